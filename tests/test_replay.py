"""The replayer: hand-checkable link and multiplexing cases, determinism, the profile of the
shipped lab bundle, and `gradwire predict` end to end."""

from __future__ import annotations

import json
import math
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    SAMPLE,
    assert_one_line_error,
    assert_sweep_stops_midway,
    gradwire,
    partial_overlaps,
)

from gradwire.collector.transport import TransportStats
from gradwire.errors import GradwireError
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.grid import start_mode
from gradwire.replay.notes import lone_peer_note, start_note
from gradwire.replay.predict import (
    GOODPUT,
    REPLICATION_OBSERVERS,
    assign_ps,
    phase_percentiles,
    replication_seed,
    simulate,
    simulate_phases,
    start_offsets,
    start_period_us,
    warmup,
)
from gradwire.replay.profile import load_profile
from gradwire.replay.template import DOWN, UP, WORKER, StepTemplate, tic_priorities
from gradwire.throughput import lab_warmup_steps


def _template(sizes: list[float], compute_us: float = 0.0) -> StepTemplate:
    """Pulls of ``sizes`` bytes released together, then one compute op after all of them."""
    t = StepTemplate(step=0)
    start = t.add("delay", 0.0, "start")
    pulls = [t.add(DOWN, b, f"pull{k}", [start], prio=k) for k, b in enumerate(sizes)]
    t.add(WORKER, compute_us, "compute", pulls)
    return t


def _end_times(t: StepTemplate, workers: int = 1, win: float | None = None,
               order: str = "observed", link: str = "fair") -> dict[str, float]:
    sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=1.0, win_bytes=win,
                                   order=order, record=True, link=link))
    sim.run(1)
    return {f"{w}:{name}": end for w, _k, name, _s, end in sim.timeline}


def test_link_is_shared_equally_between_active_workers():
    ends = _end_times(_template([100.0]), workers=2)
    assert ends["0:pull0"] == pytest.approx(200) and ends["1:pull0"] == pytest.approx(200)
    ends = _end_times(_template([100.0]), workers=3)
    assert all(ends[f"{w}:pull0"] == pytest.approx(300) for w in range(3))
    # fifo: one chunk at a time, in request order: 100, 200, 300
    ends = _end_times(_template([100.0]), workers=3, link="fifo")
    assert sorted(ends[f"{w}:pull0"] for w in range(3)) == pytest.approx([100, 200, 300])


def test_http2_window_multiplexing_matches_the_papers_figure_12_rule():
    # streams A=5, B=2 bytes, WIN=3: A sends 3, B (smaller than WIN) completes, A completes
    on = _end_times(_template([5.0, 2.0]), win=3.0)
    assert on["0:pull1"] == pytest.approx(5.0) and on["0:pull0"] == pytest.approx(7.0)
    off = _end_times(_template([5.0, 2.0]), win=None)  # flow control off: whole streams
    assert off["0:pull0"] == pytest.approx(5.0) and off["0:pull1"] == pytest.approx(7.0)
    rev = _end_times(_template([5.0, 2.0]), win=None, order="reverse")
    assert rev["0:pull1"] == pytest.approx(2.0) and rev["0:pull0"] == pytest.approx(7.0)
    # a stream bigger than WIN alone on its link: its rest follows its first WIN bytes and it
    # ends when all of it has been sent (it once ended after the first WIN, 3 bytes)
    alone = _end_times(_template([5.0]), win=3.0)
    assert alone["0:pull0"] == pytest.approx(5.0) and alone["0:compute"] == pytest.approx(5.0)


def test_worker_nic_couples_the_links_of_two_parameter_servers():
    # pulls of 100 B from PS0 and 300 B from PS1, links and NICs at 1 B/us (ICPE'20 section 5)
    t = StepTemplate(step=0)
    start = t.add("delay", 0.0, "start")
    t.add(DOWN, 100.0, "a", [start], ps=0)
    t.add(DOWN, 300.0, "b", [start], ps=1, prio=1)

    def ends(worker_rate: float) -> dict[str, float]:
        sim = Simulator([t], SimConfig(workers=1, ps=2, rate_bytes_per_us=1.0, record=True,
                                       worker_rate_bytes_per_us=worker_rate))
        sim.run(1)
        return {name: end for _w, _k, name, _s, end in sim.timeline}

    # unconstrained worker NIC: each PS link at full rate
    assert ends(float("inf")) == pytest.approx({"start": 0, "a": 100, "b": 300})
    # one NIC for both: 0.5 each until a ends at 200, then b alone for its last 200 B
    assert ends(1.0) == pytest.approx({"start": 0, "a": 200, "b": 400})


def test_throughput_of_a_network_bound_step_saturates_the_link():
    # 1 MB per step over a 1 Gbit/s link: the link carries at most 119.5 steps/s
    t = _template([1e6], compute_us=10_000)
    one, _ = simulate([t], 1, 1, 1, 1e9)
    assert one.steps_per_s == pytest.approx(1e6 / (1e6 / (1e9 * GOODPUT / 8e6) + 10_000), rel=0.01)
    # 8 identical workers stay in lock-step under equal sharing: 8 MB together, then 10 ms of
    # compute with the link idle -> 8 steps per (8 MB / rate + 10 ms), below the link's 119.5/s
    many, _ = simulate([t], 1, 8, 1, 1e9)
    assert many.steps_per_s == pytest.approx(8e6 / (8e6 / (1e9 * GOODPUT / 8e6) + 10_000),
                                             rel=0.01)
    assert many.bottleneck == "downlink ps:0" and 0.8 < many.utilisation < 0.9


def test_same_seed_same_output_to_the_bit():
    prof = load_profile([SAMPLE])
    a, _ = simulate(prof.templates, prof.batch_size, 4, 1, 1e9, order="random", seed=7)
    b, _ = simulate(prof.templates, prof.batch_size, 4, 1, 1e9, order="random", seed=7)
    c, _ = simulate(prof.templates, prof.batch_size, 4, 1, 1e9, order="random", seed=8)
    assert a == b and a.examples_per_s != c.examples_per_s


def test_profile_replays_its_own_steps():
    prof = load_profile([SAMPLE])
    assert prof.batch_size == 32 and prof.ps_tasks == ["ps:0"] and len(prof.templates) == 3
    for t in prof.templates:  # one worker at the profile's own link speed: the observed step
        sim = Simulator([t], SimConfig(workers=1, ps=1, rate_bytes_per_us=prof.link_rate_bps / 8e6))
        sim.run(1)
        # within 0.6 ms of steps of 5.5-6.7 ms (the untraced client gap, 2.6 ms, in place of
        # the traced 4.6-5.7 ms: the same 0.2-0.6 ms as before over a shorter step)
        assert sim.step_ends[0][0] == pytest.approx(t.observed_us, rel=0.1)
    assert prof.alpha_us_per_byte >= 0 and prof.beta_us > 0
    assert set(prof.phases) == {"downlink", "worker", "uplink", "server"}


def test_a_variables_pull_and_push_go_to_the_same_ps():
    prof = load_profile([SAMPLE])
    t = prof.templates[0]
    m = assign_ps([t], 2)[0]
    for kind in ("down", "up"):
        load = [sum(t.amount[i] for i, k in enumerate(t.kind) if k == kind and m[i] == s)
                for s in (0, 1)]
        assert min(load) > 0  # both PSes hold some
    ps_of_var: dict[int, set[int]] = {}
    for i, k in enumerate(t.kind):
        if k in ("down", "up"):
            ps_of_var.setdefault(t.var[i], set()).add(m[i])
    assert all(len(s) == 1 for s in ps_of_var.values()), ps_of_var


