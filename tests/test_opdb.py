"""The op cost database (issue 23): features, the SQLite file, the grid, the regressions, the
step check, and `gradwire opdb` end to end with real TensorFlow."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE, gradwire, need, need_tf

from gradwire.collector.cachepass import pass_ladder, reported_pass_bytes
from gradwire.collector.opgrid import FAMILIES, LINK_ATTR, RING_HOP, families_named, points
from gradwire.collector.opshapes import ExecutedOp
from gradwire.collector.ringhop import hop_timing
from gradwire.errors import GradwireError
from gradwire.opdb import BUILD, SCHEMA_VERSION, OpDatabase, OpdbError, OpTiming, machine_of
from gradwire.opfeatures import canonical_op, device_type, features, flops
from gradwire.replay.opcheck import critical_path_us
from gradwire.replay.opcost import (
    CostModel,
    build_rows,
    choices_note,
    chosen_kinds,
    cross_validate,
    fit,
    group,
    ring_hop_line,
    ring_hop_links,
    rows_digest,
    threads_note,
)

# -- features -----------------------------------------------------------------------------


def test_op_names_lose_onednn_prefixes_but_transfers_keep_theirs() -> None:
    assert canonical_op("_MklNativeFusedConv2D") == "FusedConv2D"
    assert canonical_op("_MklMatMul") == "MatMul"
    assert canonical_op("_FusedMatMul") == "FusedMatMul"
    assert canonical_op("_Recv") == "_Recv" and canonical_op("Relu") == "Relu"
    assert device_type("/job:worker/replica:0/task:0/device:CPU:0") == "CPU"
    assert device_type("/job:localhost/replica:0/task:0/device:GPU:1") == "GPU"


def test_flops_of_products_convolutions_and_pools() -> None:
    # [m, k] x [k, n]: 2 m k n, whichever operand is transposed
    assert flops("MatMul", [(8, 64), (64, 32)], [(8, 32)], {}) == 2 * 8 * 64 * 32
    assert flops("MatMul", [(64, 8), (64, 32)], [(8, 32)], {"transpose_a": True}) \
        == 2 * 8 * 64 * 32
    # conv: 2 x output elements x kh kw cin
    out = (2, 14, 14, 16)
    assert flops("Conv2D", [(2, 28, 28, 3), (3, 3, 3, 16)], [out], {}) \
        == 2 * math.prod(out) * 3 * 3 * 3
    assert flops("Conv2DBackpropInput", [(4,), (3, 3, 3, 16), out], [(2, 28, 28, 3)], {}) \
        == 2 * math.prod(out) * 27
    assert flops("Conv2DBackpropFilter", [(2, 28, 28, 3), (4,), out], [(3, 3, 3, 16)], {}) \
        == 2 * math.prod(out) * 27
    assert flops("MaxPool", [(1, 4, 4, 2)], [(1, 2, 2, 2)], {"ksize": (1, 2, 2, 1)}) == 8 * 4
    assert flops("Relu", [(3, 5)], [(3, 5)], {}) == 15
    n, b = features("AddV2", [(10, 10), (10, 10)], [(10, 10)], {}, "bfloat16")
    assert (n, b) == (100, 600)  # three tensors of 100 elements, 2 bytes each


# -- the database file --------------------------------------------------------------------


def _row(op: str = "MatMul", t: float = 10.0, m: int = 4, **kw) -> OpTiming:
    base = dict(op=op, inputs=((m, 8), (8, 8)), attrs=(("transpose_a", False),),
                dtype="float32", device="CPU", fingerprint="abc", source=BUILD,
                outputs=((m, 8),), flops=2.0 * m * 64, bytes_=4.0 * (16 * m + 64), reps=5,
                median_us=t, p10_us=t * 0.9, p90_us=t * 1.1)
    base.update(kw)
    return OpTiming(**base)


def test_rows_persist_and_a_key_is_stored_once(tmp_path) -> None:
    path = tmp_path / "ops.sqlite"
    with OpDatabase(path, create=True) as db:
        db.add_machine(machine_of("cpu x", 2, "2.21.0"))
        assert db.put([_row(t=10.0), _row(m=8, t=20.0)]) == 2
        db.put([_row(t=12.0)])  # the same key again: replaced, not added
    with OpDatabase(path) as db:
        rows = list(db.timings(op="MatMul"))
        assert sorted(r.median_us for r in rows) == [12.0, 20.0]
        replaced = next(r for r in rows if r.median_us == 12.0)
        assert replaced.attrs == (("transpose_a", False),) and replaced.inputs[0] == (4, 8)
        assert len(list(db.timings(fingerprint="abc"))) == 2
        assert list(db.timings(fingerprint="other")) == []
        assert db.machines()[0].description == "cpu x"
        assert db.summary()[0]["rows"] == 2


def test_build_marks_let_a_resumed_build_skip_what_it_tried(tmp_path) -> None:
    with OpDatabase(tmp_path / "ops.sqlite", create=True) as db:
        db.mark_point("abc", "MatMul[m=1] float32", ("k",), "timed")
        db.mark_point("abc", "Relu[rows=1] float32", None, "started")  # died timing it
        db.mark_point("abc", "Relu[rows=2] float32", None, "started")
        db.forget_point("abc", "Relu[rows=2] float32")  # interrupted: tried again
        assert db.crashed_points("abc") == ["Relu[rows=1] float32"]
        assert db.point_labels("abc") == {"MatMul[m=1] float32", "Relu[rows=1] float32"}
        assert db.point_outcomes("abc") == {"timed": 1, "started": 1}


def test_a_file_that_is_not_an_op_database_is_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(OpdbError, match="no op cost database here"):
        OpDatabase(tmp_path / "missing.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(OpdbError, match="not an op cost database"):
        OpDatabase(junk)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(OpdbError, match="schema"):
        OpDatabase(other)
    assert other.read_bytes()  # left as it was
    # a database of this schema that lost a table is refused, naming it
    made = tmp_path / "made.sqlite"
    OpDatabase(made, create=True).close()
    with sqlite3.connect(made) as conn:
        conn.execute("DROP TABLE steps")
    with pytest.raises(OpdbError, match="missing steps"):
        OpDatabase(made)


def test_a_database_path_that_is_no_database_is_refused_untouched(tmp_path) -> None:
    """An empty file (a log, a capture) is never made a database, read or written; '-' is
    standard output's name; collected data is refused; a read never adds tables; a new
    database's missing folders are made, as -o makes an output's."""
    empty = tmp_path / "capture.log"
    empty.touch()
    for create in (False, True):
        with pytest.raises(OpdbError, match="an empty file, not an op cost database"):
            OpDatabase(empty, create=create)
    assert empty.stat().st_size == 0
    with pytest.raises(OpdbError, match="'-' is standard output"):
        OpDatabase("-", create=True)
    assert not Path("-").exists()
    bare = tmp_path / "bare.sqlite"
    sqlite3.connect(bare).execute("PRAGMA user_version = 0").connection.close()
    before = bare.read_bytes()
    with pytest.raises(OpdbError, match="no tables"):
        OpDatabase(bare)
    assert bare.read_bytes() == before
    bundle = tmp_path / "b"
    shutil.copytree(SAMPLE / "worker0", bundle)
    for name in ("capture.log", "manifest.json"):
        data = (bundle / name).read_bytes()
        with pytest.raises(GradwireError, match="collected data of the bundle"):
            OpDatabase(bundle / name, create=True)
        assert (bundle / name).read_bytes() == data
    with OpDatabase(tmp_path / "new" / "dir" / "ops.sqlite", create=True) as db:
        assert db.machines() == []


def test_threads_are_part_of_the_machine_and_a_version_1_file_gains_them(tmp_path) -> None:
    default, one = machine_of("cpu x", 2, "2.21.0", 0), machine_of("cpu x", 2, "2.21.0", 1)
    # TensorFlow's default threads, or threads not known, keep the fingerprint of before
    # threads were kept
    assert default.fingerprint == hashlib.sha256(b"cpu x|2|2.21.0").hexdigest()[:12]
    assert machine_of("cpu x", 2, "2.21.0").fingerprint == default.fingerprint
    assert one.fingerprint != default.fingerprint and (default.threads, one.threads) == (0, 1)
    old = tmp_path / "v1.sqlite"  # schema 1, as written before threads were kept
    with sqlite3.connect(old) as conn:
        conn.executescript(
            "CREATE TABLE machines (fingerprint TEXT PRIMARY KEY, description TEXT NOT NULL, "
            "cores INTEGER NOT NULL, tf_version TEXT NOT NULL, first_seen_utc TEXT NOT NULL);"
            "CREATE TABLE ops (x); CREATE TABLE build_points (y);"
            f"INSERT INTO machines VALUES ('{default.fingerprint}', 'cpu x', 2, '2.21.0', 'z');"
            "PRAGMA user_version = 1;")
    with OpDatabase(old) as db:
        assert db.machines() == [default]
        db.add_machine(one)
        assert db.machines() == [default, one]
    with OpDatabase(old) as db:  # opened again: the current version now
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.cache_pass(default.fingerprint) is None


def _older_file(path: Path, script: str) -> Path:
    """A database at ``path`` made as an older schema was: today's, after ``script``."""
    with OpDatabase(path, create=True) as db:
        db.conn.executescript(script)
    return path


