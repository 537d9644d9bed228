"""Step templates: each profiled 1-worker step as a small graph the replayer can run.

From an aligned 1-worker profile (trace + captures), every traced step becomes a coarsened graph
(ICPE'20 sections 3.2-3.4):

- ``R_j``: a delay from the step's first RecvTensor request to the moment pull j can be sent:
  its own request's offset (TF issues them as the executor reaches each receive) plus the
  server latency the capture shows beyond queueing behind earlier streams; for a pull whose
  tensor the PS computes from a push of the same step (partition-graph ancestry on the PS: an
  embedding lookup on pushed ids, an update's completion fetched over several PSes), the delay
  counts from the end of that PS work instead, which it waits for;
- ``D_j``: one downlink transfer per pulled tensor (bytes on the wire, PS index); ``P_j``: its
  parsing overhead ``alpha * bytes + beta`` (fitted on the profile; a control tensor's, which
  has no bytes, as traced), moved off the network into a delay before the tensor's consumers;
- ``W_k``: worker compute, coarsened: the worker's ops sorted by end, cut where the set of
  downlinks they depend on (partition-graph ancestry) grows and after every op producing a pushed
  gradient; each chunk is one op lasting its observed busy extension (so executor gaps count);
- ``U_k``: one uplink transfer per pushed tensor, released when its producer's chunk ends;
- after each push its PS-side parsing overhead (its own fit; a control tensor's as traced),
  then ``S_k``: the PS work the push unlocks (its apply ops, coarsened the same way);
- ``E``: the client's gap between the end of a step and the next step's first request (minus the
  TraceHook's own storing time), on the worker.

Coarsening is exact for the model: a chain of compute ops on one serial resource between two
communication events behaves as one op of their combined busy time.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradwire.collector.h2pings import PingTimes
from gradwire.collector.overhead import OverheadPoint, fit_overhead
from gradwire.collector.summary import task_of
from gradwire.collector.transport import TransportStats
from gradwire.errors import TraceError
from gradwire.replay.placement import data_adjacency, transfer_variable

if TYPE_CHECKING:  # the aligner's graph (networkx, numpy) is not loaded to build the CLI
    from gradwire.aligner.dfg import DfgOp, DfgStep, DfgTransfer
    from gradwire.aligner.transfers import Transfer

# resource kinds of template ops. Synchronous mechanisms (replay/mechanisms.py) add: a barrier
# (every worker reaches it before any goes on; the op's PS index names which of the step's
# barriers), and transfers over the worker's own NIC, out (to the switch, or the next worker of
# a ring) and in
DELAY, WORKER, PS, DOWN, UP, BARRIER = "delay", "worker", "ps", "down", "up", "barrier"
NIC_OUT, NIC_IN = "nic-out", "nic-in"
GAP = "client gap"  # the op between a step's end and the next step's first request


@dataclass
class StepTemplate:
    """One profiled step as parallel lists indexed by op (microseconds and bytes).

    ``kind[i]`` is a resource kind; ``ps[i]`` the PS index of PS/network ops (0 otherwise);
    ``amount[i]`` microseconds (delay/compute) or bytes (network); ``succ[i]`` the ops that wait
    for op i; ``indeg[i]`` how many ops op i waits for; ``prio[i]`` the order of a transfer in
    its link's queue (lower first); ``name[i]`` for timelines.
    """

    step: int
    kind: list[str] = field(default_factory=list)
    ps: list[int] = field(default_factory=list)
    amount: list[float] = field(default_factory=list)
    succ: list[list[int]] = field(default_factory=list)
    indeg: list[int] = field(default_factory=list)
    prio: list[float] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    observed_us: float = 0.0  # the step's observed duration, first request to next request
    # transfer priorities of the --order choices built from the trace (lower first; inf for
    # the ops that are not pulls): TicTac's TIC, and the profiled time a pull is first needed
    tic: list[float] = field(default_factory=list)
    earliest: list[float] = field(default_factory=list)
    # when each op ran in the profile, on the aligned clock (us): the real timeline, coarsened
    # as the template is (empty for templates not built from a profile)
    obs_start: list[float] = field(default_factory=list)
    obs_end: list[float] = field(default_factory=list)
    # the variable each op's transfer carries (an index into var_ps/var_bytes; -1: none known),
    # and the profile's PS variables in partition-graph order: their profiled PS index and
    # bytes (replay/placement.py places them for another PS count)
    var: list[int] = field(default_factory=list)
    var_ps: list[int] = field(default_factory=list)
    var_bytes: list[int] = field(default_factory=list)
    # the traced ops a coarsened compute op or PS work chunk stands for: (name, own time in
    # us) each; empty for the other ops (the op-level what-ifs, replay/rebatch.py, rescale a
    # compute op's one by one; a synchronous update is as long as its PS work's own time)
    members: list[tuple[tuple[str, float], ...]] = field(default_factory=list)
    # the variables are no longer the profile's (tensor partition, replay/tensorpasses.py):
    # placed again by the strategy even at the profile's own PS count
    placed_again: bool = False
    # the software time of one hop of the collective ring all-reduce (copies, parsing, the
    # reduction), µs per hop and µs per byte of its chunk, from the op cost database
    # (``opcost.ring_hop_line``); (0, 0): not known, the peer mechanisms' hops cost their bytes only
    relay_us: tuple[float, float] = (0.0, 0.0)
    # the hop's line timed across shaped links instead (``predict --ring-hop link``,
    # ``opcost.ring_hop_links``): (TCP payload rate in bytes per µs, µs per hop, µs per byte),
    # slowest first; each replay takes its own rate's (``mechanisms.hop_line_at``, with
    # ``relay_us`` as the loopback end); empty: ``relay_us`` at every rate
    relay_links: tuple[tuple[float, float, float], ...] = ()
    # per pull (its op index): its request delay's op, its group (0: sent from the step's
    # start, 1: after a synchronous step's PS work) and that delay before the PS's write order
    # floored it (us); ``written_in_order`` floors it again for another order or placement
    unfloored: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    # per op: part of the train op's control chain across PSes (``is_control``: each PS's
    # updates done, fetched by the worker, joined there and pushed to the PS that ends the
    # step), which TensorFlow adds only when the updates span PSes (replay/controlchain.py)
    control: list[bool] = field(default_factory=list)
    # the step's quickest receive of a pulled and of a pushed tensor, from its last DATA byte
    # to its receive op's end (us; control tensors left out): what a control tensor, which
    # carries no bytes, costs its receiver on a PS count the profile did not run
    quickest_receive_us: tuple[float, float] = (0.0, 0.0)

    def add(self, kind: str, amount: float, name: str, after: list[int] = (), ps: int = 0,
            prio: float = 0.0, observed: tuple[float, float] | None = None,
            var: int = -1, members: tuple[tuple[str, float], ...] = (),
            control: bool = False) -> int:
        """Append an op waiting for ``after``; returns its index. ``observed``: when it ran
        in the profile (start, end; aligned us); ``var``: the variable its transfer carries;
        ``members``: the traced ops a compute op or a PS work chunk coarsens; ``control``: the op is
        part of the train op's control chain across PSes."""
        i = len(self.kind)
        self.var.append(var)
        self.members.append(members)
        self.control += [False] * (i - len(self.control)) + [control]
        if observed is not None:
            self.obs_start += [math.nan] * (i - len(self.obs_start)) + [observed[0]]
            self.obs_end += [math.nan] * (i - len(self.obs_end)) + [observed[1]]
        self.kind.append(kind)
        self.ps.append(ps)
        self.amount.append(max(0.0, float(amount)))
        self.succ.append([])
        self.indeg.append(0)
        self.prio.append(prio)
        self.name.append(name)
        for a in dict.fromkeys(after):
            self.succ[a].append(i)
            self.indeg[i] += 1
        return i

    def predecessors(self) -> list[list[int]]:
        """For each op, the ops it waits for (in index order)."""
        preds: list[list[int]] = [[] for _ in self.kind]
        for i, succ in enumerate(self.succ):
            for j in succ:
                preds[j].append(i)
        return preds

    @property
    def roots(self) -> list[int]:
        """Ops that wait for nothing."""
        return [i for i, d in enumerate(self.indeg) if d == 0]

    def bytes_by(self, kind: str) -> float:
        """Total bytes of the template's ``down`` or ``up`` transfers."""
        return sum(a for k, a in zip(self.kind, self.amount, strict=True) if k == kind)