def test_worker_nic_slows_one_worker_split_over_two_parameter_servers():
    prof = load_profile([SAMPLE])
    shared, _ = simulate(prof.templates, 32, 1, 2, 1e7, worker_bandwidth_bps=1e7)
    free, _ = simulate(prof.templates, 32, 1, 2, 1e7, worker_bandwidth_bps=None)
    one, _ = simulate(prof.templates, 32, 1, 1, 1e7)  # 10 Mbit/s: network-bound
    # two PS links in parallel beat one; through one worker NIC of the same rate they cannot
    # move the step's bytes faster than one link, so the split gains little or nothing
    assert free.examples_per_s > 1.05 * one.examples_per_s
    assert shared.examples_per_s < free.examples_per_s
    assert shared.examples_per_s <= 1.01 * one.examples_per_s


def test_predict_command_writes_table_csv_json_plot_and_timeline(tmp_path):
    out = tmp_path / "pred"
    proc = gradwire("predict", str(SAMPLE), "--workers", "1-3", "--ps", "1,2", "--model", "all",
                    "--out", str(out), "--timeline", "2,1,1Gbit", "--measured",
                    str(SAMPLE / "lab_result.json"), timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "predictions.json").read_text())
    rows = doc["rows"]
    assert len(rows) == 5 * 3 * 2 and {r["model"] for r in rows} == {
        "sim", "mva-exact", "mva-approx", "mva-hybrid", "cynthia"}
    sim = {(r["workers"], r["ps"]): r for r in rows if r["model"] == "sim"}
    assert sim[(1, 1)]["speedup"] == 1.0 and sim[(3, 1)]["examples_per_s"] > \
        sim[(1, 1)]["examples_per_s"]
    assert all(r["ci_low"] <= r["examples_per_s"] <= r["ci_high"] for r in sim.values())
    assert all(r["phase_low"] <= r["examples_per_s"] <= r["phase_high"] for r in sim.values())
    assert all(r["phase_low"] is None for r in rows if r["model"] != "sim")
    assert "phase 5-95%" in proc.stdout
    csv_text = (out / "predictions.csv").read_text()
    assert csv_text.count("\n") == len(rows) + 1
    assert ",1000000000," in csv_text and "1000000000.0" not in csv_text  # as --format csv
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    trace = json.loads((out / "timeline-W2-M1-1Gbit.json").read_text())
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {1, 2}
    assert partial_overlaps(trace) == 0  # a request's delay beside a parse: lanes of their own
    assert "measured" in proc.stdout and "sim" in proc.stdout


def test_predict_verbose_says_what_the_long_work_is_doing():
    """With -v (stderr not a terminal): the profile's bundles as they are read, the WIN fit,
    the retransmission count (before the sweep: it decides --start auto's phases), progress
    lines with seconds (--ps-cores runs in the compiled kernel too: no note of a slow loop);
    the table shows 3 significant digits."""
    proc = gradwire("predict", str(SAMPLE), "-v", "--workers", "1,2", "--ps", "1,2",
                    "--bandwidth", "1Mbit", "--replications", "2", "--max-replications", "2",
                    "--ps-cores", "1", timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("gradwire predict: ")]
    said = "\n".join(lines)
    for fragment in ("reading 2 bundles (ps0, worker0)", "solving clock offsets",
                     "fitting the flow-control window",
                     "simulated 4/4 configurations (", "counted retransmissions"):
        assert fragment in said, (fragment, said)
    assert "Python loop" not in said
    order = [next(i for i, ln in enumerate(lines) if f in ln)
             for f in ("reading", "fitting", "counted", "simulated 1/4")]
    assert order == sorted(order)
    # 1 Mbit/s: a few ex/s, shown to 2 decimals or more (not "2.3-2.3")
    rates = re.findall(r"│ +(\d+\.\d+) │", proc.stdout)
    assert rates and all(len(r.split(".")[1]) >= 2 for r in rates if float(r) < 10), rates


@pytest.mark.parametrize("args, fragments", [
    (["--workers", "0-3"], ["counts must be >= 1"]),
    (["--bandwidth", "10mbps"], ["bad rate '10mbps'"]),
    (["--model", "magic"], ["unknown model 'magic'"]),
    (["--timeline", "4x1"], ["--timeline wants W,M,BANDWIDTH"]),
    (["--measured", "/nonexistent/r.json"], ["/nonexistent/r.json", "file not found"]),
    (["--replications", "1"], ["--replications: must be at least 2"]),
    (["--steps", "5"], ["--steps: must be at least 10"]),
    (["--replications", "16", "--max-replications", "8"],
     ["--replications must be at least 2 and at most --max-replications"]),
    (["--workers", "1,,2"], ["empty item in '1,,2'"]),
    (["--replications", "0"], ["--replications: must be at least 2: '0'"]),
    (["--seed", "-1"], ["--seed: must be at least 0: '-1'"]),
    (["--timeline", "2,1,0bit"], ["--timeline '2,1,0bit': bad rate '0bit': must be > 0"]),
    (["--start", "together", "--replications", "4"],
     ["--start together runs one: drop them"]),
    (["--mechanism", "ring-allreduce", "--partition", "2"],
     ["--partition 2 set the parameter servers, and ring-allreduce has none"]),
    # the PS's link order, cores and placement: a ring would ignore them silently
    (["--mechanism", "ring-allreduce,butterfly", "--link", "fifo", "--ps-cores", "1"],
     ["--link fifo and --ps-cores 1 set the parameter servers, and ring-allreduce, butterfly"]),
    (["--mechanism", "ring-allreduce", "--placement", "balanced"],
     ["--placement balanced set the parameter servers"]),
    (["--bandwidth", "1Gbit,"], ["empty item in '1Gbit,'"]),
    (["--measured"], ["--measured: expected one argument"]),
    (["--workers", "99999999999999999999"], ["at most 4096 per configuration"]),
    (["--workers", "1-100000"], ["at most 4096 per configuration"]),
    (["--ps", "1-5000"], ["at most 4096 per configuration"]),
    (["--workers", "1-4096", "--ps", "1,2"], ["8192 configurations", "at most 2000"]),
    # each mechanism's rows count (a peer mechanism's at one PS count), and each baseline's
    (["--workers", "1-250", "--ps", "1-4", "--mechanism", "sync-ps,async-ps,ring-allreduce"],
     ["2250 configurations", "at most 2000"]),
    (["--workers", "1-101", "--ps", "1-4", "--model", "all"], ["2020 configurations"]),
    (["--timeline", "2,1,1Gbit"], ["--timeline writes into the -o folder"]),
    (["--workers", "3-1"], ["range '3-1' runs backwards"]),
    # a half-open range was read as its one end, and int()'s underscores as a number
    (["--workers", "4-"], ["expected numbers like 1-16 or 1,2,4: '4-'"]),
    (["--ps", "1_0"], ["expected numbers like 1-16 or 1,2,4: '1_0'"]),
    (["--explain", "1,1,20Mbit", "--explain", "2,1,20Mbit"],
     ["--explain is given once (it was 1,1,20Mbit before 2,1,20Mbit)"]),
    (["--timeline", "1,1,20Mbit", "--timeline", "2,1,20Mbit"], ["--timeline is given once"]),
    (["--bandwidth", "1"], ["bad rate '1': below 1kbit/s"]),
    (["--bandwidth", "inf"], ["bad rate 'inf': not a finite number"]),
    (["--bandwidth", "1Gbit,nan"], ["bad rate 'nan': not a finite number"]),
    (["--model", "all", "--bandwidth", "1e400"], ["bad rate '1e400': not a finite number"]),
    (["--model", "all,sim"], ["'all' stands alone"]),
    (["--batch-size", "-3"], ["--batch-size", "must be >= 1"]),
    (["--win", "-5"], ["--win", "must be >= 1"]),
    (["--jobs", "0"], ["--jobs", "must be >= 1"]),
    (["--timeline", "0,1,1Gbit"], ["--timeline needs at least 1 worker and 1 PS"]),
    (["--timeline", "2,0,1Gbit"], ["--timeline needs at least 1 worker and 1 PS"]),
    (["--start", "together", "--max-steps", "10"], ["--max-steps (10) is below --steps"]),
])
def test_predict_bad_input_is_one_line(args, fragments):
    assert_one_line_error(gradwire("predict", str(SAMPLE), *args), *fragments)