def test_a_machines_cache_pass_is_kept_once_and_a_version_2_file_gains_the_table(
        tmp_path) -> None:
    path = _older_file(tmp_path / "v2.sqlite", "DROP TABLE cache_passes; PRAGMA user_version = 2;")
    with OpDatabase(path) as db:
        assert db.cache_pass("abc") is None
        db.set_cache_pass("abc", 128 << 20, "calibrated")
        db.set_cache_pass("abc", 16 << 20, "another")  # the first stays: rows are timed alike
    with OpDatabase(path) as db:
        assert db.cache_pass("abc") == (128 << 20, "calibrated")
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_model_choices_are_kept_per_machine_and_a_version_3_file_gains_the_table(
        tmp_path) -> None:
    path = _older_file(tmp_path / "v3.sqlite",
                       "DROP TABLE model_choices; PRAGMA user_version = 3;")
    with OpDatabase(path) as db:
        assert db.model_choices("abc") == {}
        db.keep_model_choices("abc", {("MatMul", "float32", "CPU", "abc"): ("d1", "power"),
                                      ("Relu", "float32", "CPU", "abc"): ("d2", "roofline")})
        db.keep_model_choices("xyz", {("MatMul", "float32", "CPU", "xyz"): ("d3", "power")})
        db.keep_model_choices("abc", {("MatMul", "float32", "CPU", "abc"): ("d4", "roofline")})
    with OpDatabase(path) as db:  # replaced, not added to; the other machine's kept
        assert db.model_choices("abc") == {("MatMul", "float32", "CPU", "abc"): ("d4",
                                                                               "roofline")}
        assert db.model_choices("xyz") == {("MatMul", "float32", "CPU", "xyz"): ("d3", "power")}
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_steps_timing_is_kept_per_graph_machine_and_device_and_a_version_4_file_gains_it(
        tmp_path) -> None:
    from gradwire.opdb import StepTiming

    path = _older_file(tmp_path / "v4.sqlite", "DROP TABLE steps; PRAGMA user_version = 4;")
    row = StepTiming("g1", "abc", "XLA_CPU", "bundles/worker0", 20, 8660.0, 8120.0, 9080.0, 1.0)
    with OpDatabase(path) as db:
        assert db.step("g1", "abc", "XLA_CPU") is None
        db.put_step(row)
        db.put_step(dataclasses.replace(row, device="CPU", median_us=7200.0))
        db.put_step(dataclasses.replace(row, median_us=8700.0))  # timed again: replaced
    with OpDatabase(path) as db:
        assert db.step("g1", "abc", "XLA_CPU") == dataclasses.replace(row, median_us=8700.0)
        assert db.step("g1", "abc", "CPU").median_us == 7200.0
        assert db.step("g1", "xyz", "XLA_CPU") is None and db.step("g2", "abc", "CPU") is None
        assert [(st.device, st.median_us) for st in db.steps()] == [("CPU", 7200.0),
                                                                    ("XLA_CPU", 8700.0)]
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_the_profiles_machine_is_preferred_and_other_threads_are_noted(tmp_path) -> None:
    default, one = machine_of("cpu x", 2, "2.21.0", 0), machine_of("cpu x", 2, "2.21.0", 1)
    path = tmp_path / "ops.sqlite"
    with OpDatabase(path, create=True) as db:
        db.add_machine(default)
        db.put([_row(fingerprint=default.fingerprint, t=10.0)])
    assert build_rows(path, prefer=one.fingerprint)[1] == default.fingerprint  # the only one
    note = threads_note(path, default.fingerprint, one)
    assert note and "ran with 1 intra-op thread," in note and "--threads 1" in note
    assert threads_note(path, default.fingerprint, default) is None
    # a trace recorded before the threads were kept: not known, no note
    assert threads_note(path, default.fingerprint, machine_of("cpu y", 2, "2.21.0")) is None
    with OpDatabase(path) as db:
        db.add_machine(one)
        db.put([_row(fingerprint=one.fingerprint, t=19.0)])
    rows, fp = build_rows(path, prefer=one.fingerprint)
    assert fp == one.fingerprint and [r.median_us for r in rows] == [19.0]
    named = build_rows(path, default.fingerprint, prefer=one.fingerprint)[1]
    assert named == default.fingerprint  # --opdb-machine wins
    with pytest.raises(GradwireError, match=r"2 machines .* none the profile's \(elsewhere\)"):
        build_rows(path, prefer="elsewhere")


