"""Bundle I/O: one folder per node holding raw truth and derived tables (docs/bundle.md).

Layout::

    BUNDLE/manifest.json                 versioned description of the collection
    BUNDLE/capture.pcapng | capture.pcap packets of the cluster's gRPC ports
    BUNDLE/trace/session.json            what the TraceHook saw (TF version, cluster, devices)
    BUNDLE/trace/step-NNNNNNNN.runmeta.pb   serialized RunMetadata of one step (lossless)
    BUNDLE/trace/step-NNNNNNNN.ops.json     derived op table + data dependencies of that step

Every file is written atomically; a step is complete once its ``.ops.json`` exists (it is
written after the ``.runmeta.pb``), so a killed run leaves every completed step readable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gradwire import __version__, atomic
from gradwire.errors import BundleError
from gradwire.records import ClockSample, DataDep, OpRecord, StepTrace, to_dict

SCHEMA_VERSION = 1
ENV_BUNDLE = "GRADWIRE_BUNDLE"  # where a TraceHook writes when no out_dir is given
SUPPORTED_SCHEMAS = (1,)
MANIFEST = "manifest.json"
TRACE_DIR = "trace"
SESSION_FILE = "session.json"
CAPTURE_NAMES = ("capture.pcapng", "capture.pcap")
CAPTURE_LOG = "capture.log"  # the capture tool's own messages
KIND = "gradwire-bundle"  # the manifest's "kind"
_STEP_RE = re.compile(r"^step-(\d{8})\.ops\.json$")
_REQUIRED = ("schema_version", "kind", "status", "host", "clock_samples")


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
                 "cpu_count": usable_cpus()},
        "processes": [],
        "command": None,
        "exit_code": None,
        "clock_samples": {"start": to_dict(clock_sample()), "end": None},
        "capture": None,
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
    }
    atomic.write_text(step_file(folder, trace.step, "ops.json"), json.dumps(payload) + "\n")


_JSON_TYPES = {"int": (int,), "str": (str,), "bool": (bool,), "None": (type(None),)}
_FIELD_TYPES: dict[type, dict[str, tuple[type, ...]]] = {}


def _field_types(cls: type) -> dict[str, tuple[type, ...]]:
    """Field name -> the JSON value types it accepts (from annotations like ``int | None``)."""
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = {f.name: tuple(t for part in str(f.type).split("|")
                                           for t in _JSON_TYPES[part.strip()])
                             for f in fields(cls)}
    return _FIELD_TYPES[cls]


def _record_from(cls: type, raw: dict[str, Any], path: Path) -> Any:
    types = _field_types(cls)
    if not isinstance(raw, dict):
        raise BundleError(f"bad {cls.__name__} record: {raw!r:.60} is not an object", path=path)
    for k, v in raw.items():
        ok = types.get(k)
        # bool is an int in Python; a JSON true is not a time or a size
        if ok is not None and (not isinstance(v, ok) or (isinstance(v, bool) and bool not in ok)):
            raise BundleError(f"bad {cls.__name__} record: {k} is {v!r:.40}, not "
                              f"{' or '.join(t.__name__ for t in ok)}", path=path)
    try:
        return cls(**{k: v for k, v in raw.items() if k in types})
    except TypeError as exc:
        raise BundleError(f"bad {cls.__name__} record: {exc}", path=path) from None


def read_step(path: str | Path) -> StepTrace:
    """Load one ``step-*.ops.json`` file into a StepTrace."""
    path = Path(path)
    raw = _load_json(path)
    try:
        ops = tuple(_record_from(OpRecord, o, path) for o in raw["ops"])
        deps = tuple(_record_from(DataDep, d, path) for d in raw["deps"])
        return StepTrace(step=int(raw["step"]), ops=ops, deps=deps,
                         devices=tuple(dict.fromkeys(raw["devices"])))  # older tables repeat
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"not a step table ({exc!r} missing or wrong)", path=path) from None


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleError("file not found", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read ({exc.__class__.__name__})", path=path) from None
    if not text.strip():
        raise BundleError("file is empty", path=path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(
            f"corrupt or truncated JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            path=path,
        ) from None


@dataclass(frozen=True)
class Bundle:
    """A bundle folder opened for reading; the manifest is validated, steps load lazily."""

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
        """Every completed step's trace, in step order."""
        return [read_step(p) for p in self.step_files]

    @property
    def ports(self) -> list[int]:
        """The gRPC ports the capture was filtered to (may be empty)."""
        return [int(p) for p in self.manifest.get("ports") or []]

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
    """Open and validate a bundle folder; raises BundleError naming the faulty file."""
    folder = Path(path)
    if not folder.exists():
        raise BundleError("no such bundle folder", path=folder)
    if not folder.is_dir():
        raise BundleError("not a folder (a bundle is a folder with manifest.json)", path=folder)
    mpath = folder / MANIFEST
    if not mpath.exists():
        raise BundleError("missing manifest.json: not a gradwire bundle", path=folder)
    manifest = _load_json(mpath)
    if not isinstance(manifest, dict):
        raise BundleError("manifest is not a JSON object", path=mpath)
    missing = [k for k in _REQUIRED if k not in manifest]
    if missing:
        raise BundleError(f"manifest lacks {', '.join(missing)}", path=mpath)
    if manifest["kind"] != KIND:
        raise BundleError(f"kind is {manifest['kind']!r}, not {KIND!r}", path=mpath)
    version = manifest["schema_version"]
    if version not in SUPPORTED_SCHEMAS:
        raise BundleError(
            f"unknown schema_version {version!r} (this gradwire {__version__} reads "
            f"{', '.join(map(str, SUPPORTED_SCHEMAS))})",
            path=mpath,
        )
    _check_manifest_types(manifest, mpath)
    trace_dir = folder / TRACE_DIR
    steps = tuple(sorted(p for p in trace_dir.glob("step-*.ops.json") if _STEP_RE.match(p.name)))
    capture = next((folder / n for n in CAPTURE_NAMES if (folder / n).exists()), None)
    session_path = trace_dir / SESSION_FILE
    session = _load_json(session_path) if session_path.exists() else None
    return Bundle(folder, manifest, steps, capture, session)


