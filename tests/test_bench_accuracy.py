"""The accuracy benchmark's report stage: errors, spread and phase-range coverage from the cached
lab results and ``gradwire predict`` JSON (the numbers here are written out by hand so every
count can be checked by eye; the real data go through the same code in
``scripts/bench_accuracy.py report``)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_accuracy as bench  # noqa: E402


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_report_counts_runs_inside_the_phase_range(tmp_path: Path) -> None:
    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16)
    folder = tmp_path / cfg.name
    runs = {1: [10.0, 10.2, 9.9], 2: [15.0, 18.0, 21.0]}
    for w, values in runs.items():
        for k, v in enumerate(values):
            name = f"w{w}.json" if k == 0 else f"w{w}-r{k}.json"
            _write(folder / name, {"throughput_examples_per_s": v, "cpu_count": 2,
                                   "cpu_share_window_total": 0.2, "config": {"steps": 16}})
    # a cached run of an older protocol (8 steps per worker) is left out
    _write(folder / "w2-r3.json", {"throughput_examples_per_s": 99.0, "config": {"steps": 8}})
    rows = [
        {"model": "sim", "workers": 1, "ps": 1, "examples_per_s": 9.5,
         "phase_low": 9.49, "phase_high": 9.51},
        {"model": "sim", "workers": 2, "ps": 1, "examples_per_s": 16.0,
         "phase_low": 12.0, "phase_high": 19.0},
        {"model": "mva-exact", "workers": 1, "ps": 1, "examples_per_s": 10.0,
         "phase_low": None, "phase_high": None},
        {"model": "mva-exact", "workers": 2, "ps": 1, "examples_per_s": 18.0,
         "phase_low": None, "phase_high": None},
        # a variant with its own, wider range: counted apart, W >= 2 only
        {"model": "sim:steps-60", "workers": 1, "ps": 1, "examples_per_s": 9.6,
         "phase_low": 9.0, "phase_high": 11.0},
        {"model": "sim:steps-60", "workers": 2, "ps": 1, "examples_per_s": 17.0,
         "phase_low": 14.0, "phase_high": 22.0},
    ]
    _write(folder / "predict.json", {"rows": rows})

    summary = bench.report([cfg], tmp_path)

    assert not bench.same_protocol(cfg, json.loads((folder / "w2-r3.json").read_text()))
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    w1, w2 = doc["configs"][0]["rows"]
    assert w2["examples_per_s"] == 18.0 and w2["spread_pct"] == pytest.approx(100 * 6 / 18)
    assert w2["error_pct"]["sim"] == pytest.approx(100 * (16 - 18) / 18)
    assert w2["runs_in_phase_range"] == 2  # 15 and 18 inside 12-19, 21 above
    assert w1["runs_in_phase_range"] == 0  # W=1's range is narrow: 9.5 holds none
    assert doc["phase_range_coverage"]["w2plus"] == [2, 3]
    assert doc["phase_range_coverage"]["w1"] == [0, 3]
    assert w2["variant_runs_in_range"] == {"sim:steps-60": 3}  # 15, 18, 21 in 14-22
    assert doc["phase_range_coverage"]["variants"] == {"sim:steps-60": [3, 3]}
    assert summary["sim"]["max_abs_pct"] == pytest.approx(100 * 2 / 18)  # W=2; W=1 is -5%
    assert summary["mva-exact"]["median_abs_pct"] == pytest.approx(0.0)
    text = (tmp_path / "accuracy.md").read_text()
    assert "| 2 | 18.00 | 3 | 33 | 0.20 | 12.00-19.00 | 2/3 | - | -11.1 | -5.6 | +0.0 |" in text
    assert ("W >= 2 2/3 (67%), W = 1 0/3; sim:steps-60's own range, W >= 2 3/3 (100%)."
            in text)
    assert "sim: NOT met: median below mva-exact's 0.0%" in text


def test_report_without_phase_ranges_leaves_the_columns_empty(tmp_path: Path) -> None:
    """Predictions made with --start together (or before the range existed) have no range."""
    cfg = bench.BenchConfig(model="convnet", bandwidth="500mbit", steps=24)
    _write(tmp_path / cfg.name / "w2.json",
           {"throughput_examples_per_s": 100.0, "config": {"steps": 24}})
    _write(tmp_path / cfg.name / "predict.json",
           {"rows": [{"model": "sim", "workers": 2, "ps": 1, "examples_per_s": 90.0}]})
    bench.report([cfg], tmp_path)
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    assert doc["phase_range_coverage"] is None
    text = (tmp_path / "accuracy.md").read_text()
    assert "| 2 | 100.00 | 1 | 0 | - | - | - | - | -10.0 |" in text


def test_cross_predictions_are_summarised_apart_with_their_pre_registration(
        tmp_path: Path, monkeypatch) -> None:
    """A cross prediction is predicted from another configuration's profile; the report keeps its
    errors out of the matrix's summary and targets, in a table of their own; predictions written
    before a configuration's first lab run (``prereg.json``) get their own column and line."""
    base = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="500mbit", steps=20,
                             workers=(1, 2), group="issue21")
    cross = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="1250mbit", steps=20,
                              workers=(1, 2), profile_of=base.name, group="cross")
    assert base.name == "deepmlp10-b32-500mbit-ps1-fcon"
    assert bench._scaled("500mbit", 2.5) == "1250mbit" and bench._scaled("100mbit", 0.4) == "40mbit"
    # the predict stage needs the source profile, and names it when it is missing
    with pytest.raises(bench.BenchError, match=f"run the measure stage for {base.name}"):
        bench.predict([cross], tmp_path)
    for cfg, meas, sim, mva in ((base, (10.0, 20.0), (10.5, 19.0), (10.0, 18.0)),
                                (cross, (20.0, 40.0), (22.0, 40.0), (20.0, 40.0))):
        rows = []
        for w, m, p, q in zip(cfg.workers, meas, sim, mva, strict=True):
            _write(tmp_path / cfg.name / f"w{w}.json",
                   {"throughput_examples_per_s": m, "config": {"steps": 20}})
            rows += [{"model": "sim", "workers": w, "ps": 1, "examples_per_s": p},
                     {"model": "mva-exact", "workers": w, "ps": 1, "examples_per_s": q}]
        _write(tmp_path / cfg.name / "predict.json", {"rows": rows})
    # the cross configuration's first predictions, made before its runs: W=2 at 36 (-10%)
    _write(tmp_path / cross.name / bench.PREREG,
           {"rows": [{"model": "sim", "workers": 2, "ps": 1, "examples_per_s": 36.0}]})
    summary = bench.report([base, cross], tmp_path)
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    assert summary["sim"]["n"] == 2 and summary["sim"]["max_abs_pct"] == pytest.approx(5.0)
    assert doc["summary_cross"]["sim"]["n"] == 2
    assert doc["summary_cross"]["sim"]["max_abs_pct"] == pytest.approx(10.0)
    assert doc["targets_cross"]["met"] is False  # mva-exact is exact on the cross points
    assert doc["configs"][1]["rows"][1]["prereg_pct"] == pytest.approx(-10.0)
    text = (tmp_path / "accuracy.md").read_text()
    assert f"predicted from the profile of {base.name}" in text
    assert "## Cross predictions (profile at another bandwidth or PS count)" in text
    assert "Pre-registered sim predictions (cross: written before the configuration's first " \
           "lab run): n=1, median |error| 10.0%, max 10.0%." in text
    assert "- sim on cross predictions (profile at another bandwidth or PS count): n=2" in text


