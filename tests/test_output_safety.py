"""Every output option of every command, against every kind of path it may be given: a write
never replaces, renames or deletes anything but a regular file (or a new path) the user named,
never touches collected data or the command's own inputs, and a refusal is one line.

As root the device cases use private copies of /dev/null and /dev/full (mknod, same device
numbers) and a private link to /proc/self/fd/1, so that a regression could not replace the
machine's own /dev files; as another user the real /dev paths are used (they cannot be
replaced without root).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REALDATA, SAMPLE, assert_one_line_error, gradwire, need_realdata

SAMPLE_PS = SAMPLE / "ps0"
SAMPLE_WORKER = SAMPLE / "worker0"
QUICK_PREDICT = ("--workers", "1", "--replications", "2", "--max-replications", "2",
                 "--steps", "10")

# command -> (arguments before the output path, the output option, does it name a folder)
FILE_COMMANDS = {
    "inspect": (["inspect", "--sample"], "-o"),
    "frames": (["frames", str(SAMPLE_PS / "capture.pcapng")], "-o"),
    "streams": (["streams", str(SAMPLE_PS / "capture.pcapng")], "-o"),
    "win": (["win", str(SAMPLE_WORKER)], "-o"),
    "overhead": (["overhead", str(SAMPLE)], "-o"),
    "phases": (["phases", str(SAMPLE_PS)], "-o"),
    "predict --json": (["predict", "--sample", *QUICK_PREDICT], "--json"),
}
FOLDER_COMMANDS = {
    "align": (["align", str(SAMPLE)], "-o"),
    "predict": (["predict", "--sample", *QUICK_PREDICT], "-o"),
    "collect": (["collect", "--ports", "9", "--iface", "lo", "--attach", "--duration", "0.1"],
                "-o"),
}
SLOW = {"align", "predict", "predict --json", "collect"}


def _mark(names: dict) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


def _state(path: Path) -> tuple:
    """What a path is, without following a final symlink: kind, device, link target, and a
    regular file's sha256."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ("missing",)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return (stat.S_IFMT(st.st_mode), st.st_rdev, st.st_ino)


