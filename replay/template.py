"""Step templates: each profiled 1-worker step as a small graph the replayer can run.

From an aligned 1-worker profile (trace + captures), every traced step becomes a coarsened graph
(ICPE'20 sections 3.2-3.4):

- ``R_j``: a delay from the step's first RecvTensor request to the moment pull j can be sent:
  its own request's offset (TF issues them as the executor reaches each receive) plus the
  server latency the capture shows beyond queueing behind earlier streams;
- ``D_j``: one downlink transfer per pulled tensor (bytes on the wire, PS index); ``P_j``: its
  parsing overhead ``alpha * bytes + beta`` (fitted on the profile), moved off the network
  into a delay before the tensor's consumers;
- ``W_k``: worker compute, coarsened: the worker's ops sorted by end, cut where the set of
  downlinks they depend on (partition-graph ancestry) grows and after every op producing a pushed
  gradient; each chunk is one op lasting its observed busy extension (so executor gaps count);
- ``U_k``: one uplink transfer per pushed tensor, released when its producer's chunk ends;
- after each push its PS-side parsing overhead (its own fit), then ``S_k``: the PS work the
  push unlocks (its apply ops, coarsened the same way);
- ``E``: the client's gap between the end of a step and the next step's first request (minus the
  TraceHook's own storing time), on the worker.

Coarsening is exact for the model: a chain of compute ops on one serial resource between two
communication events behaves as one op of their combined busy time.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gradwire.aligner.dfg import DfgOp, DfgStep, DfgTransfer
from gradwire.aligner.transfers import Transfer
from gradwire.collector.overhead import OverheadPoint, fit_overhead
from gradwire.collector.summary import task_of
from gradwire.collector.transport import TransportStats
from gradwire.errors import TraceError
from gradwire.replay.placement import data_adjacency, transfer_variable

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
    # the traced ops a coarsened compute op stands for: (name, own time in us) each; empty
    # for the other ops (the op-level what-ifs, replay/rebatch.py, rescale them one by one)
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

    def add(self, kind: str, amount: float, name: str, after: list[int] = (), ps: int = 0,
            prio: float = 0.0, observed: tuple[float, float] | None = None,
            var: int = -1, members: tuple[tuple[str, float], ...] = ()) -> int:
        """Append an op waiting for ``after``; returns its index. ``observed``: when it ran
        in the profile (start, end; aligned us); ``var``: the variable its transfer carries;
        ``members``: the traced ops a compute op coarsens."""
        i = len(self.kind)
        self.var.append(var)
        self.members.append(members)
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
    # how the profiled job synchronised its workers, as its trace shows (replay/mechanisms.py)
    mechanism: str = "async-ps"
    push_beta_us: float = 0.0  # the pushes' parsing cost per message (us; its fit's beta)
    # how long each untraced captured step of the worker ran (us; profile.untraced_steps_us)
    untraced_steps_us: tuple[float, ...] = ()
    # each captured step from its first pull request to its last push's last DATA byte (us;
    # profile.in_step_us): the traced steps', the untraced steps'
    in_step_us: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
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


def _ancestry(st: DfgStep, device: str, bit_of_recv: dict[str, int]) -> dict[str, int]:
    """For each op on ``device``: a bitmask of the receive ops it depends on, following the
    partition graph's same-device edges."""
    preds: dict[str, list[str]] = defaultdict(list)
    for d in st.deps:
        if d.dst_device == device:
            preds[d.dst].append(d.src)
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
    arrival: dict[int, int] = {}
    ready_obs: dict[int, float] = {}
    gate_of_recv = {x.transfer.recv.graph_node: j for j, x in enumerate(pulls)}
    down_ops: list[int] = []
    link_free = -math.inf

    def add_pull(j: int, after: list[int], ready_at: float) -> None:
        """Pull j, sendable ``ready_at`` (us, observed) once ``after`` are done: the step's
        start (its delay counts from the step's first request) or the step's PS work. Its
        request delay is floored by the PS's write order once every pull is in."""
        nonlocal link_free
        x = pulls[j]
        t = x.transfer
        nbytes = x.wire_bytes
        # sendable when requested plus the server's latency not explained by queueing
        latency = max(0.0, x.first_data_us - max(ready_at, link_free))
        link_free = max(link_free, x.last_data_us)
        at_start = after == [lat]
        since = req0 if at_start else ready_at
        rel = tpl.add(DELAY, ready_at - since + latency, f"request {t.edge}", after,
                      observed=(since, ready_at + latency))
        d = tpl.add(DOWN, nbytes, f"pull {t.edge}", [rel], ps=ps_index[task_of(t.src_device)],
                    prio=j, observed=(x.first_data_us, x.last_data_us),
                    var=_variable_of(adj, var_index, t))
        tpl.unfloored[d] = (rel, 0 if at_start else 1, tpl.amount[rel])
        down_ops.append(d)
        ready_obs[j] = x.recv_end_us
        arrival[j] = tpl.add(DELAY, alpha * nbytes + beta, f"parse {t.edge}", [d],
                             observed=(x.last_data_us, ready_obs[j]))

    for j, x in enumerate(pulls[:token.start]):
        add_pull(j, [lat], x.request_us)
    producers = {x.transfer.producer.name: x for x in pushes if x.transfer.producer is not None}
    worker_ops = [o for o in st.ops if o.device == worker_dev and not o.record.is_transfer]
    masks = _ancestry(st, worker_dev, gate_of_recv)
    chunks = _chunks(worker_ops, masks, set(producers))
    late_mask = sum(1 << j for j in token)
    cut = next((k for k, (new, _) in enumerate(chunks) if new & late_mask), len(chunks))
    prev, prev_end = None, req0
    released: dict[str, int] = {}

    def add_chunks(todo: list[tuple[int, list[DfgOp]]]) -> None:
        """Compute chunks, in order, each after the last and the pulls it newly needs."""
        nonlocal prev, prev_end
        for new, chunk in todo:
            end = max(o.end_us for o in chunk)
            start = max([prev_end] + [ready_obs[j] for j in _bits(new)])
            after = ([prev] if prev is not None else [lat]) + [arrival[j] for j in _bits(new)]
            prev = tpl.add(WORKER, end - start, f"compute {chunk[0].name}..", after,
                           observed=(start, end),
                           members=tuple((o.name, o.end_us - o.start_us) for o in chunk))
            prev_end = max(prev_end, end)
            for o in chunk:
                if o.name in producers:
                    released[o.name] = prev

    add_chunks(chunks[:cut])
    before_pushes = len(tpl.kind)  # the ops before the pushes: orders 0, the rest inf
    step_ops = _push_and_ps(st, tpl, pushes, released, prev, lat, ps_index, (alpha_up, beta_up),
                            lambda t: _variable_of(adj, var_index, t))
    if late:  # after the step's PS work, then what computes on them
        ps_done = max(tpl.obs_end[i] for i in step_ops)
        for j in token:
            add_pull(j, list(step_ops), ps_done)
        add_chunks(chunks[cut:])
        step_ops = [*step_ops, *(arrival[j] for j in token)]
        step_ops += [prev] if cut < len(chunks) else []
    # not before the pulls the PS wrote to the connection ahead of it (one byte stream)
    _floor_in_order(tpl.amount, tpl.unfloored, _capture_order(tpl), tpl.ps)
    for req, _, _ in tpl.unfloored.values():
        tpl.obs_end[req] = tpl.obs_start[req] + tpl.amount[req]
    first_need = {j: min((o.record.start_us for o in worker_ops
                          if masks.get(o.name, 0) >> j & 1), default=math.inf)
                  for j in range(len(pulls))}
    tic = tic_priorities([masks.get(o.name, 0) for o in worker_ops], len(pulls))
    tpl.tic = [0.0] * before_pushes
    tpl.earliest = [0.0] * before_pushes
    tpl.tic += [math.inf] * (len(tpl.kind) - before_pushes)
    tpl.earliest += [math.inf] * (len(tpl.kind) - before_pushes)
    for j, d in enumerate(down_ops):
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


