"""Bundle I/O: one folder per node holding raw truth and derived tables (docs/bundle.md).

Layout::

    BUNDLE/manifest.json                 versioned description of the collection
    BUNDLE/capture.pcapng | capture.pcap packets of the cluster's gRPC ports
    BUNDLE/trace/session.json            what the TraceHook saw (TF version, cluster, devices)
    BUNDLE/trace/graph.meta.pb           the session's graph (MetaGraphDef), kept once
    BUNDLE/trace/step-NNNNNNNN.runmeta.pb   serialized RunMetadata of one step (lossless)
    BUNDLE/trace/step-NNNNNNNN.ops.json     derived op table + data dependencies of that step

Every file is written atomically; a step is complete once its ``.ops.json`` exists (it is
written after the ``.runmeta.pb``), so a killed run leaves every completed step readable.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gradwire import __version__, atomic, schema
from gradwire.errors import BundleError, GradwireError, fault_of
from gradwire.records import ClockSample, DataDep, OpRecord, StepTrace, VariableRecord, to_dict

SCHEMA_VERSION = 1
ENV_BUNDLE = "GRADWIRE_BUNDLE"  # where a TraceHook writes when no out_dir is given
SUPPORTED_SCHEMAS = schema.SUPPORTED_SCHEMAS
MANIFEST = "manifest.json"
TRACE_DIR = "trace"
SESSION_FILE = "session.json"
GRAPH_FILE = "graph.meta.pb"  # the traced session's graph (a MetaGraphDef): `opdb step` runs it
CAPTURE_NAMES = ("capture.pcapng", "capture.pcap")
CAPTURE_LOG = "capture.log"  # the capture tool's own messages
KIND = "gradwire-bundle"  # the manifest's "kind"
# shipped with gradwire: a lab recording of a 1-worker job, and lab runs of it at W = 1..4
SAMPLE_BUNDLE = Path(__file__).parent / "data" / "sample_bundle"
SAMPLE_MEASURED = Path(__file__).parent / "data" / "sample_measured"
_STEP_RE = schema.STEP_FILE_NAME  # step-00000012.ops.json (more digits past step 99,999,999)


def clock_sample() -> ClockSample:
    """Read CLOCK_REALTIME and CLOCK_MONOTONIC back to back (nanoseconds)."""
    return ClockSample(realtime_ns=time.time_ns(), monotonic_ns=time.monotonic_ns())


def host_addresses() -> list[str]:
    """IPv4/IPv6 addresses of this host (network namespace), loopback last."""
    try:
        out = subprocess.run(
            ["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    addrs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] in ("inet", "inet6"):
            addrs.append(parts[3].split("/")[0])
    return sorted(addrs, key=lambda a: (a in ("127.0.0.1", "::1"), a))


def usable_cpus() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def tcp_congestion_control() -> str | None:
    """The TCP congestion control new connections of this process's network namespace get
    (``net.ipv4.tcp_congestion_control``, e.g. 'cubic', 'bbr'); None where /proc does not
    say (not Linux, or /proc not mounted)."""
    try:
        words = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().split()
    except OSError:
        return None
    return words[0] if words else None


def new_manifest(*, created_by: str, mode: str) -> dict[str, Any]:
    """A fresh manifest for this host with a start clock sample and status 'collecting'."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "gradwire_version": __version__,
        "created_by": created_by,
        "mode": mode,
        "status": "collecting",
        "host": {"hostname": socket.gethostname(), "addresses": host_addresses(),
                 "cpu_count": usable_cpus(), "tcp_congestion_control": tcp_congestion_control()},
        "processes": [],
        "command": None,
        "exit_code": None,
        "clock_samples": {"start": to_dict(clock_sample()), "end": None},
        "capture": None,
        "host_cpu": None,
        "ports": [],
        "tf_version": None,
        "cluster_spec": None,
        "task": None,
        "stop_signal": None,
        "problems": [],
    }


