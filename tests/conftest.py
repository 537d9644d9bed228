"""Shared fixtures. A test that needs root, tshark or TensorFlow fails in CI when they are
missing (CI installs them) and skips, naming what is missing, for a user without them."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REALDATA = REPO.parent / "shared" / "realdata"
SAMPLE = REPO / "tests" / "data" / "small_bundle"  # the lab's small MLP job (0.2 MB, 1 Gbit/s)
sys.path.insert(0, str(Path(__file__).parent))
import cli_zygote  # noqa: E402  (tests/, on the path just above)

# every test builds its profiles from the bundles, and writes nothing under the user's home
# (tests/test_profilecache.py turns the cache on in a folder of its own)
os.environ["GRADWIRE_CACHE"] = "off"


def sample_bench_config(tmp_path: Path, run: dict[str, Any], name: str = "sample-20mbit",
                        config: dict[str, Any] | None = None, max_replications: int = 8,
                        **predicted: Any) -> Path:
    """A bench configuration folder (``bench-out/SET/NAME``, ``name``) around the shipped
    sample profile: its config (batch 32, and ``config``'s keys), a ``predict.json`` with the
    bench's command line (at most ``max_replications``; ``predicted`` keys beside it) and one
    lab run at W = 2, ``run`` (``w2.json``). For the diag scripts."""
    cfg = tmp_path / name
    cfg.mkdir()
    shutil.copytree(REPO / "gradwire" / "data" / "sample_bundle", cfg / "profile")
    (cfg / "config.json").write_text(json.dumps({"batch_size": 32, **(config or {})}))
    (cfg / "predict.json").write_text(json.dumps({"gradwire": {"argv": [
        "predict", "/elsewhere/profile", "--workers", "1,2", "--model", "sim,mva-exact",
        "--run-steps", "12", "--replications", "4", "--max-replications",
        str(max_replications), "--format", "json"]}, **predicted}))
    (cfg / "w2.json").write_text(json.dumps(run))
    return cfg


def turning_pair_config(tmp_path: Path) -> Path:
    """``sample_bench_config`` with one W = 2 lab run of 120 ex/s whose two workers take
    turns (step ends 0.5 s apart, the second a quarter step behind: spacing 0.5) inside its
    throughput window [2, 7] s."""
    ends0 = [1.0 + 0.5 * k for k in range(13)]
    ends1 = [1.25 + 0.5 * k for k in range(12)]
    return sample_bench_config(tmp_path, {
        "throughput_examples_per_s": 120.0, "throughput_window_s": [2.0, 7.0],
        "per_worker": {"worker0": {"step_end_times_s": ends0},
                       "worker1": {"step_end_times_s": ends1}}})


def check_missing_prediction(script: Path, cfg: Path) -> None:
    """``script`` (a diag script reading a bench folder) run on ``cfg`` once its
    predict.json is gone: a one-line error naming the file, exit 1, no traceback."""
    (cfg / "predict.json").unlink()
    proc = subprocess.run([sys.executable, str(script), str(cfg), "--workers", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"{script.stem}: ") and "predict.json" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def need(ok: bool, what: str) -> None:
    """Skip (or, in CI, fail) unless ``ok``; ``what`` names the missing requirement."""
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide {what}")
    pytest.skip(reason=f"needs {what}")


def need_root() -> None:
    need(os.geteuid() == 0, "root (packet capture / network namespaces)")


def need_tshark() -> None:
    need(shutil.which("tshark") is not None, "tshark (apt-get install tshark)")


def need_tf() -> None:
    need(importlib.util.find_spec("tensorflow") is not None,
         "TensorFlow (pip install 'gradwire[tf]')")


def graph_ancestors(op: Any) -> set[Any]:
    """The TensorFlow ops ``op`` needs, through data and control edges (what a run of it
    executes)."""
    seen, todo = set(), [op]
    while todo:
        o = todo.pop()
        if o in seen:
            continue
        seen.add(o)
        todo += [t.op for t in o.inputs] + list(o.control_inputs)
    return seen


def need_realdata() -> None:
    need(REALDATA.is_dir(), f"the shared real-data folder at {REALDATA}")


def gradwire(*args: str, timeout: float = 120, cwd: Any = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real `gradwire` command in a process of its own (``python -m gradwire``,
    forked from a process that has loaded gradwire: tests/cli_zygote.py)."""
    return cli_zygote.run(args, timeout, cwd=cwd, env=env)


def stand_in_runner(step_of: Any, calls: list) -> Any:
    """An emulator runner standing in for the namespaces (replay/emulate.py ``Runner``): one
    worker's step is ``step_of(job)`` (s), ``W`` workers take it in turn, 12 step ends each;
    ``calls`` records each run as (job, link, W, its start spread in s)."""
    def run(job: Any, link: Any, workers: int, start_spread_s: float = 0.0) -> list[list[float]]:
        calls.append((job, link, workers, start_spread_s))
        dt = step_of(job) * workers
        return [[w * dt / workers + dt * k for k in range(12)] for w in range(workers)]
    return run


def assert_sweep_stops_midway(out_dir: Path, *extra: str) -> None:
    """Run a 64-configuration ``gradwire predict`` sweep of the sample with ``extra`` options,
    send SIGTERM at its first progress line, and check the stop: exit 128 + 15, no
    traceback, the rows already simulated printed (a table on stdout, their count on
    stderr), and ``out_dir`` (its --out) not written."""
    import re
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "gradwire", "predict", str(SAMPLE), "-v",
                             "--workers", "1-32", "--bandwidth", "1Gbit,10Gbit",
                             "--out", str(out_dir), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # progress lines: one per tenth of the 64 configurations
        lines.append(line)
        if "simulated " in line:
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=120)
    err = "".join(lines) + err
    assert proc.returncode == 128 + signal.SIGTERM, err
    found = re.search(r"stopped after (\d+) of 64 configurations", err)
    assert found and 6 <= int(found.group(1)) < 64, err
    assert out.count("│ sim ") == int(found.group(1)), out
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert not out_dir.exists()


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Non-zero exit, one line on stderr holding every fragment, no traceback."""
    assert proc.returncode != 0, proc
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


@pytest.fixture
def realdata() -> Path:
    need_realdata()
    return REALDATA


def partial_overlaps(trace: dict) -> int:
    """Chrome trace X slices on one thread that overlap another without nesting in it (Perfetto
    draws those wrongly); 0 for a well-formed trace."""
    by_thread: dict[tuple, list[tuple[float, float]]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    bad = 0
    for slices in by_thread.values():
        open_ends: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start + 5e-4:  # times are written to 1 ns
                open_ends.pop()
            if open_ends and end > open_ends[-1] + 5e-4:
                bad += 1
            open_ends.append(end)
    return bad
