"""Lanes for Chrome trace slices that overlap on one thread.

Chrome trace "X" slices on one thread must nest; two that overlap only in part (two TF ops that
ran concurrently, a request delay beside a parse) are drawn wrongly by Perfetto and
chrome://tracing. ``Lanes`` gives each such slice a lane of its own: the first lane keeps the
thread id, the k-th extra lane of thread ``tid`` becomes thread ``tid * 100 + k``, named after
the thread with `` (k+1)``.
"""

from __future__ import annotations

from typing import Any

_SLACK_US = 1e-3  # slices are written rounded to 1 ns: touching ones may overlap by that


class Lanes:
    """Assign lanes to the slices of each (pid, tid); feed each thread's slices by start."""

    def __init__(self) -> None:
        self._ends: dict[tuple[int, int], list[float]] = {}

    def tid(self, pid: int, tid: int, start_us: float, end_us: float) -> int:
        """The thread id to draw a slice from ``start_us`` to ``end_us`` on."""
        ends = self._ends.setdefault((pid, tid), [])
        for k, end in enumerate(ends):
            if start_us >= end - _SLACK_US:
                ends[k] = end_us
                return _lane_tid(tid, k)
        ends.append(end_us)
        return _lane_tid(tid, len(ends) - 1)

    def thread_names(self, names: dict[tuple[int, int], str]) -> list[dict[str, Any]]:
        """``thread_name`` metadata events of the extra lanes, from the base threads' names."""
        out = []
        for (pid, tid), ends in sorted(self._ends.items()):
            base = names.get((pid, tid), str(tid))
            out += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": _lane_tid(tid, k),
                     "args": {"name": f"{base} ({k + 1})"}} for k in range(1, len(ends))]
        return out


def _lane_tid(tid: int, k: int) -> int:
    return tid if k == 0 else tid * 100 + k
