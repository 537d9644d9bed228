"""Atomic file writes: temp file in the same folder, fsync, rename.

A process killed at any instant (even with SIGKILL) leaves either the old file or the complete
new one, never a torn file. Readers ignore the ``.tmp-`` files that a kill can leave behind.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gradwire.errors import GradwireError

TMP_PREFIX = ".tmp-"
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and durably; returns the final path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically."""
    return write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def ready_folder(path: str | Path, what: str = "output folder", *, holds_outputs: bool = True
                 ) -> Path:
    """Create the folder ``path`` (and its parents) for outputs, before any long work.

    Raises GradwireError naming the path when it is a file, lies inside a bundle (outputs never
    replace what was collected), or cannot be created or written. Folders created here that are
    still empty when the process exits (the work failed or was interrupted) are removed.
    """
    path = Path(path)
    if holds_outputs:  # (the folder of one output file is checked with the file instead)
        _refuse_bundle(path, what)
    if path.exists() and not path.is_dir():
        raise GradwireError(f"the {what} is an existing file, not a folder", path=path)
    made = [q for q in [path, *path.parents] if not q.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GradwireError(f"cannot create the {what}: {exc.strerror}", path=path) from None
    if made and not _made:
        atexit.register(_remove_empty_made)
    _made.extend(made)  # deepest first
    if not os.access(path, os.W_OK | os.X_OK):
        raise GradwireError(f"the {what} is not writable", path=path)
    return path


def ready_file(path: str | Path, what: str = "output file") -> Path:
    """Check that ``path`` can be written as a file (its folder is created); returns it.

    Raises GradwireError naming the path when it is a folder, lies inside a bundle, or its
    folder cannot be made.
    """
    path = Path(path)
    _refuse_bundle(path, what)
    if path.is_dir():
        raise GradwireError(f"the {what} is a folder; give a file name", path=path)
    ready_folder(path.parent, f"folder of the {what}", holds_outputs=False)
    return path


_made: list[Path] = []  # folders ready_folder created, each deepest first


def _remove_empty_made() -> None:
    for folder in _made:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only succeeds while empty


def bundle_holding(path: str | Path) -> Path | None:
    """The bundle folder (one with a gradwire-bundle ``manifest.json``) that is ``path`` or
    holds it, if any."""
    from gradwire import bundle  # (bundle writes through this module)

    p = Path(os.path.abspath(path))
    for q in (p, *p.parents):
        manifest = q / bundle.MANIFEST
        if manifest.is_file():
            try:
                doc = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and doc.get("kind") == bundle.KIND:
                return q
    return None


def _refuse_bundle(path: Path, what: str) -> None:
    """Refuse an output path that is one of a bundle's own files, in its trace/ folder, or (as
    an output folder) the bundle folder itself; other paths inside a bundle are fine."""
    from gradwire import bundle

    folder = bundle_holding(path)
    if folder is None:
        return
    rel = Path(os.path.abspath(path)).relative_to(folder).parts
    own = {bundle.MANIFEST, bundle.CAPTURE_LOG, *bundle.CAPTURE_NAMES}
    if not rel or rel[0] == bundle.TRACE_DIR or (len(rel) == 1 and rel[0] in own):
        place = "is the bundle" if not rel else "is collected data of the bundle"
        raise GradwireError(f"the {what} {place} {folder}: gradwire never writes over what was "
                            "collected; choose another path", path=path)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
