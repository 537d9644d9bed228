"""Profiles kept between commands: a profile built from a set of bundles is pickled into a
cache folder, keyed by everything it was built from, so the next ``gradwire predict`` (or
``optimize``, or a benchmark stage) on the same bundles skips reading the captures and
solving the clock offsets (about 5 s on the lab's ResNet-50 profile, whose two captures hold
1.86 GB each; 0.8 s on the small lab bundle).

The key is a SHA-256 of: gradwire's own source (every file of the four packages' folders,
by content, so any change of code builds afresh), the Python version and those of the
libraries the build runs on, the paths as given, the arguments (batch size, WIN fit), and
for every file under each path and the lab result beside it, its relative path, size,
modification and change times (ns), inode and device. A file rewritten, touched, added or
removed changes the key. The warnings logged while the profile was built are kept with it
and logged again on each load from the cache.

Where: ``$GRADWIRE_CACHE`` (a folder), else ``$XDG_CACHE_HOME/gradwire``, else
``~/.cache/gradwire``; ``GRADWIRE_CACHE=off`` turns it off. Entries are written atomically
(temporary file, rename); the 32 most recently used are kept. A cache that cannot be read or
written is passed over: the profile is built from the bundles, as without one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gradwire.logkeep import kept_records, log_again

if TYPE_CHECKING:
    from gradwire.replay.template import Profile

__all__ = ["KEEP", "cache_folder", "cached_profile", "profile_key"]

KEEP = 32  # entries kept, the most recently used
ENV = "GRADWIRE_CACHE"
_PACKAGES = ("gradwire", "gradwire.collector", "gradwire.aligner", "gradwire.replay")
_LIBRARIES = ("numpy", "scipy", "cvxpy", "networkx", "protobuf")  # what a build runs on
_code: str | None = None  # this process's source digest, computed once


def cache_folder() -> Path | None:
    """Where profiles are kept (``profiles/`` under it), None when ``GRADWIRE_CACHE=off``
    (RuntimeError where no home folder is known)."""
    given = os.environ.get(ENV)
    if given is not None:
        return None if given.strip().lower() in ("off", "0", "no", "false", "") else \
            Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gradwire"


def _code_digest() -> str:
    """SHA-256 of every file in gradwire's package folders (its sources and the data files
    beside them, by name and content; not their subfolders: the shipped sample is input,
    keyed as such), the Python version and the versions of ``_LIBRARIES``."""
    global _code
    if _code is None:
        import importlib
        from importlib.metadata import PackageNotFoundError, version

        h = hashlib.sha256(sys.version.encode())
        for lib in _LIBRARIES:
            try:
                h.update(f"{lib}\0{version(lib)}\n".encode())
            except PackageNotFoundError:
                h.update(f"{lib}\0none\n".encode())
        for name in _PACKAGES:
            folder = Path(importlib.import_module(name).__file__ or "").parent
            for f in sorted(folder.iterdir()):
                if f.is_file() and f.suffix != ".pyc":
                    h.update(f"{name}/{f.name}\0".encode())
                    h.update(f.read_bytes())
        _code = h.hexdigest()
    return _code


def _stat_line(f: Path, rel: str) -> str:
    """One file's line of the key: ``rel``, size, modification and change times (ns), inode
    and device (OSError where it cannot be stat'ed)."""
    st = f.stat()
    return (f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0"
            f"{st.st_dev}\n")


def profile_key(paths: Sequence[str | Path], lab_file: Path | None, *args: object) -> str:
    """The cache key of a profile built from ``paths`` (and the lab result ``lab_file``
    beside them) with ``args``: see the module docstring."""
    h = hashlib.sha256(_code_digest().encode())
    h.update(repr(args).encode())
    for p in paths:  # folders (load_profile refuses a file first)
        h.update(f"path\0{p}\0{os.path.abspath(p)}\n".encode())
        root = Path(p)
        seen: set[tuple[int, int]] = set()  # folders walked: a link back up is not walked again
        for folder, dirs, files in os.walk(root, followlinks=True):
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                dirs.clear()
                continue
            seen.add((st.st_dev, st.st_ino))
            dirs.sort()
            for name in sorted(files):
                f = Path(folder) / name
                try:
                    h.update(_stat_line(f, str(f.relative_to(root))).encode())
                except OSError:  # a dangling link, a file gone meanwhile
                    h.update(f"{f}\0gone\n".encode())
    if lab_file is not None and lab_file.is_file():
        h.update(_stat_line(lab_file, f"lab\0{os.path.abspath(lab_file)}").encode())
    return h.hexdigest()


def _read(entry: Path) -> tuple[Profile, list[logging.LogRecord]] | None:
    """The profile and records kept in ``entry``; None where it cannot be read whole (a
    damaged or foreign file is a miss, never an error)."""
    try:
        with open(entry, "rb") as f:
            doc = pickle.load(f)
        prof, records = doc["profile"], list(doc["records"])
    except Exception:  # noqa: BLE001 - unpickling damaged bytes raises nearly anything
        return None
    with contextlib.suppress(OSError):  # most recently used (a read-only cache: still a hit)
        os.utime(entry)
    return prof, records


def _write(entry: Path, prof: Profile, records: list[logging.LogRecord]) -> None:
    """Keep ``prof`` and ``records`` in ``entry`` (atomically), then drop all but the
    ``KEEP`` most recently used entries; a cache that cannot be written is passed over."""
    tmp = entry.with_name(f".tmp-{os.getpid()}-{entry.name}")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(tmp, "wb") as f:
            pickle.dump({"profile": prof, "records": records}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, entry)
        others = [e for e in entry.parent.glob("[!.]*.pickle") if e != entry]
        others.sort(key=lambda e: e.stat().st_mtime_ns, reverse=True)
        for old in others[KEEP - 1:]:
            old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - OSError, or a profile that does not pickle
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    except BaseException:  # Ctrl-C mid-write: no half-written file left
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def cached_profile(key: Callable[[], str], build: Callable[[], Profile],
                   progress: Callable[[str], None] | None = None) -> Profile:
    """The profile ``build`` makes, from the cache when an entry of ``key()`` is there (its
    warnings logged again), else built and kept (with the warnings it logged)."""
    try:
        folder = cache_folder()
        entry = None if folder is None else folder / "profiles" / f"{key()}.pickle"
    except (OSError, RuntimeError):  # no home folder; a path that cannot be walked
        entry = None
    if entry is None:
        return build()
    hit = _read(entry) if entry.is_file() else None
    if hit is not None:
        prof, records = hit
        if progress:
            progress(f"the profile from the cache ({entry}: the same bundle files, the same "
                     f"gradwire; {ENV}=off reads the bundles again)")
        log_again(records)
        return prof
    with kept_records(logging.WARNING) as records:
        prof = build()
    _write(entry, prof, records)
    return prof