def _tree(folder: Path) -> dict[str, tuple]:
    return {str(p.relative_to(folder)): _state(p) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """Every kind of output path the matrix tries."""
    d = tmp_path / "places"
    d.mkdir()
    if os.geteuid() == 0:
        os.mknod(d / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(d / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        (d / "stdout").symlink_to("/proc/self/fd/1")
        devs = {"stdout": d / "stdout", "null": d / "null", "full": d / "full"}
    else:
        devs = {"stdout": Path("/dev/stdout"), "null": Path("/dev/null"),
                "full": Path("/dev/full")}
    os.mkfifo(d / "fifo")
    (d / "target.txt").write_text("old\n")
    (d / "link").symlink_to(d / "target.txt")
    (d / "dangling").symlink_to(d / "gone.txt")
    (d / "loop").symlink_to(d / "loop")
    (d / "folder").mkdir()
    (d / "folder" / "keep.txt").write_text("kept\n")
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE_WORKER, bundle)
    (d / "into-trace").symlink_to(bundle / "trace" / "session.json")
    return {**devs, "fifo": d / "fifo", "link": d / "link", "target": d / "target.txt",
            "dangling": d / "dangling", "loop": d / "loop", "folder": d / "folder",
            "bundle": bundle, "manifest": bundle / "manifest.json",
            "capture": bundle / "capture.pcapng", "into-trace": d / "into-trace"}


def _without_deprecation(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``proc`` less the deprecation note of an old spelling (predict --json FILE)."""
    proc.stderr = "".join(ln for ln in proc.stderr.splitlines(True) if "is deprecated" not in ln)
    return proc


def _run_with_reader(args: list[str], fifo: Path) -> tuple[subprocess.CompletedProcess, bytes]:
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    proc = gradwire(*args, timeout=300)
    if proc.returncode != 0:  # unblock the reader: it waits for a writer
        with open(fifo, "wb"):
            pass
    reader.join(30)
    return proc, got[0] if got else b""


@pytest.mark.parametrize("command", _mark(FILE_COMMANDS))
def test_a_file_output_harms_nothing(command: str, places: dict[str, Path]) -> None:
    before = {k: _state(p) for k, p in places.items() if k != "bundle"}
    bundle_before = _tree(places["bundle"])
    args, opt = FILE_COMMANDS[command]

    def run(where: Path | str) -> subprocess.CompletedProcess:
        return _without_deprecation(gradwire(*args, opt, str(where), timeout=300))

    ok = run(places["stdout"])  # written through standard output
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() and "Traceback" not in ok.stderr
    assert run(places["null"]).returncode == 0
    assert_one_line_error(run(places["full"]), "No space left on device")
    proc, data = _run_with_reader([*args, opt, str(places["fifo"])], places["fifo"])
    assert proc.returncode == 0 and data.strip(), proc.stderr
    proc = run(places["link"])  # the target is replaced, the link stays
    assert proc.returncode == 0, proc.stderr
    assert places["target"].read_text() != "old\n"
    assert_one_line_error(run(places["dangling"]), "does not exist")
    assert_one_line_error(run(places["loop"]), "loops")
    assert_one_line_error(run(places["folder"]), "folder")
    for own in ("manifest", "capture", "into-trace"):
        assert_one_line_error(run(places[own]), "collected")
    after = {k: _state(p) for k, p in places.items() if k != "bundle"}
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"target"}, (before, after)
    assert _tree(places["bundle"]) == bundle_before


@pytest.mark.parametrize("command", _mark(FOLDER_COMMANDS))
def test_a_folder_output_harms_nothing(command: str, places: dict[str, Path]) -> None:
    before = {k: _state(p) for k, p in places.items() if k != "bundle"}
    bundle_before = _tree(places["bundle"])
    args, opt = FOLDER_COMMANDS[command]
    for where in ("stdout", "null", "full", "fifo", "link", "dangling", "loop", "bundle",
                  "manifest", "into-trace"):
        proc = gradwire(*args, opt, str(places[where]), timeout=300)
        assert proc.returncode != 0, (where, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert sum(1 for ln in proc.stderr.splitlines() if "error" in ln) == 1, proc.stderr
    after = {k: _state(p) for k, p in places.items() if k != "bundle"}
    assert before == after
    assert _tree(places["bundle"]) == bundle_before


@pytest.mark.slow
def test_predict_writes_into_a_folder_whose_files_are_special(places: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """-o DIR where DIR/predictions.json is a symlink to a regular file, and where it is a
    FIFO nobody reads: the target is replaced in the first, the second is a one-line error
    (at the write: checking for a reader beforehand would end its read), and the FIFO stays."""
    out = tmp_path / "pred"
    out.mkdir()
    (out / "predictions.json").symlink_to(places["target"])
    proc = gradwire("predict", "--sample", *QUICK_PREDICT, "-o", str(out), "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "predictions.json").is_symlink()
    assert places["target"].read_text().startswith("{")
    (out / "predictions.csv").unlink()
    os.mkfifo(out / "predictions.csv")
    proc = gradwire("predict", "--sample", *QUICK_PREDICT, "-o", str(out), timeout=300)
    assert_one_line_error(proc, "no process is reading this FIFO")
    assert stat.S_ISFIFO(os.lstat(out / "predictions.csv").st_mode)


def test_a_damaged_bundle_is_still_collected_data(places: dict[str, Path]) -> None:
    """A manifest that does not parse still marks its folder as collected data."""
    places["manifest"].write_text("{not json")
    before = _tree(places["bundle"])
    proc = gradwire("win", str(SAMPLE_WORKER), "-o", str(places["capture"]))
    assert_one_line_error(proc, "collected")
    assert _tree(places["bundle"]) == before


@pytest.mark.slow
def test_no_output_replaces_an_input(tmp_path: Path) -> None:
    """predict's --measured files, and a capture given to frames."""
    copy = tmp_path / "sample"
    shutil.copytree(SAMPLE, copy)
    lab = copy / "lab_result.json"
    before = lab.read_bytes()
    measured = tmp_path / "m.json"
    shutil.copy(lab, measured)
    proc = _without_deprecation(gradwire("predict", str(copy), *QUICK_PREDICT, "--measured",
                                         str(measured), "--json", str(measured), timeout=300))
    assert_one_line_error(proc, "an input of this command")
    assert measured.read_bytes() == before
    capture = tmp_path / "c.pcapng"
    shutil.copy(SAMPLE_PS / "capture.pcapng", capture)
    data = capture.read_bytes()
    assert_one_line_error(gradwire("frames", str(capture), "-o", str(capture)),
                          "an input of this command")
    assert lab.read_bytes() == before and capture.read_bytes() == data


def test_a_failed_command_leaves_its_output_file_as_it_was(tmp_path: Path) -> None:
    """win on a capture with no TensorFlow traffic: an error, and the old -o file kept."""
    need_realdata()
    capture = REALDATA / "packt_grpc_go_unary.pcapng"
    out = tmp_path / "win.json"
    out.write_text('{"good": "fit"}\n')
    proc = gradwire("win", str(capture), "-o", str(out))
    assert_one_line_error(proc, "no RecvTensor transfers")
    assert out.read_text() == '{"good": "fit"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["win.json"]  # no temporary file left


def test_dash_means_standard_output_and_no_file_named_dash(tmp_path: Path) -> None:
    for args in (["inspect", "--sample", "--format", "json", "-o", "-"],
                 ["phases", str(SAMPLE_PS), "-o", "-", "--format", "json"],
                 ["frames", str(SAMPLE_PS / "capture.pcapng"), "-o", "-", "--format", "csv"]):
        proc = gradwire(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() and not (tmp_path / "-").exists()
    for command in ("predict", "align"):  # their -o is a folder: refused, naming -o -
        proc = gradwire(command, "--sample", "-o", "-", cwd=tmp_path)
        assert_one_line_error(proc, f"gradwire {command}: error: -o - names standard output",
                              f"(see gradwire {command} --help)")
        assert not proc.stdout and not (tmp_path / "-").exists()


def test_standard_output_that_fails_is_one_line(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "gradwire", "inspect", "--sample",
                               "--format", "json"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert_one_line_error(proc, "cannot write to standard output", "No space left")


def test_a_symlinked_capture_in_a_bundle_is_still_collected_data(tmp_path: Path) -> None:
    """A bundle whose capture is a link to another disk: the link's target is protected."""
    b = tmp_path / "b"
    shutil.copytree(SAMPLE_WORKER, b)
    elsewhere = tmp_path / "disk" / "w0.pcapng"
    elsewhere.parent.mkdir()
    (b / "capture.pcapng").rename(elsewhere)
    (b / "capture.pcapng").symlink_to(elsewhere)
    data = elsewhere.read_bytes()
    assert_one_line_error(gradwire("inspect", str(SAMPLE_PS), "-o", str(b / "capture.pcapng")),
                          "collected data of the bundle")
    assert elsewhere.read_bytes() == data


@pytest.mark.slow
def test_the_lab_result_beside_the_bundles_and_the_shipped_sample_are_collected_data(
        tmp_path: Path) -> None:
    copy = tmp_path / "s"
    shutil.copytree(SAMPLE, copy)
    lab = copy / "lab_result.json"
    before = lab.read_bytes()
    proc = gradwire("inspect", str(copy / "ps0"), "-o", str(lab))
    assert_one_line_error(proc, "the lab's result beside the bundles")
    assert lab.read_bytes() == before
    from gradwire.bundle import SAMPLE_MEASURED

    proc = gradwire("predict", "--sample", *QUICK_PREDICT, "-o", str(SAMPLE_MEASURED))
    assert_one_line_error(proc, "the sample shipped with gradwire")


def test_replacing_a_file_keeps_its_mode_and_owner(tmp_path: Path) -> None:
    out = tmp_path / "private.json"
    out.write_text("{}\n")
    out.chmod(0o600)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    if os.geteuid() == 0:
        os.chown(out, *owner)
    proc = gradwire("inspect", str(SAMPLE_PS), "-q", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    st = out.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == owner
    assert out.read_text().startswith("{\n")


def test_a_descriptor_by_name_is_written_through_not_replaced(tmp_path: Path) -> None:
    """`-o /dev/fd/3 3>>log`: appended to the shell's file (same inode, old lines kept)."""
    log = tmp_path / "log"
    log.write_text("OLD\n")
    ino = log.stat().st_ino
    proc = subprocess.run(f'"{sys.executable}" -m gradwire inspect "{SAMPLE_PS}" --format json '
                          f'-o /dev/fd/3 3>>"{log}"', shell=True, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert log.stat().st_ino == ino and log.read_text().startswith("OLD\n{")


def test_a_table_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """rich's own console exits 1 on a closed pipe; gradwire's tables end as its other
    writes do (`| true` has gone before the table is printed)."""
    db = tmp_path / "ops.sqlite"
    assert gradwire("opdb", "ingest", str(SAMPLE / "worker0"), "--db",
                    str(db)).returncode == 0
    for argv in ("optimize --sample --workers 2", f'opdb show --db "{db}"'):
        proc = subprocess.run(f'"{sys.executable}" -m gradwire {argv} | true; '
                              "echo ${PIPESTATUS[0]} >&2", shell=True, executable="/bin/bash",
                              capture_output=True, text=True, timeout=120)
        assert proc.stderr.strip().splitlines()[-1] == "0", (argv, proc.stderr)


def test_standard_output_closed_early_or_shut_or_onto_an_input(tmp_path: Path) -> None:
    shell = f'"{sys.executable}" -m gradwire frames "{SAMPLE_PS / "capture.pcapng"}" '
    proc = subprocess.run(shell + "--format jsonl | head -c 10 >/dev/null; "
                          "echo ${PIPESTATUS[0]} >&2", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip() == "0"  # the reader went away: quietly, exit 0
    proc = subprocess.run(shell + "--format jsonl >&-", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert_one_line_error(proc, "cannot write to standard output: it is closed")
    capture = tmp_path / "c.pcapng"
    shutil.copy(SAMPLE_PS / "capture.pcapng", capture)
    data = capture.read_bytes()
    proc = subprocess.run(f'"{sys.executable}" -m gradwire frames "{capture}" --format jsonl '
                          f'>> "{capture}"', shell=True, capture_output=True, text=True,
                          timeout=120)
    assert_one_line_error(proc, "the standard output is", "an input of this command")
    assert capture.read_bytes() == data


@pytest.mark.parametrize("out, fragment", [
    ("", "is empty"), ("x.json/", "ends in /"), ("dl/x.json", "which does not exist"),
    ("m.csv", "this command writes table, json"),
])
def test_output_paths_refused_before_the_work(tmp_path: Path, out: str, fragment: str) -> None:
    (tmp_path / "dl").symlink_to(tmp_path / "nowhere" / "deep")
    proc = gradwire("inspect", str(SAMPLE_PS), "-o", out, cwd=tmp_path)
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "x.json").exists()


def test_closed_standard_streams_are_one_line_or_nothing(tmp_path: Path) -> None:
    """A table onto a closed standard output was a traceback (exit 1), even after `-o` was
    written; a closed standard error sent the notes into standard output's JSON."""
    gw = f'"{sys.executable}" -m gradwire'
    for command in (f'phases "{SAMPLE_PS}"', "inspect --sample"):
        proc = subprocess.run(f"{gw} {command} >&-", shell=True, capture_output=True,
                              text=True, timeout=120)
        assert_one_line_error(proc, "cannot write to standard output: it is closed")
    out = tmp_path / "p.json"  # nothing meant for standard output: no error
    proc = subprocess.run(f'{gw} phases "{SAMPLE_PS}" -q -o "{out}" >&-', shell=True,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stderr and json.loads(out.read_text())
    # the worker's capture has retransmissions: frames notes them on standard error
    proc = subprocess.run(f'{gw} frames "{SAMPLE / "worker0"}" --format json 2>&-',
                          shell=True, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)


def test_an_earlier_output_in_a_bundle_folder_is_not_an_input(tmp_path: Path) -> None:
    """`inspect b -o b/summary.json` twice: the second was refused as writing over an input
    (every file under an input folder counted); the collected files still are inputs."""
    copy = tmp_path / "b"
    shutil.copytree(SAMPLE, copy)
    for _ in range(2):
        proc = gradwire("inspect", str(copy), "-q", "-o", str(copy / "summary.json"))
        assert proc.returncode == 0, proc.stderr
        proc = gradwire("frames", str(copy / "worker0"), "-q", "-o",
                        str(copy / "worker0" / "frames.csv"))
        assert proc.returncode == 0, proc.stderr
    os.link(copy / "worker0" / "capture.pcapng", tmp_path / "hard.pcapng")
    assert_one_line_error(gradwire("frames", str(copy / "worker0"), "-o",
                                   str(tmp_path / "hard.pcapng")), "an input of this command")
