"""Profiles kept between commands (replay/profilecache.py), and what pool workers log coming
back to the process that started them (gradwire/logkeep.py, gradwire/procpool.py)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, gradwire

from gradwire.procpool import map_in_processes
from gradwire.replay import profilecache
from gradwire.replay.profile import load_profile


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("GRADWIRE_CACHE", str(folder))
    return folder / "profiles"


def _bundles(tmp_path: Path) -> Path:
    dest = tmp_path / "profile"
    shutil.copytree(SAMPLE, dest)
    return dest


def test_a_profile_comes_back_from_the_cache_equal_and_without_reading(cache, tmp_path,
                                                                        monkeypatch):
    src = _bundles(tmp_path)
    built = load_profile([src])
    assert len(list(cache.glob("*.pickle"))) == 1
    said: list[str] = []

    monkeypatch.setattr("gradwire.replay.profile._build_profile", _no_build)
    again = load_profile([src], progress=said.append)
    assert again == built
    assert any("from the cache" in s for s in said)


def test_any_change_of_the_bundles_or_the_arguments_builds_afresh(cache, tmp_path):
    src = _bundles(tmp_path)
    load_profile([src])
    load_profile([src], batch_size=64)  # another argument: another entry
    assert len(list(cache.glob("*.pickle"))) == 2
    manifest = src / "worker0" / "manifest.json"
    st = manifest.stat()
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # touched
    load_profile([src])
    (src / "worker0" / "note.txt").write_text("a file more\n")
    load_profile([src])
    assert len(list(cache.glob("*.pickle"))) == 4


def test_the_warnings_of_a_build_are_logged_again_from_the_cache(cache, tmp_path, caplog):
    src = _bundles(tmp_path)
    (src / "lab_result.json").write_text("{ not json")  # warned about, then ignored
    with caplog.at_level(logging.WARNING):
        first = load_profile([src], batch_size=32)
    warned = [r.getMessage() for r in caplog.records if "lab result" in r.getMessage()]
    assert len(warned) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert load_profile([src], batch_size=32) == first
    assert [r.getMessage() for r in caplog.records if "lab result" in r.getMessage()] == warned


def test_off_keeps_nothing_and_a_broken_entry_is_passed_over(cache, tmp_path, monkeypatch):
    src = _bundles(tmp_path)
    monkeypatch.setenv("GRADWIRE_CACHE", "off")
    assert profilecache.cache_folder() is None
    load_profile([src])
    assert not cache.exists()
    monkeypatch.setenv("GRADWIRE_CACHE", str(cache.parent))
    built = load_profile([src])
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    assert load_profile([src]) == built  # built again, and kept again
    assert entry.read_bytes() != b"not a pickle"


def test_only_the_most_recently_used_entries_are_kept(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(profilecache, "KEEP", 2)
    src = _bundles(tmp_path)
    for batch in (8, 16):
        load_profile([src], batch_size=batch)
    first = {e.name for e in cache.glob("*.pickle")}
    time.sleep(0.01)
    load_profile([src], batch_size=8)  # used again: 16's is the oldest now
    load_profile([src], batch_size=32)
    left = {e.name for e in cache.glob("*.pickle")}
    assert len(left) == 2 and len(left & first) == 1
    monkeypatch.setattr("gradwire.replay.profile._build_profile", _no_build)
    load_profile([src], batch_size=8)  # kept: no build


def _no_build(*a, **k):
    raise AssertionError("built again")


def test_a_change_of_gradwire_s_code_builds_afresh(cache, tmp_path, monkeypatch):
    src = _bundles(tmp_path)
    load_profile([src])
    monkeypatch.setattr(profilecache, "_code", "another gradwire")
    load_profile([src])
    assert len(list(cache.glob("*.pickle"))) == 2


def test_a_link_back_up_in_a_bundle_folder_is_walked_once(cache, tmp_path):
    src = _bundles(tmp_path)
    (src / "worker0" / "up").symlink_to(src, target_is_directory=True)
    assert load_profile([src]) == load_profile([src])
    assert len(list(cache.glob("*.pickle"))) == 1


def test_predict_prints_the_same_from_the_cache(cache, tmp_path):
    src = _bundles(tmp_path)
    env = {**os.environ, "GRADWIRE_CACHE": str(cache.parent)}
    args = ("predict", str(src), "--workers", "1,2", "--model", "mva-exact", "--format", "json")
    first = gradwire(*args, env=env)
    second = gradwire("-v", *args, env=env)
    assert first.returncode == second.returncode == 0
    assert len(list(cache.glob("*.pickle"))) == 1
    assert "from the cache" in second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["rows"] and a["rows"] == b["rows"]
    del a["gradwire"], b["gradwire"]  # what ran: its argv differs by the -v
    assert a == b


def _warn_and_square(x: int) -> int:
    logging.getLogger("gradwire.test").warning("item %d", x)
    return x * x


def test_what_pool_workers_log_is_logged_here_in_item_order(caplog):
    with caplog.at_level(logging.WARNING):
        assert map_in_processes(_warn_and_square, [3, 1, 2], 2) == [9, 1, 4]
    assert [r.getMessage() for r in caplog.records if r.name == "gradwire.test"] == [
        "item 3", "item 1", "item 2"]


def _warn_then_refuse(x: int) -> int:
    if x == 2:
        time.sleep(1)  # item 1 has come back by then
        raise ValueError("item 2 refused")
    return _warn_and_square(x)


def test_an_item_s_failure_keeps_what_the_finished_ones_logged(caplog):
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="item 2 refused"):
        map_in_processes(_warn_then_refuse, [1, 2], 2)
    assert "item 1" in [r.getMessage() for r in caplog.records if r.name == "gradwire.test"]
