"""The tests' ``gradwire`` runs, forked from one process that has loaded gradwire already.

Each test run of the command is a process of its own, as a user's is, but starting one with
``python -m gradwire`` spends about 1.9 s loading numpy, numba, networkx and the replay before
the command does anything, and the suite runs the command about a thousand times. So
each pytest process starts one *zygote* (a Python process that has imported gradwire's
modules) and asks it for every run: the zygote forks, and the child sets the run's working
folder, environment (the test's ``os.environ``, or the ``env`` given), stdin (``/dev/null``)
and stdout/stderr (files read back), then runs ``gradwire.console.main`` as ``python -m
gradwire`` does, its exit handlers and all. Nothing is shared between runs: each child is a
copy of the zygote as it was before any run. A module that read the environment when it was
imported would see the zygote's; none of gradwire's does. The zygote also loads the compiled
replay loops numba keeps on disk (0.7-1.2 s a run otherwise; a loop not yet compiled is
compiled by the run that needs it, as before). ``GRADWIRE_TEST_SUBPROCESS=1``
runs every command as a plain subprocess instead.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

_SERVER = r"""
import atexit, json, os, signal, sys, time, traceback
requests = os.fdopen(os.dup(0), "r")
replies = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(2, 1)
import gradwire.console, gradwire.cli
for name in ("gradwire.replay.predictflow", "gradwire.replay.command",
             "gradwire.aligner.dfg", "gradwire.replay.kernel"):
    try:
        __import__(name)
    except Exception:
        pass
try:  # the replay's compiled loops loaded from numba's cache once, not once a run
    from numba.core.registry import CPUDispatcher
    for name, module in list(sys.modules.items()):
        if not name.startswith("gradwire"):
            continue
        for f in list(vars(module).values()):
            if isinstance(f, CPUDispatcher) and f.targetoptions.get("inline") != "always":
                for key in f._cache._cache_file._load_index():
                    f.compile(key[0])
except Exception:
    pass
main_path = os.path.join(os.path.dirname(gradwire.console.__file__), "__main__.py")
for line in requests:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            requests.close()
            replies.close()
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            for fd, (path, flags) in enumerate(((os.devnull, os.O_RDONLY),
                                                (req["stdout"], os.O_WRONLY | os.O_TRUNC),
                                                (req["stderr"], os.O_WRONLY | os.O_TRUNC))):
                f = os.open(path, flags)
                os.dup2(f, fd)
                os.close(f)
            sys.argv = [main_path, *req["args"]]
            rc = gradwire.console.main()
        except SystemExit as done:
            code = done.code
            if code is None:
                rc = 0
            elif isinstance(code, int):
                rc = code
            else:
                print(code, file=sys.stderr)
                rc = 1
        except BaseException:
            traceback.print_exc()
            rc = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:
            pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc & 0xFF)
    deadline = time.monotonic() + req["timeout"]
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            timed_out = True
            break
        time.sleep(0.005)
    replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(status),
                              "timed_out": timed_out}) + "\n")
    replies.flush()
"""

_zygote: subprocess.Popen | None = None
_asking = threading.Lock()  # one request at a time on the zygote's pipes


def _server() -> subprocess.Popen:
    """This pytest process's zygote, started on first use (and again if it has died)."""
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        atexit.register(_stop, _zygote)
    return _zygote


def _stop(proc: subprocess.Popen) -> None:
    """End a zygote (its stdin closed, it leaves its loop)."""
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(args: tuple[str, ...], timeout: float, cwd: Any = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m gradwire *args`` forked from the zygote: its exit code, stdout and stderr
    (text); ``subprocess.TimeoutExpired`` after ``timeout`` s, as ``subprocess.run``."""
    cmd = [sys.executable, "-m", "gradwire", *args]
    if os.environ.get("GRADWIRE_TEST_SUBPROCESS") == "1":
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=env)
    with tempfile.TemporaryDirectory(prefix="gradwire-run-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        req = {"args": [str(a) for a in args], "timeout": timeout,
               "cwd": str(cwd if cwd is not None else os.getcwd()),
               "env": dict(env if env is not None else os.environ),
               "stdout": str(out), "stderr": str(err)}
        with _asking:
            zygote = _server()
            zygote.stdin.write(json.dumps(req) + "\n")
            zygote.stdin.flush()
            line = zygote.stdout.readline()
        if not line:
            raise RuntimeError("the tests' gradwire zygote ended without an answer")
        reply = json.loads(line)
        stdout = out.read_text(errors="replace")
        stderr = err.read_text(errors="replace")
    if reply["timed_out"]:
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(cmd, reply["rc"], stdout, stderr)
