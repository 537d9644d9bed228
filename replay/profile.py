"""Read a 1-worker profile (bundles of the PSes and the worker) into step templates."""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradwire.aligner.align import Alignment, align
from gradwire.aligner.dfg import global_dfg
from gradwire.aligner.nodes import cluster_of, is_loopback_spec
from gradwire.aligner.transfers import Transfer
from gradwire.bundle import Bundle, find_bundles, open_bundle, read_json
from gradwire.collector.h2pings import PingTimes
from gradwire.collector.summary import EndpointNames, task_of
from gradwire.collector.transport import TransportStats
from gradwire.collector.win import fit_win, link_rate
from gradwire.errors import BundleError, TraceError
from gradwire.records import VariableRecord
from gradwire.replay.mechanisms import recorded_mechanism
from gradwire.replay.profilecache import cached_profile, profile_key
from gradwire.replay.recordingcost import recording_cycles_us
from gradwire.replay.template import Profile, StepTemplate, build_template
from gradwire.replay.template import fit_overhead_line as _fit
from gradwire.schema import check_lab_result

log = logging.getLogger(__name__)
LAB_RESULT = "lab_result.json"


def lab_result_file(paths: Sequence[str | Path]) -> Path | None:
    """The lab's ``lab_result.json`` stored beside (or in) the bundles, if any (a FIFO or
    other non-regular file of that name too: ``lab_result`` warns about it, unread)."""
    for p in paths:
        for folder in (Path(p), Path(p).parent):
            f = folder / LAB_RESULT
            if os.path.lexists(f):
                return f
    return None


def lab_result(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The lab's ``lab_result.json`` stored beside the bundles, read once: ``{}`` without one,
    and with a warning for one that cannot be read as JSON. One that parses is validated
    (gradwire/schema.py ``check_lab_result``): a field of the wrong type or range raises
    BundleError naming the file and the field; its ``config`` is ``{}`` when absent."""
    f = lab_result_file(paths)
    if f is None:
        return {}
    try:
        doc = read_json(f)
    except BundleError as exc:
        log.warning("%s is not a readable lab result; ignoring it (%s)", f, exc.message)
        return {}
    check_lab_result(doc, f)
    return {**doc, "config": doc.get("config", {})}


def _next_requests(al: Alignment, worker_task: str) -> list[tuple[float, int]]:
    """(first pull request time, step id) of every captured step of the worker, in order."""
    first: dict[int, float] = {}
    for t in al.transfers:
        if t.direction != "pull" or task_of(t.dst_device) != worker_task:
            continue
        r = t.at_receiver
        if r is None or r.request_ns is None or t.step_id is None:
            continue
        ts = al.capture_aligned_us(t.dst_domain, r.request_ns)
        first[t.step_id] = min(first.get(t.step_id, ts), ts)
    return sorted((ts, sid) for sid, ts in first.items())


def untraced_client_gap_us(al: Alignment, worker_task: str, traced_sids: set[int],
                           warmup: int = 2, min_steps: int = 2,
                           requests: list[tuple[float, int]] | None = None,
                           last_push: dict[int, float] | None = None) -> float | None:
    """Median client gap of the worker's untraced captured steps, us: from a step's last
    push's last DATA byte (the PS's capture) to the next step's first pull request (the
    worker's), on the aligned clock. Steps in capture order, the first ``warmup`` skipped, as
    ``trace_slowdown`` skips them; None with fewer than ``min_steps`` untraced steps (every
    step traced, or a capture that misses one side). ``requests``: ``_next_requests``'s, and
    ``last_push``: ``last_push_ends``', if already read.

    On the lab's profiles the traced and untraced steps agree from first request to last push
    (within 1%) and differ after it: 46 ms against 6 ms on the deep MLP, 144 against 15 ms on
    MobileNetV2, of which the hook's storing is only part; the rest is FULL_TRACE collecting
    the run's metadata, which the job without the hook does not do."""
    if last_push is None:
        last_push = last_push_ends(al, worker_task)
    order = requests if requests is not None else _next_requests(al, worker_task)
    gaps = [order[k + 1][0] - last_push[sid] for k, (_ts, sid) in enumerate(order[:-1])
            if k >= warmup and sid not in traced_sids and sid in last_push]
    return statistics.median(gaps) if len(gaps) >= min_steps else None


