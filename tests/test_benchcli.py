"""The benchmark scripts' argument types (scripts/benchcli.py): a results file, a folder, a
git revision and a size are checked before any work, so that a wrong path never loses a
finished run's results; and the scripts refuse them in one line."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

from benchcli import output_file, output_folder, revision, size_text  # noqa: E402


def test_a_results_file_must_be_writable_where_it_is_named(tmp_path) -> None:
    assert output_file(str(tmp_path / "out.json")) == tmp_path / "out.json"
    (tmp_path / "old.json").write_text("{}")
    assert output_file(str(tmp_path / "old.json")) == tmp_path / "old.json"  # replaced
    with pytest.raises(argparse.ArgumentTypeError, match="not a regular file"):
        output_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="is not there"):
        output_file(str(tmp_path / "missing" / "out.json"))


def test_a_folder_a_revision_and_a_size_are_checked() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="a file, not a folder"):
        output_folder(__file__)
    assert revision("HEAD") == "HEAD"
    with pytest.raises(argparse.ArgumentTypeError, match="no such commit"):
        revision("no-such-revision-zzzz")
    assert size_text("64MiB") == "64MiB"
    with pytest.raises(argparse.ArgumentTypeError, match="bad size"):
        size_text("foo")


@pytest.mark.parametrize(("script", "args", "message"), [
    ("bench_mechanisms.py", ["--json", "/"], "not a regular file"),
    ("bench_mechanisms.py", ["--scale", "abc"], "not an integer"),
    ("bench_replay.py", ["--json", "/"], "not a regular file"),
    ("bench_opdb_build.py", ["--groups", "0"], "must be >= 1"),
    ("bench_opdb_build.py", ["--cache-pass", "foo"], "bad size"),
    ("bench_opdb_predict.py", ["--db", __file__], "not an op cost database"),
    ("bench_accuracy.py", ["report", "--out", __file__], "not a folder"),
])
def test_the_scripts_refuse_bad_arguments_in_one_line_before_any_work(script, args,
                                                                      message) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / script), *args],
                          capture_output=True, text=True, timeout=120, cwd=SCRIPTS)
    assert proc.returncode in (1, 2) and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
