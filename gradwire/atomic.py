"""Safe output writes: atomic for regular files, direct for devices and FIFOs, never a harm.

Every file gradwire writes goes through :func:`open_output` (a path the user named:
:func:`write_output`; gradwire's own bundle files: :func:`write_bytes`). What it does depends
on what the path names (symlinks followed to their target; the link itself is never replaced):

- a new path or a regular file: a temporary file in the same folder, fsync, rename over the
  target. A process killed at any instant (even SIGKILL) leaves either the old file or the
  complete new one, never a torn file; readers ignore the ``.tmp-`` files a kill can leave;
- ``-``, or the file this process's standard output (or error) already writes to
  (``/dev/stdout``, ``/dev/fd/1``, a shell redirection): written through that stream;
- a character device (``/dev/null``, a terminal) or a FIFO with a reader: written to directly,
  in place;
- anything else (a folder, a block device, a socket, a dangling or looping symlink, a FIFO
  nobody reads): refused with a one-line :class:`GradwireError`, nothing touched.

A path the user names never lands on collected data (a bundle's manifest, capture, capture log
or ``trace/`` files, checked on the resolved path, also when the manifest does not parse) nor
on a file the command reads (:func:`protect_inputs`). A write that fails (``/dev/full``: no
space) is a one-line error naming the path.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gradwire.errors import GradwireError

TMP_PREFIX = ".tmp-"
STDOUT = "-"  # an output path that means standard output
_UMASK = os.umask(0)
os.umask(_UMASK)

_inputs: list[tuple[int, int, str]] = []  # (st_dev, st_ino, path) of files this run reads


def protect_inputs(paths: Any) -> None:
    """Remember files (or folders: every regular file inside, one level deep and in
    sub-folders) that this run reads, so that no output replaces them."""
    for p in paths:
        p = Path(p)
        try:
            files = [p] if not p.is_dir() else [q for q in p.rglob("*") if q.is_file()]
        except OSError:
            continue
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                if stat.S_ISREG(st.st_mode):
                    _inputs.append((st.st_dev, st.st_ino, str(f)))


def is_stdout(path: str | Path | None) -> bool:
    """Whether an output path is ``-`` (standard output)."""
    return path is not None and str(path) == STDOUT


class OutputFile:
    """A file open for output (see :func:`open_output`): ``write`` takes str (UTF-8) or bytes;
    a failed write is a GradwireError naming the path."""

    def __init__(self, fh: BinaryIO, name: str, what: str) -> None:
        self._fh, self.name, self._what = fh, name, what

    def write(self, data: str | bytes) -> int:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            self._fh.write(raw)
        except OSError as exc:
            raise _write_error(exc, self._what, self.name) from None
        return len(data)

    def flush(self) -> None:
        try:
            self._fh.flush()
        except OSError as exc:
            raise _write_error(exc, self._what, self.name) from None


@contextlib.contextmanager
def open_output(path: str | Path, what: str = "output file", *, guard: bool = True
                ) -> Iterator[OutputFile]:
    """Open ``path`` for writing as the module doc says: ``-`` or this process's own stdout
    (stderr) is written through that stream; a new path or regular file is written to a
    temporary file beside it, renamed over it only when the block ends without an error (a
    failed command leaves the old file as it was); a character device or a FIFO with a reader
    is written in place; anything else is refused. ``guard``: refuse a bundle's collected data
    and this command's inputs (every path a user names). Raises GradwireError naming the path.
    """
    if is_stdout(path):
        yield from _through_stream(sys.stdout, "standard output", what)
        return
    path = Path(path)
    kind, st = _target(path, what)
    if guard:
        _refuse_protected(path, what)
    if kind == "stream":
        yield from _through_stream(sys.stdout if _same(1, st) else sys.stderr, str(path),
                                   what)
        return
    final = Path(os.path.realpath(path))  # a symlink's target: the link stays a link
    if kind == "new" or (kind == "regular" and _same(final, st)):
        yield from _replacing(final, what, shown=path)
        return
    # a device, a FIFO, or a /proc/PID/fd link to a file: in place, never replaced
    fh = os.fdopen(_open_in_place(path, what, truncate=kind != "fifo"), "wb")
    try:
        out = OutputFile(fh, str(path), what)
        yield out
        out.flush()
    finally:
        _close_dropping(fh)


def write_output(path: str | Path, data: str | bytes, what: str = "output file") -> Path:
    """Write ``data`` (str: UTF-8) to a path the user named (see :func:`open_output`); returns
    the path. Never a bundle's collected data nor an input of this command."""
    with open_output(path, what) as out:
        out.write(data)
    return Path(path)