def _check_manifest_types(m: dict[str, Any], mpath: Path) -> None:
    """Raise BundleError naming the first manifest key whose value has the wrong shape."""
    def bad(key: str, want: str) -> BundleError:
        return BundleError(f"manifest {key!r} is {m[key]!r:.60}, not {want}", path=mpath)

    if not isinstance(m["status"], str):
        raise bad("status", "a string")
    for key in ("host", "clock_samples"):
        if not isinstance(m[key], dict):
            raise bad(key, "an object")
    if not isinstance(m.get("capture"), dict | None):
        raise bad("capture", "an object or null")
    ports = m.get("ports")
    if ports is not None and (not isinstance(ports, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in ports)):
        raise bad("ports", "a list of port numbers")
    task = m.get("task")  # TF_CONFIG's, as TF reads it: the index may be "0" or left out
    if task and not (isinstance(task, dict) and isinstance(task.get("type"), str)
                     and str(task.get("index", 0)).isdigit()):
        raise bad("task", 'an object like {"type": "worker", "index": 0}')
    spec = m.get("cluster_spec")
    if spec is not None and not (isinstance(spec, dict) and all(
            isinstance(v, list) and all(isinstance(a, str) for a in v)
            or isinstance(v, dict) and all(isinstance(a, str) for a in v.values())
            for v in spec.values())):
        raise bad("cluster_spec", "an object of job -> list of 'host:port'")


def find_bundles(path: str | Path) -> list[Path]:
    """``path`` itself if it is a bundle, else its immediate sub-folders that are bundles.

    Raises BundleError when there is none, naming the folder.
    """
    folder = Path(path)
    if not folder.exists():
        raise BundleError("no such bundle folder", path=folder)
    if not folder.is_dir() or (folder / MANIFEST).exists():
        return [folder]
    found = sorted(p for p in folder.iterdir() if (p / MANIFEST).is_file())
    for p in sorted(folder.iterdir()):
        if p.is_dir() and not (p / MANIFEST).is_file() and (
                (p / TRACE_DIR).is_dir() or any((p / n).exists() for n in CAPTURE_NAMES)):
            logging.getLogger(__name__).warning(
                "%s: has a trace or capture but no manifest.json; skipped (see docs/bundle.md)",
                p)
    if not found:
        raise BundleError("missing manifest.json: not a gradwire bundle, nor a folder of "
                          "node bundles", path=folder)
    return found
