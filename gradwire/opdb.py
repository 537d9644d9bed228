"""The op-level cost database (Huang et al.): one SQLite file of measured op times.

Each row is one op type at one set of input shapes, attributes and dtype, on one device of one
machine, from one source: ``build`` (``gradwire opdb build`` timed it alone, in a graph of its
own) or ``trace:<bundle>`` (``gradwire opdb ingest`` read it from a recorded step). Its time is
the median of the op's own execution times (µs, TensorFlow's step stats: the same clock as a
trace's ops) over its repetitions, with the 10th and 90th percentiles. A row is committed as
soon as it is measured, so a killed build loses nothing measured, and ``build_points`` records
every grid point a build tried (timed, skipped and why, or started and never finished: the
process died on it), so that the next build goes on where it stopped.

Schema (``PRAGMA user_version`` = ``SCHEMA_VERSION``)::

    machines(fingerprint PK, description, cores, tf_version, first_seen_utc, threads)
    build_points(fingerprint, label, op_key, outcome, created_utc)  -- grid points `build` tried
    cache_passes(fingerprint PK, bytes, how, created_utc)  -- the pass `build` timed after
    model_choices(fingerprint, op, dtype, device, rows_digest, chosen, created_utc)
        -- each op type's regression as `build` last chose it (replay/opcost.py), on the
        -- rows whose digest it names
    steps(graph, fingerprint, device, label, reps, median_us, p10_us, p90_us, cores_busy,
          created_utc)  -- a recorded worker step's whole compute, timed by `opdb step`
          -- (graph: its graph file's digest; device CPU, or XLA_CPU compiled by XLA)
    ops(op, inputs, attrs, dtype, device, fingerprint, source,     -- the key (UNIQUE)
        outputs, flops, bytes_, reps, median_us, p10_us, p90_us, created_utc)

``inputs`` and ``outputs`` are JSON lists of shapes (lists of ints), ``attrs`` a JSON object of
the op's cost-relevant attributes with sorted keys, ``dtype`` the name of the element type of
the op's first output (of its last numeric input for an op without outputs: an update),
``flops`` and ``bytes_`` the features of ``gradwire.opfeatures.features``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sqlite3
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradwire.bundle import usable_cpus
from gradwire.errors import GradwireError

SCHEMA_VERSION = 5  # 2: machines.threads; 3: cache_passes; 4: model_choices; 5: steps (older
# files gain them when opened)
BUILD = "build"  # the source of rows timed by ``gradwire opdb build``
KEY = ("op", "inputs", "attrs", "dtype", "device", "fingerprint", "source")

_ADDED_TABLES = """
CREATE TABLE IF NOT EXISTS cache_passes (
    fingerprint TEXT PRIMARY KEY, bytes INTEGER NOT NULL, how TEXT NOT NULL,
    created_utc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS model_choices (
    fingerprint TEXT NOT NULL, op TEXT NOT NULL, dtype TEXT NOT NULL, device TEXT NOT NULL,
    rows_digest TEXT NOT NULL, chosen TEXT NOT NULL, created_utc TEXT NOT NULL,
    PRIMARY KEY (fingerprint, op, dtype, device));
CREATE TABLE IF NOT EXISTS steps (
    graph TEXT NOT NULL, fingerprint TEXT NOT NULL, device TEXT NOT NULL, label TEXT NOT NULL,
    reps INTEGER NOT NULL, median_us REAL NOT NULL, p10_us REAL NOT NULL, p90_us REAL NOT NULL,
    cores_busy REAL NOT NULL, created_utc TEXT NOT NULL,
    PRIMARY KEY (graph, fingerprint, device));
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS machines (
    fingerprint TEXT PRIMARY KEY, description TEXT NOT NULL, cores INTEGER NOT NULL,
    tf_version TEXT NOT NULL, first_seen_utc TEXT NOT NULL, threads INTEGER);
CREATE TABLE IF NOT EXISTS ops (
    op TEXT NOT NULL, inputs TEXT NOT NULL, attrs TEXT NOT NULL, dtype TEXT NOT NULL,
    device TEXT NOT NULL, fingerprint TEXT NOT NULL, source TEXT NOT NULL,
    outputs TEXT NOT NULL, flops REAL NOT NULL, bytes_ REAL NOT NULL, reps INTEGER NOT NULL,
    median_us REAL NOT NULL, p10_us REAL NOT NULL, p90_us REAL NOT NULL,
    created_utc TEXT NOT NULL,
    UNIQUE (op, inputs, attrs, dtype, device, fingerprint, source));
CREATE INDEX IF NOT EXISTS ops_by_type ON ops (op, fingerprint);
CREATE TABLE IF NOT EXISTS build_points (
    fingerprint TEXT NOT NULL, label TEXT NOT NULL, op_key TEXT, outcome TEXT NOT NULL,
    created_utc TEXT NOT NULL, PRIMARY KEY (fingerprint, label));
""" + _ADDED_TABLES
# every table of a database of SCHEMA_VERSION (an older file gains _ADDED_TABLES when opened)
TABLES = frozenset(("machines", "ops", "build_points", "cache_passes", "model_choices", "steps"))


class OpdbError(GradwireError):
    """The op cost database file is missing, not a gradwire database, or of another schema."""


@dataclass(frozen=True, kw_only=True)
class Machine:
    """Where ops were timed: ``fingerprint`` (a short stable hash of the rest), the processor
    as the OS names it, its logical ``cores``, TensorFlow's version, and the intra-op
    ``threads`` each op had (TensorFlow's ``intra_op_parallelism_threads``; 0: TensorFlow's
    default, a thread per core; None: not known, a trace recorded before they were kept).
    The threads change an op's time as the processor does: on this project's 2-core machine
    the large ops took a median 1.5 times as long with one thread (docs/opdb.md, "Threads")."""

    fingerprint: str
    description: str
    cores: int
    tf_version: str
    threads: int | None = None


@dataclass(frozen=True, kw_only=True)
class OpTiming:
    """One op type at one shape point: its key (``op`` without TensorFlow's oneDNN prefixes,
    ``inputs``/``outputs`` shapes, ``attrs``, ``dtype``, ``device`` such as ``CPU``, the
    machine's ``fingerprint``, the ``source``) and what was measured: ``reps`` executions with
    median, 10th and 90th percentile times in µs; ``flops`` and ``bytes_`` (of the inputs and
    outputs) from ``opfeatures.features``."""

    op: str
    inputs: tuple[tuple[int, ...], ...]
    attrs: tuple[tuple[str, Any], ...]
    dtype: str
    device: str
    fingerprint: str
    source: str
    outputs: tuple[tuple[int, ...], ...]
    flops: float
    bytes_: float
    reps: int
    median_us: float
    p10_us: float
    p90_us: float

    @classmethod
    def of_times(cls, times_us: Sequence[float], **key: Any) -> OpTiming:
        """The row of one shape point's measured times (µs, at least one): their count,
        median, 10th and 90th percentiles (nearest rank); ``key``: the other fields but the
        features, computed here (``opfeatures.features``)."""
        from gradwire.opfeatures import features

        n_flops, size = features(key["op"], key["inputs"], key["outputs"], dict(key["attrs"]),
                                 key["dtype"])
        return cls(**key, flops=n_flops, bytes_=size, **spread(times_us))

    def key(self) -> tuple[str, ...]:
        """The row's unique key, as stored."""
        return (self.op, _shapes_json(self.inputs), _attrs_json(self.attrs), self.dtype,
                self.device, self.fingerprint, self.source)


def spread(times_us: Sequence[float]) -> dict[str, Any]:
    """``reps``, ``median_us``, ``p10_us`` and ``p90_us`` of measured times (µs, at least
    one; the percentiles by nearest rank), as a row of the database keeps them."""
    t = sorted(times_us)
    return {"reps": len(t), "median_us": statistics.median(t),
            "p10_us": t[int(0.1 * (len(t) - 1))], "p90_us": t[int(0.9 * (len(t) - 1) + 0.5)]}


@dataclass(frozen=True)
class StepTiming:
    """A worker's whole step of compute, run from its recorded graph on one machine
    (``gradwire opdb step``): the graph file's digest, the machine's ``fingerprint``, the
    ``device`` (``CPU``: TensorFlow's kernels; ``XLA_CPU``: auto-clustered by XLA), the bundle
    it came from (``label``), ``reps`` timed runs' median, 10th and 90th percentile (µs, wall
    clock) and the cores the process kept busy over them."""

    graph: str
    fingerprint: str
    device: str
    label: str
    reps: int
    median_us: float
    p10_us: float
    p90_us: float
    cores_busy: float


def _shapes_json(shapes: Iterable[Iterable[int]]) -> str:
    return json.dumps([list(s) for s in shapes], separators=(",", ":"))


def _attrs_json(attrs: Iterable[tuple[str, Any]]) -> str:
    return json.dumps(dict(attrs), sort_keys=True, separators=(",", ":"))


def check_path(path: str | Path, *, create: bool) -> None:
    """Refuse ``path`` as the op database before any work (one line naming it, the file
    untouched): standard output's name, something other than a regular file, an empty file
    (a log, a capture: never made a database), collected data or the shipped sample; and,
    unless ``create``, a file that is not there."""
    from gradwire import atomic

    path = Path(path)
    if str(path) == "-":
        raise OpdbError("'-' is standard output: the database is a file; name one", path=path)
    if path.exists() and not path.is_file():
        raise OpdbError("not a regular file (the database is a file)", path=path)
    if not create and not path.is_file():
        raise OpdbError("no op cost database here (make one with `gradwire opdb build` "
                        "or `gradwire opdb ingest`)", path=path)
    if path.is_file() and path.stat().st_size == 0:
        raise OpdbError("an empty file, not an op cost database (name a new file, or one "
                        "`gradwire opdb build` made)", path=path)
    if create:
        atomic.refuse_collected(path, "op cost database")
        _refuse_unwritable(path)


def _refuse_unwritable(path: Path) -> None:
    """Refuse, before any work, a database that a writing command could not write: the file
    read-only, or its folder (SQLite keeps its journal beside it; a folder not yet made: the
    nearest one that is) not writable."""
    if path.is_file() and not os.access(path, os.W_OK):
        raise OpdbError("read-only: this command adds to the database (copy it, or give a new "
                        "file)", path=path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        raise OpdbError(f"its folder {folder} is not writable (SQLite writes its journal "
                        "beside the database)", path=path)


def check_database(path: str | Path, machine: str | None = None) -> None:
    """Refuse, before any work, ``path`` given as an op cost database to read (``--opdb``):
    what ``OpDatabase`` refuses, whether or not the options given end up reading it; and a
    ``machine`` (``--opdb-machine``) it does not record."""
    with OpDatabase(path) as db:
        db.refuse_unknown_machine(machine)


class OpDatabase:
    """An open database file; use as a context manager, or call ``close``."""

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        check_path(self.path, create=create)
        if create and not self.path.parent.is_dir():  # as -o makes the folders of a file
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                above = next((a for a in self.path.parents if a.exists()), None)
                why = (f"{above} is a file, not a folder" if above and not above.is_dir()
                       else exc.strerror)
                raise OpdbError(f"cannot create its folder: {why}", path=self.path) from None
        try:
            self.conn = sqlite3.connect(self.path)
        except sqlite3.Error as exc:
            raise OpdbError(f"cannot open ({exc})", path=self.path) from None
        try:
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise OpdbError(f"not an op cost database ({exc})", path=self.path) from None
        if tables and version in (1, 2, 3, 4) and {"ops", "machines", "build_points"} <= tables:
            try:
                self.conn.executescript(_ADDED_TABLES)  # first: it commits, and is idempotent
                with self.conn:  # version 1's builds ran TensorFlow's default threads
                    if version == 1:
                        self.conn.execute("ALTER TABLE machines ADD COLUMN threads INTEGER "
                                          "DEFAULT 0")
                    self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except sqlite3.Error as exc:
                self.conn.close()
                raise OpdbError(f"a schema-{version} database, not brought to schema "
                                f"{SCHEMA_VERSION} ({exc})", path=self.path) from None
            version = SCHEMA_VERSION
            tables |= {r[0] for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and (version != SCHEMA_VERSION or not tables >= TABLES):
            self.conn.close()
            missing = sorted(TABLES - tables)
            raise OpdbError(f"not an op cost database of schema {SCHEMA_VERSION} (user_version "
                            f"{version}, tables {sorted(tables)}"
                            + (f"; missing {', '.join(missing)}" if missing else "") + ")",
                            path=self.path)
        if not tables and not create:  # a read never turns a file into a database
            self.conn.close()
            raise OpdbError("an SQLite file with no tables, not an op cost database (make one "
                            "with `gradwire opdb build` or `gradwire opdb ingest`)",
                            path=self.path)
        if not tables:
            with self.conn:
                self.conn.executescript(_SCHEMA)
                self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def __enter__(self) -> OpDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def add_machine(self, machine: Machine) -> None:
        """Record ``machine`` (once: a later call for the same fingerprint changes nothing)."""
        with self.conn:
            self.conn.execute(
                "INSERT OR IGNORE INTO machines VALUES (?, ?, ?, ?, ?, ?)",
                (machine.fingerprint, machine.description, machine.cores, machine.tf_version,
                 _utc(), machine.threads))

    def refuse_unknown_machine(self, machine: str | None) -> None:
        """Refuse a ``machine`` fingerprint (given: not None) this database does not record,
        naming those it does."""
        known = [m.fingerprint for m in self.machines()]
        if machine is not None and machine not in known:
            raise OpdbError(f"no machine {machine!r} in it (it has: "
                            f"{', '.join(known) or 'none'})", path=self.path)

    def machines(self) -> list[Machine]:
        rows = self.conn.execute("SELECT fingerprint, description, cores, tf_version, threads "
                                 "FROM machines ORDER BY rowid")
        return [Machine(fingerprint=f, description=d, cores=c, tf_version=v, threads=t)
                for f, d, c, v, t in rows]

    def cache_pass(self, fingerprint: str) -> tuple[int, str] | None:
        """The pass (bytes) ``build`` times ``fingerprint``'s ops after, and how it was
        chosen; None before the machine's first build."""
        row = self.conn.execute("SELECT bytes, how FROM cache_passes WHERE fingerprint = ?",
                                (fingerprint,)).fetchone()
        return (row[0], row[1]) if row else None

    def set_cache_pass(self, fingerprint: str, size_bytes: int, how: str) -> None:
        """Record the pass ``fingerprint``'s rows are timed after (once: all of a machine's
        build rows are timed after one pass)."""
        with self.conn:
            self.conn.execute("INSERT OR IGNORE INTO cache_passes VALUES (?, ?, ?, ?)",
                              (fingerprint, size_bytes, how, _utc()))

    def model_choices(self, fingerprint: str) -> dict[tuple[str, str, str, str], tuple[str, str]]:
        """(rows digest, chosen model) by (op, dtype, device, fingerprint): the regressions
        ``build`` chose for ``fingerprint``'s op types."""
        rows = self.conn.execute("SELECT op, dtype, device, rows_digest, chosen FROM "
                                 "model_choices WHERE fingerprint = ?", (fingerprint,))
        return {(op, dt, dev, fingerprint): (digest, chosen) for op, dt, dev, digest, chosen
                in rows}

    def keep_model_choices(self, fingerprint: str,
                           choices: dict[tuple[str, str, str, str], tuple[str, str]]) -> None:
        """Replace ``fingerprint``'s kept choices with ``choices`` (``model_choices``'s
        form), in one transaction."""
        with self.conn:
            self.conn.execute("DELETE FROM model_choices WHERE fingerprint = ?", (fingerprint,))
            self.conn.executemany(
                "INSERT INTO model_choices VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(fingerprint, op, dt, dev, digest, chosen, _utc())
                 for (op, dt, dev, fp), (digest, chosen) in choices.items() if fp == fingerprint])

    def put_step(self, step: StepTiming) -> None:
        """Store a worker step's timing (replacing one of the same graph, machine, device)."""
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (step.graph, step.fingerprint, step.device, step.label, step.reps,
                               step.median_us, step.p10_us, step.p90_us, step.cores_busy,
                               _utc()))

    def step(self, graph: str, fingerprint: str, device: str) -> StepTiming | None:
        """The timing of the step of graph digest ``graph`` on machine ``fingerprint`` and
        ``device``; None: not timed."""
        return next((s for s in self.steps() if (s.graph, s.fingerprint, s.device)
                     == (graph, fingerprint, device)), None)

    def steps(self) -> list[StepTiming]:
        """Every step timing (``opdb step``), in the order stored."""
        rows = self.conn.execute(
            "SELECT graph, fingerprint, device, label, reps, median_us, p10_us, p90_us, "
            "cores_busy FROM steps ORDER BY rowid")
        return [StepTiming(*r) for r in rows]

    def point_labels(self, fingerprint: str) -> set[str]:
        """The grid points ``build`` has tried on ``fingerprint`` (timed or skipped)."""
        rows = self.conn.execute("SELECT label FROM build_points WHERE fingerprint = ?",
                                 (fingerprint,))
        return {r[0] for r in rows}

    def mark_point(self, fingerprint: str, label: str, key: tuple[str, ...] | None,
                   outcome: str) -> None:
        """Record what ``build`` did with grid point ``label``: ``started`` (before it runs),
        ``timed`` (``key``: the row it stored) or why it was skipped, so that a resumed build
        does not try it again."""
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO build_points VALUES (?, ?, ?, ?, ?)",
                              (fingerprint, label, json.dumps(key) if key else None, outcome,
                               _utc()))

    def forget_point(self, fingerprint: str, label: str) -> None:
        """Drop grid point ``label``'s mark (its run was interrupted: try it again)."""
        with self.conn:
            self.conn.execute("DELETE FROM build_points WHERE fingerprint = ? AND label = ?",
                              (fingerprint, label))

    def point_outcomes(self, fingerprint: str) -> dict[str, int]:
        """How many grid points ``build`` timed on ``fingerprint`` (``timed``) and skipped,
        by reason."""
        rows = self.conn.execute("SELECT outcome, COUNT(*) FROM build_points WHERE "
                                 "fingerprint = ? GROUP BY outcome", (fingerprint,))
        return dict(rows.fetchall())

    def crashed_points(self, fingerprint: str) -> list[str]:
        """Grid points marked ``started`` and never finished: the process died timing them."""
        rows = self.conn.execute("SELECT label FROM build_points WHERE fingerprint = ? AND "
                                 "outcome = 'started' ORDER BY rowid", (fingerprint,))
        return [r[0] for r in rows]

    def put(self, timings: Iterable[OpTiming]) -> int:
        """Store ``timings`` in one transaction (a row with the same key is replaced);
        returns how many."""
        rows = [(*t.key(), _shapes_json(t.outputs), t.flops, t.bytes_, t.reps, t.median_us,
                 t.p10_us, t.p90_us, _utc()) for t in timings]
        with self.conn:
            self.conn.executemany(
                "INSERT OR REPLACE INTO ops VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows)
        return len(rows)

    def timings(self, *, op: str | None = None, fingerprint: str | None = None,
                source: str | None = None) -> Iterator[OpTiming]:
        """Rows matching every filter given, in insertion order."""
        where, args = [], []
        for column, value in (("op", op), ("fingerprint", fingerprint), ("source", source)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = ("SELECT op, inputs, attrs, dtype, device, fingerprint, source, outputs, flops, "
               "bytes_, reps, median_us, p10_us, p90_us FROM ops")
        if where:
            sql += " WHERE " + " AND ".join(where)
        for r in self.conn.execute(sql + " ORDER BY rowid", args):
            yield OpTiming(
                op=r[0], inputs=tuple(tuple(s) for s in json.loads(r[1])),
                attrs=tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                   for k, v in json.loads(r[2]).items())),
                dtype=r[3], device=r[4],
                fingerprint=r[5], source=r[6], outputs=tuple(tuple(s) for s in json.loads(r[7])),
                flops=r[8], bytes_=r[9], reps=r[10], median_us=r[11], p10_us=r[12], p90_us=r[13])

    def summary(self) -> list[dict[str, Any]]:
        """Per op type, device (``CPU``; ``XLA_CPU``: as XLA compiled it), machine and
        source: rows and the range of median times (µs)."""
        rows = self.conn.execute(
            "SELECT op, device, fingerprint, source, COUNT(*), MIN(median_us), MAX(median_us) "
            "FROM ops GROUP BY op, device, fingerprint, source "
            "ORDER BY op, device, fingerprint, source")
        return [dict(zip(("op", "device", "fingerprint", "source", "rows", "min_us", "max_us"),
                         r, strict=True)) for r in rows]


def local_machine(tf_version: str, threads: int | None = 0) -> Machine:
    """This machine: its processor's model name (``/proc/cpuinfo``), the cores this process
    may use, TensorFlow's version and ``threads`` (intra-op; 0: TensorFlow's default; None:
    not known), with a fingerprint hashing them."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return machine_of(model, usable_cpus(), tf_version, threads)


def machine_of(description: str, cores: int, tf_version: str, threads: int | None = None
               ) -> Machine:
    """The Machine of these facts (its fingerprint: 12 hex digits of their SHA-256; with
    TensorFlow's default threads or threads not known, of the first three alone, as before
    threads were kept)."""
    text = f"{description}|{cores}|{tf_version}" + (f"|threads={threads}" if threads else "")
    return Machine(fingerprint=hashlib.sha256(text.encode()).hexdigest()[:12],
                   description=description, cores=cores, tf_version=tf_version,
                   threads=threads)


def threads_said(threads: int | None) -> str:
    """A machine's ``threads`` in words, as the notes and tables show them."""
    if threads is None:
        return "threads not known"
    if not threads:
        return "TensorFlow's default threads"
    return f"{threads} intra-op thread{'s' if threads != 1 else ''}"


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
