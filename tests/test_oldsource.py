"""scripts/oldsource.py and bench_frames' --before: an older gradwire run beside this one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import SAMPLE, need, need_tshark

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

from oldsource import drop_old_gradwire, old_env, old_gradwire  # noqa: E402

ROOT = SCRIPTS.parent


def _need_git_checkout() -> None:
    need(shutil.which("git") is not None and (ROOT / ".git").exists(),
         "git and a git checkout of gradwire")


def test_the_older_revision_is_the_one_imported(tmp_path):
    """Its collector, aligner and replay come from the worktree, not this checkout; the
    worktree is gone afterwards."""
    _need_git_checkout()
    site = old_gradwire("HEAD", tmp_path)
    try:
        code = ("import gradwire, gradwire.collector.http2 as h, gradwire.replay as r; "
                "print(gradwire.__file__, h.__file__, r.__file__)")
        out = subprocess.run([sys.executable, "-c", code], env=old_env(site), cwd=site,
                             capture_output=True, text=True, check=True).stdout.split()
        assert len(out) == 3
        for path in out:
            assert Path(path).resolve().is_relative_to((tmp_path / "src").resolve()), path
    finally:
        drop_old_gradwire(tmp_path)
    listed = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                            text=True, check=True).stdout
    assert str(tmp_path / "src") not in listed


def test_bench_frames_times_the_older_revision_beside(tmp_path):
    """--before adds the older gradwire's time and its frame-for-frame check to each row."""
    _need_git_checkout()
    need_tshark()
    out = tmp_path / "frames.json"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_frames.py"), str(SAMPLE / "ps0"),
                           "--repeats", "1", "--before", "HEAD", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-500:]
    row = json.loads(out.read_text())["rows"][0]
    assert row["same_frames"] and row["same_as_before"] and row["frames"] > 1000
    assert row["before_s"] > 0 and row["vs_before"] == row["before_s"] / row["gradwire_s"]
    assert "| HEAD (s) | same as HEAD | vs HEAD |" in proc.stdout
