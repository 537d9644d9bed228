"""Inputs gradwire cannot read (permissions, links that loop, a trace/ that is not a folder,
damaged RunMetadata) and outputs it cannot finish: one line naming the file and the fault,
never a traceback, and nothing old replaced."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import SAMPLE, assert_one_line_error, gradwire, need

from gradwire import atomic
from gradwire.errors import GradwireError

# root reads any file; these checks drop the capability that lets it (util-linux's setpriv)
NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search"]


def gradwire_bound_by_permissions(*args: str) -> subprocess.CompletedProcess:
    """`gradwire ARGS` as a user whom file permissions bind (root without its override)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        need(shutil.which("setpriv") is not None, "setpriv (util-linux) to drop root's "
             "file-permission override")
        prefix = NO_OVERRIDE
    return subprocess.run([*prefix, sys.executable, "-m", "gradwire", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def bundles(tmp_path: Path) -> Path:
    out = tmp_path / "b"
    shutil.copytree(SAMPLE, out)
    yield out
    for p in [out, *out.rglob("*")]:  # let pytest remove what a test made unreadable
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)


def test_an_unreadable_folder_beside_bundles_is_named_and_skipped(bundles: Path) -> None:
    private = bundles / "private"
    private.mkdir()
    (private / "capture.pcapng").write_bytes(b"")
    private.chmod(0)
    proc = gradwire_bound_by_permissions("inspect", str(bundles))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{private}: cannot look into it: Permission denied; skipped" in proc.stderr
    assert "worker0" in proc.stdout and "ps0" in proc.stdout


def test_an_unreadable_bundle_folder_is_one_line(bundles: Path) -> None:
    (bundles / "worker0").chmod(0)
    proc = gradwire_bound_by_permissions("inspect", str(bundles / "worker0"))
    assert_one_line_error(proc, "worker0: cannot read this folder: Permission denied")
    bundles.chmod(0)
    proc = gradwire_bound_by_permissions("predict", str(bundles), "--workers", "1")
    assert_one_line_error(proc, f"{bundles}: cannot read this folder: Permission denied")


def test_a_node_folder_that_loops_is_named_not_dropped(bundles: Path) -> None:
    (bundles / "worker1").symlink_to("worker1")
    proc = gradwire("inspect", str(bundles))
    assert proc.returncode == 0, proc.stderr
    assert "worker1: cannot look into it: a symbolic link that loops" in proc.stderr


def test_a_trace_that_is_not_a_folder_is_an_error_not_a_bundle_without_steps(
        bundles: Path) -> None:
    trace = bundles / "worker0" / "trace"
    shutil.rmtree(trace)
    trace.write_text("not a folder\n")
    proc = gradwire("inspect", str(bundles / "worker0"))
    assert_one_line_error(proc, "trace: is not a folder (a bundle's trace/ holds its step files)")
    trace.unlink()
    trace.symlink_to("trace")
    proc = gradwire("predict", str(bundles), "--workers", "1")
    assert_one_line_error(proc, "trace: cannot read this folder: a symbolic link that loops")


def test_a_manifest_not_utf8_names_the_byte(bundles: Path) -> None:
    manifest = bundles / "worker0" / "manifest.json"
    manifest.write_bytes(b'{"a": "\xff"}')
    proc = gradwire("inspect", str(bundles / "worker0"))
    assert_one_line_error(proc, "manifest.json: cannot read: not UTF-8 text (byte 7)")


def test_an_empty_runmeta_is_a_problem_and_stops_opdb_ingest(bundles: Path,
                                                              tmp_path: Path) -> None:
    pytest.importorskip("google.protobuf", reason="needs protobuf (gradwire[predict])")
    runmeta = bundles / "worker0" / "trace" / "step-00000004.runmeta.pb"
    runmeta.write_bytes(b"")
    proc = gradwire("inspect", str(bundles / "worker0"))  # a problem in the report
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "step-00000004.runmeta.pb: holds no step statistics (an empty file)" in proc.stdout
    # the report whole on stdout; stderr's one line repeats its first problem, named by bundle
    assert proc.stderr.startswith(f"gradwire inspect: problem: {bundles / 'worker0'}: step 4: "
                                  "step-00000004.runmeta.pb: holds no step statistics"), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    proc = gradwire("opdb", "ingest", "--db", str(tmp_path / "ops.sqlite"),
                    str(bundles / "worker0"))
    assert_one_line_error(proc, "step-00000004.runmeta.pb: holds no step statistics")
    runmeta.unlink()
    runmeta.mkdir()  # a folder where the file goes: named as such, not "missing"
    proc = gradwire("inspect", str(bundles / "worker0"))
    assert "step-00000004.runmeta.pb: is a folder, not a regular file" in proc.stdout


def test_outputs_written_as_one_leave_every_old_file_when_one_fails(tmp_path: Path) -> None:
    """A FIFO nobody reads at the second of three names: nothing is replaced (the first was
    replaced before, then the FIFO refused)."""
    first, third = tmp_path / "a.json", tmp_path / "c.json"
    first.write_text("old a\n")
    third.write_text("old c\n")
    fifo = tmp_path / "b.csv"
    os.mkfifo(fifo)
    files = [(first, "new a\n", "output file"), (fifo, "new b\n", "output file"),
             (third, "new c\n", "output file")]
    with pytest.raises(GradwireError, match="no process is reading this FIFO"):
        atomic.write_outputs(files)
    assert first.read_text() == "old a\n" and third.read_text() == "old c\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.csv", "c.json"]
    full = Path("/dev/full")  # a write that fails late, at its flush: nothing replaced either
    if full.exists():
        with pytest.raises(GradwireError, match="No space left on device"):
            atomic.write_outputs([(first, "new a\n", "output file"),
                                  (full, "new b\n", "output file"),
                                  (third, "new c\n", "output file")])
        assert first.read_text() == "old a\n" and third.read_text() == "old c\n"
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    while not got and reader.is_alive():  # the reader has the FIFO open once a write lands
        try:
            assert atomic.write_outputs(files) == [first, fifo, third]
            break
        except GradwireError:
            continue
    reader.join(10)
    assert got == [b"new b\n"]
    assert first.read_text() == "new a\n" and third.read_text() == "new c\n"


def test_step_tables_named_otherwise_are_said_not_dropped_silently(bundles: Path) -> None:
    trace = bundles / "worker0" / "trace"
    shutil.copy(trace / "step-00000004.ops.json", trace / "step-4.ops.json")
    proc = gradwire("inspect", str(bundles / "worker0"))
    assert proc.returncode == 0, proc.stderr
    assert ("trace: 1 step table(s) named otherwise than step-NNNNNNNN.ops.json (8 to 18 "
            "digits) left out: step-4.ops.json") in proc.stderr


def test_an_empty_timeline_text_proto_is_named_empty(tmp_path: Path) -> None:
    pytest.importorskip("google.protobuf", reason="needs protobuf (gradwire[predict])")
    empty = tmp_path / "empty.pbtxt"
    empty.write_text("")
    assert_one_line_error(gradwire("align", str(empty)),
                          "empty.pbtxt: holds no step statistics (an empty file)")


@pytest.mark.parametrize("command, first", [("predict", "predictions.json"),
                                            ("align", "offsets.json")])
def test_an_output_folder_named_as_a_file_is_refused_alike(tmp_path: Path, command: str,
                                                            first: str) -> None:
    out = tmp_path / "result.json"
    proc = gradwire(command, "--sample", "-o", str(out))
    assert_one_line_error(proc, f"-o names the folder {command} writes its files into (DIR/"
                          f"{first}...), not a file")
    assert not out.exists()