def test_predict_o_onto_collected_data_is_refused_before_any_advice(tmp_path):
    """`-o b/lab_result.json` was answered "use --format json > b/lab_result.json", advice
    that would have written over the lab's result predict reads."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    for target in (tmp_path / "b" / "lab_result.json", tmp_path / "b" / "ps0" / "manifest.json"):
        before = target.read_bytes()
        proc = gradwire("predict", str(tmp_path / "b"), "--workers", "1", "-o", str(target))
        assert_one_line_error(proc, "gradwire never writes over what was collected")
        assert "--format json >" not in proc.stderr and target.read_bytes() == before


def test_a_rate_given_twice_is_predicted_once():
    """`--bandwidth 20Mbit,20000kbit` printed every row twice."""
    proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--bandwidth",
                    "20Mbit,20000kbit,40Mbit", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rates = [r["bandwidth_bps"] for r in json.loads(proc.stdout)["rows"] if r["model"] == "sim"]
    assert rates == [20e6, 40e6]


def test_predict_checks_its_output_places_before_the_sweep(tmp_path):
    a_file = tmp_path / "afile"
    a_file.write_text("kept\n")
    (tmp_path / "adir").mkdir()
    assert_one_line_error(gradwire("predict", str(SAMPLE), "--workers", "1", "-o", str(a_file)),
                          str(a_file), "existing file, not a folder")
    proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--json", str(tmp_path / "adir"))
    assert "--json FILE is deprecated" in proc.stderr.splitlines()[0]
    proc.stderr = "".join(proc.stderr.splitlines(True)[1:])
    assert_one_line_error(proc, "adir", "is a folder")
    assert_one_line_error(gradwire("win", str(SAMPLE / "worker0"), "-o", str(a_file / "x.json")),
                          str(a_file), "not a folder")
    assert a_file.read_text() == "kept\n"


def test_no_output_goes_into_a_bundle(tmp_path):
    """One slip of an output option used to replace a bundle's capture or manifest."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    w0 = tmp_path / "b" / "worker0"
    before = {p: p.read_bytes() for p in w0.rglob("*") if p.is_file()}
    for cmd in (["win", str(w0), "-o", str(w0 / "capture.pcapng")],
                ["predict", str(tmp_path / "b"), "--workers", "1", "-o", str(w0 / "trace")],
                ["predict", str(tmp_path / "b"), "--workers", "1", "--out", str(w0)],
                ["align", str(tmp_path / "b"), "-o", str(w0 / "trace")]):
        assert_one_line_error(gradwire(*cmd), "gradwire never writes over what was collected",
                              str(w0))
    assert {p: p.read_bytes() for p in w0.rglob("*") if p.is_file()} == before
    # the folder holding the bundles is not a bundle, and a new file or folder inside one
    # replaces nothing collected (`cd bundle && gradwire win capture.pcapng` writes win.json)
    for out in (tmp_path / "b" / "win.json", w0 / "win.json"):
        proc = gradwire("win", str(w0), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
    proc = gradwire("predict", str(tmp_path / "b"), "--workers", "1", "--out", str(w0 / "pred"),
                    "--quiet")
    assert proc.returncode == 0 and (w0 / "pred" / "predictions.csv").exists(), proc.stderr


def test_a_failed_run_leaves_no_empty_output_folder(tmp_path):
    out = tmp_path / "new" / "aligned"
    assert_one_line_error(gradwire("align", str(tmp_path / "typo"), "-o", str(out)),
                          "no such bundle folder")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()  # a folder the user made is theirs: left as it was
    assert_one_line_error(gradwire("align", str(tmp_path / "typo"), "-o", str(kept)),
                          "no such bundle folder")
    assert kept.is_dir()


def test_predict_names_a_broken_lab_result(tmp_path):
    import shutil

    for node in ("ps0", "worker0"):
        shutil.copytree(SAMPLE / node, tmp_path / node)
    (tmp_path / "lab_result.json").write_text(json.dumps({"config": {"batch_size": "abc"}}))
    assert_one_line_error(gradwire("predict", str(tmp_path), "--workers", "1"),
                          "lab_result.json", "config.batch_size is 'abc'", "--batch-size")


def test_an_unreadable_lab_result_is_warned_about_once(tmp_path):
    import shutil

    for node in ("ps0", "worker0"):
        shutil.copytree(SAMPLE / node, tmp_path / node)
    (tmp_path / "lab_result.json").write_text('{"config": ')
    proc = gradwire("predict", str(tmp_path), "--workers", "1", "--batch-size", "32",
                    "--replications", "2", "--max-replications", "2", "--quiet", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("is not a readable lab result; ignoring it") == 1, proc.stderr


def test_predict_without_batch_size_names_the_fix(tmp_path):
    import shutil

    shutil.copytree(SAMPLE / "ps0", tmp_path / "ps0")
    shutil.copytree(SAMPLE / "worker0", tmp_path / "worker0")
    assert_one_line_error(gradwire("predict", str(tmp_path)), "--batch-size")


@pytest.mark.parametrize("damage", ["missing", "cut short", "cut before the traced steps",
                                    "PS capture cut"])
def test_predict_refuses_a_profile_without_its_captures(tmp_path, damage):
    """Without packets, transfers would be timed from the trace alone (the sample predicted
    6,700 ex/s at W=1 instead of 3,100), or, from a capture that holds earlier steps only,
    matched to those steps' calls (377 ex/s): say which capture is wrong instead."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    cap = tmp_path / "b" / "worker0" / "capture.pcapng"
    if damage == "missing":
        cap.unlink()
        fragments = ["worker0", "no packet capture (capture.pcapng or .pcap) in this bundle"]
    elif damage == "cut short":
        cap.write_bytes(cap.read_bytes()[:5000])
        fragments = ["worker0", "its capture ends before"]
    else:  # cut to 40% (50% of the PS's): it holds the untraced steps before the traced ones
        if damage == "PS capture cut":
            cap = tmp_path / "b" / "ps0" / "capture.pcapng"
        data = cap.read_bytes()
        cap.write_bytes(data[:len(data) * (2 if damage == "cut before the traced steps" else 5)
                             // (5 if damage == "cut before the traced steps" else 10)])
        fragments = [cap.parent.name, "its capture ends before", "traced transfers start",
                     "cut short, or of another run"]
    assert_one_line_error(gradwire("predict", str(tmp_path / "b"), "--workers", "1"),
                          *fragments)


def test_predict_names_the_missing_ps_bundle(tmp_path):
    """It used to blame worker0's intact capture."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "ps0")
    assert_one_line_error(gradwire("predict", str(tmp_path / "b"), "--workers", "1"),
                          "no bundle of ps:0 among these")


def test_predict_on_a_file_says_it_wants_the_bundle_folder(tmp_path):
    proc = gradwire("predict", str(SAMPLE / "worker0" / "manifest.json"), "--workers", "1")
    assert_one_line_error(proc, "worker0/manifest.json", "a file, not a bundle folder")
    lab = tmp_path / "lab.json"  # the old `--measured a.json b.json BUNDLE` spelling
    lab.write_text((SAMPLE / "lab_result.json").read_text())
    proc = gradwire("predict", str(lab), str(SAMPLE), "--workers", "1")
    assert_one_line_error(proc, "a lab result, not a bundle", f"--measured {lab}")


def test_predict_without_any_trace_names_the_bundles(tmp_path):
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "run")
    shutil.rmtree(tmp_path / "run" / "worker0" / "trace")
    proc = gradwire("predict", str(tmp_path / "run"), "--workers", "1")
    assert_one_line_error(proc, str(tmp_path / "run"), "no bundle has a trace (ps0, worker0 "
                          "hold none)")


def test_predict_on_a_folder_without_bundles_says_so(tmp_path):
    # before asking for a batch size, which would send the user the wrong way
    assert_one_line_error(gradwire("predict", str(tmp_path)), str(tmp_path),
                          "not a gradwire bundle")
    assert_one_line_error(gradwire("predict", str(tmp_path / "typo")), "no such bundle folder")


def test_baselines_reproduce_a_two_ps_profile_at_one_worker():
    """A profile recorded with 2 PSes already shows the shared stations split in two; at W=1 and
    M=2 every baseline must give back 1 / (S^D + S^W + S^U + S^S), not count the split twice."""
    import dataclasses

    from gradwire.replay.grid import baseline_rows

    prof = dataclasses.replace(load_profile([SAMPLE]), ps_tasks=["ps:0", "ps:1"])
    one_step_s = sum(prof.phases.values())
    bw = prof.profile_bandwidth_bps
    for row in baseline_rows(prof, ["mva-exact", "mva-approx", "mva-hybrid", "cynthia"], [1],
                             [2], [bw]):
        assert row.steps_per_s == pytest.approx(1 / one_step_s, rel=1e-6), row.model


def _pull_push(nbytes: float, gap_us: float) -> StepTemplate:
    """One pull, a short compute, one push of the same size, the client gap."""
    t = StepTemplate(step=0, observed_us=2 * nbytes + gap_us)
    start = t.add("delay", 0.0, "start")
    pull = t.add(DOWN, nbytes, "pull", [start])
    comp = t.add(WORKER, gap_us / 2, "compute", [pull])
    push = t.add(UP, nbytes, "push", [comp])
    t.add(WORKER, gap_us / 2, "client gap", [push])
    return t


def test_random_phases_average_over_how_workers_interleave():
    # 1 MB each way at 1 B/us: a step is 2 s of network. Two workers started together pull
    # together and push together for ever (equal sharing keeps their offset), W=2 gains
    # nothing; alternating they would double it. Random phases average over the offsets.
    t = _pull_push(1e6, 1e4)
    bw = 8e6 / GOODPUT  # bits/s for 1 byte per us of goodput
    one, _ = simulate([t], 1, 1, 1, bw)
    together, _ = simulate([t], 1, 2, 1, bw)
    assert together.steps_per_s == pytest.approx(one.steps_per_s, rel=0.01)
    phases = simulate_phases([t], 1, 2, 1, bw, steps=40, replications=16, max_replications=16)
    speedup = phases.steps_per_s / one.steps_per_s
    assert 1.2 < speedup < 1.9  # between lock-step (1x) and perfect alternation (2x)
    assert phases.ci[0] < phases.examples_per_s < phases.ci[1]
    assert phases.steps == 40 * 16
    # one 40-step run lands anywhere between the two patterns, depending on its phases
    low, high = phases.phase_range
    assert one.examples_per_s * 0.99 < low < phases.ci[0] and phases.ci[1] < high
    assert high < 2 * one.examples_per_s * 1.01 and high - low > 0.3 * one.examples_per_s
    assert together.phase_range is None  # one run from one phase pattern: no range
    again = simulate_phases([t], 1, 2, 1, bw, steps=40, replications=16, max_replications=16)
    assert again == phases  # same seed, same replications, same numbers to the bit
    other = simulate_phases([t], 1, 2, 1, bw, steps=40, replications=16, max_replications=16,
                            seed=1)
    assert other.examples_per_s != phases.examples_per_s


def test_a_replications_warm_up_is_the_one_asked_for():
    # the default warm-up given explicitly is the default, to the bit; another one moves the
    # window (two workers on one link drift while they share it, so the rate moves with it)
    t = _pull_push(1e6, 1e4)
    bw = 8e6 / GOODPUT
    kw = {"steps": 16, "replications": 4, "max_replications": 4}
    default = simulate_phases([t], 1, 2, 1, bw, **kw)
    assert simulate_phases([t], 1, 2, 1, bw, warmup_steps=warmup(16), **kw) == default
    late = simulate_phases([t], 1, 2, 1, bw, warmup_steps=12, **kw)
    assert late.examples_per_s != default.examples_per_s and late.steps == 16 * 4
    # the lab's window: the first quarter of a worker's steps, at least one
    assert [lab_warmup_steps(n) for n in (3, 4, 16, 20, 60)] == [1, 1, 4, 5, 15]


def test_run_steps_predicts_runs_measured_as_the_lab_measures_them():
    proc = gradwire("predict", "--sample", "--workers", "2", "--model", "sim", "--run-steps",
                    "16", "--replications", "2", "--max-replications", "2", "--format",
                    "json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["replication"] == {"steps": 16, "warmup_steps": 4}
    (row,) = doc["rows"]
    assert row["steps"] == 2 * 16  # steps per worker summed over the replications
    plain = json.loads(gradwire("predict", "--sample", "--workers", "2", "--model", "sim",
                                "--format", "json", timeout=300).stdout)
    assert plain["replication"] == {"steps": 60, "warmup_steps": 6}
    # a synchronous mechanism runs one run from a barrier: no replications to describe
    sync = json.loads(gradwire("predict", "--sample", "--workers", "2", "--model", "sim",
                               "--mechanism", "sync-ps", "--run-steps", "16", "--format",
                               "json", timeout=300).stdout)
    assert sync["replication"] is None and sync["rows"][0]["start"] == "together"
    both = gradwire("predict", "--sample", "--run-steps", "16", "--steps", "20", timeout=300)
    assert_one_line_error(both, "--run-steps N is --steps N measured as the lab measures")


def test_aligned_replications_start_together_and_differ_in_their_draws_only():
    # --start aligned: every replication is the one run of --start together with the
    # replication's seed (its template draws), cut to the replication's steps; the row is
    # their mean and the phase range their spread
    slow, fast = _pull_push(1e6, 1e4), _pull_push(3e5, 5e3)
    bw = 8e6 / GOODPUT
    kw = {"steps": 24, "replications": 4, "max_replications": 4}
    aligned = simulate_phases([slow, fast], 1, 3, 1, bw, aligned=True, mechanism="sync-ps",
                              **kw)
    runs = [simulate([slow, fast], 1, 3, 1, bw, seed=replication_seed(0, r), steps=24,
                     max_steps=24, mechanism="sync-ps")[0].examples_per_s for r in range(4)]
    assert aligned.start == "aligned" and aligned.steps == 4 * 24
    assert aligned.examples_per_s == pytest.approx(statistics.fmean(runs), rel=1e-12)
    assert len(set(runs)) > 1  # the draws differ, so do the runs
    assert aligned.phase_range == pytest.approx(phase_percentiles(runs), rel=1e-12)
    assert simulate_phases([slow, fast], 1, 3, 1, bw, aligned=True, mechanism="sync-ps",
                           **kw) == aligned  # same seed, same numbers


def test_predict_start_aligned_replicates_a_synchronous_row():
    doc = json.loads(gradwire("predict", "--sample", "--workers", "2", "--model", "sim",
                              "--mechanism", "sync-ps", "--start", "aligned", "--replications",
                              "2", "--max-replications", "2", "--steps", "12", "--format",
                              "json", timeout=300).stdout)
    (row,) = doc["rows"]
    assert row["start"] == "aligned" and row["steps"] == 2 * 12
    assert row["phase_low"] <= row["examples_per_s"] <= row["phase_high"]
    assert doc["replication"] == {"steps": 12, "warmup_steps": 3}


def test_stratified_phases_give_every_worker_its_own_slot_of_the_step():
    t = _pull_push(1e6, 1e4)
    t.observed_us = 3e6
    for w in (2, 3, 6):
        for seed in range(20):
            offs = start_offsets([t], w, seed, stratified=True)
            assert all(0.0 <= x < 3e6 for x in offs)
            # worker k lies in slot k of W counted from worker 0's slot: within (k - 1)/W and
            # (k + 1)/W of a step after worker 0, going round the step
            rel = [(x - offs[0]) % 3e6 for x in offs]
            assert all((k - 1) * 3e6 / w < r < (k + 1) * 3e6 / w for k, r in enumerate(rel))
            assert start_offsets([t], w, seed, stratified=True) == offs  # seeded
    # independent phases are drawn as before (one uniform per worker from the seed's stream)
    rng = random.Random(7)
    assert start_offsets([t], 3, 7) == tuple(rng.uniform(0.0, 3e6) for _ in range(3))


def test_start_phases_spread_over_the_step_at_the_rate_predicted():
    # a step of network alone (1 MB each way, next to no compute): at 0.4 times the rate it is
    # 2.5 times as long, and the workers' phases, a share of the step, must spread over it.
    # Drawn within the profiled step they would all start in its first 40%, and the pair
    # would run nearer lock-step at the slow rate than at the profile's.
    t = _pull_push(1e6, 1.0)
    bw = 8e6 / GOODPUT  # 1 byte per us of goodput
    cfg = SimConfig(workers=2, ps=1, rate_bytes_per_us=0.4)
    assert start_period_us([t], [t.ps], cfg) == pytest.approx(2 * 1e6 / 0.4 + 1.0, rel=1e-6)
    kw = {"steps": 30, "replications": 8, "max_replications": 8, "stratified": True}
    one, slow_one = (simulate([t], 1, 1, 1, b)[0].steps_per_s for b in (bw, 0.4 * bw))
    fast = simulate_phases([t], 1, 2, 1, bw, **kw).steps_per_s / one
    slow = simulate_phases([t], 1, 2, 1, 0.4 * bw, **kw).steps_per_s / slow_one
    assert 1.2 < fast < 2.0 and slow == pytest.approx(fast, rel=1e-3)  # the same phases
    # the timeline's run (--timeline) starts its workers as the first replication did
    seen = []
    REPLICATION_OBSERVERS.append(lambda sim, _window, _rate: seen.append(sim.step_ends))
    try:
        simulate_phases([t], 1, 2, 1, 0.4 * bw, **kw)
    finally:
        REPLICATION_OBSERVERS.pop()
    _, first = simulate([t], 1, 2, 1, 0.4 * bw, seed=replication_seed(0, 0), steps=30,
                        max_steps=30, phases="stratified")
    assert first.step_ends == seen[0]


def test_stratified_phases_lean_towards_taking_turns():
    # two workers on one link: random phases sometimes land them in step (1x), stratified
    # ones never both in one half of the step, so their mean is higher, up to taking turns
    # (2x)
    t = _pull_push(1e6, 1e4)
    bw = 8e6 / GOODPUT
    one, _ = simulate([t], 1, 1, 1, bw)
    rand = simulate_phases([t], 1, 2, 1, bw, steps=40, replications=16, max_replications=16)
    strat = simulate_phases([t], 1, 2, 1, bw, steps=40, replications=16, max_replications=16,
                            stratified=True)
    assert (rand.start, strat.start) == ("random", "stratified")
    assert strat.examples_per_s > 1.05 * rand.examples_per_s
    assert strat.phase_range[0] > rand.phase_range[0]
    assert strat.phase_range[1] <= 2 * one.examples_per_s * 1.01


@pytest.mark.parametrize(("start", "mechanism", "mode"), [
    ("auto", "async-ps", "stratified"),     # the asynchronous PS: each worker in its own slot
    ("auto", "async-ps@whole", "stratified"),  # with a modifier alike
    ("auto", "sync-ps", "together"),        # a barrier aligns the workers
    ("auto", "ring-allreduce", "together"),
    ("random", "async-ps", "random"),       # as given
    ("stratified", "async-ps", "stratified"),
    ("together", "async-ps", "together"),
])
def test_start_auto_stratifies_the_asynchronous_ps(start, mechanism, mode):
    assert start_mode(start, mechanism) == mode


def test_the_start_note_says_what_the_sim_rows_did():
    lossy = TransportStats("c", 1000, 10, ())
    auto = start_note("auto", ("async-ps",), lossy)
    assert "start each worker in its own slot of the step (--start auto)" in auto
    assert "retransmitted 1.0% of its TCP data segments" in auto
    assert "retransmitted" not in start_note("auto", ("async-ps",), None)
    assert "retransmitted" not in start_note("auto", ("async-ps",),
                                             TransportStats("d", 1000, 1, ()))  # 0.1%
    assert "independent random phases (--start random)" in start_note("random")
    assert "--start together starts every worker at once" in start_note("together")
    assert "interval is one run's" in start_note("together")
    assert start_note("auto", ("sync-ps", "ring-allreduce"), lossy) is None
    assert start_note("auto", ("sync-ps", "async-ps")) is not None


def test_tic_orders_receives_by_the_fewest_receives_an_op_needing_them_waits_for():
    # ops needing {r0}, {r0, r1}, {r0, r1, r2} and {r3}; r4 is needed by no op
    masks = [0b0001, 0b0011, 0b0111, 0b1000, 0]
    prio = tic_priorities(masks, 5)
    assert sorted(range(5), key=lambda j: prio[j]) == [0, 3, 1, 2, 4]
    assert tic_priorities([], 2) == sorted(tic_priorities([], 2))  # none needed: in order


def test_the_orders_built_from_a_real_profile_run():
    prof = load_profile([SAMPLE], 32)
    t = prof.templates[0]
    pulls = [i for i, k in enumerate(t.kind) if k == DOWN]
    tic = sorted(pulls, key=lambda i: t.tic[i])
    earliest = sorted(pulls, key=lambda i: (t.earliest[i], i))
    # the sample is a chain of layers: TIC, from the graph alone, orders its weights and biases
    # as the profiled compute needed them, layer by layer
    assert sorted(tic) == pulls and tic == earliest and tic != pulls
    assert all(t.tic[i] == t.earliest[i] == math.inf for i, k in enumerate(t.kind) if k == UP)
    bw = 1e9
    rates = {o: simulate(prof.templates, 32, 2, 1, bw, o, steps=40, max_steps=40)[0]
             .examples_per_s for o in ("observed", "tic", "earliest", "reverse")}
    assert all(r > 0 for r in rates.values()), rates


def test_replications_double_until_the_interval_is_tight():
    t = _pull_push(1e6, 1e4)
    bw = 8e6 / GOODPUT
    loose = simulate_phases([t], 1, 3, 1, bw, steps=20, replications=2, max_replications=64,
                            ci_target=0.001)
    assert loose.steps == 20 * 64  # never tight enough: stopped at the cap
    tight = simulate_phases([t], 1, 1, 1, bw, steps=20, replications=4, max_replications=64)
    assert tight.steps == 20 * 4  # one worker, one template: every replication is the same


def test_a_step_whose_trace_lacks_transfers_is_left_out(caplog):
    """With two PSes the first traced step's RunMetadata once lacked ps:1's partition (no pushes
    to it): replayed, that step would skip 12.7 MB of its traffic. Drop one step's pushes from
    the sample's alignment: the profile keeps the other steps and says which it left out."""
    import dataclasses

    from gradwire.aligner.align import align
    from gradwire.replay.profile import profile_from_alignment

    al = align([SAMPLE])
    steps = sorted({t.step for t in al.transfers if t.recv is not None and t.step is not None})
    gone = steps[0]
    cut = [dataclasses.replace(t, recv=None, step=None)
           if t.step == gone and t.direction == "push" else t for t in al.transfers]
    with caplog.at_level("WARNING"):
        prof = profile_from_alignment(dataclasses.replace(al, transfers=cut), 32)
    assert sorted(t.step for t in prof.templates) == steps[1:]
    assert f"skipping step {gone}: its trace lacks" in caplog.text


def test_several_lab_results_of_one_configuration_give_their_median(tmp_path):
    from gradwire.replay.measured import measured_files, measured_points

    files = []
    for i, eps in enumerate([986.1, 1245.6, 1100.0]):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps({"config": {"workers": 2, "ps": 1, "bandwidth": "1gbit"},
                                 "throughput_examples_per_s": eps}))
        files.append(f)
    (point,) = measured_points(measured_files(files))
    assert point["examples_per_s"] == 1100.0 and sorted(point["runs"]) == [986.1, 1100.0, 1245.6]
    other = tmp_path / "other.json"  # another job at the same W, M and bandwidth
    other.write_text(json.dumps({"config": {"workers": 2, "ps": 1, "bandwidth": "1gbit",
                                            "model": "resnet50"},
                                 "throughput_examples_per_s": 1.5}))
    with pytest.raises(GradwireError, match="ran another job than"):
        measured_points(measured_files([*files, other]))
    assert point["mechanism"] == "async-ps"  # no mode recorded: an asynchronous lab run


def test_a_row_is_compared_only_with_runs_of_its_mechanism(tmp_path):
    from io import StringIO

    from rich.console import Console

    from gradwire.render import print_predictions
    from gradwire.replay.measured import measured_files, measured_points

    f = tmp_path / "ring.json"
    f.write_text(json.dumps({"config": {"workers": 2, "ps": 0, "bandwidth": "1gbit",
                                        "mode": "ring"}, "throughput_examples_per_s": 90.0}))
    (point,) = measured_points(measured_files([f]))
    assert point["mechanism"] == "ring-allreduce"
    bad = tmp_path / "bad.json"  # a PS run without parameter servers
    bad.write_text(json.dumps({"config": {"workers": 2, "ps": 0, "bandwidth": "1gbit"},
                               "throughput_examples_per_s": 90.0}))
    with pytest.raises(GradwireError, match="config.ps is 0, not a number of parameter"):
        measured_points(measured_files([bad]))
    row = {"model": "sim", "workers": 2, "ps": 0, "bandwidth_bps": 1e9, "examples_per_s": 99.0,
           "ci_low": 98.0, "ci_high": 100.0, "speedup": 1.0, "bottleneck": "worker NIC out",
           "utilisation": 0.9}
    out = StringIO()
    print_predictions([row | {"mechanism": "ring-allreduce"},
                       row | {"mechanism": "butterfly", "examples_per_s": 80.0}], [point],
                      Console(file=out, width=200))
    lines = {ln.split()[3]: ln for ln in out.getvalue().splitlines() if "sim" in ln}
    assert "+10.0%" in lines["ring-allreduce"] and lines["butterfly"].rstrip("│ ").endswith("-")
    assert "90.0" not in lines["butterfly"]


def test_a_profile_recorded_beside_other_workers_is_warned_about(tmp_path, caplog):
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    session = tmp_path / "b" / "worker0" / "trace" / "session.json"
    doc = json.loads(session.read_text())
    doc["cluster_spec"]["worker"] = [*doc["cluster_spec"]["worker"], "198.19.243.101:2222"]
    session.write_text(json.dumps(doc))
    with caplog.at_level("WARNING"):
        load_profile([tmp_path / "b"])
    assert "recorded in a cluster of 2 workers" in caplog.text


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_predict_stops_its_worker_processes(tmp_path, sig):
    """SIGTERM reaches only gradwire (not its pool, as Ctrl-C does): its pool workers used to
    be left blocked for good, re-parented to init."""
    proc = subprocess.Popen([sys.executable, "-m", "gradwire", "predict", str(SAMPLE),
                             "--workers", "1-32", "--bandwidth", "1Gbit,10Gbit", "--jobs", "2",
                             "--out", str(tmp_path / "o")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    kids: list[int] = []
    while time.monotonic() < deadline and len(kids) < 2:
        time.sleep(0.2)
        kids = _children(proc.pid)
    assert len(kids) >= 2, "the pool never started"
    proc.send_signal(sig)
    # a signal waits out a compile in progress (numba's, on a cold cache, holds the
    # interpreter for a minute on a loaded 2-core machine): the bound is generous on purpose
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {signal.Signals(sig).name}" in err and "Traceback" not in err
    time.sleep(1.0)
    alive = [k for k in kids if _state(k) not in (None, "Z")]
    assert alive == [], f"pool workers left running: {alive}"
    assert not (tmp_path / "o").exists()  # created for the outputs, removed when left empty


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_stopped_sweep_shows_the_configurations_it_finished(tmp_path, jobs):
    """SIGTERM midway through a sweep (in one process, or a pool of two): the rows already
    simulated are printed; --out is not written, as it holds whole sweeps only."""
    assert_sweep_stops_midway(tmp_path / "o", "--jobs", jobs)


def test_a_wide_interval_is_cut_at_zero_and_noted(tmp_path):
    """Two replications at W=2 on 100 Mbit/s: the interval was -1,002..3,133 ex/s, unexplained."""
    proc = gradwire("predict", str(SAMPLE), "--workers", "1,2", "--bandwidth", "100Mbit",
                    "--replications", "2", "--max-replications", "2", "--json",
                    str(tmp_path / "p.json"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "p.json").read_text())
    assert all(r["ci_low"] >= 0 for r in doc["rows"])
    wide = [r for r in doc["rows"]
            if r["ci_high"] - r["examples_per_s"] > 0.02 * r["examples_per_s"]]
    assert wide, "the test needs a configuration that misses the target with 2 replications"
    assert any(f"{len(wide)} of the 2 sim configurations stopped at --max-replications 2" in n
               for n in doc["notes"])
    assert "stopped at --max-replications 2" in proc.stderr


def _update_template(compute_us: float, update_us: float) -> StepTemplate:
    """A worker computes, then the PS applies its update (no transfer to share)."""
    from gradwire.replay.template import PS

    t = StepTemplate(step=0)
    start = t.add("delay", 0.0, "start")
    c = t.add(WORKER, compute_us, "compute", [start])
    t.add(PS, update_us, "apply", [c], ps=0)
    return t


@pytest.mark.parametrize("cores, steps_per_ms", [(None, 4 / 11), (1, 1 / 10), (2, 2 / 10),
                                                 (8, 4 / 11)])
def test_ps_cores_bound_the_updates_running_at_once(cores, steps_per_ms):
    """4 workers, steps of 1 ms compute + a 10 ms update: without a limit (ICPE'20: a core per
    worker's update) 4 steps per 11 ms; with 1 or 2 PS cores the PS paces the cluster."""
    sim = Simulator([_update_template(1000.0, 10_000.0)],
                    SimConfig(workers=4, ps=1, rate_bytes_per_us=1.0, ps_cores=cores))
    sim.run(200)
    steps = sum(len(e) for e in sim.step_ends)
    assert steps / (sim.now / 1000) == pytest.approx(steps_per_ms, rel=0.02)
    busy_cores = sim.ps_busy_us[0] / sim.now
    assert busy_cores == pytest.approx(10 * steps_per_ms, rel=0.02)  # 10 ms per update


def test_predict_with_ps_cores_and_the_note_without(tmp_path):
    from gradwire.replay.notes import ps_cores_note
    from gradwire.replay.predict import Prediction

    proc = gradwire("predict", str(SAMPLE), "--workers", "1,8", "--ps-cores", "1", "--json",
                    str(tmp_path / "p.json"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "p.json").read_text())["rows"]
    assert all(0 < r["ps_cores_busy"] <= 1.0 for r in rows)  # one core: never more busy
    assert_one_line_error(gradwire("predict", str(SAMPLE), "--ps-cores", "0"), "--ps-cores")

    def row(busy: float) -> Prediction:
        return Prediction(model="sim", workers=8, ps=1, bandwidth_bps=1e9, order="observed",
                          flow_control=True, examples_per_s=1.0, steps_per_s=1.0, ci=(1, 1),
                          steps=1, bottleneck="worker", utilisation=0.5, events=1,
                          ps_cores_busy=busy)

    assert ps_cores_note([row(0.4)], None) is None
    note = ps_cores_note([row(0.4), row(2.5)], None)
    assert "keep 2.5 cores busy on average at W=8" in note and "--ps-cores N" in note
    assert ps_cores_note([row(2.5)], 4) is None  # the user said how many cores there are
    assert ps_cores_note([row(2.5)], None, 2).endswith("(the profiled PS host has 2)")
    import shutil

    assert load_profile([SAMPLE]).ps_host_cores is None  # recorded before collect wrote it
    shutil.copytree(SAMPLE, tmp_path / "b")
    manifest = tmp_path / "b" / "ps0" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["host"]["cpu_count"] = 16
    manifest.write_text(json.dumps(m))
    assert load_profile([tmp_path / "b"]).ps_host_cores == 16


def test_measured_points_pair_with_rows_or_are_named(tmp_path):
    """An unshaped lab run (bandwidth null) was refused with a Python repr; a point at another
    rate than the sweep's was dropped without a word, yet drawn in the plot."""
    lab = json.loads((SAMPLE / "lab_result.json").read_text())
    unshaped = tmp_path / "unshaped.json"
    unshaped.write_text(json.dumps(lab | {"config": lab["config"] | {"bandwidth": None}}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(lab | {"config": lab["config"] | {"bandwidth": "200mbit"}}))
    for f, paired in ((unshaped, True), (other, False)):
        proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--measured", str(f),
                        "--json", str(tmp_path / "p.json"))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads((tmp_path / "p.json").read_text())
        assert bool(doc["measured"]) is paired
        lost = [n for n in doc["notes"] if "match no predicted one" in n]
        assert bool(lost) is not paired and ("W=1 M=1 200Mbit" in lost[0] if lost else True)
    # an unshaped run is no measure of a rate the user asked for
    proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--bandwidth", "10Mbit",
                    "--measured", str(unshaped), "--json", str(tmp_path / "p.json"))
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["measured"] == [] and any("W=1 M=1 unshaped" in n for n in doc["notes"])
    # nor an asynchronous run of a synchronous prediction: said, not dropped without a word
    proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--mechanism", "sync-ps",
                    "--measured", str(SAMPLE / "lab_result.json"), "--json",
                    str(tmp_path / "p.json"))
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["measured"] == [] and any("match no predicted one" in n and "async-ps)" in n
                                         for n in doc["notes"])


def test_a_what_if_is_compared_only_with_runs_of_the_job_it_predicts(tmp_path):
    """``--accumulate 2`` on the sample was shown beside the plain job's runs (+191% at
    W = 1): a what-if's error columns pair only runs whose lab job made the same what-if."""
    from gradwire.replay.measured import WHATIF_PLAIN, lab_whatif, of_the_whatif

    lab = json.loads((SAMPLE / "lab_result.json").read_text())
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(lab))
    acc = tmp_path / "acc.json"
    acc.write_text(json.dumps(lab | {"config": lab["config"] | {"accumulate": 2}}))
    fused = tmp_path / "fused.json"
    fused.write_text(json.dumps(lab | {"config": lab["config"] | {"fuse_bytes": 1e6}}))
    for f, opts, paired in ((plain, [], True), (plain, ["--accumulate", "2"], False),
                            (acc, ["--accumulate", "2"], True), (acc, [], False),
                            (plain, ["--compute-scale", "2"], False),
                            (plain, ["--fuse-tensors", "1MB"], False),
                            (fused, ["--fuse-tensors", "1MB"], True),
                            (plain, ["--batch-size", "64"], False),  # examples counted at 64
                            (plain, ["--batch-size", str(lab["config"]["batch_size"])], True)):
        proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--measured", str(f), *opts,
                        "--json", str(tmp_path / "p.json"))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads((tmp_path / "p.json").read_text())
        assert bool(doc["measured"]) is paired, (f.name, opts)
        assert any("ran another job than the one predicted" in n
                   for n in doc["notes"]) is not paired
    assert lab_whatif({}) == WHATIF_PLAIN  # a result older than the what-ifs
    assert lab_whatif({"partition": 3, "recompute": 2, "xla": True}) == {
        "partition": 3, "accumulate": 1, "mixed_precision": False, "recompute": True,
        "xla": True, "fuse_bytes": 0}
    point = {"job": {"batch_size": 32}, "whatif": dict(WHATIF_PLAIN)}
    assert of_the_whatif([point], dict(WHATIF_PLAIN), None) == ([point], 0)
    assert of_the_whatif([point], dict(WHATIF_PLAIN), 64) == ([], 1)  # --to-batch-size 64
    assert of_the_whatif([point], None, None) == ([], 1)