def last_push_ends(al: Alignment, worker_task: str) -> dict[int, float]:
    """Per gRPC step id, when the worker's last push of the step had its last DATA byte at
    the PS (the PS's capture, aligned clock, us)."""
    last_push: dict[int, float] = {}
    for t in al.transfers:
        if t.step_id is None or t.direction != "push" or task_of(t.src_device) != worker_task:
            continue
        r = t.at_receiver
        if r is not None and r.last_data_ns is not None:
            ts = al.capture_aligned_us(t.dst_domain, r.last_data_ns)
            last_push[t.step_id] = max(last_push.get(t.step_id, ts), ts)
    return last_push


def in_step_us(requests: list[tuple[float, int]], last_push: dict[int, float],
               traced_sids: set[int], warmup: int = 2) -> tuple[tuple[float, ...],
                                                            tuple[float, ...]]:
    """How long each captured step of the worker ran from its first pull request to its last
    push's last DATA byte at the PS, us, (traced steps, untraced steps), each in capture
    order, the first ``warmup`` steps skipped as ``untraced_steps_us`` skips them. The part
    of a step the template replays from the trace (the client's gap after it comes from the
    untraced steps already): where the traced steps ran it slower than the untraced ones,
    FULL_TRACE's cost is inside the templates (replay/tracecost.py). The last captured step is
    left out, as ``untraced_steps_us`` leaves it: no next request shows it ended inside the
    captures, and one the captures cut off has only the pushes they saw (a MobileNetV2
    profile's ran 39.5 ms of its 0.8 s)."""
    traced: list[float] = []
    untraced: list[float] = []
    for k, (ts, sid) in enumerate(requests[:-1]):
        end = last_push.get(sid)
        if k < warmup or end is None or end <= ts:
            continue
        (traced if sid in traced_sids else untraced).append(end - ts)
    return tuple(traced), tuple(untraced)


def first_answer_us(al: Alignment, worker_task: str, traced_sids: set[int],
                    warmup: int = 2) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """How long the PS took to answer each captured step of the worker, us, (traced steps,
    untraced steps), each in capture order, the first ``warmup`` steps skipped as
    ``in_step_us`` skips them: from the step's first pull request to the first DATA of any of
    its pulls, both on the worker's own capture. FULL_TRACE makes the PS collect its step
    statistics too, and on the lab's profiles its traced steps' answers come 2-3 times later
    (docs/notes/recording-slowdown.md): the latency the templates' requests carry."""
    request: dict[int, int] = {}  # step id -> its first pull request, ns (worker's capture)
    data: dict[int, int] = {}  # step id -> its first pull DATA, ns
    for t in al.transfers:
        r = t.at_receiver
        if (t.direction != "pull" or task_of(t.dst_device) != worker_task or r is None
                or t.step_id is None or r.request_ns is None or r.first_data_ns is None):
            continue
        request[t.step_id] = min(request.get(t.step_id, r.request_ns), r.request_ns)
        data[t.step_id] = min(data.get(t.step_id, r.first_data_ns), r.first_data_ns)
    traced: list[float] = []
    untraced: list[float] = []
    for k, sid in enumerate(sorted(request, key=request.__getitem__)):
        if k >= warmup and data[sid] > request[sid]:
            (traced if sid in traced_sids else untraced).append((data[sid] - request[sid]) / 1e3)
    return tuple(traced), tuple(untraced)


def untraced_steps_us(requests: list[tuple[float, int]], traced_sids: set[int],
                      warmup: int = 2) -> tuple[float, ...]:
    """How long each untraced captured step of the worker ran, us, in capture order: from
    its first pull request to the next step's (``_next_requests``' times), the first
    ``warmup`` steps skipped as ``untraced_client_gap_us`` skips them, and the steps the
    TraceHook traced (``traced_sids``) left out, and any of no duration (two requests
    stamped alike). The job as it ran without the hook, under its captures: what the replay
    at the profile's own configuration should give."""
    steps = (requests[k + 1][0] - ts for k, (ts, sid) in enumerate(requests[:-1])
             if k >= warmup and sid not in traced_sids)
    return tuple(d for d in steps if d > 0)


def _no_trace(untraced: list[str] | None, path: Path | None) -> TraceError:
    """The error of a profile without a traced step: ``untraced``, the bundles, none of which
    has a trace (None: some have one, and no traced step's transfers matched)."""
    which = (f"no bundle has a trace ({', '.join(untraced)} hold none)" if untraced is not None
             else "no traced step with matched transfers")
    return TraceError(f"{which}: the profile needs a worker bundle recorded with the "
                      "TraceHook and the captures of its nodes", path=path)