@dataclass(frozen=True)
class Profile:
    """What the replayer needs from a 1-worker profile."""

    templates: list[StepTemplate]
    batch_size: int
    ps_tasks: list[str]
    link_rate_bps: float  # measured goodput of the profile's links, bits per second
    alpha_us_per_byte: float
    beta_us: float
    source: str
    phases: dict[str, float] = field(default_factory=dict)  # mean S^D, S^W, S^U, S^S (s)
    profile_bandwidth_bps: float | None = None  # the link rate the profile ran at, if known
    loopback: bool = False  # the profiled cluster ran on one host's loopback
    trace_slowdown: float | None = None  # traced over untraced step run time (median)
    ps_host_cores: int | None = None  # the fewest cores among the PS hosts (manifests), if known
    # the most cores a node's machine lost to its hypervisor over its capture, and that
    # machine's cores (manifests' host_cpu), if recorded
    capture_stolen: tuple[float, int] | None = None
    fitted_win_bytes: float | None = None  # WIN fitted on the worker's capture, if asked for
    lab: dict = field(default_factory=dict)  # the lab's run configuration, if from the lab
    # the PS captures' TCP retransmissions and queueing delays (read with their streams), if any
    transport: TransportStats | None = None
    # the same of the profiled worker's capture (the windows of its pushes), if any
    worker_transport: TransportStats | None = None
    # the HTTP/2 PINGs the workers sent the PSes on the pull connections, and the PSes'
    # answers (us; collector/h2pings.py), from the PS captures, if any
    ps_pings: PingTimes | None = None
    # the TCP congestion control the PS hosts ran ('bbr', 'cubic', ...;
    # profile.ps_congestion_control), None where nothing recorded it
    ps_congestion_control: str | None = None
    # each PS's addresses, in ``ps_tasks``' order (a PS's own transfers in the captures,
    # grid.measured_share_windows); () for a PS no bundle or cluster spec places
    ps_addresses: tuple[tuple[str, ...], ...] = ()
    # how the profiled job synchronised its workers, as its trace shows (replay/mechanisms.py)
    mechanism: str = "async-ps"
    push_beta_us: float = 0.0  # the pushes' parsing cost per message (us; its fit's beta)
    # how long each untraced captured step of the worker ran (us; profile.untraced_steps_us)
    untraced_steps_us: tuple[float, ...] = ()
    # each captured step from its first pull request to its last push's last DATA byte (us;
    # profile.in_step_us): the traced steps', the untraced steps'
    in_step_us: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    # how long the PS took to answer each captured step's first pull request, from the
    # request to the first pull DATA at the worker (us; profile.first_answer_us): the traced
    # steps', the untraced steps'
    first_answer_us: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    # the worker's untraced steps, start to next start, by the TraceHook's clock (us;
    # replay/recordingcost.py): those under every node's capture, those after it ended
    recording_cycles_us: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())

    @property
    def ps_count(self) -> int:
        """The PSes the profile ran with (at least 1)."""
        return max(1, len(self.ps_tasks))