def test_trace_slowdown_from_session_step_times():
    from gradwire.replay.notes import trace_slowdown_note
    from gradwire.replay.profile import trace_slowdown

    # steps 0-1 warm-up (left out), 10-12 traced at 48 ms, the others at 32 ms
    times = [0.9, 0.2] + [0.032] * 8 + [0.048] * 3 + [0.032] * 5
    session = {"step_seconds": times, "steps_recorded": [10, 11, 12]}
    assert trace_slowdown(session) == pytest.approx(1.5)
    assert trace_slowdown({"step_seconds": times[:12], "steps_recorded": [10, 11]}) is None
    assert trace_slowdown({}) is None  # bundles recorded before step_seconds existed
    import dataclasses

    prof = load_profile([SAMPLE])
    assert trace_slowdown_note(dataclasses.replace(prof, trace_slowdown=1.1)) is None
    note = trace_slowdown_note(dataclasses.replace(prof, trace_slowdown=1.5))
    assert "the traced steps ran 50% slower than the untraced ones" in note


def test_trace_slowdown_from_the_labs_step_ends():
    """The sample's session.json predates step_seconds; its lab_result.json has the step ends:
    steps 3-5 traced took 14.6, 16.4 and 16.7 ms, of which the hook stored for 7.7, 7.2 and
    6.9 ms; steps 2 and 6 untraced 6.4 and 6.1 ms: (16.4 - 7.2) / 6.25 = 1.48."""
    from gradwire.replay.notes import trace_slowdown_note
    from gradwire.replay.profile import trace_slowdown_from_ends

    session = json.loads((SAMPLE / "worker0/trace/session.json").read_text())
    ends = json.loads((SAMPLE / "lab_result.json").read_text())[
        "per_worker"]["worker0"]["step_end_times_s"]
    durations = [round(1e3 * (b - a), 1) for a, b in zip(ends, ends[1:], strict=False)]
    assert durations == [6.4, 6.4, 14.6, 16.4, 16.7, 6.1]
    r = trace_slowdown_from_ends(session, ends)
    assert r == pytest.approx((ends[4] - ends[3] - 0.007194) / ((ends[2] - ends[1] + ends[6]
                                                                  - ends[5]) / 2), rel=1e-9)
    assert trace_slowdown_from_ends(session, ends[:-1]) is None  # ends of another run
    prof = load_profile([SAMPLE])
    assert prof.trace_slowdown == pytest.approx(r)
    assert "the traced steps ran 48% slower" in trace_slowdown_note(prof)


