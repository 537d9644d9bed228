"""What every JSON file of a bundle may hold, said once: types, ranges, rules between fields.

gradwire reads four kinds of JSON file written by others (or edited by hand, or damaged):
``manifest.json``, ``trace/session.json``, ``trace/step-NNNNNNNN.ops.json`` and the lab's
``lab_result.json``. Each is checked here, whole, right after it is parsed, against a small
declarative schema; a value of the wrong type, out of range, not finite, or disagreeing with
another field raises one :class:`~gradwire.errors.BundleError` naming the file and the field::

    B/worker0/manifest.json: field host.addresses is 5, not a list of strings

Readers then use the fields without checking them again. The bounds are physical, not tuned to
the data (docs/bundle.md, "Validation"):

- epoch timestamps (``*_us``, ``*_ns``, ``*_s`` since 1970 on a node's clock) lie within the
  years 2000-2200 (``EPOCH_MIN_S``, ``EPOCH_MAX_S``): outside, the clock or the unit is wrong;
- relative times (an op's duration, the seconds a step or a store took) are finite, not
  negative, and under a day (``DAY_S``): no traced step lasts longer;
- sizes and counts are integers from 0, sizes at most 1 PiB (``MAX_BYTES``);
- ports are 1-65535, signals 1-128, process IDs 1 to 2**31 - 1;
- a JSON ``true`` is not a number (Python's ``bool`` is an ``int``: refused explicitly);
- unknown keys are allowed (a newer writer of the same schema version may add some), but
  nested at most ``MAX_EXTRA_DEPTH`` levels.

The checker itself is pure (no I/O) and cheap: a step table of 2,100 ops and 3,000 data
dependencies takes about 10 ms, a fifth of what parsing it and building its records take.

>>> check({"a": [1, "x"]}, Obj({"a": List(Int(0, 9), "a list of digits")}), "f.json")
Traceback (most recent call last):
  ...
gradwire.errors.BundleError: f.json: field a[1] is 'x', not an integer from 0 to 9
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gradwire.errors import BundleError, GradwireError

EPOCH_MIN_S = 946_684_800  # 2000-01-01T00:00:00Z
EPOCH_MAX_S = 7_258_118_400  # 2200-01-01T00:00:00Z
DAY_S = 86_400  # the longest op, step, or hook store gradwire believes
MAX_BYTES = 2**50  # 1 PiB: larger than any tensor, buffer or capture
MAX_COUNT = 2**53  # steps, packets: exact in a float, beyond any run
MAX_PID = 2**31 - 1
MAX_EXTRA_DEPTH = 32  # nesting allowed inside keys the schema does not know
SUPPORTED_SCHEMAS = (1,)  # manifest schema versions this gradwire reads


class _Bad(Exception):
    """A value failed its spec: ``text`` says how; ``path`` collects the keys, innermost first."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
        self.path: list[str] = []
        self.label: str | None = None
        self.hint: str | None = None


def show(value: Any) -> str:
    """A value as the message shows it: short, JSON's words for true/false/null, never huge."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 48 else text[:44] + "...'"
    if isinstance(value, int):
        if value.bit_length() > 128:
            return f"an integer of {len(str(abs(value)))} digits"
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value) if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return f"a list of {len(value)}" if value else "an empty list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _not(value: Any, desc: str) -> _Bad:
    return _Bad(f"is {show(value)}, not {desc}")


class Spec:
    """What one JSON value may be. ``check(v)`` returns None or raises ``_Bad``."""

    desc = "a value"

    def check(self, v: Any) -> None:  # pragma: no cover - every spec overrides it
        """Raise ``_Bad`` unless ``v`` fits."""
        raise NotImplementedError


class Int(Spec):
    """An integer from ``lo`` to ``hi`` (a JSON true or 1.0 is not one)."""

    def __init__(self, lo: int, hi: int, desc: str | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.desc = desc or f"an integer from {lo} to {hi}"

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` unless ``v`` is an int (not bool) within the bounds."""
        if type(v) is not int or not self.lo <= v <= self.hi:
            raise _not(v, self.desc)


