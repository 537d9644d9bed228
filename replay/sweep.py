"""Run a sweep's simulations: each job in a local process pool (or one process) or as a Ray
task, with a progress bar, stopping the workers at once on Ctrl-C or a signal. Nothing else:
the configurations come from replay/grid.py, the notes from replay/notes.py, the files from
replay/outputs.py, the command's flow from replay/predictflow.py."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from gradwire.bundle import usable_cpus
from gradwire.errors import PredictError
from gradwire.procpool import kill_workers, worker_signals
from gradwire.replay.hostcores import HostShare
from gradwire.replay.hostqueue import LAB_HOST_QUEUE, HostQueueSpec
from gradwire.replay.mechanisms import ASYNC_PS
from gradwire.replay.predict import Prediction, simulate, simulate_phases
from gradwire.replay.template import Profile

REPLICATED = ("random", "stratified", "aligned")  # --start modes that average replications

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Job:
    """One simulation of a sweep (picklable, for the process pool)."""

    workers: int
    ps: int
    bandwidth_bps: float
    order: str
    win_bytes: float | None
    seed: int
    steps: int
    max_steps: int
    link: str = "fair"
    worker_bandwidth_bps: float | None = None  # None: unconstrained worker NICs
    start: str = "random"  # random/stratified/aligned: replications; together: one run
    replications: int = 8
    max_replications: int = 64
    ps_cores: int | None = None  # None: a core per worker's update (ICPE'20)
    burst_bytes: tuple[float, float] = (0.0, 0.0)  # token bucket of each PS link (down, up)
    window_bytes: tuple[float, float] = (0.0, 0.0)  # a pull's and a push's window (two-way)
    placement: str = "greedy"  # the variables' PSes at another PS count (replay/placement.py)
    mechanism: str = ASYNC_PS  # how the workers synchronise (replay/mechanisms.py)
    host_queue: HostQueueSpec = LAB_HOST_QUEUE  # link 'hostqueue': the queue, its connections
    host: HostShare | None = None  # every node's compute on one host's cores (hostcores.py)
    draw: str = "step"  # templates drawn each step, or one per run (--template-draw)
    warmup_steps: int | None = None  # a replication's warm-up (None: 10%, at least 3)


def for_jobs(prof: Profile) -> Profile:
    """The profile as the simulations get it (pickled for each job of a pool, put once in
    Ray's store): without the capture statistics they do not use (a PS capture's queueing
    delays, a float per data segment, can take megabytes)."""
    return dataclasses.replace(prof, transport=None, worker_transport=None)


def _run_job(args: tuple[Profile, Job]) -> Prediction:
    prof, job = args
    if job.start in REPLICATED:
        return simulate_phases(prof.templates, prof.batch_size, job.workers, job.ps,
                               job.bandwidth_bps, job.order, job.win_bytes, job.seed,
                               job.steps, job.replications, job.max_replications,
                               link=job.link, worker_bandwidth_bps=job.worker_bandwidth_bps,
                               ps_cores=job.ps_cores, stratified=job.start == "stratified",
                               aligned=job.start == "aligned",
                               burst_bytes=job.burst_bytes, window_bytes=job.window_bytes,
                               placement=job.placement, mechanism=job.mechanism,
                               host_queue=job.host_queue, host=job.host, draw=job.draw,
                               warmup_steps=job.warmup_steps)
    pred, _ = simulate(prof.templates, prof.batch_size, job.workers, job.ps, job.bandwidth_bps,
                       job.order, job.win_bytes, job.seed, job.steps, job.max_steps,
                       link=job.link, worker_bandwidth_bps=job.worker_bandwidth_bps,
                       ps_cores=job.ps_cores, burst_bytes=job.burst_bytes,
                       window_bytes=job.window_bytes, placement=job.placement,
                       mechanism=job.mechanism, host_queue=job.host_queue, host=job.host,
                       draw=job.draw)
    return pred


def run_jobs(prof: Profile, jobs: list[Job], processes: int | None, progress: bool,
             backend: str = "local", ray_address: str | None = None,
             verbose: bool = False) -> list[Prediction]:
    """Simulate every job, in parallel on ``processes`` cores (or as Ray tasks with
    ``backend="ray"``: on the cluster at ``ray_address``, else a local instance), with a
    progress bar. Same jobs, same predictions, whichever the backend."""
    if backend == "ray":
        from gradwire.replay.raybackend import run_jobs_ray

        return run_jobs_ray(for_jobs(prof), jobs, processes, ray_address, progress, verbose)
    if backend != "local":
        raise PredictError(f"unknown backend {backend!r}: use local or ray")
    cores = usable_cpus()
    n = min(processes or cores, cores)  # more processes than cores only costs memory
    prof = for_jobs(prof)
    work = [(prof, j) for j in jobs]
    done: list[tuple[int, Prediction]] = []  # (job, prediction) as they finish
    if n == 1 or len(jobs) == 1:
        try:
            _with_progress(enumerate(map(_run_job, work)), len(jobs), progress, done)
        except BaseException as stop:
            _keep_finished(stop, done)
            raise
        return [r for _, r in done]
    # SIGTERM/SIGHUP sent to a worker directly (a process group's signal) end it quietly
    pool = ProcessPoolExecutor(max_workers=min(n, len(jobs)), initializer=worker_signals,
                               initargs=(False,))
    try:
        # submitted, not pool.map: map cancels its futures when left early, and the pool's
        # thread then raises InvalidStateError (a traceback) on finding its workers gone
        futures = {pool.submit(_run_job, w): k for k, w in enumerate(work)}
        # counted as they finish (one slow configuration hides no other), kept in job order
        _with_progress(((futures[f], f.result()) for f in as_completed(futures)),
                       len(jobs), progress, done)
        out = [r for _, r in sorted(done, key=lambda kr: kr[0])]
    except BaseException as stop:  # Ctrl-C, SIGTERM, an error: stop the workers, now
        _keep_finished(stop, done)
        # SIGKILL: no handler of theirs runs (a SIGTERM made an idle worker print a
        # traceback); the pool marks the futures left broken
        kill_workers(pool)
        raise
    pool.shutdown()
    return out


def _keep_finished(stop: BaseException, done: list[tuple[int, Prediction]]) -> None:
    """On Ctrl-C or a signal (not an error), hand the configurations already simulated to
    ``run_predict`` on the exception (``finished``, in job order), which prints them."""
    if not isinstance(stop, Exception):
        stop.finished = [r for _, r in sorted(done, key=lambda kr: kr[0])]  # type: ignore[attr-defined]


def _with_progress(results: Iterable[T], total: int, show: bool,
                   out: list[T] | None = None) -> list[T]:
    """The results, in the order they come, with a progress bar (a terminal) or a line per
    tenth of them (a log) when ``show``; gathered into ``out`` if given, so that a caller
    interrupted midway still has those that came."""
    out = [] if out is None else out
    if not show:
        out.extend(results)
        return out
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = _stderr_console()
    if not console.is_terminal:  # a log file: a line per tenth of the sweep, not a bar
        step = max(1, total // 10)
        t0 = time.monotonic()
        for r in results:
            out.append(r)
            if len(out) % step == 0 or len(out) == total:
                print(f"gradwire predict: simulated {len(out)}/{total} configurations "
                      f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        return out
    # a spinner and the time so far: one large configuration (--workers 4096) moves no bar
    # for a while, and a bar of one (total None: a pulse) would read 0% until it is done
    counts = [MofNCompleteColumn()] if total > 1 else []
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), *counts,
                  TimeElapsedColumn(), transient=True, console=console) as bar:
        task = bar.add_task(f"simulating {total} configuration{'s' * (total != 1)}",
                            total=total if total > 1 else None)
        for r in results:
            out.append(r)
            bar.advance(task)
    return out


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)
