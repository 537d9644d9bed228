"""scripts/bench_bigw.py: the order of its stages (profile, predict, then the throughput runs)
and its deadline. The lab's stages are replaced by recorders here (they need root and minutes;
tests/test_lab.py runs the real lab); what is checked is the script's own logic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_bigw  # noqa: E402


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Record the bench stages bench_bigw calls, in order, instead of running the lab."""
    calls: list[tuple] = []
    bench = bench_bigw.bench

    def measure(configs, out, force, repeats, profiles_only=False):
        calls.append(("measure", configs[0].workers, profiles_only)
                     + ((repeats,) if repeats > 1 else ()))
        return 0

    def predict(configs, out, link="auto", variants=None):
        calls.append(("predict", configs[0].workers)
                     + ((tuple(variants),) if variants is not None else ()))
        folder = out / configs[0].name
        folder.mkdir(parents=True, exist_ok=True)
        rows = [{"model": "sim", "workers": w, "examples_per_s": 100.0 * w}
                for w in configs[0].workers]
        (folder / "predict.json").write_text(json.dumps({"rows": rows}))

    def report(configs, out, stem="accuracy"):
        calls.append(("report", configs[0].workers, stem))
        return {}

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(bench, "predict", predict)
    monkeypatch.setattr(bench, "report", report)
    return calls


def test_the_prediction_comes_before_any_throughput_run(stages, tmp_path: Path, capsys) -> None:
    assert bench_bigw.main(["--out", str(tmp_path), "--workers", "2,8,16"]) == 0
    assert stages == [
        ("measure", (2, 8, 16), True),  # the profile alone
        ("predict", (2, 8, 16)),
        ("measure", (2,), False), ("measure", (8,), False), ("measure", (16,), False),
        ("report", (2, 8, 16), "bigw"),
    ]
    printed = capsys.readouterr().out
    assert printed.index("W=16") < printed.index("bench_bigw:")
    assert "1600.0" in printed


def test_repeats_run_in_rounds_and_variants_reach_predict(stages, tmp_path: Path) -> None:
    assert bench_bigw.main(["--out", str(tmp_path), "--workers", "2,4", "--repeats", "2",
                            "--variants", "bucket,lab-run"]) == 0
    assert stages == [
        ("measure", (2, 4), True),
        ("predict", (2, 4), ("bucket", "lab-run")),
        ("measure", (2,), False), ("measure", (4,), False),  # round 1: a run each
        ("measure", (2,), False, 2), ("measure", (4,), False, 2),  # round 2: the second
        ("report", (2, 4), "bigw"),
    ]


def test_an_unknown_variant_is_a_one_line_error(stages, tmp_path: Path, capsys) -> None:
    assert bench_bigw.main(["--out", str(tmp_path), "--variants", "bucket,nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err
    assert stages == []  # refused before the profile's run


def test_no_run_starts_after_the_deadline(stages, tmp_path: Path, capsys) -> None:
    assert bench_bigw.main(["--out", str(tmp_path), "--deadline-s", "0"]) == 0
    assert [c[0] for c in stages] == ["measure", "predict"]
    assert "W=2 and later not run" in capsys.readouterr().out
    config = json.loads(next(tmp_path.glob("*/config.json")).read_text())
    assert config["workers"] == []


def test_bad_workers_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench_bigw.main(["--out", str(tmp_path), "--workers", "2,0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--workers" in err


def test_ring_is_predicted_from_the_async_profile_after_its_hop_is_timed(
        stages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple] = []
    bench = bench_bigw.bench
    monkeypatch.setattr(bench_bigw, "time_ring_hop", lambda bw: stages.append(("hop", bw)))
    real_measure = bench.measure

    def measure(configs, out, force, repeats, profiles_only=False):
        seen.append((configs[0].name, configs[0].mode, configs[0].ps, configs[0].profile_of))
        return real_measure(configs, out, force, repeats, profiles_only)

    monkeypatch.setattr(bench, "measure", measure)
    assert bench_bigw.main(["--out", str(tmp_path), "--mode", "ring", "--model", "convnet",
                            "--profile-bandwidth", "250mbit", "--workers", "2,5"]) == 0
    assert [c[0] for c in stages] == ["measure", "hop", "predict", "measure", "measure",
                                      "report"]
    assert ("hop", "1gbit") in stages  # the hop across a link of the runs' rate too
    profile, *runs = seen
    assert profile == ("convnet-b32-250mbit-ps1-fcon", "async", 1, None)
    assert {r[:4] for r in runs} == {("convnet-b32-1gbit-ps0-fcon-ring", "ring", 0,
                                      "convnet-b32-250mbit-ps1-fcon")}


def test_profile_bandwidth_is_for_ring_only(tmp_path: Path, capsys) -> None:
    assert bench_bigw.main(["--out", str(tmp_path), "--profile-bandwidth", "250mbit"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--profile-bandwidth" in err