def profile_from_alignment(al: Alignment, batch_size: int, source: str = "",
                           lab_step_ends: dict[str, list[float]] | None = None,
                           capture_ends_s: Sequence[float] = ()) -> Profile:
    """Step templates of every traced step of the (first) worker in an alignment.
    ``lab_step_ends``: per worker bundle name, the lab's step end times (s), which give the
    trace's slowdown when the session does not (bundles from before ``step_seconds``);
    ``capture_ends_s``: when each node's capture stopped (s since the epoch; empty where one
    is not known), which sorts the hook's steps into captured and uncaptured."""
    dfg = global_dfg(al)  # the typed global DFG: what the templates are built from
    traced: dict[tuple[str, int], list[Transfer]] = {
        key: [x.transfer for x in st.transfers] for key, st in dfg.steps.items() if st.transfers}
    nodes = {n.name: n for n in al.nodes}
    keys = sorted(traced)
    if not keys:
        untraced = [n for n in al.nodes if not n.steps]
        raise _no_trace([Path(n.path).name for n in untraced]
                        if len(untraced) == len(al.nodes) else None,
                        Path(al.nodes[0].path).parent if al.nodes else None)
    worker_node = keys[0][0]
    _require_captures(al, [t for ts in traced.values() for t in ts])
    if len({k[0] for k in keys}) > 1:
        log.warning("several traced workers; using %s's steps", worker_node)
    node = nodes[worker_node]
    workers = (node.cluster or {}).get("worker") or []
    if len(workers) > 1:
        log.warning("%s was recorded in a cluster of %d workers: its transfers shared the links "
                    "with the others, so the profile overstates one worker's transfer times; "
                    "predict from a 1-worker run", worker_node, len(workers))
    ps_tasks = sorted({task_of(t.src_device) for ts in traced.values() for t in ts
                       if t.direction == "pull"})
    ps_index = {task: i for i, task in enumerate(ps_tasks)}
    session = node.session  # validated: one record_seconds (if any) per recorded step
    store = dict(zip(session.get("steps_recorded", []), session.get("record_seconds", []),
                     strict=False))
    pulls = [t for ts in traced.values() for t in ts if t.direction == "pull"]
    alpha, beta = _fit(pulls, "pull")
    pushes = [t for ts in traced.values() for t in ts if t.direction == "push"]
    overhead = (alpha, beta, *_fit(pushes, "push"))
    worker_task = task_of(pulls[0].dst_device)
    requests = _next_requests(al, worker_task)
    templates: list[StepTemplate] = []
    store_by_sid: dict[int, float] = {}  # gRPC step id -> the hook's storing time, s
    traced_sids = {t.step_id for ts in traced.values() for t in ts if t.step_id is not None}
    last_push = last_push_ends(al, worker_task)
    untraced_gap = untraced_client_gap_us(al, worker_task, traced_sids, requests=requests,
                                          last_push=last_push)
    for name, step in _complete_steps(traced, worker_node):
        transfers = traced[(name, step)]
        sid = next((t.step_id for t in transfers if t.step_id is not None), None)
        if sid is not None:
            store_by_sid[sid] = float(store.get(step, 0.0))
        nxt = _after(requests, sid)
        try:
            st = dfg.steps[(name, step)]
            templates.append(build_template(st, overhead, ps_index, nxt,
                                            1e6 * float(store.get(step, 0.0)),
                                            ps_variables(st.variables, ps_index),
                                            untraced_gap))
        except TraceError as exc:
            log.warning("skipping step %s: %s", step, exc)
    if not templates:
        raise TraceError("no traced step could be turned into a replayable step")
    rate = link_rate([t.at_receiver for t in pulls if t.at_receiver is not None])
    mechanism = recorded_mechanism(op.record.op_type for key in _complete_steps(
        traced, worker_node) for op in dfg.steps[key].ops)
    return Profile(templates=templates, batch_size=batch_size, ps_tasks=ps_tasks,
                   link_rate_bps=8e9 * rate, alpha_us_per_byte=alpha, beta_us=beta,
                   push_beta_us=overhead[3],
                   source=source, phases=_phases(node.streams or _all_streams(al), store_by_sid),
                   loopback=al.domains.loopback, mechanism=mechanism,
                   trace_slowdown=trace_slowdown(session) or trace_slowdown_from_ends(
                       session, (lab_step_ends or {}).get(Path(node.path).name) or []),
                   untraced_steps_us=untraced_steps_us(requests, traced_sids),
                   in_step_us=in_step_us(requests, last_push, traced_sids),
                   first_answer_us=first_answer_us(al, worker_task, traced_sids),
                   recording_cycles_us=recording_cycles_us(session, capture_ends_s))