def write_bytes(path: str | Path, data: bytes, what: str = "file") -> Path:
    """Write ``data`` to one of gradwire's own files (a bundle being collected): atomically
    for a new path or a regular file (a symlink's target), else as :func:`open_output` does,
    without its guard. Raises GradwireError naming the path."""
    with open_output(path, what, guard=False) as out:
        out.write(data)
    return Path(path)


def write_text(path: str | Path, text: str, what: str = "file") -> Path:
    """Write UTF-8 ``text`` (see :func:`write_bytes`)."""
    return write_bytes(path, text.encode("utf-8"), what)


def write_json(path: str | Path, obj: Any, what: str = "file") -> Path:
    """Write ``obj`` as indented JSON (see :func:`write_bytes`)."""
    return write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n", what)


def _through_stream(stream: Any, name: str, what: str) -> Iterator[OutputFile]:
    """Write through an open stream (stdout/stderr); when it fails, the stream is pointed at
    /dev/null, so that what it still buffers is not retried at exit."""
    out = OutputFile(stream.buffer, name, what)
    try:
        stream.flush()
        yield out
        out.flush()
    except (OSError, GradwireError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        raise


def _close_dropping(fh: BinaryIO) -> None:
    """Close ``fh``; data it could not write (the error was already raised) is dropped."""
    with contextlib.suppress(OSError):
        fh.close()


def _replacing(final: Path, what: str, shown: Path) -> Iterator[OutputFile]:
    """Temp file beside ``final``, renamed over it (after fsync) when the caller's block ends
    without an error; errors name ``shown`` (the path as the user gave it)."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + final.name + ".", dir=final.parent)
    except OSError as exc:
        raise _write_error(exc, what, str(shown)) from None
    fh = os.fdopen(fd, "wb")
    try:
        try:
            os.fchmod(fd, 0o666 & ~_UMASK)
            out = OutputFile(fh, str(shown), what)
            yield out
            out.flush()
            try:
                os.fsync(fh.fileno())
            except OSError as exc:
                raise _write_error(exc, what, str(shown)) from None
        finally:
            _close_dropping(fh)
        try:
            os.replace(tmp, final)
        except OSError as exc:
            raise _write_error(exc, what, str(shown)) from None
    except BaseException:  # the block failed: the old file stays as it was
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(final.parent)


def _write_error(exc: OSError, what: str, name: str) -> GradwireError:
    why = exc.strerror or str(exc)
    if name == "standard output":
        return GradwireError(f"cannot write to standard output: {why}")
    return GradwireError(f"cannot write the {what}: {why}", path=name)


def is_stream(path: str | Path) -> bool:
    """Whether ``path`` is ``-`` or names this process's standard output or error."""
    if is_stdout(path):
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _same(1, st) or _same(2, st)


def ready_folder(path: str | Path, what: str = "output folder", *, holds_outputs: bool = True
                 ) -> Path:
    """Create the folder ``path`` (and its parents) for outputs, before any long work.

    A symlink to a folder is followed. Raises GradwireError naming the path when it is not a
    folder, lies inside a bundle (outputs never replace what was collected), or cannot be
    created or written. Folders created here that are still empty when the process exits (the
    work failed or was interrupted) are removed.
    """
    path = Path(path)
    if is_stdout(path):
        raise GradwireError(f"the {what} must be a folder ('-', standard output, holds one "
                            "file: use --format json for it)")
    if path.is_symlink() and not path.exists():
        raise GradwireError(f"the {what} is a symlink to {os.readlink(path)}, which does not "
                            "exist (or loops)", path=path)
    if holds_outputs:  # (the folder of one output file is checked with the file instead)
        _refuse_bundle(path, what)
    if path.exists() and not path.is_dir():
        kind = "an existing file" if path.is_file() else "not a regular file"
        raise GradwireError(f"the {what} is {kind}, not a folder", path=path)
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
    """Check, before the long work, that ``path`` can be written (see :func:`write_bytes`);
    the folder of a new or regular file is created. Returns the path.

    Raises GradwireError naming the path when it cannot be.
    """
    if is_stdout(path):
        return Path(STDOUT)
    path = Path(path)
    kind, _ = _target(path, what)
    if kind in ("new", "regular"):
        _refuse_protected(path, what)
        final = Path(os.path.realpath(path))
        ready_folder(final.parent, f"folder of the {what}", holds_outputs=False)
    return path


def _target(path: Path, what: str) -> tuple[str, os.stat_result | None]:
    """What ``path`` names: 'new', 'regular', 'stream' (this process's stdout/stderr), 'chr'
    or 'fifo' (written in place), with its stat; raises for anything that may not be
    written."""
    try:
        st = os.stat(path)  # follows symlinks, /proc/self/fd's magic links included
    except FileNotFoundError:
        if path.is_symlink():
            raise GradwireError(f"the {what} is a symlink to {os.readlink(path)}, which does "
                                "not exist: gradwire does not write through dangling links",
                                path=path) from None
        return "new", None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GradwireError(f"the {what} is a symlink that loops", path=path) from None
        if exc.errno == errno.ENOTDIR:
            raise GradwireError(f"the {what}'s folder is a file, not a folder", path=path) from None
        raise GradwireError(f"cannot use the {what}: {exc.strerror}", path=path) from None
    mode = st.st_mode
    if _same(1, st) or _same(2, st):
        return "stream", st
    if stat.S_ISREG(mode):
        return "regular", st
    if stat.S_ISDIR(mode):
        raise GradwireError(f"the {what} is a folder; give a file name", path=path)
    if stat.S_ISCHR(mode):
        return "chr", st
    if stat.S_ISFIFO(mode):
        return "fifo", st
    kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) \
        else "not a regular file"
    raise GradwireError(f"the {what} is {kind}: gradwire writes only to regular files, "
                        "character devices (/dev/null, /dev/stdout) and FIFOs", path=path)


