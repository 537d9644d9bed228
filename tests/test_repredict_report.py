"""scripts/repredict_report.py: the measured numbers it reads from a stored report, and its
refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "repredict_report.py"
REPORT = ROOT / "docs" / "preregistered" / "issue22-sync-matrix-report-2.md"


def test_it_reads_each_configurations_rate_and_measured_rows_from_the_report():
    sys.path.insert(0, str(SCRIPT.parent))
    from repredict_report import measured_tables

    tables = measured_tables(REPORT)
    assert len(tables) == 6
    deep = tables["deepmlp10-b32-500mbit-ps1-fcon-sync"]
    assert deep["rate"] == ["500mbit"]
    assert deep["rows"][0] == (1, 95.01, -4.4) and [w for w, _, _ in deep["rows"]] == [
        1, 2, 3, 4, 6]
    assert tables["mobilenet-b16-625mbit-ps1-fcon-sync"]["rows"][-1] == (6, 44.67, -7.9)
    assert deep["ps"] == ["1"]


def test_it_reads_a_cross_predictions_ps_count():
    sys.path.insert(0, str(SCRIPT.parent))
    from repredict_report import measured_tables

    tables = measured_tables(ROOT / "docs" / "preregistered" / "issue21-matrix-report-4.md")
    assert tables["deepmlp10-b32-500mbit-ps2-fcon"]["ps"] == ["2"]
    assert tables["deepmlp10-b32-500mbit-ps3-fcon"]["rows"][0][0] == 1
    assert tables["recsys20-b32-40mbit-ps1-fcon"]["rate"] == ["40mbit"]


def test_a_name_not_in_the_report_is_refused_in_one_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), str(REPORT), "nosuch=profile"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "nosuch" in proc.stderr and "Traceback" not in proc.stderr


def test_a_benchmark_configuration_is_predicted_with_its_jobs_options():
    """A partitioned or accumulated configuration of the benchmark is re-predicted with the
    options the benchmark's own predict stage gives it (``bench_accuracy.job_options``),
    so a job what-if is not re-predicted as the plain job."""
    sys.path.insert(0, str(SCRIPT.parent))
    from bench_accuracy import CONFIGS, job_options

    by_name = {c.name: c for c in CONFIGS}
    assert job_options(by_name["recsys20-b32-100mbit-ps3-fcon-part3"]) == ["--partition", "3"]
    from bench_accuracy import OPDB  # accumulation reads its micro-steps' time there

    assert job_options(by_name["deepmlp10-b32-500mbit-ps1-fcon-acc4"]) == [
        "--accumulate", "4", *(["--opdb", str(OPDB)] if OPDB.is_file() else [])]
    assert job_options(by_name["deepmlp10-b32-500mbit-ps1-fcon-xla"]) == [
        "--op-fusion", "--opdb", str(OPDB)]
    assert job_options(by_name["mlp20-b32-1gbit-ps1-fcoff"]) == ["--flow-control", "off"]
    assert job_options(by_name["recsys20-b32-100mbit-ps1-fcon"]) == []
    import repredict_report

    assert repredict_report.job_options is job_options  # the script uses the same options