def ps_variables(variables: Sequence[VariableRecord], ps_index: dict[str, int]
                 ) -> list[tuple[str, int, int]]:
    """The variables the PS strategy placed, on the profile's PSes, as (node name, PS index,
    bytes), in partition-graph order. A size unknown counts 1 byte, as the lab's strategy
    counts it; a variable colocated with another variable (an optimizer's slot) is left out:
    TensorFlow places it with that one, without asking the strategy. (A colocation group named
    after a node that is not a variable, as ``global_step``'s can be, does not count.)"""
    names = {v.name for v in variables}
    return [(v.name, ps_index[task_of(v.device)], v.bytes_ or 1) for v in variables
            if task_of(v.device) in ps_index and v.colocated_with not in names]


def _on_loopback(bundles: Sequence[Bundle]) -> bool:
    """Whether the bundles' recorded cluster spec puts every task on loopback."""
    for b in bundles:
        spec = b.manifest.get("cluster_spec") or (b.session or {}).get("cluster_spec")
        if spec:
            return is_loopback_spec(spec)
    return False


def _require_captures(al: Alignment, traced: list[Transfer]) -> None:
    """The profile times transfers from packets: each node needs a capture holding its calls.

    Raises TraceError naming the bundle whose capture is missing, or holds none or under half of
    the traced transfers (cut short, or filtered to other ports); warns below all of them.
    """
    on_loopback = al.domains.loopback  # one capture on lo holds every call
    for node in al.nodes:
        # a timeline file has no capture to ask for
        if node.capture_problem:
            raise TraceError(f"{node.capture_problem}: the profile times every transfer from "
                             "the packets of each node", path=node.path)
        if not node.streams and node.path.is_dir() and not on_loopback:
            raise TraceError("no HTTP/2 streams in this node's capture (missing, cut short or "
                             "filtered to other ports): the profile times every transfer from "
                             "the packets of each node", path=node.path)
    unseen = [t for t in traced if t.at_receiver is None or t.at_sender is None]
    orphans = sorted({d[len("task:"):] for t in unseen for d in (t.src_domain, t.dst_domain)
                      if d.startswith("task:")})  # tasks no given bundle belongs to
    if orphans and len(unseen) * 2 > len(traced):
        raise TraceError(f"no bundle of {', '.join(orphans)} among these: the profile needs "
                         "every node's bundle (its capture holds the other end of each "
                         "transfer); give the folder holding all of them",
                         path=al.nodes[0].path.parent)
    if len(unseen) * 2 > len(traced):
        names = sorted({n.name for n in al.nodes})
        raise TraceError(f"{len(unseen)} of the {len(traced)} traced transfers are missing from "
                         f"the captures of {', '.join(names)} (cut short, or filtered to other "
                         "ports?): a profile needs the packets of the traced steps",
                         path=al.nodes[0].path.parent)
    if unseen:
        log.warning("%d of the %d traced transfers are missing from a capture; their times come "
                    "from the trace alone", len(unseen), len(traced))


def _complete_steps(traced: dict[tuple[str, int], list[Transfer]], worker: str
                    ) -> list[tuple[str, int]]:
    """The worker's traced steps that matched every transfer the others did.

    A step whose RunMetadata lacks a PS partition (seen on the first traced step with two PSes:
    no pushes to ps:1) would replay without that traffic; such steps are left out with a
    warning, unless no step has the full set (then the fullest ones are kept).
    """
    keys = sorted(k for k in traced if k[0] == worker)
    edges = {k: {(t.direction, t.edge) for t in traced[k]} for k in keys}
    union = set().union(*edges.values())
    full = [k for k in keys if edges[k] == union]
    if not full:
        most = max(len(e) for e in edges.values())
        full = [k for k in keys if len(edges[k]) == most]
    for k in keys:
        if k not in full:
            gone = sorted(union - edges[k])
            log.warning("skipping step %s: its trace lacks %d transfer(s) the other steps have "
                        "(e.g. %s %s)", k[1], len(gone), *gone[0])
    return full