def test_a_bad_prediction_row_is_one_line(tmp_path: Path) -> None:
    cfg = bench.BenchConfig(model="convnet", bandwidth="500mbit", steps=24)
    _write(tmp_path / cfg.name / "w2.json",
           {"throughput_examples_per_s": 100.0, "config": {"steps": 24}})
    _write(tmp_path / cfg.name / "predict.json",
           {"rows": [{"model": "sim", "workers": 2, "examples_per_s": 90.0, "phase_low": "x",
                      "phase_high": 95.0}]})
    with pytest.raises(bench.BenchError, match="bad row in .*predict.json"):
        bench.report([cfg], tmp_path)


def test_report_without_lab_results_is_one_line(tmp_path: Path, capsys) -> None:
    assert bench.main(["report", "--out", str(tmp_path / "typo")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bench_accuracy: error: {tmp_path / 'typo'}: no lab results of these configurations: "
        "run the measure stage, or give the --out it wrote to")
    assert not (tmp_path / "typo").exists()


def test_report_splits_the_sim_errors_by_lossy_profiles(tmp_path: Path) -> None:
    """``gradwire predict`` stores the profile's TCP statistics in predict.json; the report
    names them per configuration and splits the sim's W >= 2 errors by them."""
    lossy = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16)
    clean = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20)
    for cfg, share, preds in ((lossy, 0.0102, (10.0, 16.0, 27.0)),
                              (clean, 0.0001, (10.0, 22.0, 33.0))):
        for w in (1, 2, 3):
            _write(tmp_path / cfg.name / f"w{w}.json",
                   {"throughput_examples_per_s": 10.0 * w, "config": {"steps": cfg.steps}})
        rows = [{"model": "sim", "workers": w, "ps": 1, "examples_per_s": p}
                for w, p in zip((1, 2, 3), preds, strict=True)]
        tr = {"data_segments": 10000, "retransmitted": int(share * 10000),
              "retransmitted_share": share, "queue_delay_ms": 3.36}
        _write(tmp_path / cfg.name / "predict.json", {"profile": {"transport": tr}, "rows": rows})
    bench.report([lossy, clean], tmp_path)
    text = (tmp_path / "accuracy.md").read_text()
    assert ("1.02% of TCP data segments retransmitted (lossy), PS egress queueing 3.4 ms"
            in text)
    assert "0.01% of TCP data segments retransmitted, PS egress" in text
    # lossy: W=2 16 vs 20 (-20%), W=3 27 vs 30 (-10%); loss-free: +10% and +10%
    assert "on lossy profiles (retransmitted share above 0.3%): n=2, median |error| 15.0%, " \
           "signed -20.0% to -10.0%." in text
    assert "on loss-free profiles (retransmitted share at most 0.3%): n=2, median |error| " \
           "10.0%, signed +10.0% to +10.0%." in text
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    assert doc["configs"][0]["transport"]["retransmitted_share"] == 0.0102


def test_measurement_noise_resamples_the_runs() -> None:
    """Identical runs leave nothing to resample: the intervals are the exact errors; spread
    runs widen them; a point with one run is left out."""
    def table(runs_by_w: dict[int, list[float]], sim: float, mva: float) -> dict:
        rows = []
        for w, runs in runs_by_w.items():
            mid = sorted(runs)[len(runs) // 2]
            rows.append({"workers": w, "runs": runs, "examples_per_s": mid,
                         "predicted": {"sim": sim, "mva-exact": mva},
                         "error_pct": {"sim": 100 * (sim - mid) / mid,
                                       "mva-exact": 100 * (mva - mid) / mid}})
        return {"rows": rows}

    flat = bench._bootstrap([table({2: [10.0, 10.0, 10.0], 3: [7.0]}, 11.0, 12.0)], n=50)
    assert flat is not None and flat["points"] == 1
    assert flat["median_abs_pct_95"]["sim"] == pytest.approx([10.0, 10.0])
    assert flat["max_abs_pct_95"]["mva-exact"] == pytest.approx([20.0, 20.0])
    assert flat["sim_median_lower"] == {"mva-exact": 1.0}
    assert "sim 10.0-10.0%, mva-exact 20.0-20.0%" in flat["line"]
    spread = bench._bootstrap([table({2: [8.0, 10.0, 12.0]}, 10.0, 10.5)], n=400, seed=3)
    lo, hi = spread["median_abs_pct_95"]["sim"]
    assert lo == pytest.approx(0.0) and hi == pytest.approx(25.0)  # 10 against 8, 10 or 12
    assert 0.0 < spread["sim_median_lower"]["mva-exact"] < 1.0
    again = bench._bootstrap([table({2: [8.0, 10.0, 12.0]}, 10.0, 10.5)], n=400, seed=3)
    assert again == spread  # seeded
    assert bench._bootstrap([table({2: [9.0]}, 10.0, 10.0)]) is None


def test_alternation_distances_and_their_report_section(tmp_path: Path) -> None:
    ends0 = [float(k) for k in range(10)]  # worker 0: one step a second
    ends1 = [k + 0.1 for k in range(3)] + [k + 0.5 for k in range(3, 9)]  # in step, then not
    d = bench.alternation_distances(ends0, ends1)
    assert d == pytest.approx([0.4] * 3 + [0.0] * 6)
    assert bench.alternation_distances(ends0, [-1.0, 9.5]) == []  # outside worker 0's steps

    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16)
    folder = tmp_path / cfg.name
    for name, ends in (("w2.json", ends1), ("w2-r1.json", [k + 0.2 for k in range(9)])):
        _write(folder / name, {"throughput_examples_per_s": 10.0, "config": {"steps": 16},
                               "per_worker": {"worker0": {"step_end_times_s": ends0},
                                              "worker1": {"step_end_times_s": ends}}})
    a = bench.w2_alternation(cfg, tmp_path)
    assert [r["first_steps"] for r in a["runs"]] == pytest.approx([0.4, 0.3])
    assert [r["second_half"] for r in a["runs"]] == pytest.approx([0.0, 0.3])
    assert a["second_half"] == pytest.approx(0.15)
    _write(folder / "predict.json", {"rows": [{"model": "sim", "workers": 2, "ps": 1,
                                               "examples_per_s": 9.0}]})
    bench.report([cfg], tmp_path)
    text = (tmp_path / "accuracy.md").read_text()
    assert "| mlp20-b32-250mbit-ps1-fcon | - | 2 | 0.35 | 0.15 | 0.00 0.30 | -10.0 |" in text