def _same(path: Path | int, st: os.stat_result | None) -> bool:
    """Whether ``st`` is the file at ``path``, or open as the descriptor ``path``."""
    try:
        other = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except OSError:
        return False
    return st is not None and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def _open_in_place(path: Path, what: str, truncate: bool) -> int:
    """A descriptor on a device or FIFO as it is (never replacing it); a FIFO must have a
    reader (else an error, not a wait)."""
    flags = os.O_WRONLY | os.O_NONBLOCK | (os.O_TRUNC if truncate else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise GradwireError(f"cannot write the {what}: no process is reading this FIFO",
                                path=path) from None
        raise _write_error(exc, what, str(path)) from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


_made: list[Path] = []  # folders ready_folder created, each deepest first


def _remove_empty_made() -> None:
    for folder in _made:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only succeeds while empty


def bundle_holding(path: str | Path) -> Path | None:
    """The bundle folder that is ``path`` or holds it (symlinks resolved), if any: a folder
    whose ``manifest.json`` is a gradwire-bundle manifest, or one that cannot be read as JSON
    (a damaged bundle is still collected data)."""
    from gradwire import bundle  # (bundle writes through this module)

    p = Path(os.path.realpath(path))
    for q in (p, *p.parents):
        manifest = q / bundle.MANIFEST
        if not manifest.exists():
            continue
        if not manifest.is_file():  # a FIFO or device named manifest.json: do not read it
            return q
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return q
        if not isinstance(doc, dict) or doc.get("kind") == bundle.KIND:
            return q
    return None


def _refuse_protected(path: Path, what: str) -> None:
    _refuse_bundle(path, what)
    try:
        st = os.stat(path)
    except OSError:
        return
    for dev, ino, name in _inputs:
        if (st.st_dev, st.st_ino) == (dev, ino):
            raise GradwireError(f"the {what} is {name}, an input of this command: gradwire "
                                "never writes over what it reads; choose another path",
                                path=path)


def _refuse_bundle(path: Path, what: str) -> None:
    """Refuse an output path that is one of a bundle's own files, in its trace/ folder, or (as
    an output folder) the bundle folder itself; other paths inside a bundle are fine."""
    from gradwire import bundle

    folder = bundle_holding(path)
    if folder is None:
        return
    rel = Path(os.path.realpath(path)).relative_to(folder).parts
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
