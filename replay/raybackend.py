"""Run a sweep's simulations as Ray tasks (``gradwire predict --backend ray``; optional extra).

The profile is put in Ray's object store once; every job is one task that gets it by reference,
so a node fetches it once however many tasks it runs. Results come back in job order; the
progress bar advances as tasks finish. A Ray instance this module started (no address given) is
shut down at the end; one we connected to is left running.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gradwire.bundle import usable_cpus
from gradwire.errors import GradwireError
from gradwire.replay.predict import Prediction
from gradwire.replay.template import Profile

if TYPE_CHECKING:
    from gradwire.replay.sweep import Job

MISSING = "--backend ray needs the optional 'ray' extra: pip install 'gradwire[ray]'"
AUTH_HINT = " (a cluster with token authentication also needs RAY_AUTH_MODE=token and its token)"
PROBE_TIMEOUT_S = 5.0


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise GradwireError(MISSING) from None
    return ray


def _simulate(prof: Profile, job: Job) -> Prediction:
    """The body of a task (module-level, so Ray pickles it by reference)."""
    from gradwire.replay.sweep import _run_job

    return _run_job((prof, job))


def _probe(address: str) -> None:
    """Fail fast, naming the address, when nothing listens there (``ray.init`` would retry
    for minutes). Addresses that are not ``[ray://]HOST:PORT`` (e.g. ``auto``) go to Ray as
    they are."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise GradwireError(f"cannot connect to the Ray cluster at {address}: {reason}") from None


def _start(ray: Any, address: str | None, processes: int | None, verbose: bool) -> bool:
    """Start or join Ray; True when this call started it (and so must shut it down)."""
    if ray.is_initialized():  # the caller's own session (e.g. a test, a notebook)
        return False
    quiet = {"log_to_driver": False, "logging_level": logging.INFO if verbose else logging.ERROR}
    with _own_signal_handlers():
        _init(ray, address, processes, quiet)
    return True


@contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """Keep this process's handlers of SIGINT, SIGTERM and SIGHUP across ``ray.init``, which
    installs its own (a SIGTERM then left with exit code 15, skipping gradwire's stop)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in before.items():
            if handler is not None and signal.getsignal(s) is not handler:
                signal.signal(s, handler)


def _init(ray: Any, address: str | None, processes: int | None, quiet: dict[str, Any]) -> None:
    """``ray.init`` on the cluster at ``address``, else a local instance of ``processes``
    CPUs; a cluster that cannot be joined is a one-line error naming it."""
    if address:
        _probe(address)
        try:
            ray.init(address=address, **quiet)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            hint = "" if os.environ.get("RAY_AUTH_MODE") else AUTH_HINT
            msg = f"cannot connect to the Ray cluster at {address}: {first}{hint}"
            raise GradwireError(msg) from None
    else:
        ray.init(
            address="local",
            num_cpus=processes or usable_cpus(),  # the cores this process may use
            include_dashboard=False,
            **quiet,
        )


def _wait_one(ray: Any, pending: list[Any]) -> tuple[list[Any], list[Any]]:
    """``ray.wait`` for one task of ``pending``. A signal's stop (SIGTERM's ``Terminated``,
    Ctrl-C's KeyboardInterrupt: neither an ``Exception``) raised by its handler while Ray's
    compiled extension waits comes out as a SystemError holding it; it is raised as itself,
    so the sweep stops as a local one does."""
    try:
        return ray.wait(pending, num_returns=1)
    except SystemError as exc:
        stop = exc.__cause__ or exc.__context__
        if stop is not None and not isinstance(stop, Exception):
            raise stop from None
        raise


def _finished(ray: Any, refs: list[Any]) -> Iterator[tuple[int, Prediction]]:
    """(job index, prediction) as each task finishes."""
    index = {ref: k for k, ref in enumerate(refs)}
    pending = list(refs)
    while pending:
        done, pending = _wait_one(ray, pending)
        for ref in done:
            try:
                yield index[ref], ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, GradwireError):
                    raise exc.cause from None
                raise


def run_jobs_ray(
    prof: Profile,
    jobs: list[Job],
    processes: int | None,
    address: str | None,
    progress: bool,
    verbose: bool = False,
) -> list[Prediction]:
    """Simulate every job as a Ray task; predictions in job order, as ``run_jobs`` returns.
    ``address``: a running cluster (else ``RAY_ADDRESS``, else a local instance of
    ``processes`` CPUs, started and shut down here)."""
    from gradwire.replay.sweep import _keep_finished, _with_progress

    ray = import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    started = _start(ray, address, processes, verbose)
    refs: list[Any] = []
    done: list[tuple[int, Prediction]] = []  # (job, prediction) as they finish
    try:
        simulate = ray.remote(num_cpus=1)(_simulate)
        shared = ray.put(prof)
        refs = [simulate.remote(shared, job) for job in jobs]
        out = dict(_with_progress(_finished(ray, refs), len(refs), progress, done))
        return [out[k] for k in range(len(jobs))]
    except BaseException as stop:
        _keep_finished(stop, done)
        if not started:  # failed or interrupted on a shared cluster: leave no work behind
            for ref in refs:
                ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