def fit_overhead_line(transfers: list[Transfer], direction: str) -> tuple[float, float]:
    """alpha (us per byte) and beta (us) of the parsing overhead of ``pull`` or ``push``
    transfers: receive-op end minus last DATA at the receiver, least squares over bytes."""
    pts = [OverheadPoint(step=t.step or 0, tensor=t.edge, bytes_=t.bytes_ or 0,
                         overhead_us=t.recv.end_us - t.at_receiver.last_data_ns / 1000)
           for t in transfers if t.direction == direction and t.recv is not None
           and t.at_receiver is not None and t.at_receiver.last_data_ns and t.bytes_]
    if len(pts) < 2:
        return 0.0, 0.0
    fit = fit_overhead(direction, pts)
    return max(0.0, fit.alpha_us_per_byte), max(0.0, fit.beta_us)


def _device_preds(st: DfgStep, device: str) -> dict[str, list[str]]:
    """The partition graph's edges on ``device``: op -> the ops it waits for."""
    preds: dict[str, list[str]] = defaultdict(list)
    for d in st.deps:
        if d.dst_device == device:
            preds[d.dst].append(d.src)
    return preds


def _ancestry(st: DfgStep, device: str, bit_of_recv: dict[str, int]) -> dict[str, int]:
    """For each op on ``device``: a bitmask of the receive ops it depends on, following the
    partition graph's same-device edges."""
    preds = _device_preds(st, device)
    memo: dict[str, int] = {}
    for op in sorted((o for o in st.ops if o.device == device), key=lambda o: o.record.start_us):
        stack = [op.name]
        on_stack = {op.name}
        while stack:  # iterative DFS: graphs of 10k+ ops
            name = stack[-1]
            todo = [p for p in preds.get(name, ()) if p not in memo and p not in on_stack]
            if todo:
                stack.extend(todo)
                on_stack.update(todo)
                continue
            stack.pop()
            on_stack.discard(name)
            mask = 1 << bit_of_recv[name] if name in bit_of_recv else 0
            for p in preds.get(name, ()):
                mask |= memo.get(p, 0)
            memo[name] = mask
    return memo


def _chunks(ops: list[DfgOp], masks: dict[str, int], cut_after: set[str]
            ) -> list[tuple[int, list[DfgOp]]]:
    """Ops sorted by end (as traced), cut where they need a receive no earlier op needed and
    after ``cut_after`` ops; each chunk with the receives it newly needs (bitmask)."""
    out: list[tuple[int, list[DfgOp]]] = []
    seen = 0
    for op in sorted(ops, key=lambda o: (o.record.end_us, o.record.start_us)):
        new = masks.get(op.name, 0) & ~seen
        if not out or new:
            seen |= new
            out.append((new, [op]))
        else:
            out[-1][1].append(op)
        if op.name in cut_after:
            out.append((0, []))
    return [(m, chunk) for m, chunk in out if chunk]


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _first_need(ops: Sequence[DfgOp], masks: dict[str, int], n: int) -> dict[int, float]:
    """For each of ``n`` pulls, the start (us) of the earliest op whose mask has its bit
    (inf where none): ops in start order, each pull's bit looked at once."""
    first = dict.fromkeys(range(n), math.inf)
    left = (1 << n) - 1
    for o in sorted(ops, key=lambda o: o.record.start_us):
        new = masks.get(o.name, 0) & left
        if new:
            for j in _bits(new):
                first[j] = o.record.start_us
            left &= ~new
            if not left:
                break
    return first


