"""The replayer's synthetic timeline as Chrome trace JSON (one process per worker; with a
synchronous mechanism, threads of barrier waits and of the worker's NIC too: ring sends), each
worker's critical path marked on a thread of its own ("critical path": the segments of every
step's path, ``replay/critical.py``) and in the args of the ops on it."""

from __future__ import annotations

from typing import Any

from gradwire.replay.critical import ReplayPaths
from gradwire.replay.engine import Simulator
from gradwire.replay.mechanisms import ASYNC_PS, shown_ps
from gradwire.tracelanes import Lanes

_TID = {"worker": 1, "ps": 2, "down": 3, "up": 4, "delay": 5, "barrier": 7, "nic-out": 8,
        "nic-in": 9}
_THREAD = {1: "compute", 2: "PS update", 3: "downlink", 4: "uplink", 5: "latency/parse",
           6: "critical path"}
# synchronous mechanisms' (replay/mechanisms.py): a ring sends on the worker's NIC out
_SYNC_THREADS = {7: "barrier wait", 8: "worker NIC out", 9: "worker NIC in"}
_CRITICAL = 6


def synthetic_trace(sim: Simulator, bandwidth_bps: float | None = None) -> dict[str, Any]:
    """Every recorded op of a simulation (``SimConfig.record``) as a Chrome trace document;
    its ``otherData`` names the configuration: W, M, the mechanism and, given, the link's
    ``bandwidth_bps`` (bit/s)."""
    events: list[dict[str, Any]] = []
    threads = _THREAD if sim.cfg.mechanism == ASYNC_PS else {**_THREAD, **_SYNC_THREADS}
    for w in range(sim.cfg.workers):
        events.append({"ph": "M", "name": "process_name", "pid": w + 1,
                       "args": {"name": f"worker:{w} (simulated)"}})
        for tid, name in threads.items():
            events.append({"ph": "M", "name": "thread_name", "pid": w + 1, "tid": tid,
                           "args": {"name": name}})
    paths = ReplayPaths.of(sim)
    on_path: set[tuple[int, str, float]] = set()  # (worker, op, end): every op on a path
    for w, ends in enumerate(sim.step_ends):
        for k in range(len(ends)):
            for s in paths.step(w, k).segments:
                events.append({"ph": "X", "name": s.name, "cat": f"critical {s.kind}",
                               "pid": w + 1, "tid": _CRITICAL, "ts": round(s.start_us, 3),
                               "dur": round(round(s.end_us, 3) - round(s.start_us, 3), 3),
                               "args": {"step": k, "kind": s.kind, "from": s.node}})
            for x in paths.rows_on_path(w, k):  # another worker's op too (a PS core's)
                lane, graph, task, end = paths.row_of(x)
                on_path.add((lane, sim.templates[graph].name[task], round(end, 3)))
    lanes = Lanes()
    for w, kind, name, start, end in sorted(sim.timeline, key=lambda e: (e[3], -e[4])):
        tid = lanes.tid(w + 1, _TID[kind], start, end)
        ev = {"ph": "X", "name": name, "cat": kind, "pid": w + 1, "tid": tid,
              "ts": round(start, 3), "dur": round(round(end, 3) - round(start, 3), 3)}
        if (w, name, round(end, 3)) in on_path:
            ev["args"] = {"critical": True}
        events.append(ev)
    events += lanes.thread_names({(w + 1, tid): name for w in range(sim.cfg.workers)
                                  for tid, name in threads.items()})
    for w, ends in enumerate(sim.step_ends):
        for k, t in enumerate(ends):
            events.append({"ph": "i", "name": f"step {k} done", "pid": w + 1, "tid": 1,
                           "ts": round(t, 3), "s": "t"})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "gradwire predict", "workers": sim.cfg.workers,
                          "ps": shown_ps(sim.cfg), "mechanism": sim.cfg.mechanism,
                          **({} if bandwidth_bps is None else {"bandwidth_bps": bandwidth_bps})}}
