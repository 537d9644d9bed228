"""Bad bundles, made in code: a copy of the shipped sample with one mutation applied.

``make(tmp, mutation)`` copies ``tests/data/small_bundle`` (``ps0/``, ``worker0/`` and the
lab's ``lab_result.json``; the captures and RunMetadata are symlinked, not copied, as no
mutation here edits them) into ``tmp/b`` and applies ``mutation(root)``. The mutations are
small functions of the bundle root built by the helpers below: ``set_(file, field, value)``,
``drop(file, field)``, ``raw(file, text)``, ``fifo(file)``... ``field`` is a dotted path
(``host.addresses``, ``ops.3.end_us``). ``RAW`` values are spliced into the JSON text as
written (a 5,000-digit integer, arrays nested 100,000 deep), as ``json.dumps`` cannot make them.

``CASES`` is the fuzz corpus of tests/test_bundle_fuzz.py: name -> (mutation, fragments of the
one-line error, what reads it: ``open`` (open_bundle of both nodes), ``steps`` (their
load_steps) or ``profile`` (replay.profile.load_profile of the root)).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

SAMPLE = Path(__file__).resolve().parent / "data" / "small_bundle"
LINKED = (".pcapng", ".pcap", ".pb")  # large and never mutated here: symlinked

W = "worker0/manifest.json"
PS = "ps0/manifest.json"
S = "worker0/trace/session.json"
T = "worker0/trace/step-00000004.ops.json"
L = "lab_result.json"

Mutation = Callable[[Path], Any]


class Raw:
    """A value written into the JSON text as is (``text``), where json.dumps cannot."""

    def __init__(self, text: str) -> None:
        self.text = text


def deep(levels: int) -> Raw:
    """Arrays nested ``levels`` deep."""
    return Raw("[" * levels + "]" * levels)


def digits(n: int) -> Raw:
    """An integer of ``n`` digits (Python's int() refuses over 4,300)."""
    return Raw("9" * n)


def copy_sample(dst: Path) -> Path:
    """Copy the sample bundle to ``dst`` (JSON and logs copied, large binaries symlinked)."""
    for src in sorted(SAMPLE.rglob("*")):
        out = dst / src.relative_to(SAMPLE)
        if src.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        elif src.suffix in LINKED:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.symlink_to(src)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
    return dst


def make(tmp: Path, mutation: Mutation | None = None) -> Path:
    """The sample copied into ``tmp/b`` with ``mutation`` applied; returns ``tmp/b``."""
    root = copy_sample(tmp / "b")
    if mutation is not None:
        mutation(root)
    return root


def dumps(doc: Any) -> str:
    """JSON text of ``doc`` with every ``Raw`` spliced in (NaN and Infinity as Python writes
    them)."""
    raws: list[str] = []

    def default(o: Any) -> Any:
        if isinstance(o, Raw):
            raws.append(o.text)
            return f"@@RAW{len(raws) - 1}@@"
        raise TypeError(type(o).__name__)

    text = json.dumps(doc, default=default)
    for i, r in enumerate(raws):
        text = text.replace(f'"@@RAW{i}@@"', r)
    return text


def _walk(doc: Any, field: str) -> tuple[Any, str | int]:
    """The container holding ``field`` (dotted; list indices as numbers) and its last key."""
    *parents, last = field.split(".")
    node = doc
    for k in parents:
        node = node[int(k)] if isinstance(node, list) else node[k]
    return node, int(last) if isinstance(node, list) else last


def edit(file: str, fn: Callable[[Any], Any]) -> Mutation:
    """Load ``file`` (relative to the root), apply ``fn`` (returning a new document, or None
    after editing in place) and write it back."""
    def mutation(root: Path) -> None:
        path = root / file
        doc = json.loads(path.read_text())
        new = fn(doc)
        path.write_text(dumps(doc if new is None else new))
    return mutation


def set_(file: str, field: str, value: Any) -> Mutation:
    """Set the dotted ``field`` of ``file`` to ``value`` (a ``Raw`` spliced in as text)."""
    def fn(doc: Any) -> None:
        node, key = _walk(doc, field)
        node[key] = value
    return edit(file, fn)


def drop(file: str, field: str) -> Mutation:
    """Delete the dotted ``field`` of ``file``."""
    def fn(doc: Any) -> None:
        node, key = _walk(doc, field)
        del node[key]
    return edit(file, fn)


def raw(file: str, text: str) -> Mutation:
    """Replace ``file`` with ``text``."""
    return lambda root: (root / file).write_text(text)


def fifo(file: str) -> Mutation:
    """Replace ``file`` with a named pipe nobody writes to (reading it would block)."""
    def mutation(root: Path) -> None:
        (root / file).unlink()
        os.mkfifo(root / file)
    return mutation


def folder(file: str) -> Mutation:
    """Replace ``file`` with a folder of the same name."""
    def mutation(root: Path) -> None:
        (root / file).unlink()
        (root / file).mkdir()
    return mutation


def op_field(field: str, fn: Callable[[dict[str, Any]], Any], index: int = 1) -> Mutation:
    """Set ``field`` of op ``index`` of step 4 to ``fn(op)``."""
    def edit_op(doc: Any) -> None:
        op = doc["ops"][index]
        op[field] = fn(op)
    return edit(T, edit_op)


def first_transfer(doc: dict[str, Any]) -> int:
    """Index of the first transfer op (one with a tensor) of a step table."""
    return next(i for i, op in enumerate(doc["ops"]) if op["tensor"])


TRANSFER = first_transfer(json.loads((SAMPLE / T).read_text()))
NAN = math.nan

# name -> (mutation, fragments of the one-line error, reader: open | steps | profile)
CASES: dict[str, tuple[Mutation, tuple[str, ...], str]] = {
    # -- manifest.json: types ------------------------------------------------------------------
    "addresses a number": (set_(W, "host.addresses", 5), (
        "worker0/manifest.json: field host.addresses is 5, not a list of strings",), "open"),
    "an address a number": (set_(W, "host.addresses", ["10.0.0.1", 7]), (
        "field host.addresses[1] is 7, not a string",), "open"),
    "host a string": (set_(W, "host", "vm"), ("field host is 'vm', not a JSON object",), "open"),
    "hostname null": (set_(PS, "host.hostname", None), (
        "ps0/manifest.json: field host.hostname is null, not a string",), "open"),
    "cpu_count 0": (set_(W, "host.cpu_count", 0), ("field host.cpu_count is 0, not a number "
                                                   "of cores from 1",), "open"),
    "cpu_count true": (set_(PS, "host.cpu_count", True), ("field host.cpu_count is true",),
                       "open"),
    "schema_version true": (set_(W, "schema_version", True), (
        "field schema_version is true, not a schema_version this gradwire reads (1)",), "open"),
    "schema_version 1.0": (set_(W, "schema_version", 1.0), ("field schema_version is 1.0",),
                           "open"),
    "schema_version '1'": (set_(W, "schema_version", "1"), ("field schema_version is '1'",),
                           "open"),
    "schema_version 5,000 digits": (set_(W, "schema_version", digits(5000)), (
        "worker0/manifest.json: holds an integer of more than 4,300 digits",), "open"),
    "exit_code 4,000 digits": (set_(W, "exit_code", digits(4000)), (
        "field exit_code is an integer of 4000 digits",), "open"),
    "kind another": (set_(W, "kind", "other"), ("field kind is 'other', not 'gradwire-bundle'",),
                     "open"),
    "status a number": (set_(W, "status", 5), ("field status is 5, not one of",), "open"),
    "status unknown": (set_(W, "status", "done"), ("field status is 'done', not one of",),
                       "open"),
    "status missing": (drop(W, "status"), ("field status is missing",), "open"),
    "port -1": (set_(W, "ports", [-1]), (
        "field ports[0] is -1, not a port number from 1 to 65535",), "open"),
    "port 99999999": (set_(PS, "ports", [99999999]), (
        "ps0/manifest.json: field ports[0] is 99999999, not a port number from 1 to 65535",),
        "open"),
    "port a float": (set_(W, "ports", [2222.0]), ("field ports[0] is 2222.0",), "open"),
    "clock_samples null": (set_(W, "clock_samples", None), (
        "field clock_samples is null, not a JSON object",), "open"),
    "clock sample NaN": (set_(W, "clock_samples.start.realtime_ns", NAN), (
        "field clock_samples.start.realtime_ns is NaN, not a time in nanoseconds since the "
        "epoch within the years 2000-2200",), "open"),
    "clock sample in 1e20 ns": (set_(W, "clock_samples.end.realtime_ns", 10**20), (
        "field clock_samples.end.realtime_ns is 100000000000000000000",), "open"),
    "clock sample in seconds": (set_(PS, "clock_samples.start.realtime_ns", 1795301570), (
        "field clock_samples.start.realtime_ns is 1795301570, not a time in nanoseconds",),
        "open"),
    "clock runs back": (set_(W, "clock_samples.end.monotonic_ns", 1), (
        "field clock_samples.end has monotonic_ns 1, before the start's",), "open"),
    "clock start missing": (drop(W, "clock_samples.start"), (
        "field clock_samples.start is missing",), "open"),
    "snaplen negative": (set_(W, "capture.snaplen_bytes", -1), (
        "field capture.snaplen_bytes is -1, not a size in bytes",), "open"),
    "drops a string": (set_(W, "capture.drops_kernel", "0"), (
        "field capture.drops_kernel is '0', not a count from 0, or null",), "open"),
    "capture start in 1970": (set_(W, "capture.started_ns", 5), (
        "field capture.started_ns is 5",), "open"),
    "processes an object": (set_(W, "processes", {"role": "x"}), (
        "field processes is an object, not a list of processes",), "open"),
    "pid negative": (set_(W, "processes.0.pid", -5), (
        "field processes[0].pid is -5, not a process ID",), "open"),
    "exit code 1000": (set_(W, "exit_code", 1000), ("field exit_code is 1000",), "open"),
    "stop signal 0": (set_(PS, "stop_signal", 0), ("field stop_signal is 0",), "open"),
    "cluster port out of range": (set_(W, "cluster_spec.worker", ["10.0.0.1:99999999"]), (
        "field cluster_spec.worker[0] is '10.0.0.1:99999999', not a 'host:port' string",),
        "open"),
    "cluster index not a number": (set_(W, "cluster_spec.worker", {"x": "10.0.0.1:2222"}), (
        "field cluster_spec.worker has key 'x', not a task index",), "open"),
    "task index negative": (set_(W, "task.index", -1), ("field task.index is -1",), "open"),
    "task index a word": (set_(W, "task.index", "zero"), ("field task.index is 'zero'",),
                          "open"),
    "problems a string": (set_(W, "problems", "none"), (
        "field problems is 'none', not a list of strings",), "open"),
    "command a string": (set_(W, "command", "python train.py"), (
        "field command is 'python train.py', not a list of strings, or null",), "open"),
    "tf_version a number": (set_(W, "tf_version", 2.21), ("field tf_version is 2.21",), "open"),
    "manifest a list": (raw(W, "[1, 2]"), (
        "worker0/manifest.json: the file is a list of 2, not a JSON object",), "open"),
    "manifest nested 100,000 deep": (raw(W, "[" * 100_000 + "]" * 100_000), (
        "worker0/manifest.json: JSON nested too deeply",), "open"),
    "unknown key nested 40 deep": (set_(W, "extra", deep(40)), (
        "field extra nests lists or objects more than 32 levels deep",), "open"),
    "manifest a FIFO": (fifo(W), (
        "worker0/manifest.json: is a named pipe (FIFO), not a regular file",), "open"),
    "manifest a folder": (folder(PS), ("ps0/manifest.json: is a folder, not a regular file",),
                          "open"),
    "capture a FIFO": (fifo("worker0/capture.pcapng"), (
        "worker0/capture.pcapng: is a named pipe (FIFO), not a regular file",), "open"),
    # -- trace/session.json --------------------------------------------------------------------
    "session a list": (raw(S, "[1]"), (
        "worker0/trace/session.json: the file is a list of 1, not a JSON object",), "open"),
    "steps_recorded a number": (set_(S, "steps_recorded", 5), (
        "trace/session.json: field steps_recorded is 5, not a list of step indices",), "open"),
    "steps_recorded not ascending": (set_(S, "steps_recorded", [4, 3, 5]), (
        "field steps_recorded[1] is 3, not above the step before it (4)",), "open"),
    "steps_recorded beyond steps_run": (set_(S, "steps_recorded", [3, 4, 99]), (
        "field steps_recorded holds step 99, but steps_run is 7",), "open"),
    "record_seconds NaN": (set_(S, "record_seconds", [NAN, 0.1, 0.1]), (
        "field record_seconds[0] is NaN, not a finite number of seconds",), "open"),
    "record_seconds negative": (set_(S, "record_seconds.2", -0.5), (
        "field record_seconds[2] is -0.5",), "open"),
    "record_seconds one short": (set_(S, "record_seconds", [0.1, 0.1]), (
        "field record_seconds has 2 values for 3 steps_recorded",), "open"),
    "step_seconds over a day": (set_(S, "step_seconds", [0.1, 1e9]), (
        "field step_seconds[1] is 1000000000.0",), "open"),
    "step_seconds Infinity": (set_(S, "step_seconds", [math.inf]), (
        "field step_seconds[0] is Infinity",), "open"),
    "step_starts_unix_s before 2000": (set_(S, "step_starts_unix_s", [1.7e9, 12.0]), (
        "field step_starts_unix_s[1] is 12.0",), "open"),
    "step_starts_unix_s too many": (set_(S, "step_starts_unix_s", [1.7e9 + k for k in range(9)]), (
        "field step_starts_unix_s has 9 values, more than steps_run (7)",), "open"),
    "steps_run negative": (set_(S, "steps_run", -1), ("field steps_run is -1",), "open"),
    "every 0": (set_(S, "options.every", 0), ("field options.every is 0",), "open"),
    "options null": (set_(S, "options", None), ("field options is null, not a JSON object",),
                     "open"),
    "session pid true": (set_(S, "pid", True), ("field pid is true, not a process ID",), "open"),
    "session clock sample lacks realtime": (drop(S, "clock_sample.realtime_ns"), (
        "field clock_sample.realtime_ns is missing",), "open"),
    "session nested 5,000 deep": (raw(S, "[" * 5000 + "]" * 5000), (
        "trace/session.json: JSON nested too deeply",), "open"),
    "session a FIFO": (fifo(S), ("session.json: is a named pipe (FIFO)",), "open"),
    # -- trace/step-*.ops.json -----------------------------------------------------------------
    "step of another file": (set_(T, "step", 99), (
        "step-00000004.ops.json: field step is 99, but the file name says step 4",), "steps"),
    "step true": (set_(T, "step", True), ("field step is true, not a step index",), "steps"),
    "op ends at 1e20 us": (op_field("end_us", lambda op: 10**20), (
        "step-00000004.ops.json: field ops[1].end_us (op 'random_uniform/min') is "
        "100000000000000000000, not a time in microseconds since the epoch within the years "
        "2000-2200",), "steps"),
    "op ends before it starts": (op_field("end_us", lambda op: op["start_us"] - 5), (
        "field ops[1].end_us (op ", ") is 1", "before start_us", "(a negative duration)"), "steps"),
    "op lasts two days": (op_field("end_us", lambda op: op["start_us"] + 2 * 86_400 * 10**6), (
        "field ops[1].end_us", "48 h after start_us", "an op lasts under a day"), "steps"),
    "op start NaN": (op_field("start_us", lambda op: NAN), (
        "field ops[1].start_us (op 'random_uniform/min') is NaN",), "steps"),
    "op start a float": (op_field("start_us", lambda op: op["start_us"] + 0.5), (
        "field ops[1].start_us (op 'random_uniform/min') is 1795",), "steps"),
    "op start 5,000 digits": (op_field("start_us", lambda op: digits(5000)), (
        "step-00000004.ops.json: holds an integer of more than 4,300 digits",), "steps"),
    "transfer bytes negative": (op_field("bytes_", lambda op: -1, TRANSFER), (
        f"field ops[{TRANSFER}].bytes_ (op 'RecvTensor') is -1, not a size in bytes from 0 to "
        "2**50, or null",),
        "steps"),
    "transfer bytes a float": (op_field("bytes_reported", lambda op: 1.5, TRANSFER), (
        f"field ops[{TRANSFER}].bytes_reported (op 'RecvTensor') is 1.5",), "steps"),
    "op of another step": (op_field("step", lambda op: 5), (
        "field ops[1].step (op 'random_uniform/min') is 5, not the table's step 4",), "steps"),
    "op name null": (op_field("name", lambda op: None), ("field ops[1].name is null",),
                     "steps"),
    "op a string": (set_(T, "ops.0", "x"), ("field ops[0] is 'x', not an op record",), "steps"),
    "op lacks start": (drop(T, "ops.0.start_us"), (
        "field ops[0].start_us (op '_SOURCE') is missing",), "steps"),
    "no ops": (set_(T, "ops", []), ("field ops is an empty list, not a non-empty list",),
               "steps"),
    "dep control a string": (set_(T, "deps.0.control", "yes"), (
        "field deps[0].control is 'yes', not true or false",), "steps"),
    "deps null": (set_(T, "deps", None), ("field deps is null, not a list",), "steps"),
    "devices of numbers": (set_(T, "devices", [1]), ("field devices[0] is 1, not a string",),
                           "steps"),
    "op on a device not listed": (op_field("device", lambda op: "/job:foo/task:0"), (
        "field ops[1].device (op 'random_uniform/min') is '/job:foo/task:0', not one of the "
        "table's devices",), "steps"),
    "no devices": (set_(T, "devices", []), (
        "field ops[0].device (op '_SOURCE') is", "not one of the table's devices"), "steps"),
    "step table nested 100,000 deep": (raw(T, "[" * 100_000 + "]" * 100_000), (
        "step-00000004.ops.json: JSON nested too deeply",), "steps"),
    "step table a FIFO": (fifo(T), ("step-00000004.ops.json: is a named pipe (FIFO)",),
                          "steps"),
    # -- lab_result.json (read by replay.profile.load_profile) ---------------------------------
    "batch size a word": (set_(L, "config.batch_size", "abc"), (
        "lab_result.json: field config.batch_size is 'abc', not a positive integer",
        "give --batch-size"), "profile"),
    "batch size 0": (set_(L, "config.batch_size", 0), ("field config.batch_size is 0",),
                     "profile"),
    "bandwidth not a rate": (set_(L, "config.bandwidth", "fast"), (
        "field config.bandwidth is 'fast', not a link rate",), "profile"),
    "step end NaN": (set_(L, "per_worker.worker0.step_end_times_s", [NAN]), (
        "field per_worker.worker0.step_end_times_s[0] is NaN",), "profile"),
    "step end not epoch": (set_(L, "per_worker.worker0.step_end_times_s", [5.0]), (
        "field per_worker.worker0.step_end_times_s[0] is 5.0, not a time in seconds since the "
        "epoch",), "profile"),
    "step ends go back": (set_(L, "per_worker.worker0.step_end_times_s", [1.8e9, 1.7e9]), (
        "field per_worker.worker0.step_end_times_s[1] is 1700000000.0, before the step end",),
        "profile"),
    "throughput negative": (set_(L, "throughput_examples_per_s", -1), (
        "field throughput_examples_per_s is -1",), "profile"),
    "lab config a list": (set_(L, "config", []), ("field config is an empty list, not a JSON "
                                                  "object",), "profile"),
    "lab result a list": (raw(L, "[]"), ("lab_result.json: the file is an empty list",),
                          "profile"),
}