def build_template(st: DfgStep, overhead: tuple[float, float, float, float],
                   ps_index: dict[str, int], next_request_us: float | None,
                   hook_store_us: float, variables: Sequence[tuple[str, int, int]] = (),
                   untraced_gap_us: float | None = None) -> StepTemplate:
    """One traced step's template (see the module docstring), from the global DFG's step
    ``st`` (its ops and transfers on the reference clock, microseconds); ``variables``: the
    profile's PS variables (node name, profiled PS index, bytes) in partition-graph order.

    ``untraced_gap_us``: the untraced steps' median time from their last push's last DATA
    byte (at the PS) to the next step's first request, from the captures
    (``untraced_client_gap_us``). When given, the client gap ``E`` is that, less what this
    step did after its own last push's DATA (the PS's last updates, traced): a traced step's
    gap also holds FULL_TRACE's collection of the run metadata, which the job without the
    hook never pays. None: ``E`` as traced, less the hook's storing time."""
    tpl = StepTemplate(step=st.step, var_ps=[v[1] for v in variables],
                       var_bytes=[v[2] for v in variables])
    var_index = {v[0]: i for i, v in enumerate(variables)}
    adj = data_adjacency(st) if var_index else {}
    alpha, beta, alpha_up, beta_up = overhead
    pulls = sorted((x for x in st.transfers if x.transfer.direction == "pull"),
                   key=lambda x: x.first_data_us)
    pushes = [x for x in st.transfers if x.transfer.direction == "push"]
    if not pulls or not pushes:
        raise TraceError(f"step {st.step} has no traced pulls or pushes to replay")
    worker_dev = pulls[0].transfer.dst_device
    req0 = min(x.request_us for x in pulls)
    lat = tpl.add(DELAY, 0.0, "step start", observed=(req0, req0))
    # what the PS sends only once every push is in (SyncReplicasOptimizer's token): its
    # request waits for the pushes' PS work, not for a latency of the profile's timing
    pushes_in = max(x.last_data_us for x in pushes)
    late = [x for x in pulls if x.first_data_us >= pushes_in]
    pulls = [x for x in pulls if x.first_data_us < pushes_in] + late
    token = range(len(pulls) - len(late), len(pulls))  # the late pulls' indices, last
    gate_of_recv = {x.transfer.recv.graph_node: j for j, x in enumerate(pulls)}
    producers = {x.transfer.producer.name for x in pushes if x.transfer.producer is not None}
    worker_ops = [o for o in st.ops if o.device == worker_dev and not o.record.is_transfer]
    masks = _ancestry(st, worker_dev, gate_of_recv)
    chunks = _chunks(worker_ops, masks, producers)
    late_mask = sum(1 << j for j in token)
    cut = next((k for k, (new, _) in enumerate(chunks) if new & late_mask), len(chunks))
    ps_side = _PsSide(st, pulls, pushes, token.start)
    plan = _StepPlan(chunks, cut, ps_side, token)
    order = plan.order()
    if order is None:  # the trace's dependencies in a cycle: every pull timed from the start
        ps_side = _PsSide(st, pulls, pushes, token.start, follow=False)
        plan = _StepPlan(chunks, cut, ps_side, token)
        order = plan.order()
    if order is None:
        raise TraceError(f"step {st.step}: its transfers and compute wait for each other in a "
                         "cycle")
    delays = _request_delays(pulls, ps_side, req0, plan.ps_done_obs(req0), token.start)
    chain = _ControlChain(pulls, ps_side, masks, chunks)
    tpl.quickest_receive_us = (_quickest_receive(pulls), _quickest_receive(pushes))

    arrival: dict[int, int] = {}  # per pull: its parse op (what computes on it waits for)
    ready_obs: dict[int, float] = {}
    down_op: dict[int, int] = {}
    request_op: dict[int, int] = {}  # per pull: its request delay
    chunk_op: dict[int, int] = {}
    prev_end = req0
    arrive: dict[tuple[str, int], int] = {}  # per push (PS device, index): its parse op
    apply_op: dict[tuple[str, int], int] = {}
    apply_end: dict[str, float] = {}
    before_pushes = -1  # the ops before the first push: orders 0, the rest inf
    node_of: dict[tuple, int] = {}  # per part of the plan: the op its successors wait for

    def ends() -> list[int]:
        """The ops the step's PS work ends with (what a late pull waits for)."""
        return ([] if cut else [lat]) + [node_of[p] for p in plan.ends()]

    def add_pull(j: int) -> int:
        """Pull j: its request delay (from the step's start, from the PS work it waits for,
        or, a late pull, from the step's PS work), its transfer and its parse."""
        x = pulls[j]
        t = x.transfer
        nbytes = x.wire_bytes
        group, since, ready_at, latency = delays[j]
        after = ([lat] if group == 0 else ends() if group == 1
                 else [apply_op[ps_side.waits_for[j]]]
                 + ([request_op[ps_side.ahead[j]]] if j in ps_side.ahead else []))
        mine = j in chain.pulls
        rel = tpl.add(DELAY, ready_at - since + latency, f"request {t.edge}", after,
                      observed=(since, ready_at + latency), control=mine)
        request_op[j] = rel
        d = tpl.add(DOWN, nbytes, f"pull {t.edge}", [rel], ps=ps_index[task_of(t.src_device)],
                    prio=j, observed=(x.first_data_us, x.last_data_us),
                    var=_variable_of(adj, var_index, t), control=mine)
        tpl.unfloored[d] = (rel, group, tpl.amount[rel])
        down_op[j] = d
        ready_obs[j] = x.recv_end_us
        parse = (ready_obs[j] - x.last_data_us if is_control(t) else alpha * nbytes + beta)
        arrival[j] = tpl.add(DELAY, parse, f"parse {t.edge}", [d],
                             observed=(x.last_data_us, ready_obs[j]), control=mine)
        return arrival[j]

    def add_chunk(c: int) -> int:
        """Compute chunk c, after the chunk before it and the pulls it newly needs."""
        nonlocal prev_end
        new, chunk = chunks[c]
        end = max(o.end_us for o in chunk)
        start = max([prev_end] + [ready_obs[j] for j in _bits(new)])
        after = [chunk_op[c - 1] if c else lat] + [arrival[j] for j in _bits(new)]
        chunk_op[c] = tpl.add(WORKER, end - start, f"compute {chunk[0].name}..", after,
                              observed=(start, end),
                              members=tuple((o.name, o.end_us - o.start_us) for o in chunk),
                              control=c in chain.joins)
        prev_end = max(prev_end, end)
        return chunk_op[c]

    def add_push(dev: str, k: int) -> int:
        """Push k of those to PS ``dev``, after its producer and those written ahead of it,
        and its parse at the PS."""
        nonlocal before_pushes
        if before_pushes < 0:
            before_pushes = len(tpl.kind)
        x = ps_side.by_ps[dev][k]
        t = x.transfer
        nbytes = x.wire_bytes
        after = [lat if c < 0 else chunk_op[c] for c in plan.push_after[(dev, k)]]
        mine = (dev, k) in chain.pushes
        u = tpl.add(UP, nbytes, f"push {t.edge}", after, ps=ps_index[task_of(dev)], prio=k,
                    observed=(x.first_data_us, x.last_data_us), var=_variable_of(adj, var_index, t),
                    control=mine)
        parse = (x.recv_end_us - x.last_data_us if is_control(t)
                 else alpha_up * nbytes + beta_up)
        arrive[(dev, k)] = tpl.add(DELAY, parse, f"parse {t.edge}", [u],
                                   observed=(x.last_data_us, x.recv_end_us), control=mine)
        return arrive[(dev, k)]

    def add_apply(dev: str, a: int) -> int:
        """The PS work chunk a on ``dev``, after the one before it and the pushes it needs."""
        new, chunk = ps_side.applies[dev][a]
        group = ps_side.by_ps[dev]
        end = max(o.end_us for o in chunk)
        start = max([apply_end.get(dev, -math.inf)] + [group[k].recv_end_us for k in _bits(new)])
        after = [arrive[(dev, k)] for k in _bits(new)] + ([apply_op[(dev, a - 1)]] if a else [])
        apply_op[(dev, a)] = tpl.add(PS, end - start, f"apply {chunk[0].name}..", after,
                                     ps=ps_index[task_of(dev)], observed=(start, end),
                                     members=tuple((o.name, o.end_us - o.start_us)
                                                   for o in chunk))
        apply_end[dev] = max(apply_end.get(dev, -math.inf), end)
        return apply_op[(dev, a)]

    adders = {"pull": add_pull, "chunk": add_chunk, "push": add_push, "apply": add_apply}
    for part in order:
        node_of[part] = adders[part[0]](*part[1:])
    step_ops = ends()
    if late:  # after the step's PS work, then what computes on them
        step_ops += [arrival[j] for j in token]
        step_ops += [chunk_op[len(chunks) - 1]] if cut < len(chunks) else []
    step_ops += [arrival[j] for j in ps_side.waits_for]
    # not before the pulls the PS wrote to the connection ahead of it (one byte stream)
    _floor_in_order(tpl.amount, tpl.unfloored, _capture_order(tpl), tpl.ps)
    for req, _, _ in tpl.unfloored.values():
        tpl.obs_end[req] = tpl.obs_start[req] + tpl.amount[req]
    first_need = _first_need(worker_ops, masks, len(pulls))
    tic = tic_priorities([masks.get(o.name, 0) for o in worker_ops], len(pulls))
    tpl.tic = [0.0] * before_pushes
    tpl.earliest = [0.0] * before_pushes
    tpl.tic += [math.inf] * (len(tpl.kind) - before_pushes)
    tpl.earliest += [math.inf] * (len(tpl.kind) - before_pushes)
    for j, d in down_op.items():
        tpl.tic[d] = tic[j]
        tpl.earliest[d] = first_need[j]  # the parameters the profiled compute needed first
    end_obs = max(o.end_us for o in st.ops)
    if untraced_gap_us is not None:
        gap = untraced_gap_us - (end_obs - max(x.last_data_us for x in pushes))
    else:
        gap = 0.0 if next_request_us is None else next_request_us - end_obs - hook_store_us
    gap = max(0.0, gap)
    tpl.add(WORKER, gap, GAP, step_ops, observed=(end_obs, end_obs + gap))
    tpl.observed_us = (end_obs + gap - req0 if untraced_gap_us is not None
                       else (next_request_us or end_obs) - req0 - hook_store_us)
    tpl.tic += [math.inf] * (len(tpl.kind) - len(tpl.tic))
    tpl.earliest += [math.inf] * (len(tpl.kind) - len(tpl.earliest))
    return tpl


