"""scripts/bench_win.py: Table 1 statistics of the WIN model on real captures (the sample bundle
shipped with gradwire, which the lab recorded; the accuracy benchmark's layout rebuilt from it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE, need_root, need_tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_win  # noqa: E402

from gradwire.bundle import open_bundle  # noqa: E402
from gradwire.collector.win import fit_capture  # noqa: E402


def _direct_fit(folder: Path):
    bundle = open_bundle(folder)
    return fit_capture(bundle.capture_file, bundle.ports)[0]  # what `gradwire win` fits


def test_rows_are_the_fit_of_gradwire_win(tmp_path: Path, capsys) -> None:
    # the accuracy benchmark's layout: <out>/<config>/profile/{ps0,worker0}
    (tmp_path / "acc" / "mlp-cfg").mkdir(parents=True)
    (tmp_path / "acc" / "mlp-cfg" / "profile").symlink_to(SAMPLE)
    out = tmp_path / "win.json"
    code = bench_win.main(["--accuracy", str(tmp_path / "acc"), "--bundle",
                           str(SAMPLE / "worker0"), "--json", str(out)])
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["source"], r["label"]) for r in rows] == [
        ("accuracy", "mlp-cfg worker0"), ("bundle", str(SAMPLE / "worker0"))]
    want = _direct_fit(SAMPLE / "worker0")
    for r in rows:  # the PS bundle is left out: only the worker receives the parameters
        assert r["fitted_win_bytes"] == want.fitted_win_bytes
        assert r["fitted"]["median"] == want.fitted.median
        assert r["advertised"]["streams"] == want.advertised.streams > 0
    printed = capsys.readouterr().out
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in printed.splitlines()
             if line.startswith(("| accuracy", "| bundle"))]
    assert [c[8] for c in cells] == [f"{100 * want.fitted.median:.2f}"] * 2  # median %
    assert [c[5] for c in cells] == [f"{want.fitted_win_bytes:,}"] * 2
    within = int(want.fitted.median <= bench_win.PAPER_WORST_MEDIAN) * 2
    assert f"{within} of 2 within the paper's worst Table 1 median (8%)" in printed


def test_bad_sources_are_one_line(tmp_path: Path, capsys) -> None:
    assert bench_win.main(["--json", str(tmp_path / "w.json")]) == 2
    assert bench_win.main(["--bundle", str(tmp_path / "nope")]) == 1
    (tmp_path / "empty").mkdir()
    assert bench_win.main(["--accuracy", str(tmp_path / "empty")]) == 1
    assert bench_win.main(["--bundle", str(SAMPLE / "ps0")]) == 1  # a PS has no pulls to fit
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "bench_win: error: give --accuracy DIR, --bundle PATH or --fresh N",
        f"bench_win: error: {tmp_path / 'nope'}: no such bundle folder",
        f"bench_win: error: {tmp_path / 'empty'}: no <config>/profile folders (run "
        "bench_accuracy.py measure)",
        f"bench_win: error: {SAMPLE / 'ps0'}: no worker bundle with a capture",
    ]
    assert not (tmp_path / "w.json").exists()


@pytest.mark.slow
@pytest.mark.root
def test_fresh_lab_run_is_fitted_then_deleted(tmp_path: Path) -> None:
    need_root()
    need_tf()
    out = tmp_path / "win.json"
    assert bench_win.main(["--fresh", "1", "--work", str(tmp_path / "runs"), "--json",
                           str(out)]) == 0
    (r,) = json.loads(out.read_text())["rows"]
    assert (r["source"], r["label"]) == ("fresh", "fresh 1 worker0")
    assert r["links"] == 1 and r["steps"] >= 7 and r["fitted"]["streams"] >= 56
    assert r["fitted"]["median"] < 0.25  # the ceiling tests/test_win.py holds every run to
    assert list((tmp_path / "runs").iterdir()) == []  # ~0.8 GB of capture, gone once fitted
