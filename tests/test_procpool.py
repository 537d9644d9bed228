"""Work spread over processes (gradwire/procpool.py), and the bundles of a profile read that
way (aligner/nodes.py: one process per capture)."""

from __future__ import annotations

import os
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest
from conftest import SAMPLE

from gradwire.aligner import nodes as nodes_mod
from gradwire.errors import BundleError
from gradwire.procpool import kill_workers, map_in_processes, worker_signals


def _pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def _refuse(x: int) -> int:
    if x == 3:
        raise BundleError("no manifest.json", path=f"/bundles/b{x}")
    return x


def test_items_come_back_in_order_each_from_a_worker_process() -> None:
    out = map_in_processes(_pid_and_square, list(range(6)), 2)
    assert [sq for _, sq in out] == [0, 1, 4, 9, 16, 25]
    assert os.getpid() not in {pid for pid, _ in out}  # worked in the pool, not here


def _slow_or_refuse(x: int) -> int:
    if x == 0:
        time.sleep(60)
    return _refuse(x)


def test_an_items_error_does_not_wait_for_a_slower_item() -> None:
    """Item 3 fails at once while item 0 would work a minute: the error comes back at once
    (as_completed) and the slow worker is killed, not waited for."""
    start = time.monotonic()
    with pytest.raises(BundleError):
        map_in_processes(_slow_or_refuse, [0, 3], 2)
    assert time.monotonic() - start < 30


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_killing_the_workers_ends_the_pools_thread_even_mid_message() -> None:
    """A worker killed while it sent its result left part of a message in the result pipe:
    the pool's thread waited for the rest for ever, and the interpreter's exit with it (a
    signalled ``predict --jobs 2`` hung about 1 run in 10). Here that part-message is written
    by hand (a length of 1000 bytes, 3 of them sent) while a worker is busy."""
    pool = ProcessPoolExecutor(max_workers=1, initializer=worker_signals)
    future = pool.submit(_sleep, 60)
    thread = pool._executor_manager_thread
    assert thread is not None
    while not future.running():
        time.sleep(0.01)
    os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1000) + b"abc")
    time.sleep(0.2)  # the thread is now reading the message that never ends
    t0 = time.monotonic()
    kill_workers(pool)
    assert not thread.is_alive()
    assert time.monotonic() - t0 < 5
    with pytest.raises(BrokenProcessPool):
        future.result(timeout=5)


def test_one_process_works_here() -> None:
    out = map_in_processes(_pid_and_square, [2, 3], 1)
    assert out == [(os.getpid(), 4), (os.getpid(), 9)]


def test_an_items_error_comes_back_as_itself_naming_its_file() -> None:
    with pytest.raises(BundleError) as err:
        map_in_processes(_refuse, [1, 2, 3, 4], 2)
    assert str(err.value) == "/bundles/b3: no manifest.json"
    assert (err.value.path, err.value.message) == ("/bundles/b3", "no manifest.json")


def test_every_error_pickles_whole() -> None:
    import pickle

    from gradwire.errors import MissingExtra

    err = pickle.loads(pickle.dumps(MissingExtra("ray", "ray")))
    assert (type(err), err.module, err.extra, str(err)) == (
        MissingExtra, "ray", "ray", str(MissingExtra("ray", "ray")))


def test_the_sample_reads_alike_at_once_and_one_after_the_other(monkeypatch) -> None:
    progress: list[str] = []
    together = nodes_mod.load_nodes([SAMPLE], progress.append)
    assert progress == ["reading 2 bundles (ps0, worker0), 2 at once"] or \
        nodes_mod.usable_cpus() == 1
    monkeypatch.setattr(nodes_mod, "usable_cpus", lambda: 1)
    progress.clear()
    alone = nodes_mod.load_nodes([SAMPLE], progress.append)
    assert progress == ["reading 2 bundles (ps0, worker0)"]
    assert [n.name for n in together] == [n.name for n in alone] == ["ps0", "worker0"]
    for a, b in zip(together, alone, strict=True):
        assert a.streams == b.streams and len(a.streams) > 100
        assert a.steps == b.steps and a.settings == b.settings
        assert a.transport.retransmitted == b.transport.retransmitted
        assert a.transport.data_segments == b.transport.data_segments > 0
