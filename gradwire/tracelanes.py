"""Lanes for Chrome trace slices that overlap on one thread.

Chrome trace "X" slices on one thread must nest; two that overlap only in part (two TF ops that
ran concurrently, a request delay beside a parse) are drawn wrongly by Perfetto and
chrome://tracing. ``Lanes`` gives each such slice a lane of its own: the first lane keeps the
thread id; extra lanes get thread ids from ``EXTRA_TID`` up, one per (process, thread, lane),
named after their thread with `` (k+1)``.
"""

from __future__ import annotations

from typing import Any

_SLACK_US = 1e-3  # slices are written rounded to 1 ns: touching ones may overlap by that
EXTRA_TID = 1000  # thread ids of extra lanes start here (base threads are numbered below)


class Lanes:
    """Assign lanes to the slices of each (pid, tid); feed each thread's slices by start."""

    def __init__(self) -> None:
        self._ends: dict[tuple[int, int], list[float]] = {}
        self._extra: dict[tuple[int, int, int], int] = {}  # (pid, tid, lane) -> its thread id
        self._next: dict[int, int] = {}  # pid -> next free extra thread id

    def tid(self, pid: int, tid: int, start_us: float, end_us: float) -> int:
        """The thread id to draw a slice from ``start_us`` to ``end_us`` on."""
        ends = self._ends.setdefault((pid, tid), [])
        for k, end in enumerate(ends):
            if start_us >= end - _SLACK_US:
                ends[k] = end_us
                return self._lane_tid(pid, tid, k)
        ends.append(end_us)
        return self._lane_tid(pid, tid, len(ends) - 1)

    def _lane_tid(self, pid: int, tid: int, k: int) -> int:
        if k == 0:
            return tid
        key = (pid, tid, k)
        if key not in self._extra:
            self._extra[key] = self._next.get(pid, EXTRA_TID)
            self._next[pid] = self._extra[key] + 1
        return self._extra[key]

    def thread_names(self, names: dict[tuple[int, int], str]) -> list[dict[str, Any]]:
        """``thread_name`` metadata events of the extra lanes, from the base threads' names."""
        return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": lane_tid,
                 "args": {"name": f"{names.get((pid, tid), str(tid))} ({k + 1})"}}
                for (pid, tid, k), lane_tid in sorted(self._extra.items())]