def is_control(t: Transfer) -> bool:
    """Whether ``t`` carries no data, only a control edge across devices: TensorFlow's graph
    partitioner sends such an edge as an empty float tensor from a dummy ``Const`` it adds on
    the source device (``AddDummyConst``, graph_partition.cc), 26 bytes on the wire."""
    return t.bytes_ == 0 and t.producer is not None and t.producer.op_type == "Const"


# the op types of the partitioner's plumbing around a control edge (the receiving side's
# Identity, the group's NoOp, the dummy Const it sends) and of nothing else
_PLUMBING = frozenset({"NoOp", "Const", "Identity"})


class _ControlChain:
    """The train op's control chain across PSes in one traced step: the pulls of a control
    tensor that wait for PS work of the step (``pulls``: each PS's updates done), the pushes
    of a control tensor whose producer depends on them (``pushes``: the worker's join, sent
    to the PS whose update ends the step) and the worker's compute chunks between, when
    they hold only the partitioner's plumbing (``joins``)."""

    def __init__(self, pulls: Sequence[DfgTransfer], ps_side: _PsSide, masks: dict[str, int],
                 chunks: Sequence[tuple[int, list[DfgOp]]]) -> None:
        self.pulls = {j for j in ps_side.waits_for if is_control(pulls[j].transfer)}
        bits = sum(1 << j for j in self.pulls)
        self.pushes = {(dev, k) for dev, group in ps_side.by_ps.items()
                       for k, x in enumerate(group) if is_control(x.transfer)
                       and masks.get(x.transfer.producer.name, 0) & bits}
        self.joins = {c for c, (new, chunk) in enumerate(chunks) if new & bits
                      and all(o.record.op_type in _PLUMBING for o in chunk)} if bits else set()