def test_report_says_which_code_wrote_the_predictions(tmp_path: Path) -> None:
    """Every predict.json carries gradwire's stamp; a report over predictions of different
    commits, unstamped ones, or not the running code's, warns (in the table too)."""
    from gradwire.provenance import source_commit

    a = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16)
    b = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20)
    row = {"model": "sim", "workers": 1, "ps": 1, "examples_per_s": 10.0}
    for cfg in (a, b):
        _write(tmp_path / cfg.name / "w1.json", {"throughput_examples_per_s": 10.0,
                                                 "config": {"steps": cfg.steps}})
    now = source_commit()
    _write(tmp_path / a.name / "predict.json", {"rows": [row], "gradwire": {"commit": now}})
    _write(tmp_path / b.name / "predict.json", {"rows": [row], "gradwire": {"commit": "abc"}})
    bench.report([a, b], tmp_path)
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    assert doc["predicted_by"]["commits"] == {a.name: now, b.name: "abc"}
    assert "2 different versions of gradwire" in doc["predicted_by"]["warning"]
    assert "**Warning: the predictions come from 2" in (tmp_path / "accuracy.md").read_text()
    _write(tmp_path / b.name / "predict.json", {"rows": [row]})  # written before the stamp
    bench.report([b], tmp_path)
    made = json.loads((tmp_path / "accuracy.json").read_text())["predicted_by"]
    assert made["commits"] == {b.name: "unknown (not stamped)"} and "rerun" in made["warning"]


def test_commits_that_differ_in_markdown_only_hold_the_same_code(tmp_path: Path) -> None:
    import subprocess

    from gradwire.provenance import same_code

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    commits = []
    for name, text in (("model.py", "a = 1\n"), ("README.md", "docs\n"), ("model.py", "a = 2\n")):
        (tmp_path / name).write_text(text)
        git("add", name)
        git("commit", "-q", "-m", name)
        commits.append(git("rev-parse", "HEAD"))
    code1, docs, code2 = commits
    assert same_code(code1, docs, tmp_path) and same_code(docs, docs, tmp_path)
    assert not same_code(docs, code2, tmp_path)
    assert not same_code(docs + "-dirty", docs, tmp_path)
    assert not same_code("unknown (not stamped)", docs, tmp_path)


def test_a_sim_variant_is_reported_beside_the_sim_and_is_not_a_baseline(tmp_path: Path) -> None:
    """``sim:NAME`` rows (the sim with a mechanism off, ``SIM_VARIANTS``) get a column after the
    sim's and a summary row, but the targets compare the sim with the baselines only."""
    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=20,
                            workers=(1, 2))
    rows = []
    for w, m, p, v, q in ((1, 10.0, 10.2, 10.2, 10.0), (2, 20.0, 19.0, 16.0, 25.0)):
        _write(tmp_path / cfg.name / f"w{w}.json",
               {"throughput_examples_per_s": m, "config": {"steps": 20}})
        rows += [{"model": "sim", "workers": w, "ps": 1, "examples_per_s": p},
                 {"model": "sim:two-way-off", "workers": w, "ps": 1, "examples_per_s": v},
                 {"model": "mva-exact", "workers": w, "ps": 1, "examples_per_s": q}]
    _write(tmp_path / cfg.name / "predict.json", {"rows": rows})
    summary = bench.report([cfg], tmp_path)
    assert summary["sim:two-way-off"]["max_abs_pct"] == pytest.approx(20.0)
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    # the variant (median 11%) is no baseline: the sim (3.5%) need only beat mva-exact (12.5%)
    assert doc["targets"]["met"] is True
    assert not [c for c in doc["targets"]["checks"] if "two-way" in c]
    text = (tmp_path / "accuracy.md").read_text()
    assert "| sim pre-registered % | sim % | sim:two-way-off % | mva-exact % |" in text


