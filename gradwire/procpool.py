"""Independent work spread over processes, each item in a worker of a local process pool.

The workers leave Ctrl-C to the process that started them (they ignore SIGINT, and end
quietly on a SIGTERM or SIGHUP sent to the process group); that process kills them at once
when it is interrupted or one item fails, so no worker outlives it or prints a traceback of
its own. Results come back in input order; an item's exception is raised as it was. What an
item logs comes back with its result and is logged by the starting process, in input order,
not interleaved by the workers as they go (gradwire/logkeep.py).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Generic, TypeVar

from gradwire.logkeep import kept_records, log_again

__all__ = ["kill_workers", "map_in_processes", "worker_signals"]

T = TypeVar("T")
R = TypeVar("R")


def worker_signals(ignore_interrupt: bool = True) -> None:
    """A pool worker's signals (its initializer): SIGTERM and SIGHUP end it quietly (the
    default action, not gradwire's handler, which is the starting process's), and with
    ``ignore_interrupt`` Ctrl-C is left to the starting process."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if ignore_interrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def kill_workers(pool: ProcessPoolExecutor, wait_s: float = 10.0) -> None:
    """Stop ``pool``'s workers now (SIGKILL: no handler of theirs runs) and let it go, its
    own thread ended (within ``wait_s`` seconds) before this returns.

    A worker killed while it sends a result leaves part of a message in the result pipe, and
    this process holds that pipe's write end too: the pool's thread then waits for the rest
    for ever, and the interpreter's exit waits for that thread (about 1 run in 10 of a
    signalled ``predict --jobs 2``). With the workers gone, closing that write end turns the
    wait into an end of file, which the pool takes as broken and cleans up after. Ending the
    thread here also keeps the exit's own wake-up of it off a pipe the thread has closed
    (an ``OSError`` printed as "Exception ignored" at exit)."""
    # the pool's internals, taken before shutdown() lets go of them
    procs = list((getattr(pool, "_processes", None) or {}).values())
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    thread = getattr(pool, "_executor_manager_thread", None)
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.join(wait_s)
    pool.shutdown(wait=False)
    if writer is not None and not any(p.is_alive() for p in procs):
        writer.close()
    if thread is not None:
        thread.join(wait_s)


class _Logged(Generic[T, R]):
    """``fn``, returning what it logged beside its result (records held, not printed); an
    item that fails prints its records where it ran, then raises."""

    def __init__(self, fn: Callable[[T], R]) -> None:
        self.fn = fn

    def __call__(self, item: T) -> tuple[R, list[logging.LogRecord]]:
        kept: list[logging.LogRecord] = []
        try:
            with kept_records(hold=True) as kept:
                out = self.fn(item)
        except BaseException:
            log_again(kept)
            raise
        return out, kept


def map_in_processes(fn: Callable[[T], R], items: Sequence[T], processes: int) -> list[R]:
    """``[fn(x) for x in items]``, the items spread over at most ``processes`` worker
    processes (in this process where that is one, or there is one item). ``fn`` and the items
    must pickle (a module-level function). An item's error is raised as soon as it comes
    back, the other workers killed, not after the slower items finish."""
    if processes <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    pool = ProcessPoolExecutor(max_workers=min(processes, len(items)),
                               initializer=worker_signals)
    logged = _Logged(fn)
    futures: list[Future[tuple[R, list[logging.LogRecord]]]] = []
    try:
        futures = [pool.submit(logged, x) for x in items]
        for f in as_completed(futures):
            f.result()
        done = [f.result() for f in futures]
    except BaseException:
        kill_workers(pool)
        for f in futures:  # what the items that finished logged, which may tell why
            if f.done() and not f.cancelled() and f.exception() is None:
                log_again(f.result()[1])
        raise
    pool.shutdown()
    for _, records in done:
        log_again(records)
    return [out for out, _ in done]