def _all_streams(al: Alignment) -> list:
    return [s for n in al.nodes for s in n.streams]


def _phases(streams: list, store_by_sid: dict[int, float] | None = None) -> dict[str, float]:
    """Mean MASCOTS'18 phases (seconds) of the worker's captured steps, warm-up skipped. The
    TraceHook stores a traced step between its last push and the next step's first request,
    inside that step's server phase: ``store_by_sid`` (gRPC step id -> storing seconds) is
    taken out of it, as the sim leaves it out of the templates, so the baselines model the
    untraced job too. A step whose first push began before its last pull ended (a deep
    model's first gradients can leave while a late parameter still arrives) has no worker
    phase between them: 0, not the negative gap, which the baselines' service times refuse."""
    from gradwire.collector.phases import step_phases, summarize_phases

    rows = [r if r.server_s is None or r.step_id not in (store_by_sid or {}) else
            replace(r, server_s=max(0.0, r.server_s - store_by_sid[r.step_id]))
            for r in step_phases(streams)]
    rows = [replace(r, worker_s=max(0.0, r.worker_s)) for r in rows]
    summary = summarize_phases(rows, skip=1)
    if not summary:
        return {}
    stats = next(iter(summary.values()))
    return {k: stats.get(f"{k}_mean", 0.0) for k in ("downlink", "worker", "uplink", "server")}


def _after(requests: list[tuple[float, int]], sid: int | None) -> float | None:
    """First request time of the step after step id ``sid``."""
    for k, (_ts, s) in enumerate(requests):
        if s == sid and k + 1 < len(requests):
            return requests[k + 1][0]
    return None


def trace_slowdown(session: dict[str, Any], warmup: int = 2) -> float | None:
    """Median run time of the traced steps over that of the untraced ones after ``warmup``
    (session.json's ``step_seconds``); None with fewer than 3 of either."""
    times = session.get("step_seconds") or []
    return _median_ratio(dict(enumerate(times)), set(session.get("steps_recorded") or []),
                         warmup, min_plain=3)


def trace_slowdown_from_ends(session: dict[str, Any], ends_s: Sequence[float],
                             warmup: int = 2) -> float | None:
    """``trace_slowdown`` from the lab's step end times (s) when the session has no
    ``step_seconds``: step k lasts from end k-1 to end k, less the hook's storing time for a
    recorded step (``record_seconds``, not FULL_TRACE's cost, and left out of the templates
    already); None with fewer than 3 traced or 2 untraced steps after ``warmup``, or end times
    that do not cover the session's steps."""
    recorded = list(session.get("steps_recorded") or [])
    store = dict(zip(recorded, session.get("record_seconds") or [], strict=False))
    if not ends_s or len(ends_s) != session.get("steps_run"):
        return None
    dur = {k: ends_s[k] - ends_s[k - 1] - float(store.get(k, 0.0)) for k in range(1, len(ends_s))}
    return _median_ratio(dur, set(store), warmup, min_plain=2)


def _median_ratio(dur: dict[int, float], traced_steps: set[int], warmup: int,
                  min_plain: int) -> float | None:
    """Median duration of the ``traced_steps`` over that of the others from ``warmup`` on;
    None with fewer than 3 traced or ``min_plain`` others."""
    traced = [d for k, d in dur.items() if k in traced_steps]
    plain = [d for k, d in dur.items() if k >= warmup and k not in traced_steps]
    if len(traced) < 3 or len(plain) < min_plain or statistics.median(plain) <= 0:
        return None
    return statistics.median(traced) / statistics.median(plain)


def _lab_step_ends(result: dict[str, Any]) -> dict[str, list[float]]:
    """Per worker, the step end times of a (validated) lab result (``lab_result``; {} if it
    has none)."""
    return {k: [float(x) for x in v.get("step_end_times_s", [])]
            for k, v in result.get("per_worker", {}).items()}


def _fitted_win(al: Alignment) -> float | None:
    """WIN (bytes) fitted on the downlink of the first traced node's capture (the profiled
    worker), as ``gradwire win`` fits it; None when it has no transfer to time."""
    for node in al.nodes:
        if node.steps:
            fit = fit_win(node.streams, node.settings)
            return float(fit.fitted_win_bytes) if fit.steps else None
    return None


