"""gradwire.jit.drop_stale_cache: a module's numba cache goes when a module it compiles
against changes (numba itself watches only the module's own file)."""

from __future__ import annotations

from pathlib import Path

from gradwire.jit import drop_stale_cache


def _cache_files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.glob("*.nb?"))


def test_a_changed_dependency_drops_the_cache_and_an_unchanged_one_keeps_it(tmp_path):
    module, dep = tmp_path / "kernel.py", tmp_path / "hqkernel.py"
    module.write_text("x = 1\n")
    dep.write_text("MSS = 1448\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    compiled = ["kernel.loop-523.py311.1.nbc", "kernel.loop-523.py311.nbi"]
    other = ["hqkernel.hq_send-149.py311.nbi"]  # another module's: never touched
    for name in compiled + other:
        (cache / name).write_bytes(b"machine code")

    assert drop_stale_cache(str(module), str(dep))  # no digest yet: compiled against unknown
    assert _cache_files(cache) == other
    assert (cache / "kernel.deps").read_text()

    for name in compiled:  # numba compiles afresh against today's dependency
        (cache / name).write_bytes(b"machine code")
    assert not drop_stale_cache(str(module), str(dep))
    assert _cache_files(cache) == sorted(compiled + other)

    dep.write_text("MSS = 1460\n")  # the dependency changes: the cache goes again
    assert drop_stale_cache(str(module), str(dep))
    assert _cache_files(cache) == other


def test_a_folder_it_cannot_write_is_left_alone(tmp_path):
    """Best effort: where the cache folder cannot be made, nothing is raised."""
    module, dep = tmp_path / "kernel.py", tmp_path / "dep.py"
    module.write_text("x = 1\n")
    dep.write_text("y = 2\n")
    (tmp_path / "__pycache__").write_text("a file where the folder would be")
    assert drop_stale_cache(str(module), str(dep)) is False


def test_the_replay_kernel_keeps_its_cache_against_its_dependencies():
    """The kernel's loop and the host-queue functions register their dependencies at import:
    their digests sit beside their caches (where __pycache__ is writable)."""
    from gradwire.replay import hqkernel, kernel

    for mod in (kernel, hqkernel):
        cache = Path(mod.__file__).parent / "__pycache__"
        stem = Path(mod.__file__).stem
        assert (cache / f"{stem}.deps").is_file()