def _quickest_receive(xs: Sequence[DfgTransfer]) -> float:
    """The least time from a transfer's last DATA byte to its receive op's end among ``xs``
    (us; control tensors left out; 0 if none)."""
    return max(0.0, min((x.recv_end_us - x.last_data_us for x in xs
                         if not is_control(x.transfer)), default=0.0))


def _variable_of(adj: dict[str, list[str]], var_index: dict[str, int], t: Transfer) -> int:
    """The variable transfer ``t`` carries (an index into ``var_index``'s), -1 if unknown:
    near the op feeding a pull's ``_Send``, or a push's ``_Recv``, on the PS."""
    if not var_index:
        return -1
    if t.direction == "pull":
        node = t.producer.name if t.producer is not None else (
            t.recv.producer.rpartition(":")[0] if t.recv is not None else "")
    else:
        node = t.recv.graph_node if t.recv is not None else ""
    return transfer_variable(adj, var_index, node) if node else -1


def written_in_order(t: StepTemplate, ps_of: Sequence[int], prio: Sequence[float]
                     ) -> StepTemplate:
    """``t`` with each pull sendable no earlier than the pull written ahead of it on its
    connection, when the PS writes in the order ``prio`` (lower first, as the replay serves
    them) and the pulls go to the PSes ``ps_of`` (per op). The template keeps the capture's
    order on the profiled PSes: then ``t`` itself. For ``--order`` other than observed and
    for another placement of the variables (docs/predict.md, "The PS's write order")."""
    pulls = [d for d in t.unfloored if t.kind[d] == DOWN]  # a mechanism may have made some
    order = sorted(pulls, key=lambda d: (prio[d], d))  # other ops: they keep their delays
    if order == _capture_order(t) and all(ps_of[d] == t.ps[d] for d in pulls):
        return t
    amount = list(t.amount)
    _floor_in_order(amount, t.unfloored, order, ps_of)
    return dataclasses.replace(t, amount=amount)


def _capture_order(t: StepTemplate) -> list[int]:
    """The pulls of ``t`` (still pulls) in the order the profile's PS wrote them."""
    return sorted((d for d in t.unfloored if t.kind[d] == DOWN), key=lambda d: (t.prio[d], d))


def _floor_in_order(amount: list[float], unfloored: Mapping[int, tuple[int, int, float]],
                    order: Sequence[int], ps_of: Sequence[int]) -> None:
    """Set the request delay in ``amount`` (us, in place) of each pull in ``order`` to its
    unfloored delay, at least the delay of the pull before it in ``order`` on the same PS
    (``ps_of``) and in the same group (``StepTemplate.unfloored``; pulls not in ``order``
    are left as they are): a PS writes a worker's pulls to one connection,
    one after another. Several pulls sharing one request take the latest floor of theirs."""
    last: dict[tuple[int, int], float] = {}
    floor: dict[int, float] = {}
    for d in order:
        req, group, raw = unfloored[d]
        key = (int(ps_of[d]), group)
        mine = max(raw, last.get(key, 0.0))
        floor[req] = max(floor.get(req, 0.0), mine)
        last[key] = mine
    for req, value in floor.items():
        amount[req] = value