# -- the grid -----------------------------------------------------------------------------


def test_the_grid_is_fixed_and_a_larger_budget_only_adds_points() -> None:
    small = [p.label() for p in points(per_family=8)]
    assert small == [p.label() for p in points(per_family=8)]
    assert set(small) <= {p.label() for p in points(per_family=16)}
    assert len(set(small)) == len(small)
    ops = {p.family.op for p in points(per_family=2)}
    assert ops == {f.op for f in FAMILIES}
    with pytest.raises(ValueError, match="Bogus"):
        families_named("MatMul,Bogus")


# -- regressions --------------------------------------------------------------------------


def test_the_roofline_recovers_a_known_cost_and_cross_validation_scores_it() -> None:
    # time = 3 us + flops at 10 GFLOP/s + bytes at 5 GB/s, exactly
    rows = [_row(m=m, flops=f, bytes_=b, t=3 + f / 1e4 + b / 5e3)
            for m, (f, b) in enumerate([(1e5, 1e4), (1e6, 3e4), (1e7, 1e5), (3e7, 2e6),
                                        (2e5, 4e6), (5e6, 1e3), (8e7, 9e5), (4e4, 2e5)])]
    model = fit(rows, "roofline")
    a, b, c = model.coef
    assert a == pytest.approx(3, rel=1e-3) and b == pytest.approx(1e-4, rel=1e-3)
    assert c == pytest.approx(2e-4, rel=1e-3)
    v = cross_validate(rows, ("MatMul", "float32", "CPU", "abc"))
    assert v is not None and v.median("roofline") < 1e-3
    assert cross_validate(rows[:5], ("MatMul", "float32", "CPU", "abc")) is None  # too few


def test_a_timed_shape_is_served_as_measured_and_others_by_the_model() -> None:
    rows = [_row(m=m, t=1.0 + m) for m in range(1, 9)]
    cm = CostModel(rows)
    assert cm.predict_us("MatMul", rows[2], "float32", "CPU") == rows[2].median_us
    unseen = _row(m=100, t=0.0)
    guess = cm.predict_us("MatMul", unseen, "float32", "CPU")
    assert guess is not None and guess > rows[-1].median_us  # more work, more time
    assert cm.predict_us("Conv2D", unseen, "float32", "CPU") is None
    # bfloat16 without rows of its own: float32's model stands in
    assert cm.predict_us("MatMul", unseen, "bfloat16", "CPU") == guess


def test_a_kept_choice_spares_the_folds_only_on_the_rows_it_was_made_on() -> None:
    rows = [_row(m=m, t=1.0 + m) for m in range(1, 9)]
    key = ("MatMul", "float32", "CPU", "abc")
    fresh = CostModel(rows)
    unseen = _row(m=100, t=0.0)
    guess = fresh.predict_us("MatMul", unseen, "float32", "CPU")
    assert list(fresh._validations) == [key]  # asked for, so chosen and fitted, once
    kept = chosen_kinds(fresh)
    assert kept == {key: (rows_digest(rows), fresh.chosen(key))}
    # with the kept choice: the same answer, and no fold run
    served = CostModel(rows, kept)
    assert served.predict_us("MatMul", unseen, "float32", "CPU") == guess
    assert served._validations == {} and served.kept_choices == 1
    assert choices_note(Path("ops.sqlite"), "abc", served) is None
    assert "ops.sqlite keeps no choice of regression for machine abc" in \
        choices_note(Path("ops.sqlite"), "abc", fresh)
    # a choice kept on other rows (one time changed) is not taken: the folds run again
    changed = [*rows[:-1], _row(m=8, t=20.0)]
    assert rows_digest(changed) != rows_digest(rows)
    other = CostModel(changed, {key: (rows_digest(rows), "power")})
    assert other.chosen(key) == other.validation(key).chosen and key in other._validations
    # an op type never asked for is never fitted
    two = CostModel([*rows, *(_row(op="Relu", m=m, t=2.0 * m) for m in range(1, 9))])
    two.predict_us("MatMul", unseen, "float32", "CPU")
    assert two._fits.keys() == {key} and two.op_types() == {"MatMul", "Relu"}


def test_the_trees_predict_on_one_openmp_thread() -> None:
    # scikit-learn's OpenMP threads spin when the cores are busy: the trees must run on one
    from threadpoolctl import ThreadpoolController

    rows = [_row(m=m, t=1.0 + m * m) for m in range(1, 13)]
    model = fit(rows, "roofline+trees")
    threads: list[int] = []

    class Watching:
        def predict(self, x):
            threads.extend(p["num_threads"] for p in ThreadpoolController().info()
                           if p["user_api"] == "openmp")
            return model.trees.predict(x)

    watched = dataclasses.replace(model, trees=Watching())
    assert watched.predict_many_us(rows[:3]).tolist() == model.predict_many_us(rows[:3]).tolist()
    assert threads and set(threads) == {1}


