"""The replayer's synthetic timeline as Chrome trace JSON (one process per worker)."""

from __future__ import annotations

from typing import Any

from gradwire.replay.engine import Simulator
from gradwire.tracelanes import Lanes

_TID = {"worker": 1, "ps": 2, "down": 3, "up": 4, "delay": 5}
_THREAD = {1: "compute", 2: "PS update", 3: "downlink", 4: "uplink", 5: "latency/parse"}


def synthetic_trace(sim: Simulator) -> dict[str, Any]:
    """Every recorded op of a simulation (``SimConfig.record``) as a Chrome trace document."""
    events: list[dict[str, Any]] = []
    for w in range(sim.cfg.workers):
        events.append({"ph": "M", "name": "process_name", "pid": w + 1,
                       "args": {"name": f"worker:{w} (simulated)"}})
        for tid, name in _THREAD.items():
            events.append({"ph": "M", "name": "thread_name", "pid": w + 1, "tid": tid,
                           "args": {"name": name}})
    lanes = Lanes()
    for w, kind, name, start, end in sorted(sim.timeline, key=lambda e: (e[3], -e[4])):
        tid = lanes.tid(w + 1, _TID[kind], start, end)
        events.append({"ph": "X", "name": name, "cat": kind, "pid": w + 1, "tid": tid,
                       "ts": round(start, 3), "dur": round(round(end, 3) - round(start, 3), 3)})
    events += lanes.thread_names({(w + 1, tid): name for w in range(sim.cfg.workers)
                                  for tid, name in _THREAD.items()})
    for w, ends in enumerate(sim.step_ends):
        for k, t in enumerate(ends):
            events.append({"ph": "i", "name": f"step {k} done", "pid": w + 1, "tid": 1,
                           "ts": round(t, 3), "s": "t"})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "gradwire predict", "workers": sim.cfg.workers,
                          "ps": sim.cfg.ps}}