def test_predict_json_is_stamped_with_the_code_and_command(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "p.json"
    args = ["predict", "--sample", "--workers", "1", "--replications", "2",
            "--max-replications", "2", "-o", str(tmp_path)]
    out = tmp_path / "predictions.json"
    proc = subprocess.run([sys.executable, "-m", "gradwire", *args], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    stamp = json.loads(out.read_text())["gradwire"]
    from gradwire import __version__
    from gradwire.provenance import source_commit

    assert stamp == {"version": __version__, "commit": source_commit(), "argv": args}


def test_ring_configurations_run_only_the_variants_that_act_on_a_ring(
        monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = []
    monkeypatch.setattr(bench, "_predict_json", lambda cmd, name: calls.append(cmd) or {
        "rows": [{"model": "sim", "workers": 2, "examples_per_s": 1.0}]})
    ring = ["gradwire", "predict", "P", "--mechanism", "ring-allreduce", "--model", "sim"]
    monkeypatch.setattr(bench, "has_link_hops", lambda: False)  # OPDB: no hop across a link
    assert [r["model"] for r in bench._variant_rows(ring, "ring")] == [
        "sim:bucket", "sim:host-cores", "sim:bucket+host-cores", "sim:lab-run",
        "sim:trace-cost", "sim:recording-kept", "sim:gaps-kept", "sim:lab-run+gaps-kept",
        "sim:compute-alone", "sim:lab-run+compute-alone", "sim:host-cpu-off"]
    lab = ["--link-burst", "auto", "--host-cores", "auto"]
    assert calls == [[*ring, "--link-burst", "auto"], [*ring, "--host-cores", "auto"],
                     [*ring, *lab], [*ring, *lab, "--trace-cost", "auto"],
                     [*ring, "--trace-cost", "auto"],
                     [*ring, "--recording-cost", "keep"], [*ring, "--executor-gaps", "keep"],
                     [*ring, *lab, "--trace-cost", "auto", "--executor-gaps", "keep"],
                     [*ring, "--executor-gaps", "alone"],
                     [*ring, *lab, "--trace-cost", "auto", "--executor-gaps", "alone"],
                     [*ring, "--host-cpu", "off"]]
    calls.clear()
    monkeypatch.setattr(bench, "has_link_hops", lambda: True)  # ... and with one
    assert [r["model"] for r in bench._variant_rows(ring, "ring")][-1] == "sim:hop-link"
    assert calls[-1] == [*ring, "--ring-hop", "link"]
    calls.clear()
    ps = ["gradwire", "predict", "P", "--ps", "1", "--run-steps", "16", "--model",
          "sim,mva-exact"]
    rows = bench._variant_rows(ps, "ps")
    assert [r["model"] for r in rows] == ["sim:two-way-off", "sim:two-way-ratio",
                                          "sim:random-ratio", "sim:random", "sim:bucket",
                                          "sim:bucket-off", "sim:host-cores",
                                          "sim:trace-cost", "sim:trace-requests",
                                          "sim:recording-kept",
                                          "sim:draw-run", "sim:gaps-dropped",
                                          "sim:draw-run+gaps-dropped", "sim:host-cpu-off",
                                          "sim:hostqueue", "sim:hostqueue-bbr",
                                          "sim:hostqueue-up", "sim:hostqueue-up-bbr",
                                          "sim:hostqueue-up-bbr1", "sim:bbr1",
                                          "sim:bbr1-pings-none", "sim:pings-none",
                                          "sim:shares",
                                          "sim:equal-shares",
                                          "sim:shared-links", "sim:overflow",
                                          "sim:steps-60"]
    run = ["gradwire", "predict", "P", "--ps", "1", "--run-steps", "16", "--model", "sim"]
    assert calls[:-1] == [[*run, *extra]
                     for extra in (["--link-windows", "off"], ["--link-windows", "ratio"],
                                   ["--start", "random", "--link-windows", "ratio"],
                                   ["--start", "random"],
                                   ["--link-burst", "auto"], ["--link-burst", "off"],
                                   ["--host-cores", "auto"],
                                   ["--trace-cost", "auto"], ["--trace-cost", "requests"],
                                   ["--recording-cost", "keep"],
                                   ["--template-draw", "run"], ["--executor-gaps", "drop"],
                                   ["--template-draw", "run", "--executor-gaps", "drop"],
                                   ["--host-cpu", "off"], ["--link", "hostqueue"],
                                   ["--link", "hostqueue", "--tcp", "bbr"],
                                   ["--link", "hostqueue", "--uplink-queue"],
                                   ["--link", "hostqueue", "--uplink-queue", "--tcp", "bbr"],
                                   ["--link", "hostqueue", "--uplink-queue", "--tcp",
                                    "bbr-v1"],
                                   ["--tcp", "bbr-v1"], ["--tcp", "bbr-v1", "--pings", "none"],
                                   ["--pings", "none"],
                                   ["--link-shares", "windows"],
                                   ["--link-shares", "equal"],
                                   ["--link", "fair"], ["--link", "overflow"])]
    # the replications' old length in place of the lab's run, never both
    assert calls[-1] == ["gradwire", "predict", "P", "--ps", "1", "--model", "sim", "--steps",
                         "60"]
    calls.clear()
    sync = [a for a in ps if a not in ("--run-steps", "16")]  # a run of its own: no variant
    synced = [r["model"] for r in bench._variant_rows(sync, "sync")]
    assert "sim:steps-60" not in synced and "sim:aligned" in synced  # replicates its one run
    # --variants names a subset; an unknown name is a one-line error before any predict
    calls.clear()
    assert [r["model"] for r in bench._variant_rows(ps, "ps", ["gaps-dropped"])] == [
        "sim:gaps-dropped"]
    assert bench.main(["predict", "--variants", "draw-runs"]) == 1
    assert "unknown --variants draw-runs" in capsys.readouterr().err


def test_a_runs_share_beside_another_workers_transfers_counts_every_link_and_way() -> None:
    def way(n: int, share: float | None) -> dict:
        return {"transfers": n, "same_share": share}

    result = {"headers": {"ps0": {"out": way(10, 0.1), "in": way(30, 0.5)},
                          "ps1": {"out": way(0, None), "in": way(10, 0.0)}}}
    assert bench.same_direction_share(result) == pytest.approx((1 + 15 + 0) / 50)
    assert bench.same_direction_share({"throughput_examples_per_s": 1.0}) is None


def test_report_splits_one_worker_into_the_replay_and_the_recorded_run(tmp_path: Path) -> None:
    """predict.json's self_check (the profile's recorded run beside its replay) and the lab's
    W = 1 runs give the one-worker section: the replay 10% below its own run, the run 5%
    below the lab's; a cross prediction (another profile's) gets no row."""
    own = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16)
    cross = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="500mbit", steps=16,
                              profile_of=own.name)
    check = {"measured_examples_per_s": 38.0, "replayed_examples_per_s": 34.2,
             "inside": False}
    for cfg in (own, cross):
        _write(tmp_path / cfg.name / "w1.json", {"throughput_examples_per_s": 40.0,
                                                 "config": {"steps": 16}})
        _write(tmp_path / cfg.name / "predict.json", {
            "self_check": check, "rows": [{"model": "sim", "workers": 1, "ps": 1,
                                           "examples_per_s": 34.2}]})
    bench.report([own, cross], tmp_path)
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    first, second = doc["configs"]
    assert first["own_run"]["replay_vs_run_pct"] == pytest.approx(-10.0)
    assert first["own_run"]["run_vs_lab_pct"] == pytest.approx(-5.0)
    assert second["own_run"] is None
    text = (tmp_path / "accuracy.md").read_text()
    assert ("| mlp20-b32-250mbit-ps1-fcon | 38.00 | 34.20 (outside) | -10.0 | 40.00 | -5.0 |"
            in text)
    assert "mlp20-b32-500mbit" not in text.split("## One worker")[1].split("## Summary")[0]


def test_a_bad_self_check_is_one_error_naming_the_file(tmp_path: Path) -> None:
    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16)
    _write(tmp_path / cfg.name / "w1.json", {"throughput_examples_per_s": 40.0,
                                             "config": {"steps": 16}})
    _write(tmp_path / cfg.name / "predict.json", {"self_check": {"replayed_examples_per_s": 1},
                                                  "rows": []})
    with pytest.raises(bench.BenchError, match="bad self_check in .*predict.json"):
        bench.report([cfg], tmp_path)