def test_the_ring_hop_line_comes_from_its_rows_alone() -> None:
    # hops of 1,000, 2,000 and 4,000 float32 (4 to 16 kB) at 50 + 0.01 us per byte, exactly
    hop = [hop_timing(n, [50 + 0.01 * 4 * n] * 3, machine_of("cpu x", 2, "2.21.0"))
           for n in (1000, 2000, 4000)]
    assert ring_hop_line([*hop, *(_row(m=m, t=1.0 + m) for m in range(1, 9))]) == \
        pytest.approx((50.0, 0.01))
    assert ring_hop_line([_row(m=m, t=1.0 + m) for m in range(1, 9)]) is None
    assert ring_hop_line(hop[:1]) is None  # one chunk size: no line
    assert hop[0].op == RING_HOP and hop[0].bytes_ == 2 * 4 * 1000  # in and out


def test_a_hop_row_pools_the_runs_of_three_pairs_of_processes(monkeypatch) -> None:
    # each pair of TensorFlow processes is a fresh start (mocked here: no TensorFlow needed
    # for the pooling); pair k times every all-reduce at 1000 (k + 1) us, so the row holds
    # 3 x reps runs and its median is the middle pair's, less loopback's streaming time
    from gradwire.collector import ringhop

    pairs = iter(range(3))

    def pair(start, addresses, chunks, reps, threads, timeout_s):
        k = next(pairs)
        assert threads == 1  # the machine's threads
        return {str(n): [1000.0 * (k + 1)] * reps for n in chunks}

    monkeypatch.setattr(ringhop, "time_allreduces", pair)
    monkeypatch.setattr(ringhop, "loopback_stream_us", lambda nbytes: 10.0)
    (row,) = ringhop.measure_hops([1000], machine_of("cpu x", 2, "2.21.0", threads=1), reps=4)
    assert row.reps == 3 * 4 and row.median_us == pytest.approx(1000.0 - 10.0)
    assert ringhop.PAIRS == 3


def test_hops_timed_across_links_make_a_line_per_link_rate() -> None:
    # hops timed on loopback (50 + 0.01 us/byte) and across links of 800 and 200 Mbit/s
    # payload (20 + 0.002 and 5 + 0.0005 us/byte): the loopback line ignores the links' rows,
    # and each link its own line, keyed by its rate in bytes per us, slowest first
    m = machine_of("cpu x", 2, "2.21.0")

    def hops(f: float, b: float, bps: float | None) -> list:
        return [hop_timing(n, [f + b * 4 * n] * 3, m, bps) for n in (1000, 2000, 4000)]

    rows = [*hops(50, 0.01, None), *hops(20, 0.002, 800e6), *hops(5, 0.0005, 200e6)]
    assert ring_hop_line(rows) == pytest.approx((50.0, 0.01))
    links = ring_hop_links(rows)
    assert [r for r, _, _ in links] == pytest.approx([25.0, 100.0])
    assert [line for _, *line in links] == [pytest.approx([5.0, 0.0005]),
                                            pytest.approx([20.0, 0.002])]
    assert ring_hop_links(hops(50, 0.01, None)) == ()  # loopback only: no link
    assert ring_hop_links(hops(5, 0.0005, 200e6)[:1]) == ()  # one chunk size: no line
    assert dict(rows[3].attrs)[LINK_ATTR] == 800_000_000


def test_the_critical_path_follows_data_and_control_edges() -> None:
    def op(name: str, *preds: str) -> ExecutedOp:
        return ExecutedOp(name=name, op="Relu", device="CPU", inputs=(), outputs=(),
                          dtype="float32", attrs=(), duration_us=0.0, preds=preds)

    ops = [op("a"), op("b", "a"), op("c", "a"), op("d", "b", "c"), op("e")]  # d: c by control
    w = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0, "e": 6.0}
    assert critical_path_us(ops, w) == 7.0  # a, b, d
    w["c"] = 9.0
    assert critical_path_us(ops, w) == 11.0  # a, c, d (control edge)
    # a while loop's back edge (d feeds a again) closes a cycle: ignored, no hang
    looped = [op("a", "d"), *ops[1:]]
    assert critical_path_us(looped, w) == 11.0


# -- end to end, with TensorFlow ----------------------------------------------------------


def test_cli_errors_are_one_line(tmp_path) -> None:
    proc = gradwire("opdb", "show", "--db", str(tmp_path / "none.sqlite"))
    assert proc.returncode == 2 and "no op cost database here" in proc.stderr
    assert proc.stderr.startswith("gradwire opdb show: error: ")  # the action named
    db = tmp_path / "ops.sqlite"
    assert gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db", str(db)).returncode == 0
    proc = gradwire("opdb", "show", "--db", str(db), "--machine", "nope")
    assert proc.returncode == 2 and "no machine 'nope' in it (it has: " in proc.stderr
    # the database is checked before the bundles are read
    proc = gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db", "-")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = gradwire("opdb", "build", "--ops", "Bogus", "--db", str(tmp_path / "x.sqlite"))
    assert proc.returncode == 2 and "unknown op type(s) Bogus" in proc.stderr
    assert not (tmp_path / "x.sqlite").exists()
    for empty in ("", ",", " , "):  # an unset $OPS is not every op type
        proc = gradwire("opdb", "build", "--ops", empty, "--db", str(tmp_path / "x.sqlite"))
        assert proc.returncode == 2 and "names no op type" in proc.stderr, proc.stderr
    assert not (tmp_path / "x.sqlite").exists()
    proc = gradwire("opdb", "fit", "--db", str(db), "--machine", "nope")
    assert proc.returncode == 2 and "no machine 'nope' in it (it has: " in proc.stderr
    # a folder of a profile's bundles is taken for its one traced bundle; of two, refused
    for name in ("a", "b"):
        shutil.copytree(SAMPLE / "worker0", tmp_path / "two" / name)
    proc = gradwire("opdb", "check", str(tmp_path / "two"), "--db", str(db))
    assert proc.returncode == 2 and "2 bundles with a TensorFlow trace here (a, b): give one" \
        in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_build_ops_of_a_bundle_times_only_the_op_types_it_ran(tmp_path) -> None:
    """`--ops-of` reads the sample's recorded steps and times the grid's op types among
    them (the worker's and its PS's), naming those the grid has no family for."""
    need_tf()
    db = tmp_path / "ops.sqlite"
    proc = gradwire("opdb", "build", "--db", str(db), "--ops-of", str(SAMPLE), "--points", "1",
                    "--reps", "3", "--threads", "1", "--cache-pass", "16MiB", timeout=600)
    assert proc.returncode == 0, proc.stderr
    ran = ["MatMul", "FusedMatMul", "ReluGrad", "Mul", "Sum", "ResourceApplyGradientDescent",
           "SparseSoftmaxCrossEntropyWithLogits"]
    assert (f"--ops-of: 7 of the grid's op types ran in these bundles: {', '.join(ran)}; not "
            "in the grid (their rows come only from `gradwire opdb ingest`): "
            "AssignAddVariableOp") in proc.stderr, proc.stderr
    with OpDatabase(db) as d:
        assert {r.op for r in d.timings(source=BUILD)} == set(ran)