def _pushes_in_write_order(sources: Sequence[int | None], first_data_us: Sequence[float],
                           lat: int) -> list[list[int]]:
    """Each push's predecessors (op indices), one PS's pushes given by their producing compute
    chunks ``sources`` (None: the step's start ``lat``) and the capture's first DATA byte of
    each (us): its own producer, and the latest producer of the pushes the worker wrote ahead
    of it to that PS. A worker's pushes to one PS share one TCP connection, so one written
    after another cannot leave before it: a 1 MB gradient whose producer ends 6 us before a
    98 KB one's, but whose first byte left 0.55 ms after its (serialising takes the worker
    longer), is not sent ahead of it in the replay. Chunks are added in step order, each
    after the one before, so the highest index ends last."""
    own = [lat if s is None else s for s in sources]
    out = [[s] for s in own]
    latest = -1
    for k in sorted(range(len(own)), key=lambda k: (first_data_us[k], k)):
        if latest > own[k]:
            out[k].append(latest)
        latest = max(latest, own[k])
    return out


def _push_and_ps(st: DfgStep, tpl: StepTemplate, pushes: list[DfgTransfer],
                 released: dict[str, int], last_compute: int | None, lat: int,
                 ps_index: dict[str, int], overhead: tuple[float, float],
                 variable_of: Callable[[Transfer], int]) -> list[int]:
    """Uplink transfers and the PS work they unlock (``variable_of``: the variable a push
    carries); returns the ops that end the step."""
    ends: list[int] = [last_compute if last_compute is not None else lat]
    by_ps: dict[str, list[DfgTransfer]] = defaultdict(list)
    for x in pushes:
        by_ps[x.transfer.dst_device].append(x)
    for dev, group in by_ps.items():
        group.sort(key=lambda x: x.recv_end_us)
        ps = ps_index[task_of(dev)]
        gate_of_recv: dict[str, int] = {}
        arrive: dict[int, int] = {}
        ready_obs: dict[int, float] = {}
        producers = [released.get(x.transfer.producer.name if x.transfer.producer else "",
                                  last_compute) for x in group]
        after = _pushes_in_write_order(producers, [x.first_data_us for x in group], lat)
        for k, x in enumerate(group):
            t = x.transfer
            nbytes = x.wire_bytes
            u = tpl.add(UP, nbytes, f"push {t.edge}", after[k],
                        ps=ps, prio=k, observed=(x.first_data_us, x.last_data_us),
                        var=variable_of(t))
            ready_obs[k] = x.recv_end_us
            arrive[k] = tpl.add(DELAY, overhead[0] * nbytes + overhead[1], f"parse {t.edge}",
                                [u], observed=(x.last_data_us, ready_obs[k]))
            gate_of_recv[t.recv.graph_node] = k
        masks = _ancestry(st, dev, gate_of_recv)
        ps_ops = [o for o in st.ops if o.device == dev and not o.record.is_transfer
                  and masks.get(o.name, 0)]
        prev, prev_end = None, -math.inf
        for new, chunk in _chunks(ps_ops, masks, set()):
            end = max(o.end_us for o in chunk)
            start = max([prev_end] + [ready_obs[k] for k in _bits(new)])
            prev = tpl.add(PS, end - start, f"apply {chunk[0].name}..",
                           [arrive[k] for k in _bits(new)] + ([prev] if prev is not None
                                                               else []), ps=ps,
                           observed=(start, end))
            prev_end = max(prev_end, end)
        ends += [arrive[k] for k in arrive] + ([prev] if prev is not None else [])
    return ends