def test_checked_sets_each_registration_against_the_runs_after_it(tmp_path: Path,
                                                                   capsys) -> None:
    """``checked``: the pre-registered rows (sim, a sim variant, a baseline) against the
    runs' medians, with each W >= 2 run's share beside another worker's transfers; a
    configuration without a registration is left out, and none at all is one error."""
    cfg = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="500mbit", steps=20,
                            workers=(1, 2, 3), group="issue21")
    bare = bench.BenchConfig(model="convnet", bandwidth="500mbit", steps=24)
    with pytest.raises(bench.BenchError, match="no configuration has both"):
        bench.registration_checked([cfg, bare], tmp_path)
    beside = {"headers": {"ps0": {"out": {"transfers": 10, "same_share": 0.1},
                                  "in": {"transfers": 10, "same_share": 0.3}}}}
    for w, values in {1: [100.0, 110.0, 90.0], 2: [150.0, 160.0, 200.0],
                      3: [180.0, 180.0, 180.0]}.items():
        for k, v in enumerate(values):
            name = f"w{w}.json" if k == 0 else f"w{w}-r{k}.json"
            _write(tmp_path / cfg.name / name,
                   {"throughput_examples_per_s": v, "config": {"steps": 20}} | beside)
    _write(tmp_path / bare.name / "w1.json",
           {"throughput_examples_per_s": 50.0, "config": {"steps": 24}})
    rows = [{"model": "mva-exact", "workers": w, "ps": 1, "examples_per_s": p}
            for w, p in ((1, 100.0), (2, 176.0), (3, 162.0))]
    rows += [{"model": "sim", "workers": w, "ps": 1, "examples_per_s": p,
              "phase_low": lo, "phase_high": hi}
             for w, p, lo, hi in ((1, 110.0, 109.0, 111.0), (2, 144.0, 140.0, 165.0),
                                  (3, 189.0, 170.0, 190.0))]
    rows += [{"model": "sim:draw-run", "workers": w, "ps": 1, "examples_per_s": p,
              "phase_low": p, "phase_high": p} for w, p in ((1, 110.0), (2, 192.0), (3, 189.0))]
    rows.append({"model": "sim", "workers": 2, "ps": 2, "examples_per_s": 1.0})  # another PS
    _write(tmp_path / cfg.name / bench.PREREG, {"rows": rows})

    text = bench.registration_checked([cfg, bare], tmp_path)

    assert text == (tmp_path / "checked.md").read_text()
    assert bare.name not in text
    assert "| job | W | lab median (runs) | same-direction share | sim | sim:draw-run | " \
           "mva-exact |" in text
    assert f"| {cfg.name} | 1 | 100.0 (100.0, 110.0, 90.0) | - | +10.0 | +10.0 | +0.0 |" in text
    assert f"| {cfg.name} | 2 | 160.0 (150.0, 160.0, 200.0) | 20%, 20%, 20% | -10.0 | +20.0 " \
           "| +10.0 |" in text
    # sim: |10, 10, 5|; its ranges hold 150 and 160 at W = 2 and all three at W = 3
    assert "- sim: median |error| 10.0%, max 10.0%, beyond 10%: 0 of 3, W >= 3 median 5.0%, " \
           "phase range holds 5 of 6 W >= 2 runs" in text
    assert "- sim:draw-run: median |error| 10.0%, max 20.0%, beyond 10%: 1 of 3" in text
    assert "- mva-exact: median |error| 10.0%, max 10.0%, beyond 10%: 0 of 3, W >= 3 median " \
           "10.0%" in text and "mva-exact: median |error| 10.0%, max 10.0%, beyond 10%: 0 of " \
           "3, W >= 3 median 10.0%, phase" not in text
    assert bench.main(["checked", "--only", "no-such-config"]) == 1
    assert "no configuration" in capsys.readouterr().err


def test_checked_names_the_file_of_a_bad_registered_row(tmp_path: Path) -> None:
    cfg = bench.BenchConfig(model="convnet", bandwidth="500mbit", steps=24)
    _write(tmp_path / cfg.name / "w1.json",
           {"throughput_examples_per_s": 100.0, "config": {"steps": 24}})
    _write(tmp_path / cfg.name / bench.PREREG,
           {"rows": [{"model": "sim", "workers": "two", "ps": 1, "examples_per_s": 9.0}]})
    with pytest.raises(bench.BenchError, match=f"bad row in .*{bench.PREREG}"):
        bench.registration_checked([cfg], tmp_path)


def test_a_run_the_hypervisor_disturbed_is_run_again(monkeypatch: pytest.MonkeyPatch,
                                                      capsys) -> None:
    """The lab's result stands in here for a run whose machine lost cores to its hypervisor
    (a noisy neighbour cannot be called up on demand); the rule is the bench's own."""
    stolen = iter([0.66, 0.05, 0.9])
    runs: list[int] = []
    cleared: list[int] = []

    def lab(cfg):
        runs.append(1)
        return {"host_steal_window": next(stolen), "uncaptured": None}

    monkeypatch.setattr(bench, "run_lab", lab)
    result = bench._lab_run(types.SimpleNamespace(collect_dir=None), 0.2, lambda: cleared.append(1))
    assert len(runs) == 2 and len(cleared) == 1  # 0.66 over the limit, then 0.05 under it
    assert result["bench"]["stolen_cores_by_attempt"] == [0.66, 0.05]
    assert result["bench"]["disturbed"] is False
    assert "lost 0.66 cores to its hypervisor" in capsys.readouterr().out
    # every attempt over the limit: the last is kept, marked
    stolen = iter([0.5, 0.6, 0.7])
    result = bench._lab_run(types.SimpleNamespace(collect_dir=None), 0.2)
    assert result["bench"]["stolen_cores_by_attempt"] == [0.5, 0.6, 0.7]
    assert result["bench"]["disturbed"] is True
    # a profile's steps after its captures count too; a run from before steal was recorded
    # has none and is never run again
    assert bench.stolen_cores({"host_steal_window": 0.1, "uncaptured": {"host_steal": 0.3}}) == 0.3
    assert bench.stolen_cores({"host_cpu_window": 0.7}) is None