def test_extra_lanes_never_take_another_threads_id():
    """120 pulls at once on a downlink used to get lane ids colliding with the uplink's."""
    from gradwire.tracelanes import Lanes

    lanes = Lanes()
    down = [lanes.tid(1, 3, 0.01 * i, 1000.0) for i in range(120)]
    up = [lanes.tid(1, 4, 10.0 + i, 2000.0) for i in range(3)]
    assert len(set(down)) == 120 and len(set(up)) == 3 and not set(down) & set(up)
    assert lanes.tid(1, 3, 1000.0, 1001.0) == 3  # a free lane is reused: the thread's own
    names = {e["tid"]: e["args"]["name"] for e in lanes.thread_names({(1, 3): "downlink",
                                                                      (1, 4): "uplink"})}
    assert len(names) == 119 + 2 and names[down[1]] == "downlink (2)"
    assert names[up[2]] == "uplink (3)"


def test_notes_on_another_job_a_ps_only_lab_and_a_timeline_outside_the_sweep():
    from gradwire.replay.notes import other_job_note, recorded_notes, shaped_ps_only_note
    from gradwire.replay.options import PredictOptions

    lab = json.loads((SAMPLE / "lab_result.json").read_text())["config"]  # MLP 0.2 MB, b32
    same = {"job": {k: lab.get(k) for k in ("model", "model_mb", "batch_size", "mode",
                                            "grpc_options")}}
    other = {"job": {**same["job"], "model_mb": 20}}
    assert other_job_note(lab, [same]) is None and other_job_note({}, [other]) is None
    assert "model_mb 20 against 0.2" in other_job_note(lab, [same, other])
    opts = PredictOptions(bundles=(SAMPLE,))  # --worker-bandwidth same, no --timeline
    assert "--worker-bandwidth unlimited predicts the lab" in shaped_ps_only_note(lab, opts, [1, 2])
    assert shaped_ps_only_note(lab, opts, [1]) is None  # one PS: the worker NIC is the PS link's
    assert shaped_ps_only_note({**lab, "shape": "all"}, opts, [2]) is None
    unlimited = PredictOptions(bundles=(SAMPLE,), worker_bandwidth="unlimited")
    assert shaped_ps_only_note(lab, unlimited, [2]) is None
    rows = [{"model": "sim", "workers": 2, "ps": 1, "bandwidth_bps": 1e9}]
    assert recorded_notes(opts, rows) == []

    def timeline(w: int, m: int, bw: float, explain=None) -> PredictOptions:
        return PredictOptions(bundles=(SAMPLE,), timeline=(w, m, bw), out=Path("o"),
                              explain=explain)

    assert recorded_notes(timeline(2, 1, 1e9), rows) == []
    (note,) = recorded_notes(timeline(9, 1, 1e9), rows)
    assert "timeline's configuration (W=9, M=1, 1Gbit) is not one of the table's sim rows" in note
    both = recorded_notes(timeline(2, 1, 1e9, explain=(3, 1, 1e9)), rows)
    assert len(both) == 1 and "critical path's configuration (W=3, M=1, 1Gbit)" in both[0]


