"""The aligned timeline as Chrome trace JSON (Perfetto UI, chrome://tracing).

One process per cluster task (``worker:0``, ``ps:0``), threads ``compute`` and ``downlink`` /
``uplink`` for transfers; op slices on the reference clock (microseconds, as the format wants);
flow arrows from each tensor's producer to its transfer and on to the receive op.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from gradwire.tracelanes import Lanes

_THREADS = {"downlink": 2, "uplink": 3, "network": 4}


def chrome_trace(g: nx.DiGraph, origin_us: float | None = None) -> dict[str, Any]:
    """A Chrome trace document of a DFG's nodes (times relative to ``origin_us``, default the
    earliest start) with flow events for its transfer edges."""
    timed = [(n, d) for n, d in g.nodes(data=True) if d.get("start_us") is not None]
    t0 = origin_us if origin_us is not None else min((d["start_us"] for _, d in timed),
                                                     default=0.0)
    pids: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    where: dict[str, tuple[int, int, float]] = {}
    lanes = Lanes()  # TF ops that ran concurrently overlap on one thread
    for n, d in sorted(timed, key=lambda nd: (nd[1]["start_us"], -nd[1]["duration_us"])):
        task = d["dst_task"] if d["op_type"] == "Transfer" else d["task"]
        pid = pids.setdefault(task, len(pids) + 1)
        ts = d["start_us"] - t0
        tid = lanes.tid(pid, _THREADS.get(d["kind"], 1), ts, ts + max(d["duration_us"], 0.0))
        args = {k: d[k] for k in ("bundle", "step", "device", "op_type", "bytes", "txn")
                if d.get(k) is not None}
        events.append({"ph": "X", "name": d["name"], "cat": d["kind"], "pid": pid, "tid": tid,
                       "ts": round(ts, 3),
                       "dur": round(round(ts + max(d["duration_us"], 0.0), 3) - round(ts, 3), 3),
                       "args": args})
        where[n] = (pid, tid, ts)
    for task, pid in pids.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": task}})
        for name, tid in (("compute", 1), *_THREADS.items()):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": name}})
    events += lanes.thread_names({(pid, tid): name for pid in pids.values()
                                  for name, tid in (("compute", 1), *_THREADS.items())})
    flow = 0
    for a, b, e in g.edges(data=True):
        if not e.get("transfer") or a not in where or b not in where:
            continue
        flow += 1
        (pa, ta, sa), (pb, tb, sb) = where[a], where[b]
        events.append({"ph": "s", "id": flow, "name": "tensor", "cat": "transfer", "pid": pa,
                       "tid": ta, "ts": round(sa, 3)})
        events.append({"ph": "f", "bp": "e", "id": flow, "name": "tensor", "cat": "transfer",
                       "pid": pb, "tid": tb, "ts": round(sb, 3)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "gradwire align", "origin_us": t0}}
