"""One CLI convention: every command's --help shows the same names for the same meaning, and
old spellings still work with a deprecation note naming the new one."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLE, assert_one_line_error, gradwire

from gradwire.cli import build_parser

ONE_RESULT = ("inspect", "frames", "streams", "win", "overhead", "phases")
FOLDER_RESULTS = ("collect", "align", "predict")
READS_CAPTURES = ("collect", "frames", "streams", "win", "phases")


def _options(command: str) -> dict[str, str]:
    """option string -> metavar (or '' for a flag) of one subcommand, hidden ones left out."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {s: (a.metavar or "") for a in sub._actions if a.help != "==SUPPRESS=="
            for s in a.option_strings}


@pytest.mark.parametrize("command", ONE_RESULT + FOLDER_RESULTS)
def test_every_command_has_the_shared_options(command: str) -> None:
    opts = _options(command)
    for name in ("-o", "--out", "-q", "--quiet", "-v", "--verbose"):
        assert name in opts, (command, name)
    assert opts["--out"] == ("DIR" if command in FOLDER_RESULTS else "FILE")
    if command != "collect":
        assert "--format" in opts
    assert ("--ports" in opts) == (command in READS_CAPTURES)
    assert "--port" not in opts and "--json" not in opts  # old spellings are hidden


def test_no_command_reads_the_sample_unasked() -> None:
    for command in ("inspect", "align", "predict", "optimize"):
        proc = gradwire(command)
        assert proc.returncode == 2 and "--sample" in proc.stderr, proc.stderr


def test_align_without_an_output_folder_prints_its_report_and_writes_nothing(tmp_path) -> None:
    """align wanted -o where every other command prints to standard output without one."""
    proc = gradwire("align", "--sample", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hosts"] and not any(tmp_path.iterdir())


def test_old_spellings_work_with_a_note(tmp_path) -> None:
    proc = gradwire("phases", str(SAMPLE / "ps0"), "--json", "--port", "2222")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)
    notes = [ln for ln in proc.stderr.splitlines() if "is deprecated" in ln]
    assert len(notes) == 2 and "--format json" in notes[0] and "--ports" in notes[1]


