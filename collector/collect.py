"""`gradwire collect`: capture a node's gRPC traffic while training runs, into one bundle.

Run mode starts the capture, runs the training command with ``GRADWIRE_BUNDLE`` pointing at the
bundle (so a ``TraceHook`` in the script writes its steps there), and stops the capture when the
command exits, on Ctrl-C and on SIGTERM (both are forwarded to the command first), or earlier:
after ``--duration`` seconds or on SIGUSR1, while the command runs on (its later steps, which the
hook still times, are the job without a capture: ``gradwire predict``'s recording cost). Attach mode
captures beside training that is already running, for a fixed duration or until interrupted.
The manifest is written before anything starts and rewritten at the end, atomically each time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from gradwire import atomic, bundle, schema
from gradwire.collector.capture import DEFAULT_BUFFER_MIB, DEFAULT_SNAPLEN, Capture
from gradwire.errors import BundleError, CollectError
from gradwire.procstat import host_cpu_between, host_cpu_ticks
from gradwire.records import CaptureInfo, to_dict

log = logging.getLogger(__name__)
GRACE_S = 30.0  # after forwarding a signal, how long the command gets to exit


@dataclass
class CollectOptions:
    """Everything `gradwire collect` was asked to do (see ``gradwire collect --help``)."""

    out: Path
    command: list[str] = field(default_factory=list)
    iface: str = "any"
    ports: list[int] = field(default_factory=list)
    tool: str = "auto"
    snaplen_bytes: int = DEFAULT_SNAPLEN
    buffer_mib: int = DEFAULT_BUFFER_MIB
    attach: bool = False
    duration_s: float | None = None


def tf_config_fields(tf_config: str | None) -> tuple[dict[str, Any] | None, Any]:
    """The cluster and the task of a ``TF_CONFIG`` JSON string, each as the bundle's manifest
    keeps it (gradwire/schema.py: ``cluster_spec``, ``task``); (None, None) when absent.

    Raises CollectError naming the fault: not JSON, no cluster object, or a field of another
    shape (the by-index form of TensorFlow's resolver, ``{"ps": {"0": "h:2222"}}``, is one)."""
    if not tf_config:
        return None, None
    try:
        doc = json.loads(tf_config)
    except json.JSONDecodeError as exc:
        raise CollectError(f"TF_CONFIG is not valid JSON ({exc.msg} at char {exc.pos})") \
            from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cluster"), dict):
        raise CollectError("TF_CONFIG has no 'cluster' object")
    task = doc.get("task") or None
    try:  # the manifest's rules for its cluster_spec and task
        schema.check({"cluster": doc["cluster"], "task": task},
                     schema.Obj({"cluster": schema.CLUSTER_SPEC, "task": schema.Opt(schema.TASK)}),
                     None, CollectError)
    except CollectError as exc:
        raise CollectError(f"TF_CONFIG: {exc.message}") from None
    return doc["cluster"], task


def cluster_ports(tf_config: str | None) -> list[int]:
    """Ports of every task in a ``TF_CONFIG`` JSON string's cluster ([] when absent); raises
    CollectError as :func:`tf_config_fields` does."""
    return _ports_of(tf_config_fields(tf_config)[0])


def _ports_of(cluster: dict[str, Any] | None) -> list[int]:
    """Ports of every task of a cluster :func:`tf_config_fields` checked ([] for None)."""
    hosts = [h for tasks in (cluster or {}).values()
             for h in (tasks.values() if isinstance(tasks, dict) else tasks)]
    return sorted({int(h.rsplit(":", 1)[1]) for h in hosts})


def listening_pids(ports: list[int]) -> list[dict[str, Any]]:
    """Processes listening on any of ``ports`` in this namespace (via ``ss``), for the manifest."""
    try:
        out = subprocess.run(["ss", "-H", "-tlnp"], capture_output=True, text=True,
                             timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 6 or not cols[3].rsplit(":", 1)[-1].isdigit():
            continue
        port = int(cols[3].rsplit(":", 1)[-1])
        if port in ports:
            for name, pid in _ss_users(cols[5]):
                found.append({"role": "listener", "port": port, "pid": pid, "name": name})
    return found


def _ss_users(text: str) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for m in re.finditer(r'"([^"]*)",pid=(\d+)', text)]


def _validate(opts: CollectOptions) -> None:
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise CollectError(f"--duration must be positive seconds, not {opts.duration_s}",
                           usage=True)
    if opts.attach:
        if opts.command:
            raise CollectError("--attach captures beside running training: give no command",
                               usage=True)
    elif not opts.command:
        raise CollectError("nothing to run: give the training command after --, or --attach",
                           usage=True)
    elif "/" not in opts.command[0] and shutil.which(opts.command[0]) is None:
        err = CollectError(f"command not found: {opts.command[0]}")
        err.exit_code = 127  # as a shell says it
        raise err
    elif "/" in opts.command[0] and not (os.path.isfile(opts.command[0])
                                         and os.access(opts.command[0], os.X_OK)):
        found = os.path.exists(opts.command[0])
        err = CollectError(f"cannot run {opts.command[0]}: "
                           + ("not an executable file" if found else "no such file"))
        err.exit_code = 126 if found else 127  # as a shell says them
        raise err
    if str(opts.out) == atomic.STDOUT:
        raise CollectError("--out must be a folder ('-', standard output, is not one): a "
                           "bundle is a folder of files", usage=True)
    if opts.out.is_symlink() and not opts.out.exists():
        raise CollectError("--out is a symbolic link to nothing", path=opts.out)
    if atomic.in_sample(Path(os.path.realpath(opts.out))):
        raise CollectError("--out is in the sample shipped with gradwire; choose another path",
                           path=opts.out)
    if opts.out.exists():
        if not opts.out.is_dir():
            raise CollectError("--out exists and is not a folder", path=opts.out)
        if (opts.out / bundle.MANIFEST).exists():
            try:
                status = json.loads((opts.out / bundle.MANIFEST).read_text()).get("status")
            except (OSError, ValueError, AttributeError):
                status = None
            what = f"a {status} bundle" if isinstance(status, str) else "a bundle"
            hint = ("; delete it to collect there again" if status in ("failed", "stopped")
                    else "")
            raise CollectError(f"already holds {what}; choose a new --out{hint} (nothing was "
                               "overwritten)", path=opts.out)
        if any(opts.out.iterdir()):
            raise CollectError("--out folder is not empty", path=opts.out)
    for port in opts.ports:
        if not 0 < port < 65536:
            raise CollectError(f"port {port} is out of range 1-65535")
    if opts.buffer_mib < 1:
        raise CollectError(f"--buffer-mib {opts.buffer_mib} must be at least 1", usage=True)
    if opts.snaplen_bytes < 64:
        raise CollectError(f"--snaplen {opts.snaplen_bytes} is too small (at least 64 bytes)",
                           usage=True)


class _Signals:
    """Record SIGINT/SIGTERM/SIGHUP during a collection and pass them on to the command;
    SIGUSR1 (``end_capture``) asks for the capture to end while the command runs on, and is
    not passed on.

    With ``shared_group`` (collect in a terminal's foreground, the command in collect's process
    group) a terminal's Ctrl-C and hang-up reach the command by themselves, so only SIGTERM is
    forwarded; otherwise every signal goes to the command's own process group.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self.end_capture = False
        self.child: subprocess.Popen[bytes] | None = None
        self.shared_group = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._handle)
        self._old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._handle_usr1)
        return self

    def _handle_usr1(self, _signum: int, _frame: Any) -> None:
        self.end_capture = True

    def _handle(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)
        if self.child is not None and self.child.poll() is None:
            if not self.shared_group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.child.pid, signum)
            elif signum == signal.SIGTERM:
                self.child.send_signal(signum)

    def kill_child(self) -> None:
        """SIGKILL the command (and, in its own group, everything it started)."""
        assert self.child is not None
        if self.shared_group:
            self.child.kill()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def collect(opts: CollectOptions, progress: Callable[[str], None] | None = None) -> int:
    """Run one collection; returns the exit code to use (the command's, in run mode)."""
    say = progress or (lambda msg: log.info("%s", msg))
    _validate(opts)  # every fault of the options first, then the question of the ports
    try:
        cluster, task = tf_config_fields(os.environ.get("TF_CONFIG"))
        broken = None
    except CollectError as exc:
        if not opts.ports:  # the ports were to come from it
            raise
        # a broken TF_CONFIG is training's business where --ports was given: not kept
        cluster, task, broken = None, None, exc
    listening = _ports_of(cluster)
    if not opts.ports:
        opts.ports = listening
    if not opts.ports:
        raise CollectError("which ports? give --ports P,... or set TF_CONFIG with the cluster",
                           usage=True)
    missed = sorted(set(listening) - set(opts.ports))
    if missed:
        say(f"warning: TF_CONFIG's cluster listens on port(s) {','.join(map(str, missed))}, "
            "which --ports leaves out: their traffic is not captured")
    try:
        opts.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"cannot create the --out folder: {exc.strerror}", path=opts.out) \
            from None
    manifest = bundle.new_manifest(created_by="collect", mode="attach" if opts.attach else "run")
    manifest["ports"] = sorted(set(opts.ports))
    manifest["command"] = opts.command or None
    manifest["processes"] = [{"role": "collect", "pid": os.getpid()}]
    manifest["tf_version"] = _installed_version("tensorflow") or _installed_version(
        "tensorflow-cpu")
    manifest["cluster_spec"], manifest["task"] = cluster, task
    if broken is not None:
        manifest["problems"].append(f"{broken.message}: its cluster and task not recorded")
        say(f"warning: {broken.message}: its cluster and task are not recorded")
    bundle.write_manifest(opts.out, manifest)
    with _Signals() as sigs:
        return _collect_with(opts, manifest, sigs, say)


def _collect_with(
    opts: CollectOptions, manifest: dict[str, Any], sigs: _Signals, say: Callable[[str], None]
) -> int:
    capture = Capture(opts.out, opts.iface, opts.ports, opts.tool, opts.snaplen_bytes,
                      opts.buffer_mib)
    try:
        capture.start()
    except BaseException:
        manifest["status"] = "failed"
        manifest["problems"].append("capture did not start")
        bundle.write_manifest(opts.out, manifest)
        raise
    manifest["capture"] = to_dict(capture.info())
    ended: list[CaptureInfo] = []  # the capture's info once ended before the command
    cpu_start = _cpu_reading()

    def end_capture(why: str) -> None:
        """Stop the capture now, the command running on (``--duration``, SIGUSR1)."""
        if ended:
            return
        ended.append(capture.stop())
        manifest["capture"] = to_dict(ended[0])
        manifest["host_cpu"] = _host_cpu_since(cpu_start)
        manifest["capture_ended"] = why
        bundle.write_manifest(opts.out, manifest)
        say(f"{why}: capture stopped after {ended[0].packets_captured} packets; the command "
            "runs on, its steps timed by the TraceHook without a capture")

    if capture.pid:
        manifest["processes"].append({"role": "capture", "pid": capture.pid,
                                      "argv": capture.argv()})
    say(f"capturing {capture.filter} on {opts.iface} with {capture.tool} -> {capture.path}")
    bundle.write_manifest(opts.out, manifest)

    exit_code = 0
    try:
        if opts.attach:
            manifest["processes"] += listening_pids(opts.ports)
            exit_code = _attach(opts, manifest, sigs, say)
        else:
            exit_code = _run(opts, manifest, sigs, say, end_capture)
    finally:
        info = ended[0] if ended else capture.stop()
        manifest["capture"] = to_dict(info)
        if not ended:
            manifest["host_cpu"] = _host_cpu_since(cpu_start)
        if capture.exited_early:
            manifest["problems"].append(f"{info.tool} exited before the end of the collection; "
                                        "see capture.log")
        manifest["clock_samples"]["end"] = to_dict(bundle.clock_sample())
        _merge_session(opts.out, manifest)
        drops = sum(d or 0 for d in (info.drops_kernel, info.drops_capturer, info.drops_iface))
        if drops:
            manifest["problems"].append(f"capture dropped {drops} packets")
        traced = len(list((opts.out / bundle.TRACE_DIR).glob("step-*.ops.json")))
        if not info.packets_captured and (traced or opts.attach):
            though = f", though the TraceHook recorded {traced} step(s)" if traced else ""
            manifest["problems"].append(f"no packet captured{though}")
            say(f"warning: no packet on port(s) {','.join(map(str, opts.ports))} of "
                f"{opts.iface}{though}: " + ("are these the cluster's ports and interface?"
                                             if traced else "is the training running there, "
                                             "on those ports?"))
        if manifest["status"] == "collecting":
            manifest["status"] = "complete"
        bundle.write_manifest(opts.out, manifest)
        known = any(d is not None for d in (info.drops_kernel, info.drops_capturer,
                                            info.drops_iface))
        say(f"captured {info.packets_captured} packets, "
            f"{drops if known else 'unknown (no counters from ' + info.tool + ')'} dropped; "
            f"bundle {opts.out} is {manifest['status']}")
    return exit_code


def _cpu_reading() -> tuple[float, tuple[int, int, int]] | None:
    """(monotonic s, the machine's CPU ticks), None where there is no /proc/stat."""
    try:
        return time.monotonic(), host_cpu_ticks()
    except (OSError, ValueError, IndexError):
        return None


def _host_cpu_since(start: tuple[float, tuple[int, int, int]] | None) -> dict[str, float] | None:
    """The machine's busy and stolen cores from ``start`` to now (the manifest's ``host_cpu``:
    a node whose virtual machine lost cores to its hypervisor ran its traced steps slower
    than the machine does alone); None without /proc/stat."""
    end = _cpu_reading()
    if start is None or end is None:
        return None
    cpu = host_cpu_between(start[1], end[1], end[0] - start[0])
    return None if cpu is None else cpu._asdict()


def _run(
    opts: CollectOptions, manifest: dict[str, Any], sigs: _Signals, say: Callable[[str], None],
    end_capture: Callable[[str], None],
) -> int:
    if sigs.received:  # interrupted while the capture was starting: do not start the command
        manifest["status"] = "interrupted"
        manifest["problems"].append(f"interrupted by signal {sigs.received[0]} before start")
        return 128 + sigs.received[0]
    env = dict(os.environ, **{bundle.ENV_BUNDLE: str(opts.out.resolve())})
    # in a terminal's foreground the command joins collect's process group, so input(), pdb,
    # Ctrl-C and Ctrl-Z reach it as they would without collect; else it gets a group of its own
    sigs.shared_group = _in_terminal_foreground()
    try:
        child = subprocess.Popen(opts.command, env=env,
                                 **({} if sigs.shared_group else {"process_group": 0}))
    except OSError as exc:
        why = f"cannot start {opts.command[0]}: {exc.strerror}"
        manifest["status"] = "failed"
        manifest["problems"].append(why)  # the bundle says why it holds no run
        raise CollectError(why) from None
    sigs.child = child
    code = _wait(child, sigs, manifest, opts, say, end_capture)
    manifest["exit_code"] = code
    if sigs.received:
        manifest["status"] = "stopped"
        manifest["stop_signal"] = sigs.received[0]
    elif code != 0:
        manifest["status"] = "failed"
        manifest["problems"].append(
            f"command killed by signal {-code} ({signal.Signals(-code).name})" if code < 0
            else f"command exited with code {code}")
    return code if code >= 0 else 128 - code


def _in_terminal_foreground() -> bool:
    """Whether collect runs in the foreground process group of the terminal on its stdin."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _wait(child: subprocess.Popen[bytes], sigs: _Signals, manifest: dict[str, Any],
          opts: CollectOptions, say: Callable[[str], None],
          end_capture: Callable[[str], None]) -> int:
    """The command's exit code (negative: killed by that signal), killing it when a signal
    was not enough after GRACE_S seconds or a second signal came; the capture ended early
    after ``--duration`` seconds or on SIGUSR1."""
    manifest["processes"].append({"role": "command", "pid": child.pid, "argv": opts.command})
    bundle.write_manifest(opts.out, manifest)
    deadline = None
    capture_until = time.monotonic() + opts.duration_s if opts.duration_s else None
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if sigs.end_capture:
            end_capture("SIGUSR1")
        elif capture_until is not None and time.monotonic() > capture_until:
            end_capture(f"--duration {opts.duration_s:g} s")
        if sigs.received and deadline is None:
            say(f"signal {sigs.received[0]}: waiting {GRACE_S:.0f} s for the command to exit "
                "(signal again to kill it)")
            deadline = time.monotonic() + GRACE_S
        if deadline is not None and (time.monotonic() > deadline or len(sigs.received) > 1):
            sigs.kill_child()
            return child.wait()


def _attach(
    opts: CollectOptions, manifest: dict[str, Any], sigs: _Signals, say: Callable[[str], None]
) -> int:
    end = time.monotonic() + opts.duration_s if opts.duration_s else None
    say(f"attached; capturing for {opts.duration_s:.0f} s" if end else "attached; until Ctrl-C")
    while not sigs.received and not sigs.end_capture and (end is None or time.monotonic() < end):
        time.sleep(0.1)
    if sigs.end_capture:
        say("SIGUSR1: stopping the capture")
    elif sigs.received:
        say(f"signal {sigs.received[0]}: stopping the capture")
        manifest["status"] = "stopped"
        manifest["stop_signal"] = sigs.received[0]
    return 0


def _merge_session(folder: Path, manifest: dict[str, Any]) -> None:
    """Copy what the TraceHook learnt (TF version, cluster spec, PID) into the manifest."""
    path = folder / bundle.TRACE_DIR / bundle.SESSION_FILE
    if not path.exists():
        return
    try:  # (read_json refuses a FIFO or device there: it would block collect at its end)
        session = bundle.read_json(path)
        schema.check_session(session, path)
    except BundleError as exc:
        manifest["problems"].append(f"unreadable {path.name}: {exc.message}")
        return
    manifest["tf_version"] = session.get("tf_version") or manifest["tf_version"]
    manifest["cluster_spec"] = session.get("cluster_spec") or manifest["cluster_spec"]
    if session.get("pid"):
        manifest["processes"].append({"role": "training", "pid": session["pid"]})


def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