class Num(Spec):
    """A finite number (integer or float, not bool) from ``lo`` to ``hi``; NaN never fits."""

    def __init__(self, lo: float, hi: float, desc: str | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.desc = desc or f"a finite number from {lo:g} to {hi:g}"

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` unless ``v`` is an int or float within the bounds (NaN is not)."""
        t = type(v)
        if (t is not float and t is not int) or not self.lo <= v <= self.hi:
            raise _not(v, self.desc)


class Str(Spec):
    """A string; with ``choices``, one of them; with ``test``, one it accepts."""

    def __init__(self, choices: Iterable[str] | None = None, desc: str | None = None,
                 test: Callable[[str], bool] | None = None) -> None:
        self.choices = frozenset(choices) if choices is not None else None
        self.test = test
        self.desc = desc or ("a string" if self.choices is None else
                             "one of " + ", ".join(repr(c) for c in sorted(self.choices)))

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` unless ``v`` is a string that fits."""
        if type(v) is not str or (self.choices is not None and v not in self.choices) or (
                self.test is not None and not self.test(v)):
            raise _not(v, self.desc)


class Bool(Spec):
    """true or false."""

    desc = "true or false"

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` unless ``v`` is a bool."""
        if type(v) is not bool:
            raise _not(v, self.desc)


class Opt(Spec):
    """``spec``, or null."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.desc = f"{spec.desc}, or null"

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` unless ``v`` is null or fits the spec."""
        if v is not None:
            try:
                self.spec.check(v)
            except _Bad as exc:
                if not exc.path:  # the value itself: say null would do too
                    exc.text = _not(v, self.desc).text
                raise


class Hint(Spec):
    """``spec``, with what to do about a value it refuses (said after the message)."""

    def __init__(self, spec: Spec, hint: str) -> None:
        self.spec, self.hint = spec, hint
        self.desc = spec.desc

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` (with the hint) unless ``v`` fits the spec."""
        try:
            self.spec.check(v)
        except _Bad as exc:
            exc.hint = exc.hint or self.hint
            raise


class AnyOf(Spec):
    """The first of ``specs`` that fits (its own message if the value is of its JSON type)."""

    def __init__(self, desc: str, *specs: tuple[type, Spec]) -> None:
        self.desc = desc
        self.specs = specs

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` unless one spec fits ``v``."""
        for kind, spec in self.specs:
            if type(v) is kind:
                spec.check(v)
                return
        raise _not(v, self.desc)


class List(Spec):
    """A list of ``item``; at least ``min_len`` long; ``rule(list)`` may name a wrong item."""

    def __init__(self, item: Spec, desc: str | None = None, min_len: int = 0,
                 rule: Callable[[list[Any]], tuple[int, str] | None] | None = None) -> None:
        self.item, self.min_len, self.rule = item, min_len, rule
        self.desc = desc or f"a list of {item.desc}"

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` naming the first item that does not fit."""
        if type(v) is not list or len(v) < self.min_len:
            raise _not(v, self.desc)
        check = self.item.check
        i = 0
        try:
            for i, x in enumerate(v):  # noqa: B007 - i names the bad item
                check(x)
        except _Bad as exc:
            exc.path.append(f"[{i}]")
            raise
        if self.rule is not None:
            bad = self.rule(v)
            if bad is not None:
                exc = _Bad(bad[1])
                exc.path.append(f"[{bad[0]}]")
                raise exc


class Map(Spec):
    """An object of any keys (strings), each value a ``value``."""

    def __init__(self, value: Spec, desc: str | None = None,
                 keys: tuple[Callable[[str], bool], str] | None = None) -> None:
        self.value = value
        self.keys = keys  # (test, what a key must be)
        self.desc = desc or f"an object of {value.desc}"

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` naming the first key, or key whose value, does not fit."""
        if type(v) is not dict:
            raise _not(v, self.desc)
        if self.keys is not None:
            test, what = self.keys
            for key in v:
                if not test(key):
                    raise _Bad(f"has key {show(key)}, not {what}")
        check = self.value.check
        key = ""
        try:
            for key, x in v.items():  # noqa: B007 - key names the bad value
                check(x)
        except _Bad as exc:
            exc.path.append(_key(key))
            raise


Rule = Callable[[dict[str, Any]], "tuple[str, str] | None"]


class Obj(Spec):
    """A JSON object with known ``fields`` (those in ``required`` must be there; others may
    be missing), unknown keys allowed up to ``MAX_EXTRA_DEPTH`` deep; then each ``rule(obj)``
    (run once the fields fit) may return ``(field, what is wrong)``. ``label(obj)`` names the
    object in a message about one of its fields (an op: its name)."""

    def __init__(self, fields: Mapping[str, Spec], required: Iterable[str] = (),
                 rules: Iterable[Rule] = (), label: Callable[[dict[str, Any]], str] | None = None,
                 desc: str = "a JSON object") -> None:
        self.fields = dict(fields)
        self.items = tuple(self.fields.items())
        self.required = frozenset(required)
        unknown = self.required - set(self.fields)
        assert not unknown, unknown
        self.rules = tuple(rules)
        self.label = label
        self.desc = desc

    def check(self, v: Any) -> None:
        """Raise ``_Bad`` naming the first field that is missing or does not fit."""
        if type(v) is not dict:
            raise _not(v, self.desc)
        key = ""
        seen = 0
        try:
            for key, spec in self.items:
                if key in v:
                    seen += 1
                    spec.check(v[key])
                elif key in self.required:
                    raise _Bad(f"is missing (wanted {spec.desc})")
            if seen < len(v):
                for key in v:
                    if key not in self.fields:
                        _shallow(v[key], MAX_EXTRA_DEPTH)
            for rule in self.rules:
                bad = rule(v)
                if bad is not None:
                    key = bad[0]
                    raise _Bad(bad[1])
        except _Bad as exc:
            exc.path.append(_key(key))
            if self.label is not None and exc.label is None:
                exc.label = self.label(v) or None
            raise


def _key(key: str) -> str:
    """``.key`` for the path in a message (quoted when it has spaces or odd characters)."""
    key = str(key)
    if len(key) > 40:
        key = key[:37] + "..."
    return "." + (key if key.isprintable() and " " not in key else repr(key))


def _shallow(v: Any, depth: int) -> None:
    """Raise ``_Bad`` when ``v`` nests lists/objects more than ``depth`` levels (no recursion)."""
    level = [v]
    for _ in range(depth + 1):
        level = [c for x in level if isinstance(x, list | dict)
                 for c in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return
    raise _Bad(f"nests lists or objects more than {depth} levels deep (an unknown key "
               "gradwire does not read: remove it)")


def check(doc: Any, spec: Spec, path: str | Path | None,
          error: type[GradwireError] = BundleError) -> None:
    """Raise ``error`` (BundleError) naming ``path`` and the first field of ``doc`` that
    ``spec`` refuses."""
    try:
        spec.check(doc)
    except _Bad as exc:
        raise error(_message(exc), path=path) from None


def _message(exc: _Bad) -> str:
    where = "".join(reversed(exc.path)).lstrip(".")
    if exc.label:
        where = f"{where} ({exc.label})"
    text = f"field {where} {exc.text}" if where else f"the file {exc.text}"
    return f"{text}: {exc.hint}" if exc.hint else text


# -- the pieces --------------------------------------------------------------------------------

US, NS = 10**6, 10**9
EPOCH_US = Int(EPOCH_MIN_S * US, EPOCH_MAX_S * US,
               "a time in microseconds since the epoch within the years 2000-2200")
EPOCH_NS = Int(EPOCH_MIN_S * NS, EPOCH_MAX_S * NS,
               "a time in nanoseconds since the epoch within the years 2000-2200")
EPOCH_S = Num(EPOCH_MIN_S, EPOCH_MAX_S,
              "a time in seconds since the epoch within the years 2000-2200")
SECONDS = Num(0, DAY_S, "a finite number of seconds from 0 to 86400 (a day)")
CORES = Num(0, 2**20, "a finite number of cores from 0")
MONOTONIC_NS = Int(0, 200 * 365 * DAY_S * NS, "nanoseconds of CLOCK_MONOTONIC (from 0)")
BYTES = Int(0, MAX_BYTES, "a size in bytes from 0 to 2**50")
COUNT = Int(0, MAX_COUNT, "a count from 0")
STEP = Int(0, MAX_COUNT, "a step index from 0")
PID = Int(1, MAX_PID, "a process ID from 1 to 2**31 - 1")
PORT = Int(1, 65535, "a port number from 1 to 65535")
STR = Str()
STRINGS = List(STR, "a list of strings")


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 9


_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]-]{1,255}$")  # a name, an IPv4 or a [IPv6] address


def _host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(_HOST.match(host)) and port.isascii() and port.isdigit() and len(port) <= 5 \
        and 1 <= int(port) <= 65535


HOST_PORT = Str(desc="a 'host:port' string with a port from 1 to 65535", test=_host_port)
CLUSTER_SPEC = Map(AnyOf("a list of 'host:port' strings (or an object of them by task index)",
                         (list, List(HOST_PORT, "a list of 'host:port' strings")),
                         (dict, Map(HOST_PORT, "an object of 'host:port' strings",
                                    keys=(_digits, "a task index (a string of digits)")))),
                   "an object of job -> list of 'host:port'")


TASK = Obj({"type": STR,
            "index": AnyOf("a task index (an integer from 0, or a string of its digits)",
                           (int, Int(0, 2**31 - 1, "a task index from 0")),
                           (str, Str(desc="a task index from 0", test=_digits)))},
           required=("type",), desc='an object like {"type": "worker", "index": 0}')


def _later_sample(m: dict[str, Any]) -> tuple[str, str] | None:
    end = m.get("end")
    if end is not None and "start" in m and end["monotonic_ns"] < m["start"]["monotonic_ns"]:
        return "end", (f"has monotonic_ns {end['monotonic_ns']}, before the start's "
                       f"{m['start']['monotonic_ns']} (CLOCK_MONOTONIC never goes back)")
    return None


CLOCK_SAMPLE = Obj({"realtime_ns": EPOCH_NS, "monotonic_ns": MONOTONIC_NS},
                   required=("realtime_ns", "monotonic_ns"),
                   desc="a JSON object {realtime_ns, monotonic_ns}")

# -- manifest.json -----------------------------------------------------------------------------

STATUSES = ("collecting", "complete", "stopped", "failed", "interrupted")
MANIFEST = Obj({
    # first, so that a manifest of another version is refused as such
    "schema_version": Int(min(SUPPORTED_SCHEMAS), max(SUPPORTED_SCHEMAS),
                          "a schema_version this gradwire reads ("
                          + ", ".join(map(str, SUPPORTED_SCHEMAS)) + ")"),
    "kind": Str(("gradwire-bundle",), "'gradwire-bundle'"),
    "gradwire_version": STR,
    "created_by": STR,
    "mode": STR,
    "status": Str(STATUSES),
    "host": Obj({"hostname": STR, "addresses": STRINGS,
                 "cpu_count": Int(1, 2**20, "a number of cores from 1"),
                 "tcp_congestion_control": Opt(STR)}),
    "processes": List(Obj({"role": STR, "pid": PID, "argv": STRINGS, "port": PORT,
                           "name": STR}, required=("role", "pid"),
                          desc="a process (an object {role, pid, ...})"),
                      "a list of processes (objects {role, pid, ...})"),
    "command": Opt(STRINGS),
    "exit_code": Opt(Int(-128, 255, "an exit code from -128 (a signal) to 255")),
    "stop_signal": Opt(Int(1, 128, "a signal number from 1 to 128")),
    "clock_samples": Obj({"start": CLOCK_SAMPLE, "end": Opt(CLOCK_SAMPLE)},
                         required=("start",), rules=(_later_sample,)),
    "capture": Opt(Obj({"tool": STR, "file": STR, "iface": STR, "filter": STR,
                        "snaplen_bytes": BYTES, "buffer_bytes": BYTES,
                        "packets_captured": Opt(COUNT), "drops_kernel": Opt(COUNT),
                        "drops_capturer": Opt(COUNT), "drops_iface": Opt(COUNT),
                        "started_ns": Opt(EPOCH_NS), "stopped_ns": Opt(EPOCH_NS)})),
    # the machine's CPU over the capture (collect; None without /proc/stat)
    "host_cpu": Opt(Obj({"seconds": Num(0, 1e9, "a finite number of seconds from 0"),
                         "busy_cores": CORES, "stolen_cores": CORES},
                        required=("seconds", "busy_cores", "stolen_cores"))),
    "ports": List(PORT, "a list of port numbers from 1 to 65535"),
    "tf_version": Opt(STR),
    "cluster_spec": Opt(CLUSTER_SPEC),
    "task": Opt(TASK),
    "problems": STRINGS,
}, required=("schema_version", "kind", "status", "host", "clock_samples"))

# -- trace/session.json ------------------------------------------------------------------------


def _ascending(values: list[Any]) -> tuple[int, str] | None:
    for i in range(1, len(values)):
        if values[i] <= values[i - 1]:
            return i, f"is {values[i]}, not above the step before it ({values[i - 1]})"
    return None


def _session_rules(s: dict[str, Any]) -> tuple[str, str] | None:
    recorded, ran = s.get("steps_recorded"), s.get("steps_run")
    if recorded and ran is not None and recorded[-1] >= ran:
        return "steps_recorded", (f"holds step {recorded[-1]}, but steps_run is {ran} (steps "
                                  "count from 0)")
    store = s.get("record_seconds")
    if store is not None and recorded is not None and len(store) != len(recorded):
        return "record_seconds", (f"has {len(store)} values for {len(recorded)} steps_recorded "
                                  "(one per recorded step)")
    for name in ("step_seconds", "step_starts_unix_s"):
        times = s.get(name)
        if times is not None and ran is not None and len(times) > ran:
            return name, f"has {len(times)} values, more than steps_run ({ran})"
    return None


SESSION = Obj({
    "status": Str(("running", "complete")),
    "gradwire_version": STR,
    "tf_version": Opt(STR),
    "hostname": STR,
    "pid": PID,
    "cluster_spec": Opt(CLUSTER_SPEC),
    "options": Obj({"first_step": STEP, "num_steps": Opt(Int(1, MAX_COUNT, "a count from 1")),
                    "every": Int(1, MAX_COUNT, "an integer from 1"),
                    # TraceHook(batch_size=N): examples per step of this worker
                    "batch_size": Opt(Int(1, MAX_COUNT, "examples per step, from 1"))}),
    "steps_run": COUNT,
    "steps_recorded": List(STEP, "a list of step indices from 0", rule=_ascending),
    "record_seconds": List(SECONDS, "a list of seconds (finite, from 0 to 86400)"),
    "step_seconds": List(SECONDS, "a list of seconds (finite, from 0 to 86400)"),
    # CLOCK_REALTIME, so not checked to ascend: the clock may be stepped during a run
    "step_starts_unix_s": List(EPOCH_S, "a list of times, s since the epoch"),
    "clock_sample": CLOCK_SAMPLE,
    # the op cost database's key of where the trace's ops ran (gradwire/opdb.py, Machine)
    "machine": Opt(Obj({"fingerprint": STR, "description": STR, "cores": COUNT,
                        "tf_version": STR, "threads": Opt(COUNT)})),
}, rules=(_session_rules,))

# -- trace/step-NNNNNNNN.ops.json --------------------------------------------------------------

DAY_US = DAY_S * US


def _op_span(op: dict[str, Any]) -> tuple[str, str] | None:
    start, end = op["start_us"], op["end_us"]
    if end < start:
        return "end_us", f"is {end}, before start_us {start} (a negative duration)"
    if end - start > DAY_US:
        return "end_us", (f"is {end}, {(end - start) / 3.6e9:,.0f} h after start_us {start} (an "
                          "op lasts under a day)")
    return None


OP = Obj({
    "step": STEP, "name": STR, "op_type": STR, "device": STR,
    "start_us": EPOCH_US, "end_us": EPOCH_US,
    "graph_node": STR, "tensor": STR, "bytes_": Opt(BYTES), "bytes_reported": Opt(BYTES),
    "src_device": STR, "dst_device": STR, "producer": STR,
}, required=("step", "name", "op_type", "device", "start_us", "end_us"), rules=(_op_span,),
    label=lambda op: f"op {op['name']!r:.60}" if type(op.get("name")) is str else "",
    desc="an op record (a JSON object)")
DEP = Obj({"src": STR, "dst": STR, "src_device": STR, "dst_device": STR, "control": Bool(),
           "tensor": STR}, required=("src", "dst", "src_device", "dst_device"),
          desc="a data dependency (a JSON object)")
VARIABLE = Obj({"name": STR, "device": STR, "bytes_": Opt(BYTES), "colocated_with": STR},
               required=("name", "device"),
               desc="a variable record (a JSON object)")
STEP_TABLE = Obj({
    "step": STEP,
    "devices": STRINGS,
    "ops": List(OP, "a non-empty list of op records", min_len=1),
    "deps": List(DEP, "a list of data dependencies"),
    "variables": List(VARIABLE, "a list of variable records"),
}, required=("step", "devices", "ops", "deps"))
STEP_FILE_NAME = re.compile(r"^step-(\d{8,18})\.ops\.json$")


def check_manifest(doc: Any, path: str | Path) -> None:
    """Raise BundleError unless ``doc`` is a manifest.json of a supported schema version."""
    check(doc, MANIFEST, path)


def check_session(doc: Any, path: str | Path) -> None:
    """Raise BundleError unless ``doc`` is a TraceHook's trace/session.json."""
    check(doc, SESSION, path)


def check_step_table(doc: Any, path: str | Path) -> None:
    """Raise BundleError unless ``doc`` is a step table whose step agrees with its file name
    (``step-00000004.ops.json`` holds step 4) and with each of its ops, each op's device one
    of its ``devices``."""
    check(doc, STEP_TABLE, path)
    step = doc["step"]
    named = STEP_FILE_NAME.match(Path(path).name)
    if named and int(named.group(1)) != step:
        raise BundleError(f"field step is {step}, but the file name says step "
                          f"{int(named.group(1))}", path=path)
    devices = set(doc["devices"])  # every device that ran an op (collector/stepstats.py)
    for i, op in enumerate(doc["ops"]):
        if op["step"] != step:
            raise BundleError(f"field ops[{i}].step (op {op['name']!r:.60}) is {op['step']}, "
                              f"not the table's step {step}", path=path)
        if op["device"] not in devices:
            raise BundleError(f"field ops[{i}].device (op {op['name']!r:.60}) is "
                              f"{op['device']!r:.80}, not one of the table's devices", path=path)


# -- a TF timeline's Chrome trace (aligner/loaders.py) ---------------------------------------


def _x_has_ts(e: dict[str, Any]) -> tuple[str, str] | None:
    if e.get("ph") == "X" and "ts" not in e:
        return "ts", "is missing (an X event is an op: it has a start time)"
    return None


CHROME_TRACE = Obj({"traceEvents": List(Obj({
    "ph": STR,
    "pid": AnyOf("a process id (an integer or a string)", (int, Int(-(2**63), 2**63)),
                 (str, STR)),
    "ts": Num(0, EPOCH_MAX_S * US, "a finite time in microseconds from 0 (before 2200)"),
    "dur": Num(0, DAY_S * US, "a finite duration in microseconds from 0 to a day"),
    "args": Obj({}),
}, rules=(_x_has_ts,), desc="a trace event (a JSON object)"), "a list of trace events")},
    required=("traceEvents",))


# -- lab_result.json ---------------------------------------------------------------------------


def _rate(text: str) -> bool:
    from gradwire.units import parse_rate_bps

    if text == "none":
        return True
    try:
        parse_rate_bps(text)
    except ValueError:
        return False
    return True


def _ends_ascending(values: list[Any]) -> tuple[int, str] | None:
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            return i, f"is {values[i]!r}, before the step end before it ({values[i - 1]!r})"
    return None


RATE = Opt(Str(desc="a link rate such as '1gbit' or 'none'", test=_rate))
THROUGHPUT = Num(0, 1e12, "a finite number of examples per second from 0 to 1e12")
_LAB_CONFIG = {
    "model": STR, "model_mb": Num(0, 1e9, "a finite size in MB from 0"),
    "batch_size": Hint(Int(1, 2**31 - 1, "a positive integer (examples per worker step)"),
                       "fix it, or give --batch-size"),
    "steps": Int(1, MAX_COUNT, "an integer from 1"),
    "workers": Int(1, 2**20, "a number of workers from 1"),
    "ps": Int(0, 2**20, "a number of parameter servers from 0"),
    "mode": STR, "bandwidth": RATE, "delay": Opt(STR), "queue": Opt(STR), "shape": STR,
    "grpc_options": Opt(STR), "trace_first": Opt(STEP), "trace_steps": Opt(COUNT),
    "timeout_s": Opt(Num(0, 1e9, "a finite number of seconds from 0")),
}
_PER_WORKER = Map(Obj({
    "steps": COUNT,
    "examples_per_s": Opt(THROUGHPUT),
    "step_end_times_s": List(EPOCH_S, "a list of step end times (epoch seconds, years "
                             "2000-2200)", rule=_ends_ascending),
    "examples_per_step": Opt(Int(1, 2**31 - 1, "a positive integer")),
    "param_bytes": Opt(BYTES),
}), "an object of worker name -> its result")


def _ps_for_mode(cfg: dict[str, Any]) -> tuple[str, str] | None:
    """No PS in a ring all-reduce run (``mode`` ring), at least one in the others."""
    ps, ring = cfg.get("ps"), cfg.get("mode") == "ring"
    if ps is None or (ps == 0) == ring:
        return None
    return "ps", (f"is {ps}: a ring all-reduce run has no parameter servers" if ring
                  else "is 0, not a number of parameter servers from 1")


def _lab_spec(measured: bool) -> Obj:
    config = Obj(_LAB_CONFIG, required=("workers", "ps", "bandwidth") if measured else (),
                 rules=(_ps_for_mode,))
    return Obj({
        "config": config,
        "throughput_examples_per_s": THROUGHPUT if measured else Opt(THROUGHPUT),
        "per_worker": _PER_WORKER,
        "bandwidth_bps": Opt(Num(0, 1e15, "a finite rate in bit/s from 0")),
        "cpu_count": Opt(Int(1, 2**20, "a number of cores from 1")),
    }, required=("config", "throughput_examples_per_s") if measured else ("config",))


LAB_RESULT = _lab_spec(measured=False)
LAB_RESULT_MEASURED = _lab_spec(measured=True)


def check_lab_result(doc: Any, path: str | Path, *, measured: bool = False) -> None:
    """Raise BundleError unless ``doc`` is a lab result (``lab_result.json``) whose fields have
    the types and ranges gradwire reads. ``measured``: it is a measured point for ``gradwire
    predict --measured``, so ``config.workers``, ``config.ps``, ``config.bandwidth`` and a
    ``throughput_examples_per_s`` (not null) must be there."""
    check(doc, LAB_RESULT_MEASURED if measured else LAB_RESULT, path)
