"""SIGTERM stops `gradwire predict` within a second or two even inside one long configuration:
the compiled kernel (numba runs no Python signal handler) returns to Python every
``kernel.BUDGET`` work units, and the handler runs between two calls.

Sweeps of many configurations stopped midway (a pool, or one process between configurations):
``tests/test_replay.py`` with ``conftest.assert_sweep_stops_midway``, whose checks (exit 128 +
15, no traceback, "stopped by SIGTERM") these tests repeat for a stop inside a configuration.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import SAMPLE

from gradwire.replay.predict import simulate
from gradwire.replay.profile import load_profile


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM yet (Linux: SigCgt in its status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_sigterm_inside_one_long_configuration_stops_within_two_seconds():
    """W=2000 on the sample (one configuration, 8 or more replications: 15 s or more);
    SIGTERM 3 s after the start, once gradwire's handler is in place: exit 143 within 2 s
    (most of it the interpreter's own shutdown), without a traceback."""
    # compiled (or loaded from numba's cache) here, not in the child
    prof = load_profile([SAMPLE])
    simulate(prof.templates, prof.batch_size, 2, 1, 1e9, steps=4, max_steps=4)
    env = dict(os.environ)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gradwire", "predict", str(SAMPLE),
                             "--workers", "2000", "--ps", "1", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        while not _catches_sigterm(proc.pid) and time.monotonic() - start < 30:
            time.sleep(0.05)
        time.sleep(max(0.0, start + 3.0 - time.monotonic()))
        assert proc.poll() is None, "it ended before the signal: choose a longer run"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    assert "stopped by SIGTERM" in err, err
    assert took < 2.0, f"{took:.2f} s from SIGTERM to exit"


def test_a_sigterm_that_lands_in_a_ctypes_callback_is_not_lost():
    """numba's compiler calls Python back through ctypes, which drops an exception raised
    there ("Exception ignored on calling ctypes callback function"): a SIGTERM that landed
    in one was lost, and predict ran on to exit 0. The signal is sent again, and raised
    once the callback has returned."""
    import ctypes

    import pytest

    from gradwire.cli import Terminated, _stop_on_signals

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    hook = sys.unraisablehook
    ran = []

    def callback() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # its handler raises here, inside the callback
        ran.append(True)

    try:
        _stop_on_signals()
        with pytest.raises(Terminated) as stop:
            ctypes.CFUNCTYPE(None)(callback)()
            for _ in range(1000):  # the signal sent again is raised at the next check
                time.sleep(0.001)
        assert stop.value.signum == signal.SIGTERM and not ran
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        sys.unraisablehook = hook


def test_a_stop_exits_past_a_pool_thread_left_waiting():
    """After a stop signal, a process pool's manager thread left waiting (on a pipe a killed
    worker half wrote) no longer keeps the process alive: the interpreter's exit would join
    it for good (a clean-clone CI run that said "stopped by SIGTERM" and never ended). Here a
    thread of that class that never ends stands in for it, in a process of its own."""
    script = (
        "import threading, sys\n"
        "from gradwire.cli import _exit_past_a_stuck_pool\n"
        "class _ExecutorManagerThread(threading.Thread):\n"
        "    pass\n"
        "_ExecutorManagerThread(target=threading.Event().wait).start()\n"
        "print('said before', flush=False)\n"
        "_exit_past_a_stuck_pool(143)\n"
        "sys.exit(0)  # not reached\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 143 and proc.stdout == "said before\n", proc.stderr
    # without such a thread it returns, and the caller's exit runs as usual
    done = subprocess.run([sys.executable, "-c", "from gradwire.cli import "
                           "_exit_past_a_stuck_pool; _exit_past_a_stuck_pool(143); print('on')"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "on\n", done.stderr