def test_a_profile_whose_captures_the_hypervisor_disturbed_is_recorded_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile's traced steps run while its captures do: a node's bundle that says its
    machine lost 0.26 cores over the capture (manifest ``host_cpu``) gets the profile recorded
    again, though the run's own window lost 0.01 (the profile of 2026-12-01 05:13 that
    ``gradwire predict`` warned of and the bench kept). The lab's result and manifests stand in
    for a run whose neighbour was noisy (one cannot be called up on demand)."""
    capture_steal = iter([0.26, 0.05])
    cleared: list[int] = []

    def lab(cfg):
        stolen = next(capture_steal)
        for node in ("ps0", "worker0"):
            _write(Path(cfg.collect_dir) / node / "manifest.json",
                   {"host_cpu": {"stolen_cores": stolen if node == "worker0" else 0.0}})
        return {"host_steal_window": 0.01, "uncaptured": None}

    monkeypatch.setattr(bench, "run_lab", lab)
    cfg = types.SimpleNamespace(collect_dir=str(tmp_path / "profile"))
    result = bench._lab_run(cfg, 0.2, lambda: cleared.append(1))
    assert result["bench"]["stolen_cores_by_attempt"] == [0.26, 0.05] and len(cleared) == 1
    assert bench.capture_stolen_cores(tmp_path / "nothing") is None
    _write(tmp_path / "odd" / "ps0" / "manifest.json", ["not", "a", "manifest"])
    _write(tmp_path / "odd" / "worker0" / "manifest.json", {"host_cpu": None})
    assert bench.capture_stolen_cores(tmp_path / "odd") is None


def test_report_shows_the_most_cores_a_points_runs_lost_to_the_hypervisor(
        tmp_path: Path) -> None:
    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16,
                            workers=(1,))
    for name, steal in (("w1.json", 0.02), ("w1-r1.json", 0.13)):
        _write(tmp_path / cfg.name / name, {"throughput_examples_per_s": 10.0, "cpu_count": 2,
                                            "cpu_share_window_total": 0.5,
                                            "host_steal_window": steal,
                                            "config": {"steps": 16}})
    bench.report([cfg], tmp_path)
    assert "| 1 | 10.00 | 2 | 0 | 0.50, 0.13 stolen |" in (tmp_path / "accuracy.md").read_text()
    row = json.loads((tmp_path / "accuracy.json").read_text())["configs"][0]["rows"][0]
    assert row["stolen_cores_max"] == 0.13


def test_measure_runs_only_the_workers_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys) -> None:
    """``measure --workers 1,3``: the lab's results stand in for its runs (what is tested is
    which runs the bench asks for, and that it caches them)."""
    asked: list[tuple[int, bool]] = []

    def lab(cfg):
        asked.append((cfg.workers, cfg.collect_dir is not None))
        return {"throughput_examples_per_s": 10.0, "cpu_count": 2, "host_steal_window": 0.0,
                "config": {"steps": cfg.steps}}

    monkeypatch.setattr(bench, "run_lab", lab)
    monkeypatch.setattr(bench.os, "geteuid", lambda: 0)
    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16,
                            workers=(1, 2, 3, 4))
    assert bench.measure([cfg], tmp_path, False, 2, workers_only=[1, 3]) == 0
    assert sorted(asked) == [(1, False), (1, False), (1, True), (3, False), (3, False)]
    assert sorted(p.name for p in (tmp_path / cfg.name).glob("w*.json")) == [
        "w1-r1.json", "w1.json", "w3-r1.json", "w3.json"]
    assert "0.00 stolen by the hypervisor" in capsys.readouterr().out


def test_a_profile_run_with_one_thread_is_also_costed_with_default_thread_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradwire.opdb import OpDatabase, machine_of

    default, one = machine_of("cpu x", 2, "2.21.0", 0), machine_of("cpu x", 2, "2.21.0", 1)
    monkeypatch.setattr(bench, "OPDB", tmp_path / "ops.sqlite")
    with OpDatabase(bench.OPDB, create=True) as db:
        db.add_machine(one)
    profile = tmp_path / "profile"
    _write(profile / "worker0" / "trace" / "session.json", {"machine": one.__dict__})
    assert bench.default_threads_machine(profile) is None  # OPDB has no default-thread rows
    with OpDatabase(bench.OPDB) as db:
        db.add_machine(default)
    assert bench.default_threads_machine(profile) == default.fingerprint
    _write(profile / "worker0" / "trace" / "session.json", {"machine": default.__dict__})
    assert bench.default_threads_machine(profile) is None  # it ran the default itself


def test_the_asynchronous_ps_is_predicted_for_runs_as_long_as_the_labs(tmp_path: Path) -> None:
    """An asynchronous configuration's replications are its own steps per worker, measured
    with the lab's window (--run-steps); a synchronous one runs as one run, without it."""
    for mode in ("async", "sync"):
        cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16,
                                mode=mode)
        _write(tmp_path / cfg.name / "profile" / bench.LAB_RESULT, {})
        _write(tmp_path / cfg.name / "config.json", {"batch_size": cfg.batch_size})
        cmd, linear = bench.predict_command(cfg, tmp_path)
        assert linear == []
        if mode == "async":
            assert cmd[cmd.index("--run-steps") + 1] == "16" and "--steps" not in cmd
        else:
            assert "--run-steps" not in cmd