def tic_priorities(masks: Sequence[int], receives: int) -> list[float]:
    """TicTac's timing-independent order (TIC, Hashemi et al., SysML'19) of ``receives``
    transfers from the graph alone: an op's communication dependency M(op) is how many of the
    receives it needs (``masks``: per op, a bitmask of them); a receive's priority is the
    least M(op) over the ops that need it (lower goes first; one no op needs goes last), ties
    in receive order (index). Returned as one float per receive, ``P * (receives + 1) + j``."""
    best = [math.inf] * receives
    seen = 0  # ops by rising M: a receive's first op is its least; each bit is set once
    for mask in sorted({m for m in masks if m}, key=int.bit_count):
        new = mask & ~seen
        if new:
            seen |= new
            for j in _bits(new):
                best[j] = mask.bit_count()
    return [(b if b != math.inf else receives + 1) * (receives + 1) + j
            for j, b in enumerate(best)]


def _pushes_in_write_order(sources: Sequence[int], first_data_us: Sequence[float]
                           ) -> list[list[int]]:
    """Each push's predecessors, one PS's pushes given by their producing compute chunks
    ``sources`` (chunk indices; -1: the step's start) and the capture's first DATA byte of
    each (us): its own producer, and the latest producer of the pushes the worker wrote ahead
    of it to that PS. A worker's pushes to one PS share one TCP connection, so one written
    after another cannot leave before it: a 1 MB gradient whose producer ends 6 us before a
    98 KB one's, but whose first byte left 0.55 ms after its (serialising takes the worker
    longer), is not sent ahead of it in the replay. Chunks are added in step order, each
    after the one before, so the highest index ends last."""
    own = list(sources)
    out = [[s] for s in own]
    latest = -1
    for k in sorted(range(len(own)), key=lambda k: (first_data_us[k], k)):
        if latest > own[k]:
            out[k].append(latest)
        latest = max(latest, own[k])
    return out


def _upstream(preds: Mapping[str, Sequence[str]], name: str) -> set[str]:
    """``name`` and every op it depends on through ``preds`` (op -> the ops it waits for)."""
    seen, stack = {name}, [name]
    while stack:
        for p in preds.get(stack.pop(), ()):
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


class _PsSide:
    """The PS side of one traced step: the pushes grouped by the PS they go to, each group in
    the order the PS received them (``by_ps``); the PS work they unlock on each PS, coarsened
    as the worker's compute is (``applies``: chunks with the pushes each newly needs); and
    the pulls among the first ``early`` whose tensor that work produces (``waits_for``: pull ->
    its PS and the chunk ending with the last such op; ``ready_us``: that op's traced end;
    ``ahead``: the pull the PS wrote just ahead of it on the same connection, if any, which
    it cannot leave before). A worker's fetch of an update's completion over 2 PSes, or an
    embedding lookup on the ids a worker pushed, is such a pull: the PS can send it only
    after that work, at any rate.
    ``follow`` False: no pull waits for PS work (each is timed from the step's start)."""

    def __init__(self, st: DfgStep, pulls: Sequence[DfgTransfer], pushes: Sequence[DfgTransfer],
                 early: int, follow: bool = True) -> None:
        self.by_ps: dict[str, list[DfgTransfer]] = defaultdict(list)
        for x in pushes:
            self.by_ps[x.transfer.dst_device].append(x)
        self.applies: dict[str, list[tuple[int, list[DfgOp]]]] = {}
        self.waits_for: dict[int, tuple[str, int]] = {}
        self.ready_us: dict[int, float] = {}
        self.ahead: dict[int, int] = {}
        for dev, group in self.by_ps.items():
            group.sort(key=lambda x: x.recv_end_us)
            masks = _ancestry(st, dev, {x.transfer.recv.graph_node: k for k, x in enumerate(group)})
            ps_ops = [o for o in st.ops if o.device == dev and not o.record.is_transfer
                      and masks.get(o.name, 0)]
            last_of: dict[int, DfgOp] = {}
            if follow and ps_ops:
                preds = _device_preds(st, dev)
                for j in range(early):
                    t = pulls[j].transfer
                    if (t.src_device != dev or t.producer is None
                            or not masks.get(t.producer.name, 0)):
                        continue  # its tensor comes of no push of the step
                    before = _upstream(preds, t.producer.name)
                    mine = [o for o in ps_ops if o.name in before]
                    if mine:
                        last_of[j] = max(mine, key=lambda o: (o.end_us, o.start_us))
            self.applies[dev] = _chunks(ps_ops, masks, {o.name for o in last_of.values()})
            where = {o.name: a for a, (_, chunk) in enumerate(self.applies[dev]) for o in chunk}
            for j, o in last_of.items():
                self.waits_for[j] = (dev, where[o.name])
                self.ready_us[j] = o.end_us
                before = [i for i in range(j) if pulls[i].transfer.src_device == dev]
                if before:
                    self.ahead[j] = before[-1]


