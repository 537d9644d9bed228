"""Which asynchronous-PS rows ``--link overflow`` replays through each PS's own queue.

The replay's shared links serve every worker's connection equally, which is what a drop-tail
FIFO on the PS does while it takes TCP Small Queues' floor of every connection at once (two
GSO packets each: ``hostqueue.fits_every_connection``). A row whose W connections cannot all
keep their two packets there overflows that queue on the PS itself: the packet that finds it
full is dropped locally, its connection halves its window, and the shares part
(``replay/hostqueue.py``). Those rows are replayed through the PS's own queue, packet by
packet, as ``--link hostqueue`` replays them; the others stay equally shared. No parameter
of its own: the queue is ``--host-queue``'s or the profile's lab's (the size it recorded, or
its default at each rate), the packets Linux's. Asked for, not the default: written down as
``--link auto``'s before three new jobs' runs (docs/preregistered/issue21-own-queue.md and its
report), it came within 4.6% at both W = 6 points, where equal sharing was 8-12% low, and
10.5-12.8% low on a recommendation model whose queue overflowed from W = 2. Written down
again for the profiles whose PS capture showed no loss (docs/preregistered/
issue21-loss-free-queue.md and its report), it was nearer at 2 of the 4 rows it moved (-0.7%
at an MLP's W = 6 where equal sharing was -10.5%; -10.1% at a recommendation model's W = 8
where equal sharing was -5.9%; over 60-step runs -9.5% against +2.7%), so it stays asked
for (docs/predict.md, "The PS's own queue"). A third time, as it is, with the decision fixed
first (docs/preregistered/issue21-overflow-third.md and its report): 6.2% median / 13.3% max
over the 23 rows it moved in the three sets against equal sharing's 5.9% / 20.8%, and the
higher median on the new set's 6 rows, so it was not taken."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradwire.replay.grid import sim_jobs
from gradwire.replay.hostqueue import fits_every_connection
from gradwire.replay.mechanisms import ASYNC_PS, base_mechanism
from gradwire.replay.options import PredictOptions
from gradwire.replay.sweep import Job


@dataclass(frozen=True)
class OwnQueueRows:
    """The PS's own queue for the asynchronous rows that overflow it: ``opts`` resolved with
    ``--link hostqueue`` (its queue the profile's lab's), and the shaper's bucket and the
    two-way windows (bytes, pulls and pushes) its rows replay (``predictflow.link_settings``)."""

    opts: PredictOptions
    burst: tuple[float, float]
    windows: tuple[float, float]

    def takes(self, workers: int, bandwidth_bps: float, mechanism: str) -> bool:
        """Whether the row of ``workers`` workers at ``bandwidth_bps`` (bits per second) under
        ``mechanism`` goes through the PS's own queue: an asynchronous PS whose W connections'
        two GSO packets each do not fit the queue at that rate."""
        return (base_mechanism(mechanism) == ASYNC_PS and not fits_every_connection(
            workers, self.opts.host_queue.wire_queue_bytes(bandwidth_bps)))

    def swapped(self, jobs: Sequence[Job], ps_list: list[int], bandwidths: list[float],
                win: float | None) -> list[Job]:
        """``jobs`` (``grid.sim_jobs``' of the same sweep, in its order) with every row it
        ``takes`` replaced by the same row through the PS's own queue."""
        own = sim_jobs(self.opts, ps_list, bandwidths, win, self.burst, self.windows)
        return [o if self.takes(j.workers, j.bandwidth_bps, j.mechanism) else j
                for j, o in zip(jobs, own, strict=True)]


def own_queue_rows_note(jobs: Sequence[Job]) -> str | None:
    """The note of a sweep where ``--link overflow`` replayed some asynchronous rows through the
    PS's own queue (``jobs``: those rows; none, no note)."""
    if not jobs:
        return None
    workers = ", ".join(str(w) for w in sorted({j.workers for j in jobs}))
    sizes = sorted({j.host_queue.wire_queue_bytes(j.bandwidth_bps) for j in jobs})
    size = " to ".join(dict.fromkeys(f"{b / 1e3:,.0f} KB" for b in (sizes[0], sizes[-1])))
    return (f"note: the async-ps rows at W = {workers} replay each PS's downlink as the PS's "
            f"own drop-tail queue ({size}), packet by packet, each worker "
            "a Reno connection (--link overflow): their W connections' two GSO packets each "
            "(TCP Small Queues' floor) do not fit it, so it drops on the PS and their shares "
            "part, where equal sharing holds only while they fit (docs/predict.md, 'The PS's "
            "own queue')")