def ps_transport(al: Alignment) -> TransportStats | None:
    """TCP retransmissions and egress queueing delays of the PSes' captures (the nodes with a
    capture and no trace), merged; None when no PS has a capture. Observed as the alignment
    read the captures for their streams: no capture is read again."""
    return _merged_transport(al, traced=False)


def worker_transport(al: Alignment) -> TransportStats | None:
    """The same statistics of the profiled workers' captures (the traced nodes), merged; None
    without one."""
    return _merged_transport(al, traced=True)


def ps_addresses(al: Alignment, ps_tasks: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Each of ``ps_tasks``' (``ps:0``...) addresses: those of the node whose bundle names
    the task, else its host's address in the recorded cluster spec (either of TF's forms, a
    name resolved: ``EndpointNames``); () where neither says."""
    spec = {task: ip for (ip, _port), task in EndpointNames(cluster_of(al.nodes)).by_addr.items()}
    out = []
    for task in ps_tasks:
        node = next((n for n in al.nodes if n.task == task and n.addresses), None)
        ip = spec.get(task)
        out.append(tuple(node.addresses) if node is not None else (ip,) if ip else ())
    return tuple(out)


def ps_pings(al: Alignment) -> PingTimes | None:
    """The HTTP/2 PINGs the PS captures (the nodes with a capture and no trace) show their
    clients sending on the connections they serve, merged; None without a PS capture."""
    parts = [n.pings for n in al.nodes if n.pings is not None and not n.steps]
    return PingTimes.merge(parts) if parts else None


def _merged_transport(al: Alignment, traced: bool) -> TransportStats | None:
    parts = [n.transport for n in al.nodes if n.transport is not None and bool(n.steps) == traced]
    return TransportStats.merge(parts) if parts else None


def capture_ends_s(bundles: Sequence[Bundle]) -> tuple[float, ...]:
    """When each bundle's capture stopped (s since the epoch, its manifest's
    ``capture.stopped_ns``); empty where a captured bundle does not say."""
    ends = [(b.manifest.get("capture") or {}).get("stopped_ns") for b in bundles
            if b.capture_file is not None]
    if not ends or any(e is None for e in ends):
        return ()
    return tuple(e / 1e9 for e in ends)


def capture_stolen(bundles: Sequence[Bundle]) -> tuple[float, int] | None:
    """The most cores any node's machine lost to its hypervisor over its capture (manifest
    ``host_cpu.stolen_cores``, recorded by collect since 2026-11-29) and that machine's cores;
    None where no manifest says."""
    seen = [(b.manifest["host_cpu"]["stolen_cores"], b.manifest["host"]["cpu_count"])
            for b in bundles if b.manifest.get("host_cpu") and "cpu_count" in b.manifest["host"]]
    return max(seen) if seen else None


def ps_congestion_control(lab: dict[str, Any], bundles: Sequence[Bundle]) -> str | None:
    """The TCP congestion control the profile's PS hosts ran: the lab's (``--tcp-cc``, or the
    host's default its ``lab_result.json`` recorded: ``tcp_cc_run``), else the one the PS
    bundles' manifests record (``host.tcp_congestion_control``, written by collect since
    2026-12-07); None where nothing says, or the PS hosts differ."""
    ran = lab.get("tcp_cc") or lab.get("tcp_cc_run")
    if ran:
        return str(ran)
    seen = {b.manifest["host"].get("tcp_congestion_control") for b in bundles
            if not b.step_files} - {None}
    return seen.pop() if len(seen) == 1 else None


def _ps_host_cores(bundles: Sequence[Bundle]) -> int | None:
    """The fewest cores among the PS hosts (manifest ``host.cpu_count``, recorded since collect
    wrote it, validated a positive integer; a PS bundle holds no traced step), or None when
    none says."""
    counts = [b.manifest["host"]["cpu_count"] for b in bundles
              if not b.step_files and "cpu_count" in b.manifest["host"]]
    return min(counts) if counts else None


def load_profile(paths: Sequence[str | Path], batch_size: int | None = None,
                 progress: Callable[[str], None] | None = None,
                 fit_win: bool = False) -> Profile:
    """``_build_profile``'s profile, from the cache of profiles when the same bundle files
    were built by the same gradwire code before (``replay/profilecache.py``; off with
    ``GRADWIRE_CACHE=off``)."""
    for p in paths:  # a wrong path is the first thing to say, before a missing batch size
        if Path(p).is_file():
            raise TraceError("a file, not a bundle folder: give the profile's bundle folders "
                             "(or the folder holding them)", path=p)
    return cached_profile(
        lambda: profile_key(paths, lab_result_file(paths), batch_size, fit_win),
        lambda: _build_profile(paths, batch_size, progress, fit_win), progress)


def _hook_batch(bundles: Sequence[Any]) -> int | None:
    """The batch the workers' TraceHook recorded (``TraceHook(batch_size=N)``, the session's
    ``options``), when one did; the first worker's where several did."""
    for b in bundles:
        batch = ((b.session or {}).get("options") or {}).get("batch_size")
        if batch is not None:
            return int(batch)
    return None