def test_profile_bandwidth_sets_the_rate_the_profile_ran_at(tmp_path):
    """--profile-bandwidth overrides the lab's rate: the sweep's default rate and the baselines'
    scaling follow it (the sample ran at 1 Gbit/s; said to be 500 Mbit/s, a 1 Gbit/s row of a
    baseline is the 500 Mbit/s one's link times halved)."""
    out = tmp_path / "p.json"
    proc = gradwire("predict", "--sample", "--workers", "1", "--model", "mva-exact",
                    "--profile-bandwidth", "500Mbit", "--format", "json", timeout=300)
    out.write_text(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["bandwidth_bps"] == 500e6
    proc = gradwire("predict", "--sample", "--workers", "1", "--model", "mva-exact",
                    "--bandwidth", "1Gbit", "--profile-bandwidth", "500Mbit", "--json", str(out),
                    timeout=300)
    (fast,) = json.loads(out.read_text())["rows"]
    assert fast["examples_per_s"] > row["examples_per_s"]


def test_the_lone_peer_note_explains_a_ring_of_one():
    """A ring of one worker exchanges nothing: a note says its W = 1 row is the compute alone
    (the speedups of its rows read below 1x otherwise without a word)."""
    import dataclasses

    from gradwire.replay.options import PredictOptions

    opts = PredictOptions(bundles=("b",), workers=(1, 2), mechanisms=("ring-allreduce",))
    assert "its W = 1 row is the compute alone" in lone_peer_note(opts)
    assert lone_peer_note(dataclasses.replace(opts, workers=(2, 4))) is None
    assert lone_peer_note(dataclasses.replace(opts, mechanisms=("sync-ps",))) is None


def test_a_profile_captured_while_the_hypervisor_took_cores_says_so(tmp_path):
    """collect's manifest has the machine's CPU over the capture (``host_cpu``); a node that
    lost a tenth of its cores or more to its hypervisor makes predict say the rows may be low.
    The sample predates the record: it has none, and no note."""
    import dataclasses
    import shutil

    from gradwire.replay.notes import stolen_note

    prof = load_profile([SAMPLE])
    assert prof.capture_stolen is None and stolen_note(prof) is None
    copy = tmp_path / "sample"
    shutil.copytree(SAMPLE, copy)
    for node, stolen in (("ps0", 0.1), ("worker0", 0.5)):
        path = copy / node / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["host_cpu"] = {"seconds": 3.0, "busy_cores": 0.8, "stolen_cores": stolen}
        manifest["host"]["cpu_count"] = 2  # collect writes both (the sample predates them)
        path.write_text(json.dumps(manifest))
    prof = load_profile([copy])
    assert prof.capture_stolen == (0.5, 2)
    note = stolen_note(dataclasses.replace(prof, capture_stolen=(0.5, 2)))
    assert "lost 0.50 of its 2 cores to its hypervisor" in note
    assert stolen_note(dataclasses.replace(prof, capture_stolen=(0.2, 2))) is None


def test_the_many_workers_note_says_where_the_replay_has_run_low():
    from dataclasses import replace

    from gradwire.replay.notes import MANY_WORKERS, many_workers_note
    from gradwire.replay.options import PredictOptions
    opts = PredictOptions(bundles=(Path("profile"),), workers=(1, 2, MANY_WORKERS),
                          mechanisms=("async-ps",), link="fair")
    note = many_workers_note(opts, {"qdisc": "fifo"})
    assert note is not None and "6-18% low at 21" in note and "--model emulate" in note
    assert many_workers_note(opts, {}) == note  # no lab: a cluster's queue, FIFO-like
    assert many_workers_note(opts, {"qdisc": "fair"}) is None  # the lab queued each node apart
    for other in (dict(workers=(1, 2, MANY_WORKERS - 1)), dict(mechanisms=("sync-ps",)),
                  dict(link="hostqueue"), dict(models=("mva-exact",))):
        assert many_workers_note(replace(opts, **other), {}) is None
    # its W >= MANY_WORKERS rows went through the PS's own queue (replay/ownqueue.py)
    assert many_workers_note(opts, {}, shared_workers=[1, 2]) is None
    assert many_workers_note(opts, {}, shared_workers=[1, MANY_WORKERS]) == note


def test_the_several_ps_note_says_where_shares_by_window_ran_low():
    from dataclasses import replace

    from gradwire.replay.notes import several_ps_shares_note
    from gradwire.replay.options import PredictOptions
    opts = PredictOptions(bundles=(Path("profile"),), workers=(1, 2, 4),
                          mechanisms=("async-ps",), link="fair", worker_bandwidth="unlimited",
                          share_windows=((300e3, 320e3), (280e3,)))
    note = several_ps_shares_note(opts, [1, 2])
    assert note is not None and "12-25% low" in note and "issue21-fresh-1207" in note
    assert several_ps_shares_note(opts, [1]) is None  # one PS: registered twice, no note
    for other in (dict(workers=(1,)), dict(share_windows=((), ())),
                  dict(mechanisms=("sync-ps",)), dict(models=("mva-exact",)),
                  dict(worker_bandwidth="same")):  # coupled NICs: shared max-min
        assert several_ps_shares_note(replace(opts, **other), [2]) is None


def test_a_measured_folder_passes_over_json_files_that_are_no_lab_results(tmp_path):
    """A bench configuration's folder holds config.json and predict.json beside its runs:
    --measured on it reads the runs (it failed on config.json); a folder of JSON files none
    of which is a lab result is one error naming it."""
    import shutil

    from gradwire.bundle import SAMPLE_MEASURED

    runs = tmp_path / "cfg"
    shutil.copytree(SAMPLE_MEASURED, runs)
    (runs / "config.json").write_text('{"name": "a bench configuration"}\n')
    (runs / "predict.json").write_text('{"rows": []}\n')
    proc = gradwire("predict", "--sample", "--workers", "1,2", "--measured", str(runs),
                    "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert {m["workers"] for m in json.loads(proc.stdout)["measured"]} == {1, 2}
    for name in list(runs.glob("lab-*.json")):
        name.unlink()
    proc = gradwire("predict", "--sample", "--workers", "1", "--measured", str(runs))
    assert proc.returncode == 2 and "no lab result (*.json) in this --measured folder (2 " \
        in proc.stderr