def write_manifest(folder: str | Path, manifest: dict[str, Any]) -> Path:
    """Write ``manifest.json`` atomically into ``folder``."""
    return atomic.write_json(Path(folder) / MANIFEST, manifest)


def step_file(folder: str | Path, step: int, suffix: str) -> Path:
    """Path of one step's file in a bundle's trace folder (``suffix``: runmeta.pb/ops.json)."""
    return Path(folder) / TRACE_DIR / f"step-{step:08d}.{suffix}"


def write_step(folder: str | Path, trace: StepTrace, runmeta: bytes) -> None:
    """Store one step: the raw RunMetadata first, then the derived table that marks it done."""
    atomic.write_bytes(step_file(folder, trace.step, "runmeta.pb"), runmeta)
    payload = {
        "step": trace.step,
        "devices": list(trace.devices),
        "ops": [to_dict(op) for op in trace.ops],
        "deps": [to_dict(dep) for dep in trace.deps],
        "variables": [to_dict(v) for v in trace.variables],
    }
    atomic.write_text(step_file(folder, trace.step, "ops.json"), json.dumps(payload) + "\n")


_OP_FIELDS = frozenset(f.name for f in fields(OpRecord))
_DEP_FIELDS = frozenset(f.name for f in fields(DataDep))
_VAR_FIELDS = frozenset(f.name for f in fields(VariableRecord))


def _records(cls: type, known: frozenset[str], raws: list[dict[str, Any]]) -> tuple[Any, ...]:
    """Records from validated dicts (keys a newer writer added are left out)."""
    return tuple(cls(**r) if r.keys() <= known else cls(**{k: r[k] for k in known if k in r})
                 for r in raws)


def read_step(path: str | Path) -> StepTrace:
    """Load one ``step-*.ops.json`` file into a StepTrace.

    Raises BundleError naming the file and the field when it is not a valid step table
    (gradwire/schema.py: types, times within 2000-2200, no negative duration, the step of
    the file name and of every op).
    """
    path = Path(path)
    raw = read_json(path)
    schema.check_step_table(raw, path)
    return StepTrace(step=raw["step"], ops=_records(OpRecord, _OP_FIELDS, raw["ops"]),
                     deps=_records(DataDep, _DEP_FIELDS, raw["deps"]),
                     devices=tuple(dict.fromkeys(raw["devices"])),  # older tables repeat
                     variables=_records(VariableRecord, _VAR_FIELDS, raw.get("variables", [])))


_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"))


def _regular(st: os.stat_result, path: Path) -> None:
    """Raise BundleError unless ``st`` is a regular file's (reading anything else may block)."""
    if not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _NOT_REGULAR if test(st.st_mode)), "not a file")
        raise BundleError(f"is {what}, not a regular file: refused (reading it could block "
                          "or never end)", path=path)


def read_bytes(path: str | Path) -> bytes:
    """The whole content of a regular file; BundleError naming it when it is missing,
    unreadable, or not a regular file (a FIFO would block forever: refused before it is
    opened, and again on the opened descriptor, should it have been swapped in between)."""
    path = Path(path)
    try:
        _regular(os.stat(path), path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            _regular(os.fstat(f.fileno()), path)
            return f.read()
    except FileNotFoundError:
        raise BundleError("file not found", path=path) from None
    except OSError as exc:
        raise BundleError(f"cannot read: {fault_of(exc)}", path=path) from None


def read_text(path: str | Path) -> str:
    """The whole text (UTF-8) of a regular file (``read_bytes``); BundleError naming it as
    ``read_bytes`` does, or when it is not UTF-8."""
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"cannot read: {fault_of(exc)}", path=path) from None


