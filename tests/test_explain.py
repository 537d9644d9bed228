"""``gradwire predict --explain W,M,BW``: the critical path printed after the table, kept in
predictions.json and in --format json, and marked in --timeline's Chrome trace; bad values
refused in one line."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error, gradwire

FAST = ("--replications", "2", "--max-replications", "2", "--steps", "12")


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    out = tmp_path_factory.mktemp("explain")
    proc = gradwire("predict", "--sample", "--workers", "1,2", "--ps", "1,2", *FAST,
                    "--explain", "2,2,20Mbit", "--timeline", "2,2,20Mbit", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return proc, out


def test_the_path_is_printed_after_the_table(explained):
    proc, _ = explained
    table, _, path = proc.stdout.partition("critical path of async-ps at W=2, M=2, 20Mbit")
    assert "predicted training throughput" in table and "ms per step" in path
    assert "steps of one replication)" in " ".join(path.split())
    assert "downlink ps:" in path and "uplink ps:" in path and "pull edge_" in path


def test_the_path_is_in_predictions_json(explained):
    _, out = explained
    cp = json.loads((out / "predictions.json").read_text())["critical_path"]
    assert (cp["mechanism"], cp["workers"], cp["ps"], cp["bandwidth_bps"]) == (
        "async-ps", 2, 2, 20e6)
    assert sum(cp["by_kind_us"].values()) == pytest.approx(cp["mean_step_us"], rel=1e-9)
    assert {k.split(" ps:")[0] for k in cp["by_kind_us"]} <= {
        "worker", "delay", "compute", "downlink", "uplink", "wait"}
    assert cp["example"]["segments"] and cp["top"][0]["share"] > 0


def test_the_timeline_marks_the_path(explained):
    _, out = explained
    events = json.loads((out / "timeline-W2-M2-20Mbit.json").read_text())["traceEvents"]
    threads = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "thread_name"}
    assert {(1, "critical path"), (2, "critical path")} <= threads
    path = [e for e in events if e.get("cat", "").startswith("critical ")]
    marked = [e for e in events if e.get("args", {}).get("critical")]
    assert path and marked and {e["pid"] for e in path} == {1, 2}
    # the path's segments of one worker's step never overlap
    steps = {}
    for e in path:
        steps.setdefault((e["pid"], e["args"]["step"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for segs in steps.values():
        segs.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(segs, segs[1:], strict=False))


def test_explain_in_json_and_quiet():
    proc = gradwire("predict", "--sample", "--workers", "1", *FAST, "--explain", "1,1,20Mbit",
                    "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["critical_path"]["workers"] == 1
    proc = gradwire("predict", "--sample", "--workers", "1", *FAST, "--explain", "1,1,20Mbit",
                    "-q")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr


def test_a_mechanism_without_pses_is_explained_at_the_m_its_rows_show():
    # ring all-reduce's rows have M = 0: --explain W,0,BW names one of them (no "not one of
    # the table's rows" note); a PS mechanism still needs a PS
    proc = gradwire("predict", "--sample", "--workers", "4", "--mechanism", "ring-allreduce",
                    "--bandwidth", "1Gbit", "--explain", "4,0,1Gbit", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "not one of the table's sim rows" not in proc.stderr
    path = json.loads(proc.stdout)["critical_path"]
    assert path["workers"] == 4 and any("ring step" in str(x) for x in path.values())
    assert path["ps"] == 0  # as its rows say (the replay is given one PS it never uses)
    assert_one_line_error(gradwire("predict", "--sample", "--workers", "4", "--explain",
                                   "4,0,1Gbit"), "needs at least 1 worker and 1 PS")
    # and a ring's M is 0: a PS count there named no row (it was explained without a word)
    assert_one_line_error(gradwire("predict", "--sample", "--mechanism", "ring-allreduce",
                                   "--explain", "2,3,20Mbit"), "--explain 2,3: ", "give 2,0")


@pytest.mark.parametrize(("args", "fragment"), [
    (("--explain", "4,1"), "--explain wants W,M,BANDWIDTH"),
    (("--explain", "0,1,1Gbit"), "--explain needs at least 1 worker"),
    (("--explain", "5000,1,1Gbit"), "--explain: at most 4096"),
    (("--explain", "2,1,fast"), "--explain '2,1,fast': bad rate 'fast'"),
    (("--explain", "2,1,1Gbit", "--format", "csv"), "does not fit the CSV's rows"),
    (("--explain", "4000,1,1Gbit"), "more than 5,000,000 (about 1 GB): give it at most 3,"),
    (("--timeline", "4000,1,1Gbit", "-o", "o"), "--timeline 4000,1,1Gbit would record"),
])
def test_bad_explain_values(args, fragment, tmp_path):
    assert_one_line_error(gradwire("predict", "--sample", "--workers", "1", *args,
                                   cwd=tmp_path), fragment)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