class _StepPlan:
    """In which order a step's parts go into its template, each after what it waits for:
    ``("pull", j)``, ``("chunk", c)`` (worker compute), ``("push", dev, k)`` and
    ``("apply", dev, a)`` (PS work). The order is the one the phases give (the pulls sent at
    the step's start, the compute before the late pulls, each PS's pushes and work, the late
    pulls, the compute on them), a part moved only as far as the parts it waits for."""

    def __init__(self, chunks: Sequence[tuple[int, list[DfgOp]]], cut: int, ps_side: _PsSide,
                 token: range) -> None:
        self.chunks, self.cut, self.ps_side, self.token = chunks, cut, ps_side, token
        chunk_of = {o.name: c for c, (_, chunk) in enumerate(chunks[:cut]) for o in chunk}
        last = cut - 1 if cut else -1
        # each push after its producer's chunk (-1: the step's start) and the producers of
        # the pushes written ahead of it to its PS (the worker's write order)
        self.push_after: dict[tuple[str, int], list[int]] = {}
        for dev, group in ps_side.by_ps.items():
            sources = [chunk_of.get(x.transfer.producer.name, last)
                       if x.transfer.producer is not None else last for x in group]
            after = _pushes_in_write_order(sources, [x.first_data_us for x in group])
            for k, a in enumerate(after):
                self.push_after[(dev, k)] = a

    def ends(self) -> list[tuple]:
        """The parts the step's PS work ends with: what a late pull waits for."""
        out: list[tuple] = [("chunk", self.cut - 1)] if self.cut else []
        for dev, group in self.ps_side.by_ps.items():
            out += [("push", dev, k) for k in range(len(group))]
            n = len(self.ps_side.applies[dev])
            out += [("apply", dev, n - 1)] if n else []
        return out

    def ps_done_obs(self, req0: float) -> float:
        """When the parts of ``ends`` ended in the trace (us; the step's start ``req0`` where
        no compute came before them): a late pull's reference."""
        side = self.ps_side
        observed = {"chunk": lambda c: max(o.end_us for o in self.chunks[c][1]),
                    "push": lambda dev, k: side.by_ps[dev][k].recv_end_us,
                    "apply": lambda dev, a: max(o.end_us for o in side.applies[dev][a][1])}
        return max(([] if self.cut else [req0])
                   + [observed[p[0]](*p[1:]) for p in self.ends()])

    def order(self) -> list[tuple] | None:
        """Every part, each after those it waits for; None if they wait in a cycle."""
        side = self.ps_side
        early = range(self.token.start)
        deps: dict[tuple, list[tuple]] = {}
        for j in early:
            deps[("pull", j)] = ([("apply", *side.waits_for[j])] if j in side.waits_for else [])
            deps[("pull", j)] += [("pull", side.ahead[j])] if j in side.ahead else []
        chunk_deps = {("chunk", c): ([("chunk", c - 1)] if c else [])
                      + [("pull", j) for j in _bits(new)]
                      for c, (new, _) in enumerate(self.chunks)}
        deps.update((p, d) for p, d in chunk_deps.items() if p[1] < self.cut)
        for dev, group in side.by_ps.items():
            for k in range(len(group)):
                deps[("push", dev, k)] = [("chunk", c) for c in self.push_after[(dev, k)]
                                          if c >= 0]
            for a, (new, _) in enumerate(side.applies[dev]):
                deps[("apply", dev, a)] = (([("apply", dev, a - 1)] if a else [])
                                           + [("push", dev, k) for k in _bits(new)])
        for j in self.token:
            deps[("pull", j)] = self.ends()
        deps.update((p, d) for p, d in chunk_deps.items() if p[1] >= self.cut)
        pending, done, out = list(deps), set(), []
        while pending:
            i = next((i for i, p in enumerate(pending) if all(d in done for d in deps[p])),
                     None)
            if i is None:
                return None
            done.add(pending[i])
            out.append(pending.pop(i))
        return out


def _request_delays(pulls: Sequence[DfgTransfer], ps_side: _PsSide, req0: float,
                    ps_done: float, early: int) -> dict[int, tuple[int, float, float, float]]:
    """Per pull: its group (0: timed from the step's start ``req0``; 1: a late pull, from the
    step's PS work ``ps_done``; 2 + j: pull j, from the PS work it waits for, floored by no
    other), when its delay counts from, when it could be requested, and the server's latency
    beyond queueing behind the pulls written ahead of it on its own PS's link (us, on the
    trace's clock): a pull of another PS runs on another link and holds none of its bytes
    back."""
    out: dict[int, tuple[int, float, float, float]] = {}
    link_free: dict[str, float] = {}  # per PS task (its one link): when its last pull ended
    for j, x in enumerate(pulls):
        if j >= early:
            group, since, ready = 1, ps_done, ps_done
        elif j in ps_side.ready_us:
            group, since = 2 + j, ps_side.ready_us[j]
            ready = max(since, x.request_us)
        else:
            group, since, ready = 0, req0, x.request_us
        src = task_of(x.transfer.src_device)
        free = link_free.get(src, -math.inf)
        latency = max(0.0, x.first_data_us - max(ready, free))
        link_free[src] = max(free, x.last_data_us)
        out[j] = (group, since, ready, latency)
    return out