def read_json(path: str | Path) -> Any:
    """Parse one JSON file of a bundle (or the lab's lab_result.json) whole.

    Raises BundleError naming the file when it is missing, not a regular file (see
    ``read_text``), unreadable, empty, not JSON, nested deeper than Python's parser goes, or
    holding an integer of more than Python's 4,300 digits. NaN and Infinity parse; the schema
    (gradwire/schema.py) refuses them where they matter.
    """
    path = Path(path)
    text = read_text(path)
    if not text.strip():
        raise BundleError("file is empty", path=path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(
            f"corrupt or truncated JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            path=path,
        ) from None
    except RecursionError:
        raise BundleError("JSON nested too deeply for Python to read (lists or objects within "
                          "each other, hundreds of levels)", path=path) from None
    except ValueError:  # int('9' * 5000): Python's limit on integer digits
        raise BundleError(f"holds an integer of more than {sys.get_int_max_str_digits():,} "
                          "digits, more than Python reads (and than any field needs)",
                          path=path) from None


@dataclass(frozen=True)
class Bundle:
    """A bundle folder opened for reading; the manifest and session are validated
    (gradwire/schema.py: every field has its type and range), steps load lazily."""

    path: Path
    manifest: dict[str, Any]
    step_files: tuple[Path, ...]
    capture_file: Path | None
    session: dict[str, Any] | None

    @property
    def steps(self) -> list[int]:
        """Indices of the completed steps, ascending."""
        return [int(_STEP_RE.match(p.name).group(1)) for p in self.step_files]  # type: ignore[union-attr]

    def load_steps(self) -> list[StepTrace]:
        """Every completed step's trace, in step order (each file validated as it is read)."""
        return [read_step(p) for p in self.step_files]

    @property
    def ports(self) -> list[int]:
        """The gRPC ports the capture was filtered to (may be empty)."""
        return list(self.manifest.get("ports") or [])

    @property
    def task(self) -> str:
        """The cluster task the manifest names (``worker:0``; TF_CONFIG's index may be "0" or
        left out), or '' when it names none."""
        task = self.manifest.get("task")
        return f"{task['type']}:{int(task.get('index', 0))}" if task else ""


def one_bundle_per_task(bundles: Iterable[tuple[str, str, Path]]) -> None:
    """Raise BundleError when two of ``(task, name, path)`` hold the same task (a copy beside
    the bundles, or two runs): it would be counted twice. An empty task is no task."""
    seen: dict[str, str] = {}
    for task, name, path in bundles:
        if task and task in seen:
            raise BundleError(f"bundles {seen[task]} and {name} both hold task {task} (a copy, "
                              "or two runs?): give one bundle per task", path=path)
        seen.setdefault(task, name)


def open_bundle(path: str | Path) -> Bundle:
    """Open and validate a bundle folder: its manifest and session against gradwire/schema.py,
    its capture a regular file. Raises BundleError naming the faulty file and field."""
    folder = Path(path)
    if not folder.exists():
        raise BundleError("no such bundle folder", path=folder)
    if not folder.is_dir():
        raise BundleError("not a folder (a bundle is a folder with manifest.json)", path=folder)
    _readable_folder(folder, "a bundle is a folder with manifest.json")
    mpath = folder / MANIFEST
    if not os.path.lexists(mpath):
        raise BundleError("missing manifest.json: not a gradwire bundle", path=folder)
    manifest = read_json(mpath)
    schema.check_manifest(manifest, mpath)
    trace_dir = folder / TRACE_DIR
    tables = [trace_dir / n for n in _readable_folder(trace_dir, "a bundle's trace/ holds "
                                                      "its step files")
              if fnmatch.fnmatchcase(n, "step-*.ops.json")]
    steps = tuple(sorted((p for p in tables if _STEP_RE.match(p.name)),
                         key=lambda p: int(_STEP_RE.match(p.name).group(1))))  # type: ignore[union-attr]
    if len(steps) < len(tables):  # step-4.ops.json: not the TraceHook's (8-18 digits)
        odd = sorted(p.name for p in tables if not _STEP_RE.match(p.name))
        logging.getLogger(__name__).warning(
            "%s: %d step table(s) named otherwise than step-NNNNNNNN.ops.json (8 to 18 "
            "digits) left out: %s", trace_dir, len(odd), ", ".join(odd[:3])
            + (", ..." if len(odd) > 3 else ""))
    capture = next((folder / n for n in CAPTURE_NAMES if os.path.lexists(folder / n)), None)
    if capture is not None:
        try:
            _regular(os.stat(capture), capture)
        except OSError as exc:
            raise BundleError(f"cannot read: {fault_of(exc)}", path=capture) from None
    session_path = trace_dir / SESSION_FILE
    session = None
    if os.path.lexists(session_path):
        session = read_json(session_path)
        schema.check_session(session, session_path)
    return Bundle(folder, manifest, steps, capture, session)


def given_or_sample(paths: Iterable[Path], sample: bool, what: str) -> list[Path]:
    """The bundles a command reads: ``paths`` as given, or with ``--sample`` the one shipped
    with gradwire, never both and never neither (``what``: what to give, in the error).

    Raises GradwireError saying what to give."""
    given = list(paths)
    if sample and given:
        raise GradwireError(f"give {what} or --sample, not both", usage=True)
    if sample:
        return [SAMPLE_BUNDLE]
    if not given:
        raise GradwireError(f"give {what}, or --sample for the sample bundle shipped with "
                            "gradwire", usage=True)
    return given


def one_given_or_sample(path: Path | str | None, sample: bool, what: str) -> Path:
    """``given_or_sample`` for a command that reads one bundle or capture: ``path`` (None:
    not given) or with ``--sample`` the shipped bundle."""
    return Path(given_or_sample([] if path is None else [Path(path)], sample, what)[0])


def _readable_folder(path: Path, what: str) -> list[str]:
    """The names in folder ``path`` (none where nothing is there); BundleError when it
    exists (a link too) but is not a folder gradwire can list (``what``: what the folder
    holds, for the message): a bundle or its trace/ that is a file, a link that loops, or
    unreadable would otherwise read as one without a manifest or without steps."""
    if not os.path.lexists(path):
        return []
    try:
        if not stat.S_ISDIR(os.stat(path).st_mode):
            raise BundleError(f"is not a folder ({what})", path=path)
        return os.listdir(path)
    except OSError as exc:
        raise BundleError(f"cannot read this folder: {fault_of(exc)}", path=path) from None


def find_bundles(path: str | Path) -> list[Path]:
    """``path`` itself if it is a bundle, else its immediate sub-folders that are bundles.

    Raises BundleError when there is none, naming the folder.
    """
    folder = Path(path)
    if not folder.exists():
        raise BundleError("no such bundle folder", path=folder)
    if not folder.is_dir() or os.path.lexists(folder / MANIFEST):
        return [folder]
    entries = sorted(folder / n for n in _readable_folder(folder, "of node bundles"))
    # a manifest.json that is not a regular file is opened, and refused by name
    found = [p for p in entries if os.path.lexists(p / MANIFEST)]
    log = logging.getLogger(__name__)
    for p in entries:
        if p in found:
            continue
        try:  # os's calls, not pathlib's, which hide a permission error on newer Pythons
            if stat.S_ISDIR(os.stat(p).st_mode):  # a link that loops or leads nowhere raises
                names = set(os.listdir(p))
                if TRACE_DIR in names or names.intersection(CAPTURE_NAMES):
                    log.warning("%s: has a trace or capture but no manifest.json; skipped "
                                "(see docs/bundle.md)", p)
        except OSError as exc:  # a folder it cannot look into, a link that loops...
            why = ("a link to nothing" if exc.errno == errno.ENOENT and os.path.islink(p)
                   else fault_of(exc))
            log.warning("%s: cannot look into it: %s; skipped", p, why)
    if not found:
        raise BundleError("missing manifest.json: not a gradwire bundle, nor a folder of "
                          "node bundles", path=folder)
    return found