@pytest.mark.slow
def test_build_xla_times_what_xla_compiles_beside_the_plain_rows(tmp_path) -> None:
    """`--xla` times each point's op compiled by XLA alone: rows of device XLA_CPU keyed as
    TensorFlow's own kernel's (its type, shapes and attributes), a cluster's launch, and
    build points of their own (a plain build and an XLA build resume apart). Then predict
    --op-fusion on the sample says it costs XLA's code from them."""
    need_tf()
    db = tmp_path / "ops.sqlite"
    args = ["--db", str(db), "--ops", "MatMul,Relu", "--points", "3", "--reps", "3",
            "--threads", "1", "--cache-pass", "16MiB"]
    assert gradwire("opdb", "build", *args, timeout=600).returncode == 0
    proc = gradwire("opdb", "build", *args, "--xla", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "as XLA compiles them" in proc.stderr and "a compiled cluster's launch" in proc.stderr
    with OpDatabase(db) as d:
        rows = list(d.timings(source=BUILD))
        labels = d.point_labels(d.machines()[0].fingerprint)
    plain = {(r.op, r.inputs, r.attrs, r.dtype) for r in rows if r.device == "CPU"}
    compiled = {(r.op, r.inputs, r.attrs, r.dtype) for r in rows if r.device == "XLA_CPU"
                and r.op != "XlaLaunch"}
    assert compiled and compiled <= plain  # the same keys as TensorFlow's kernels'
    assert [r.median_us > 0 for r in rows if r.op == "XlaLaunch"] == [True]
    assert sum(label.endswith(" @xla") for label in labels) == len(labels) // 2 + 1
    again = gradwire("opdb", "build", *args, "--xla", timeout=600)
    assert again.returncode == 0 and "0 points to time" in again.stderr, again.stderr
    proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--op-fusion", "--opdb", str(db),
                    "--model", "sim", "-v", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "and XLA's own code for the other ops" in proc.stderr, proc.stderr


def test_build_ops_of_refuses_what_it_cannot_use_in_one_line(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for extra, said in (
            (["--ops-of", str(empty)], "not a gradwire bundle"),
            (["--ops-of", str(SAMPLE / "ps0")], "--ops-of: no bundle with recorded steps"),
            (["--ops-of", str(SAMPLE), "--ops", "MatMul"], "not allowed with argument")):
        proc = gradwire("opdb", "build", "--db", str(tmp_path / "x.sqlite"), *extra)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and said in last, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.sqlite").exists()
    # --list lists what --ops-of would time
    proc = gradwire("opdb", "build", "--ops-of", str(SAMPLE), "--list")
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == [
        "MatMul", "FusedMatMul", "ReluGrad", "Mul", "Sum", "ResourceApplyGradientDescent",
        "SparseSoftmaxCrossEntropyWithLogits"]
    # one bundle per flag, repeated, as --measured; -q keeps the notes (progress goes)
    again = gradwire("opdb", "build", "-q", "--ops-of", str(SAMPLE / "ps0"), "--ops-of",
                     str(SAMPLE / "worker0"), "--list")
    assert again.returncode == 0 and again.stdout == proc.stdout, again.stderr
    assert f"note: {SAMPLE / 'ps0'}: skipped: no recorded step" in again.stderr, again.stderr
    assert "note: --ops-of: 7 of the grid's op types ran" in again.stderr, again.stderr


def test_grid_ops_of_a_job_adds_the_ring_hop_for_its_collectives() -> None:
    from gradwire.collector.opgrid import grid_ops_of

    grid, others = grid_ops_of({"Relu", "MatMul", "Pad"})
    assert grid == ["MatMul", "Relu"] and others == ["Pad"]  # the grid's order
    grid, others = grid_ops_of({"MatMul", "CollectiveReduceV2", "CollectiveGatherV2"})
    assert grid == ["MatMul", RING_HOP] and others == []


@pytest.mark.slow
def test_build_ingest_fit_and_check_with_real_tensorflow(tmp_path) -> None:
    need_tf()
    db = tmp_path / "ops.sqlite"
    proc = gradwire("opdb", "build", "--db", str(db), "--ops", "MatMul,FusedMatMul,Relu",
                    "--points", "7", "--reps", "3", timeout=600)
    assert proc.returncode == 0, proc.stderr
    with OpDatabase(db) as d:
        rows = list(d.timings(source=BUILD))
        fp = d.machines()[0].fingerprint
        outcomes = d.point_outcomes(fp)
    assert {r.op for r in rows} == {"MatMul", "FusedMatMul", "Relu"}
    assert all(r.median_us > 0 and r.reps >= 3 and r.flops > 0 for r in rows)
    assert outcomes["timed"] == len(rows) and sum(outcomes.values()) == 2 * 7 + 7 + 2 * 7
    # the cache pass was calibrated on this machine before the first point, and kept
    assert "calibrating the cache pass" in proc.stderr, proc.stderr
    with OpDatabase(db) as d:
        size, how = d.cache_pass(fp)
    assert size in pass_ladder(reported_pass_bytes()) and how.startswith("cache pass ")
    # each op type's regression chosen at the build's end, kept on the rows it was chosen on
    with OpDatabase(db) as d:
        kept = d.model_choices(fp)
    groups = group(rows)
    assert set(kept) == set(groups)
    for key, (digest, chosen) in kept.items():
        assert digest == rows_digest(groups[key]) and chosen == CostModel(rows).chosen(key)
    # resumed: nothing left to time, the same pass; another pass for these rows is refused
    proc = gradwire("opdb", "build", "--db", str(db), "--ops", "MatMul,FusedMatMul,Relu",
                    "--points", "7", "--reps", "3", timeout=600)
    assert proc.returncode == 0 and "0 points to time" in proc.stderr, proc.stderr
    proc = gradwire("opdb", "build", "--db", str(db), "--ops", "Relu", "--points", "8",
                    "--cache-pass", str(size + (1 << 20)), timeout=600)
    assert proc.returncode == 2 and "were timed after a" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 2  # the "points to time" line, the error

    proc = gradwire("opdb", "ingest", str(SAMPLE), "--db", str(db), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ps0: no TensorFlow trace" in proc.stderr
    with OpDatabase(db) as d:
        traced = [r for r in d.timings() if r.source.startswith("trace:")]
    assert {"MatMul", "FusedMatMul"} <= {r.op for r in traced}
    # the sample's first layer: batch 32 x 1024 inputs times a 1024 x 50 kernel
    assert any(r.op == "FusedMatMul" and r.inputs[0][0] == 32 for r in traced)

    proc = gradwire("opdb", "fit", "--db", str(db), "--machine", fp, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    fits = json.loads(proc.stdout)["op_types"]
    assert {f["op"] for f in fits} >= {"MatMul", "Relu"}
    assert all(f["chosen"] in ("roofline", "power", "roofline+trees") for f in fits)

    # check and the what-if read the trace without TensorFlow: run with it unimportable
    without_tf = [sys.executable, "-c", "import sys; sys.modules['tensorflow'] = None; "
                  "from gradwire.cli import main; sys.exit(main(sys.argv[1:]))"]
    proc = subprocess.run([*without_tf, "opdb", "check", str(SAMPLE / "worker0"), "--db",
                           str(db), "--format", "json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["steps"] == 3 and doc["machine"] == fp
    assert 0 < doc["summary"]["covered_share"] <= 1
    # the parameters received from the PS are said apart: the allocator's records lack them
    assert doc["summary"]["received_bytes"] > 0 and doc["summary"]["estimated_peak_bytes"] > 0
    assert doc["summary"]["sends_held"] == 9  # its gradients, held until they left
    for step in doc["steps"]:
        assert step["estimated_peak_bytes"] >= step["local_peak_bytes"] > 0
        assert step["traced_path_us"] <= step["traced_sum_us"]
        assert step["predicted_path_us"] > 0

    # the batch what-if from these rows; the replay at batch 64 is not checked against the
    # profile's own run, which was at 32
    proc = subprocess.run([*without_tf, "predict", str(SAMPLE), "--workers", "1,2",
                           "--to-batch-size", "64", "--opdb", str(db), "--model", "sim",
                           "--format", "json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["profile"]["to_batch_size"] and not doc.get("self_check"), doc.get("self_check")
    assert doc["profile"]["to_batch_size"]["batch_transfers"] == []  # a dense model's
    assert not any("keeps no choice" in n for n in doc["notes"])  # the build kept them
    assert all(r["examples_per_s"] > 0 for r in doc["rows"])

    # one intra-op thread, as the lab's nodes run their ops: another machine's rows
    proc = gradwire("opdb", "build", "--db", str(db), "--ops", "MatMul", "--points", "3",
                    "--reps", "3", "--threads", "1", "--cache-pass", "32MiB", timeout=600)
    assert proc.returncode == 0 and "cores, 1 intra-op thread, TensorFlow" in proc.stderr, \
        proc.stderr
    assert "calibrating" not in proc.stderr  # the pass was given
    with OpDatabase(db) as d:
        one = next(m for m in d.machines() if m.threads == 1)
        assert {r.op for r in d.timings(fingerprint=one.fingerprint)} == {"MatMul"}
        assert d.cache_pass(one.fingerprint) == (32 << 20, "--cache-pass")
    # two machines' build rows, neither the sample's: check asks which, in one line
    proc = gradwire("opdb", "check", str(SAMPLE / "worker0"), "--db", str(db), timeout=300)
    assert proc.returncode != 0 and "none the profile's" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_ring_hops_are_timed_with_real_tensorflow_and_slow_the_ring(tmp_path) -> None:
    need_tf()
    db = tmp_path / "ops.sqlite"
    proc = gradwire("opdb", "build", "--db", str(db), "--ops", RING_HOP, "--points", "2",
                    "--reps", "3", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "3 pairs of TensorFlow processes on loopback" in proc.stderr
    with OpDatabase(db) as d:
        rows = sorted(d.timings(op=RING_HOP), key=lambda r: r.inputs[0][0])
    # the grid's smallest and largest chunk: 250 kB and 16 MB of float32, each row every
    # pair's runs
    assert [r.inputs[0][0] for r in rows] == [62_500, 4_000_000]
    # (a 250 kB hop's software time can be under the loopback timing's noise on a busy
    # machine, and a hop is never less than nothing: 0, as one CI run beside other work gave)
    assert all(r.reps == 3 * 3 for r in rows) and 0 <= rows[0].median_us < rows[1].median_us

    def ring(*extra: str) -> tuple[float, str]:
        p = gradwire("predict", str(SAMPLE), "--workers", "4", "--mechanism",
                     "ring-allreduce", "--format", "json", *extra, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["rows"][0]["examples_per_s"], p.stderr

    plain, said = ring()
    assert "leave out TensorFlow's software time per hop" in said
    timed, said = ring("--opdb", str(db))
    assert "per hop" not in said
    assert timed < plain


# -- the batch-size what-if ---------------------------------------------------------------


def test_rebatch_scales_the_batch_dimension_but_not_variables() -> None:
    from gradwire.replay.rebatch import batch_ratios, rebatch_template, rescaled
    from gradwire.replay.template import WORKER, StepTemplate

    assert rescaled((32, 1024), 32, 64) == (64, 1024)
    assert rescaled((32,), 32, 64) == (32,)  # a vector: a bias, a shape, not the batch
    assert rescaled((1024, 32), 32, 64) == (1024, 32)
    # a matmul costing exactly 1 us per 1,000 FLOPs: at twice the batch, twice the time
    rows = [_row(m=m, t=2.0 * m * 64 / 1e3, flops=2.0 * m * 64, bytes_=0.0)
            for m in range(2, 12)]
    model = CostModel(rows)
    fwd = ExecutedOp(name="dense/MatMul", op="MatMul", device="CPU", inputs=((8, 4), (4, 8)),
                     outputs=((8, 8),), dtype="float32", attrs=(("transpose_a", False),),
                     duration_us=100.0, from_variable=(False, True))
    # the kernel's gradient [4, 8] and its update: of the variable's shape, not the batch's,
    # though the batch is 4
    apply = ExecutedOp(name="apply", op="ResourceApplyGradientDescent", device="CPU",
                       inputs=((4, 8), (), (4, 8)), outputs=(), dtype="float32", attrs=(),
                       duration_us=50.0, from_variable=(True, False, False))
    rb = batch_ratios([fwd, apply], 8, 16, model)
    assert rb.ratios["dense/MatMul"] == pytest.approx(2.0, rel=1e-6)
    assert rb.ratios["apply"] == 1.0 and rb.unchanged_share == pytest.approx(50 / 150)
    assert batch_ratios([fwd, apply], 4, 16, model).ratios["apply"] == 1.0
    assert rb.compute_factor == pytest.approx((100 * 2 + 50 * 1.0) / 150, rel=1e-6)
    assert rb.costed_share == pytest.approx(100 / 150)
    t = StepTemplate(step=0)
    t.add(WORKER, 400.0, "compute dense..", members=(("dense/MatMul", 100.0), ("x", 100.0)))
    t.add(WORKER, 30.0, "gap")
    out = rebatch_template(t, rb.ratios)
    assert out.amount == [pytest.approx(400.0 * (200 + 100) / 200), 30.0]


# -- the memory estimator -----------------------------------------------------------------


def test_peak_memory_from_tensor_lifetimes() -> None:
    from gradwire.replay.memory import estimated_peak_bytes

    def op(name: str, start: float, end: float, out: int, *reads: str,
           kind: str = "Relu") -> ExecutedOp:
        return ExecutedOp(name=name, op=kind, device="CPU", inputs=(), outputs=(),
                          dtype="float32", attrs=(), duration_us=end - start,
                          input_nodes=reads, start_us=start, end_us=end, output_bytes=(out,))

    # a (100 B) read by b and c; b (50 B) read by d; c (10 B) read by nothing; r aliases a
    ops = [op("a", 0, 1, 100), op("b", 1, 2, 50, "a"), op("c", 2, 3, 10, "a"),
           op("r", 3, 3.5, 100, "a", kind="Reshape"), op("d", 4, 5, 20, "b")]
    # at 2-3: a (until c ends at 3... and r at 3.5), b (until d ends at 5), c: 160 B
    assert estimated_peak_bytes(ops) == 160
    # frees come before allocations at the same instant: a freed at 3.5, e starts at 3.5
    ops.append(op("e", 3.5, 4, 200))
    assert estimated_peak_bytes(ops) == 50 + 200
    # a received tensor (read by e until 4) counts, unless left out as the allocator's
    # records leave it out: the RPC layer fills it, not an op
    ops.append(op("x", 3.0, 3.2, 1000, kind="_Recv"))
    ops[-2] = op("e", 3.5, 4, 200, "x")
    assert estimated_peak_bytes(ops) == 50 + 200 + 1000
    assert estimated_peak_bytes(ops, received=False) == 50 + 200


def test_element_wise_ops_write_into_an_input_nobody_reads_after_them() -> None:
    """TensorFlow's forward_input_or_allocate_output: a Relu whose input (one output of a
    batch norm, as many bytes) has no later reader writes into its buffer; one whose input is
    read again later, or whose input is a variable's value, allocates its own."""
    from gradwire.replay.memory import estimated_peak_bytes

    def op(name: str, kind: str, start: float, end: float, outs: tuple[int, ...],
           *reads: tuple[str, int]) -> ExecutedOp:
        return ExecutedOp(name=name, op=kind, device="CPU", inputs=(), outputs=(),
                          dtype="float32", attrs=(), duration_us=end - start,
                          input_nodes=tuple(n for n, _ in reads),
                          input_slots=tuple(k for _, k in reads), start_us=start, end_us=end,
                          output_bytes=outs)

    # bn's y (100 B, slot 0) read only by relu; its saved mean (8 B, slot 1) by the grad
    ops = [op("bn", "FusedBatchNormV3", 0, 1, (100, 8)),
           op("relu", "Relu", 1, 2, (100,), ("bn", 0)),
           op("grad", "FusedBatchNormGradV3", 5, 6, (100,), ("relu", 0), ("bn", 1))]
    assert estimated_peak_bytes(ops) == 100 + 8 + 100  # at 5-6: relu (in y's), mean, grad
    kept = [*ops[:2], op("later", "MatMul", 3, 4, (4,), ("bn", 0)), ops[2]]
    assert estimated_peak_bytes(kept) == 100 + 8 + 100 + 4  # y read later: relu allocates
    var = [op("h", "VarHandleOp", 0, 0, (0,)), op("r", "ReadVariableOp", 0, 1, (100,), ("h", 0)),
           op("relu", "Relu", 1, 2, (100,), ("r", 0))]
    assert estimated_peak_bytes(var) == 100  # the variable's value is not the step's


@pytest.mark.slow
def test_point_timer_shares_a_session_and_starts_a_new_one(tmp_path) -> None:
    """Points timed one after another in one graph: three gathers (each with its own "table"
    variable, in its own scope; the second over the size limits, so built and never run) and
    an update, in sessions of three points at most, so the update opens a second session;
    every point is timed as if alone."""
    need_tf()
    from gradwire.collector.opbench import PointTimer, run_point
    from gradwire.opdb import local_machine
    from gradwire.quiet import native_stderr_silenced

    with native_stderr_silenced():
        import tensorflow as tf
    machine = local_machine(tf.__version__, 1)
    fams = families_named("ResourceGather,ResourceApplyGradientDescent")
    grid = [p for p in points(fams, per_family=3) if p.dtype == "float32"]
    chosen = grid[:4]  # the largest gather (grid[1]) is over the limits: built, never run
    assert [p.family.op for p in chosen] == ["ResourceGather"] * 3 + [
        "ResourceApplyGradientDescent"]
    with PointTimer(tf, flush_bytes=16 << 20, threads=1, max_points=3) as timer:
        got = [timer.time(p, machine, reps=3) for p in chosen]
        assert timer._points == 1  # the fourth point is the second session's first
    assert isinstance(got[1], str) and "over the build's limits" in got[1], got[1]
    got = [got[0], got[2], got[3]]
    chosen = [chosen[0], chosen[2], chosen[3]]
    assert all(isinstance(g, OpTiming) for g in got), got
    assert [g.op for g in got] == [p.family.op for p in chosen]
    assert all(g.median_us > 0 and g.reps == 3 for g in got)
    alone = run_point(tf, chosen[0], machine, flush_bytes=16 << 20, threads=1, reps=3)
    assert isinstance(alone, OpTiming) and alone.key() == got[0].key()


@pytest.mark.slow
def test_a_point_tensorflow_fails_is_tried_again_alone_and_loses_no_other(monkeypatch
                                                                         ) -> None:
    """Three points in one session: a gather, an op TensorFlow fails at run time
    (CheckNumerics of a NaN, a real InvalidArgumentError) and an update. The failing point is
    tried again in a fresh session, then reported failed with the line that says why; the
    others are timed."""
    need_tf()
    from gradwire.collector import opbench
    from gradwire.collector.opgrid import Family, Point
    from gradwire.opdb import local_machine
    from gradwire.quiet import native_stderr_silenced

    with native_stderr_silenced():
        import tensorflow as tf
    monkeypatch.setitem(opbench.BUILDERS, "nan_check", lambda tf, p, dt: tf.debugging.
                        check_numerics(tf.math.log(-tf.abs(opbench._var(tf, [p["n"]], dt))
                                                   - 1.0), "a NaN, as meant"))
    bad = Point(family=Family(op="CheckNumerics", builder="nan_check", axes=(("n", (8,)),)),
                values=(("n", 8),), dtype="float32")
    fams = families_named("ResourceGather,ResourceApplyGradientDescent")
    grid = [p for p in points(fams, per_family=3) if p.dtype == "float32"]
    chosen = [grid[0], bad, grid[3]]
    machine = local_machine(tf.__version__, 1)
    with opbench.PointTimer(tf, flush_bytes=16 << 20, threads=1) as timer:
        got = [timer.time(p, machine, reps=3) for p in chosen]
        assert timer._points == 1  # the failing point's session closed: the update's own
    assert got[1] == "failed: a NaN, as meant : Tensor had NaN values", got[1]
    timed = [got[0], got[2]]
    assert all(isinstance(g, OpTiming) and g.reps == 3 and g.median_us > 0 for g in timed)
    assert [g.op for g in timed] == ["ResourceGather", "ResourceApplyGradientDescent"]


def test_a_database_a_writing_command_cannot_write_is_refused_before_the_work(tmp_path) -> None:
    """A read-only database (the immutable flag: root ignores the mode's bits) or one in a
    folder that cannot be written is refused in one line by ingest, before anything is read;
    a read still reads it. A missing folder under a file says so."""
    db = tmp_path / "ops.sqlite"
    assert gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db", str(db)).returncode == 0
    need(subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode == 0,
         "chattr +i (root, and a file system with the immutable flag)")
    try:
        proc = gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db", str(db))
        assert proc.returncode == 2 and "read-only" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert gradwire("opdb", "show", "--db", str(db)).returncode == 0
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    (tmp_path / "afile").write_text("x")
    proc = gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db",
                    str(tmp_path / "afile" / "sub" / "ops.sqlite"))
    assert proc.returncode == 2 and "is a file, not a folder" in proc.stderr, proc.stderr


def test_predict_refuses_a_database_path_it_would_not_read(tmp_path) -> None:
    """--opdb is checked whether or not a what-if reads it: a mistyped path is not a
    plain prediction; --opdb-machine without --opdb is refused."""
    proc = gradwire("predict", "--sample", "--workers", "1", "--opdb",
                    str(tmp_path / "nope.sqlite"))
    assert proc.returncode == 2 and "no op cost database here" in proc.stderr
    db = tmp_path / "ops.sqlite"
    assert gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db", str(db)).returncode == 0
    proc = gradwire("predict", "--sample", "--workers", "1", "--opdb", str(db),
                    "--opdb-machine", "nosuch")  # it said "no rows timed ... run it first"
    assert proc.returncode == 2 and "no machine 'nosuch' in it (it has: " in proc.stderr
    proc = gradwire("predict", "--sample", "--workers", "1", "--opdb-machine", "abc")
    assert proc.returncode == 2 and "--opdb-machine abc" in proc.stderr
    proc = gradwire("predict", "--sample", "--workers", "1", "--op-fusion")
    assert proc.returncode == 2 and "--op-fusion needs --opdb FILE" in proc.stderr


def test_the_actions_that_read_bundles_take_the_sample_as_every_command(tmp_path) -> None:
    """`opdb ingest|check --sample` read the bundles shipped with gradwire; neither or both
    is a usage error pointing to the action's help, said before any database is looked for.
    `step` takes none: the shipped sample keeps no graph to run."""
    from gradwire.bundle import SAMPLE_BUNDLE

    dbs = {}
    for name, given in (("sample", ["--sample"]), ("named", [str(SAMPLE_BUNDLE)])):
        dbs[name] = tmp_path / f"{name}.sqlite"
        proc = gradwire("opdb", "ingest", "--db", str(dbs[name]), *given)
        assert proc.returncode == 0 and "worker0: 16 op shape points" in proc.stderr, proc.stderr
    with OpDatabase(dbs["sample"]) as a, OpDatabase(dbs["named"]) as b:
        assert len(list(a.timings())) == len(list(b.timings())) > 0
    for action in ("ingest", "check"):
        for db, extra in ((dbs["sample"], []), (dbs["sample"], ["--sample", str(SAMPLE_BUNDLE)]),
                          (tmp_path / "none.sqlite", [])):
            proc = gradwire("opdb", action, "--db", str(db), *extra)
            assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
            assert proc.stderr.startswith(f"gradwire opdb {action}: error: give "), proc.stderr
            assert proc.stderr.rstrip().endswith(f"(see gradwire opdb {action} --help)")
    assert not (tmp_path / "none.sqlite").exists()
    proc = gradwire("opdb", "step", str(SAMPLE_BUNDLE), "--sample", "--db", str(dbs["sample"]))
    assert proc.returncode == 2 and "unrecognized arguments: --sample" in proc.stderr