def test_win_writes_nothing_unless_asked(tmp_path) -> None:
    proc = gradwire("win", str(SAMPLE / "worker0"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "fitted" in proc.stdout.lower() and list(tmp_path.iterdir()) == []
    proc = gradwire("win", str(SAMPLE / "worker0"), "-o", "w.json", cwd=tmp_path)
    assert proc.returncode == 0 and "wrote w.json" in proc.stderr
    assert json.loads((tmp_path / "w.json").read_text())["fit"]["steps"] > 0


def test_the_sample_is_predicted_beside_its_measured_runs() -> None:
    """--sample compares with the lab runs shipped beside it (W = 1..4, 5 runs each); those
    off the sweep go quietly, since they were not asked for."""
    proc = gradwire("predict", "--sample", "--workers", "1,2", "--format", "json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(m["workers"] for m in doc["measured"]) == [1, 2]
    assert all(len(m["runs"]) == 5 for m in doc["measured"])
    assert "match no predicted one" not in proc.stderr


@pytest.mark.parametrize("args", [["predict", "--sample", "--workers", "1"],
                                  ["inspect", str(SAMPLE / "ps0")]])
def test_quiet_prints_no_table(args: list[str]) -> None:
    """-q: no table on standard output, for a folder command (predict) as for a file one."""
    proc = gradwire(*args, "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_quiet_wins_over_verbose_for_progress_lines() -> None:
    """-q -v: the log level rises, but no progress line ("reading 2 bundles ...")."""
    args = ["predict", "--sample", "--workers", "1"]
    loud = gradwire(*args, "-v", timeout=300)
    quiet = gradwire(*args, "-q", "-v", timeout=300)
    assert loud.returncode == quiet.returncode == 0, quiet.stderr
    said = [ln for ln in loud.stderr.splitlines()
            if ln.startswith("gradwire predict: ") and "note:" not in ln]
    assert said, loud.stderr  # -v alone shows progress
    assert not [ln for ln in quiet.stderr.splitlines() if ln in said], quiet.stderr


def test_every_help_text_reads_as_written() -> None:
    """argparse %-formats option help but not a raw description: a '%%' meant for the one
    shows doubled in the other (optimize's description said "95%%")."""
    import contextlib
    import io

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in commands.items():
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            sub.print_help()
        assert "%%" not in text.getvalue(), name
        assert "%(" not in text.getvalue(), name


def test_building_the_parser_loads_no_numeric_library() -> None:
    """`gradwire --help`, `--version` and every command's parsing start without numpy,
    networkx, cvxpy, scipy or numba (each is loaded by the command that computes with it):
    in a fresh interpreter, building the whole parser leaves them unimported."""
    import subprocess
    import sys

    heavy = ("numpy", "networkx", "cvxpy", "scipy", "numba")
    code = ("import sys; from gradwire.cli import build_parser; build_parser(); "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "", f"building the parser imported {out}"


@pytest.mark.parametrize("args, command", [
    (["phases", str(SAMPLE / "ps0"), "--bogus"], "gradwire phases"),
    (["frames", "a", "b"], "gradwire frames"),
    (["opdb", "show", "--bogus"], "gradwire opdb show")])
def test_an_argument_no_parser_takes_is_refused_by_its_command(args, command) -> None:
    """It was `gradwire: error: unrecognized arguments: ... (see gradwire --help)`."""
    proc = gradwire(*args)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{command}: error: unrecognized "
                                                           "arguments:"), proc.stderr
    assert proc.stderr.rstrip().endswith(f"(see {command} --help)"), proc.stderr


@pytest.mark.parametrize("args, usage", [
    # options checked past the parser, whatever their words begin with
    (["predict", "--sample", "--workers", "0"], True),
    (["predict", "--sample", "--model", "bogus"], True),  # "unknown model 'bogus': ..."
    (["predict", "--sample", "--steps", "60", "--warmup-steps", "60"], True),
    (["predict"], True),  # "give the profile's bundles ..."
    (["collect", "--out", "-", "--", "true"], True),
    # a fault in a file: its path comes first, no pointer to the help
    (["predict", "/nonexistent/bundles"], False)])
def test_a_usage_error_past_the_parser_points_to_the_help_and_a_files_fault_does_not(
        args, usage) -> None:
    """The pointer is the error's own ``usage`` (set where an option is checked); it was
    chosen by the message's first words, which left "unknown model" without it."""
    proc = gradwire(*args)
    command = f"gradwire {args[0]}"
    assert proc.returncode == 2 and proc.stderr.startswith(f"{command}: error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(f"(see {command} --help)") == usage, proc.stderr


def test_the_usage_mark_survives_a_worker_process() -> None:
    """Errors raised in a worker process come back pickled (gradwire/procpool.py)."""
    import pickle

    from gradwire.errors import GradwireError, PredictError

    for err in (PredictError("--workers names no count", usage=True),
                GradwireError("corrupt", path="/x/y.json")):
        back = pickle.loads(pickle.dumps(err))
        assert (type(back), back.usage, back.path, str(back)) == (
            type(err), err.usage, err.path, str(err))


def test_log_lines_read_as_the_commands_lines(tmp_path) -> None:
    """A warning was `gradwire: WARNING gradwire.bundle: ...`; -vv printed thousands of the
    HPACK decoder's debug lines and none of gradwire's."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    (tmp_path / "b" / "worker0" / "manifest.json").unlink()
    proc = gradwire("inspect", str(tmp_path / "b"), "--format", "json")
    assert proc.returncode == 0 and proc.stderr.startswith(
        "gradwire inspect: warning: ") and "no manifest.json; skipped" in proc.stderr
    proc = gradwire("-vv", "phases", str(SAMPLE / "ps0"), "-o", str(tmp_path / "p.json"))
    assert proc.returncode == 0 and "hpack" not in proc.stderr, proc.stderr[:500]


def test_a_row_table_is_aligned_and_splits_into_its_columns() -> None:
    from gradwire.export import FRAME_COLUMNS

    proc = gradwire("frames", str(SAMPLE / "ps0"), "--format", "table")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[0].split() == FRAME_COLUMNS
    assert all(len(ln.split()) == len(FRAME_COLUMNS) for ln in lines)
    assert all(ln == ln.rstrip() for ln in lines)
    starts = {ln.index(ln.split()[2], 25) for ln in lines[1:200]}  # dst: one column start
    assert len(starts) == 1, starts


def test_a_batch_size_against_the_profiles_says_what_it_does() -> None:
    """`--batch-size 64` on the sample (batch 32) doubled every row without a word, and the
    sample's lab runs left the table silently."""
    proc = gradwire("predict", "--sample", "--workers", "1", "--batch-size", "64", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "--batch-size 64 is not the batch the profile ran (32" in proc.stderr
    assert "--to-batch-size 64 --opdb DB" in proc.stderr
    assert "ran another job than the one predicted" in proc.stderr
    assert "vs W=1" in proc.stdout  # the speedup column names its base


def test_csv_cells_of_whole_floats_are_whole_numbers() -> None:
    from gradwire.export import _cell

    assert [_cell(2e7), _cell(1e9), _cell(1795301573.569215), _cell(0.5)] == [
        "20000000", "1000000000", "1795301573.569215", 0.5]


def test_a_csv_of_no_rows_is_its_header() -> None:
    import io

    from gradwire.export import write_rows

    out = io.StringIO()
    assert write_rows(iter(()), "csv", ["a", "b"], out) == 0
    assert out.getvalue().splitlines() == ["a,b"]
    out = io.StringIO()
    assert write_rows([{"a": 1, "b": 2}], "csv", ["a", "b"], out) == 1
    assert out.getvalue().splitlines() == ["a,b", "1,2"]


@pytest.mark.parametrize("command", ["frames", "streams", "win", "phases", "overhead"])
def test_the_capture_commands_read_the_sample_when_asked(command: str) -> None:
    proc = gradwire(command, "--sample", "--format", "json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.lstrip().startswith(("[", "{"))
    assert_one_line_error(gradwire(command), "or --sample for the sample bundle shipped with")