def test_accumulation_and_tensor_fusion_read_the_database_where_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their predictions read OPDB's step timed whole (a micro-step; the rate of the compute
    the buckets move away from the pushes) once it exists, and cost from the trace before."""
    monkeypatch.setattr(bench, "OPDB", tmp_path / "ops.sqlite")
    jobs = [bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=20,
                              accumulate=2),
            bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=20,
                              fuse_bytes=4e6)]
    assert all("--opdb" not in bench.job_options(cfg) for cfg in jobs)
    bench.OPDB.write_bytes(b"")
    for cfg in jobs:
        opts = bench.job_options(cfg)
        assert opts[opts.index("--opdb") + 1] == str(bench.OPDB)
    plain = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=20)
    assert "--opdb" not in bench.job_options(plain)


def test_a_queue_other_than_the_labs_default_is_in_the_name_and_every_run() -> None:
    plain = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="1600mbit", steps=20)
    small = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="1600mbit", steps=20,
                              queue="512k")
    assert small.name == plain.name + "-q512k"
    assert small.lab(1).queue == small.lab(3).queue == "512k"
    assert plain.lab(3).queue is None


def test_a_fair_queue_is_in_the_name_every_run_and_the_protocol() -> None:
    """Runs through the lab's fair queue (its --qdisc) are a configuration of their own: the
    name says so, every run (its 1-worker profile run included) asks for it, and a cached run
    through the other queue is not counted for it, nor the other way round."""
    plain = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="400mbit", steps=20)
    fair = bench.BenchConfig(model="deepmlp", model_mb=10, bandwidth="400mbit", steps=20,
                             qdisc="fair")
    assert fair.name == plain.name + "-fair"
    assert fair.lab(1).qdisc == fair.lab(8).qdisc == "fair" and plain.lab(8).qdisc == "fifo"

    def run(qdisc: str | None) -> dict:
        cfg = {"steps": 20, "workers": 8}
        return {"config": cfg if qdisc is None else cfg | {"qdisc": qdisc}}

    assert bench.same_protocol(fair, run("fair")) and not bench.same_protocol(fair, run("fifo"))
    assert not bench.same_protocol(fair, run(None))  # an older run: through the FIFO
    assert bench.same_protocol(plain, run(None)) and not bench.same_protocol(plain, run("fair"))


def test_a_congestion_control_is_in_the_name_every_run_and_the_protocol() -> None:
    """Runs whose nodes ran another congestion control (the lab's --tcp-cc) are a
    configuration of their own, as a queue discipline is."""
    plain = bench.BenchConfig(model="mlp", model_mb=10, bandwidth="450mbit", steps=16)
    reno = bench.BenchConfig(model="mlp", model_mb=10, bandwidth="450mbit", steps=16,
                             tcp_cc="reno")
    assert reno.name == plain.name + "-reno"
    assert reno.lab(1).tcp_cc == reno.lab(8).tcp_cc == "reno" and plain.lab(8).tcp_cc is None

    def run(cc: str | None) -> dict:
        cfg = {"steps": 16, "workers": 8}
        return {"config": cfg if cc is None else cfg | {"tcp_cc": cc}}

    assert bench.same_protocol(reno, run("reno")) and not bench.same_protocol(reno, run(None))
    assert bench.same_protocol(plain, run(None)) and not bench.same_protocol(plain, run("reno"))


def test_runs_together_are_their_own_protocol_at_w2_and_up() -> None:
    """A configuration whose workers run on until all have their steps (lab --run-together)
    counts only runs made so at W >= 2, and any W = 1 run of its steps (one worker has no one
    to wait for); its name says so, and its 1-worker lab runs never ask for it."""
    plain = bench.BenchConfig(model="recsys", model_mb=20, bandwidth="550mbit", ps=2, steps=20)
    together = bench.BenchConfig(model="recsys", model_mb=20, bandwidth="550mbit", ps=2,
                                 steps=20, run_together=True)
    assert together.name == plain.name + "-together"
    assert together.lab(2).run_together and not together.lab(1).run_together

    def run(workers: int, flag: bool | None) -> dict:
        cfg = {"steps": 20, "workers": workers}
        return {"config": cfg if flag is None else cfg | {"run_together": flag}}

    assert bench.same_protocol(together, run(2, True))
    assert not bench.same_protocol(together, run(2, None))  # an older run: not run together
    assert bench.same_protocol(together, run(1, False))
    assert bench.same_protocol(plain, run(2, None)) and not bench.same_protocol(plain,
                                                                                run(2, True))


def test_the_report_names_points_measured_over_a_few_steps(tmp_path: Path) -> None:
    """Two workers of 20 one-second steps, the second started 14 s after the first: the
    window where both run past their warm-up quarter holds one step of each (18 to 19 s), so
    the point is named; run together (the first running on to the second's end), 15."""
    cfg = bench.BenchConfig(model="recsys", model_mb=20, bandwidth="550mbit", ps=2, steps=20,
                            workers=(2,))

    def result(first: list[float]) -> dict:
        second = [14.0 + i for i in range(20)]
        return {"throughput_examples_per_s": 1.0, "config": {"steps": 20, "batch_size": 32},
                "per_worker": {"worker0": {"step_end_times_s": first},
                               "worker1": {"step_end_times_s": second}}}

    apart = result([float(i) for i in range(20)])
    together = result([float(i) for i in range(34)])
    assert bench.window_steps(apart) == 1 and bench.window_steps(together) == 15
    assert bench.window_steps({"throughput_examples_per_s": 1.0}) is None
    _write(tmp_path / cfg.name / "w2.json", apart)
    _write(tmp_path / cfg.name / "w2-r1.json", apart)
    _write(tmp_path / cfg.name / "predict.json",
           {"rows": [{"model": "sim", "workers": 2, "ps": 2, "examples_per_s": 60.0}]})
    bench.report([cfg], tmp_path)
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    assert doc["few_steps"]["points"] == [[cfg.name, 2, 1]]
    assert f"{cfg.name} W=2 (1 steps)" in (tmp_path / "accuracy.md").read_text()
    _write(tmp_path / cfg.name / "w2.json", together)
    _write(tmp_path / cfg.name / "w2-r1.json", together)
    bench.report([cfg], tmp_path)
    assert json.loads((tmp_path / "accuracy.json").read_text())["few_steps"] is None


def test_every_configurations_profile_can_be_recorded() -> None:
    # a configuration predicted from another job's profile names a configuration of the
    # bench, or one whose profile `measure` records with it (PROFILE_SOURCES, or its own job
    # without its what-ifs): else `measure --profiles-only` would record nothing for it
    names = {c.name for c in bench.CONFIGS}
    for cfg in bench.CONFIGS:
        if cfg.profile_of is not None and cfg.profile_of not in names:
            source = bench.plain_source(cfg)
            assert source is not None and source.name == cfg.profile_of, cfg.name
    assert {c.name for c in bench.PROFILE_SOURCES}.isdisjoint(names)


def test_predicting_from_a_profile_never_recorded_is_one_line(tmp_path: Path) -> None:
    ring = next(c for c in bench.CONFIGS if c.mode == "ring" and c.profile_of)
    profile = tmp_path / ring.profile_of / "profile"
    profile.mkdir(parents=True)
    (profile / bench.LAB_RESULT).write_text("{}")  # recorded by hand: no config.json beside
    with pytest.raises(bench.BenchError, match="config.json: missing or unreadable"):
        bench.predict_command(ring, tmp_path)


def test_a_fusion_prediction_keeps_the_least_traced_times_beside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor fusion configuration predicted with the database (its step timed whole) is
    predicted again without it, as ``sim:fusion-traced``; the step is timed first (a
    stand-in for ``gradwire`` records the commands)."""
    cfg = bench.BenchConfig(model="convnet", model_mb=50, bandwidth="800mbit", steps=20,
                            workers=(1, 2), fuse_bytes=8e6)
    commands: list[list[str]] = []
    timed: list[Path] = []

    def fake_predict(cmd: list[str], name: str) -> dict:
        commands.append(cmd)
        rate = 11.0 if "--opdb" in cmd else 10.0
        return {"rows": [{"model": cmd[cmd.index("--model") + 1], "workers": w, "ps": 1,
                          "examples_per_s": rate * w} for w in (1, 2)], "profile": {}}

    monkeypatch.setattr(bench, "time_step", lambda profile, xla: timed.append(profile))
    monkeypatch.setattr(bench, "predict_command", lambda c, out, link="auto": (
        ["gradwire", "predict", "--model", "sim", "--opdb", str(bench.OPDB)], []))
    monkeypatch.setattr(bench, "_predict_json", fake_predict)
    monkeypatch.setattr(bench, "_variant_rows", lambda cmd, name, variants=None: [])
    bench.predict([cfg], tmp_path)
    assert timed == [tmp_path / cfg.name / "profile"]
    assert commands[1] == ["gradwire", "predict", "--model", bench.OURS]
    doc = json.loads((tmp_path / cfg.name / "predict.json").read_text())
    assert {(r["model"], r["examples_per_s"]) for r in doc["rows"] if r["workers"] == 1} == {
        ("sim", 11.0), ("sim:fusion-traced", 10.0)}


def test_predict_emulate_runs_every_emulated_step_beside_the_sim(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``predict --emulate``: one ``--model emulate`` run per ``--emulate-step``, phases'
    rows as ``emulate``, tensors' as ``emulate:tensors``; the pre-registered table
    shows both, and neither counts as a baseline (a stand-in for ``gradwire predict``
    records each command it is given)."""
    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16,
                            workers=(1, 2))
    commands: list[list[str]] = []

    def fake_predict(cmd: list[str], name: str) -> dict:
        commands.append(cmd)
        model = cmd[cmd.index("--model") + 1]
        step = cmd[cmd.index("--emulate-step") + 1] if "--emulate-step" in cmd else None
        rate = {None: 10.0, "phases": 11.0, "tensors": 12.0}[step]
        return {"rows": [{"model": model, "workers": w, "ps": 1, "examples_per_s": rate * w}
                         for w in (1, 2)], "profile": {"emulate": {"step": step}}}

    monkeypatch.setattr(bench, "predict_command",
                        lambda c, out, link="auto": (["gradwire", "predict", "--model", "sim"], []))
    monkeypatch.setattr(bench, "_predict_json", fake_predict)
    monkeypatch.setattr(bench, "_variant_rows", lambda cmd, name, variants=None: [])
    bench.predict([cfg], tmp_path, emulate=("phases", "tensors"))

    assert [c[-1] for c in commands[1:]] == ["phases", "tensors"]
    doc = json.loads((tmp_path / cfg.name / bench.PREREG).read_text())
    assert {(r["model"], r["examples_per_s"]) for r in doc["rows"] if r["workers"] == 2} == {
        ("sim", 20.0), ("emulate", 22.0), ("emulate:tensors", 24.0)}
    assert doc["profile"]["emulate"] == {"step": "phases"}
    assert set(doc["profile"]["emulate_steps"]) == {"phases", "tensors"}
    text = bench.preregistered([cfg], tmp_path)
    assert "| emulate ex/s | emulate:tensors ex/s |" in text and "| 2 | 20.00 |" in text
    summary = {m: {"median_abs_pct": 1.0, "max_abs_pct": 2.0}
               for m in ("sim", "emulate", "emulate:tensors", "mva-exact")}
    targets = bench._targets(summary)
    lines = targets["lines"]
    assert any("mva-exact" in line for line in lines)
    assert not any("below emulate" in line for line in lines)
    # each emulate step is held to the same targets beside the sim's own verdict
    assert "emulate:tensors: NOT met: median below mva-exact's 1.0%" in lines
    assert set(targets["emulated"]) == {"emulate", "emulate:tensors"}
    assert targets["met"] is False and targets["emulated"]["emulate"]["met"] is False

    # --emulate names the steps: tensors alone runs only its own, and its rows stand for the
    # profile's emulation; an unknown step is a one-line error before any predict
    commands.clear()
    bench.predict([cfg], tmp_path, emulate=("tensors",))
    assert [c[-1] for c in commands[1:]] == ["tensors"]
    doc = json.loads((tmp_path / cfg.name / "predict.json").read_text())
    assert doc["profile"]["emulate"] == {"step": "tensors"}
    assert {r["model"] for r in doc["rows"]} == {"sim", "emulate:tensors"}
    assert bench.main(["predict", "--emulate", "tensors,bogus", "--only", cfg.name]) == 1
    assert "unknown --emulate bogus" in capsys.readouterr().err
    assert bench.main(["predict", "--emulate", "tensors:staggered", "--only", cfg.name]) == 1
    assert "unknown --emulate tensors:staggered" in capsys.readouterr().err

    # STEP:START runs that --emulate-start beside, its rows named after it
    commands.clear()
    bench.predict([cfg], tmp_path, emulate=("tensors", "tensors:random"))
    assert commands[2][-4:] == ["--emulate-start", "random", "--emulate-step", "tensors"]
    # a bare STEP keeps the bench's older name and start, whatever predict's default
    assert commands[1][-4:] == ["--emulate-start", "together", "--emulate-step", "tensors"]
    doc = json.loads((tmp_path / cfg.name / "predict.json").read_text())
    assert {r["model"] for r in doc["rows"]} == {"sim", "emulate:tensors",
                                                "emulate:tensors:random"}
    assert set(doc["profile"]["emulate_steps"]) == {"tensors", "tensors:random"}


def test_predict_keeps_the_last_predictions_until_new_ones_are_made(tmp_path) -> None:
    """A failed predict stage (here: no profile recorded) leaves the configuration's
    predict.json as it was: it is replaced only by the new one."""
    cfg = next(c for c in bench.CONFIGS if c.name == "mlp20-b32-250mbit-ps1-fcon")
    old = tmp_path / cfg.name / "predict.json"
    old.parent.mkdir()
    old.write_text('{"rows": []}\n')
    with pytest.raises(bench.BenchError, match="no profile"):
        bench.predict([cfg], tmp_path, variants=[])
    assert old.read_text() == '{"rows": []}\n'