def _build_profile(paths: Sequence[str | Path], batch_size: int | None = None,
                  progress: Callable[[str], None] | None = None,
                  fit_win: bool = False) -> Profile:
    """Align the bundles under ``paths`` and build the 1-worker profile.

    ``batch_size`` (examples per step) defaults to the lab's configuration when the bundles
    come from the lab; otherwise it must be given. ``fit_win``: also fit WIN (bytes) on the
    profiled worker's capture (``Profile.fitted_win_bytes``; None without one), from the
    streams the alignment has already read. Each bundle is opened once and each capture
    read once: its streams and its TCP statistics (``Profile.transport``, the PS captures'
    retransmissions) come from the same pass.
    """
    bundles = [open_bundle(f) for p in paths for f in find_bundles(p) if f.is_dir()]
    if bundles and not any(b.step_files for b in bundles):  # before the clocks are solved
        raise _no_trace([b.path.name for b in bundles],
                        Path(paths[0]) if len(paths) == 1 else None)
    uncaptured = [b for b in bundles if b.capture_file is None]
    if uncaptured and not (len(uncaptured) < len(bundles) and _on_loopback(bundles)):
        raise TraceError("no packet capture (capture.pcapng or .pcap) in this bundle: the "
                         "profile times every transfer from the packets of each node",
                         path=uncaptured[0].path)
    result = lab_result(paths)
    lab = result.get("config", {})
    if lab and isinstance(result.get("queue_bytes"), int):  # the shaped links' bfifo, if any
        lab = {**lab, "queue_bytes": result["queue_bytes"]}
    if lab and isinstance(result.get("tcp_cc"), str):  # the congestion control it ran, the
        lab = {**lab, "tcp_cc_run": result["tcp_cc"]}  # host's where the config left it None
    if lab and isinstance(result.get("cpu_count"), int):  # the one machine every node ran on
        lab = {**lab, "cpu_count": result["cpu_count"]}
    # the steps after the captures ended: what a step cost that machine (replay/hostcpu.py)
    if lab and isinstance(result.get("uncaptured"), dict):
        lab = {**lab, "uncaptured": result["uncaptured"]}
    if batch_size is None:
        batch_size = lab.get("batch_size") or _hook_batch(bundles)  # validated: >= 1
        if batch_size is None:
            raise TraceError("the batch size is unknown: give --batch-size (examples per "
                             "worker step), or record it with TraceHook(batch_size=N)",
                             path=paths[0])
    al = align(bundles, progress=progress)  # opened above: not again
    prof = profile_from_alignment(al, int(batch_size), ", ".join(map(str, paths)),
                                  _lab_step_ends(result), capture_ends_s(bundles))
    prof = replace(prof, ps_host_cores=_ps_host_cores(bundles), lab=lab,
                   capture_stolen=capture_stolen(bundles),
                   transport=ps_transport(al), worker_transport=worker_transport(al),
                   ps_pings=ps_pings(al),
                   ps_congestion_control=ps_congestion_control(lab, bundles),
                   ps_addresses=ps_addresses(al, prof.ps_tasks))
    if fit_win:
        if progress:
            progress("fitting the flow-control window (WIN) on the worker's capture")
        prof = replace(prof, fitted_win_bytes=_fitted_win(al))
    bw = lab.get("bandwidth")  # validated: a rate, "none" or null
    if bw and bw != "none":
        from gradwire.units import parse_rate_bps

        try:
            rate = parse_rate_bps(str(bw))
        except ValueError as exc:
            raise TraceError(f"config.bandwidth: {exc}", path=lab_result_file(paths)) from None
        prof = replace(prof, profile_bandwidth_bps=rate)
    return prof
