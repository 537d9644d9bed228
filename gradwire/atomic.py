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
import io
import json
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from gradwire.errors import GradwireError

TMP_PREFIX = ".tmp-"
STDOUT = "-"  # an output path that means standard output
LAB_RESULT = "lab_result.json"  # the lab's result beside a profile's bundles: collected too
# a descriptor by name: /dev/fd/N, /proc/self/fd/N, /proc/PID/fd/N (pid, fd)
_FD_PATH = re.compile(r"^/(?:proc/(self|thread-self|\d+)/fd|dev/fd)/(\d+)$")
_MAX_LINKS = 40  # as the kernel's own limit on symlinks in one path

_inputs: list[tuple[int, int, str]] = []  # (st_dev, st_ino, path) of files this run reads


def protect_inputs(paths: Any) -> None:
    """Remember the files this run reads, so that no output replaces them (nor a link to
    one): each file given, and in a folder given what gradwire reads there (see
    :func:`_read_in_folder`); other files in it (an earlier run's ``-o`` output) are not
    inputs."""
    for p in paths:
        p = Path(p)
        try:
            files = [p] if not p.is_dir() else _read_in_folder(p)
        except OSError:
            continue
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                if stat.S_ISREG(st.st_mode):
                    _inputs.append((st.st_dev, st.st_ino, str(f)))


def _read_in_folder(folder: Path) -> list[Path]:
    """The files a command reads in a folder it is given: the collected files of the bundle
    it is, or of the bundles right under it (``bundle.find_bundles``' reach), and the lab's
    result beside them."""
    from gradwire import bundle  # (bundle writes through this module)

    own = (bundle.MANIFEST, bundle.CAPTURE_LOG, *bundle.CAPTURE_NAMES)
    nodes = [folder] if os.path.lexists(folder / bundle.MANIFEST) else [
        c for c in folder.iterdir() if os.path.lexists(c / bundle.MANIFEST)]
    files = [folder / LAB_RESULT]
    for node in nodes:
        files += [node / n for n in own] + list((node / bundle.TRACE_DIR).rglob("*"))
    return files


def is_stdout(path: str | Path | None) -> bool:
    """Whether an output path is ``-`` (standard output)."""
    return path is not None and str(path) == STDOUT


class OutputFile:
    """A file open for output (see :func:`open_output`): ``write`` takes str (UTF-8) or bytes;
    a failed write is a GradwireError naming the path (a closed pipe on standard output stays
    a BrokenPipeError, which the CLI ends on quietly)."""

    def __init__(self, fh: BinaryIO, name: str, what: str) -> None:
        self._fh, self.name, self._what = fh, name, what

    def write(self, data: str | bytes) -> int:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            self._fh.write(raw)
        except OSError as exc:
            raise self._error(exc) from None
        return len(data)

    def flush(self) -> None:
        try:
            self._fh.flush()
        except OSError as exc:
            raise self._error(exc) from None

    def _error(self, exc: OSError) -> OSError | GradwireError:
        if isinstance(exc, BrokenPipeError) and self.name == "standard output":
            return exc
        return _write_error(exc, self._what, self.name)


@contextlib.contextmanager
def open_output(path: str | Path, what: str = "output file", *, guard: bool = True
                ) -> Iterator[OutputFile]:
    """Open ``path`` for writing as the module doc says, and yield it.

    ``-``, a descriptor of this process by name (``/dev/stdout``, ``/dev/fd/3``), or the file
    standard output (error) already is: written through that descriptor (its offset and
    O_APPEND kept). A new path or a regular file: a temporary file beside it, renamed over it
    (keeping an old file's mode and owner) only when the block ends without an error, so a
    failed command leaves the old file as it was. A character device or a FIFO with a reader:
    written in place. Anything else is refused. ``guard``: refuse a bundle's collected data,
    the shipped sample and this command's inputs (every path a user names). Raises
    GradwireError naming the path.
    """
    fd = _descriptor_of(path, what)
    if fd is not None:
        yield from _through_descriptor(fd, "standard output" if is_stdout(path) else str(path),
                                       what)
        return
    path = Path(path)
    kind, st = _target(path, what)
    if guard:
        _refuse_protected(path, what, st)
    if kind == "stream":
        yield from _through_descriptor(1 if _same(1, st) else 2, str(path), what)
        return
    if kind in ("new", "regular"):
        final = Path(os.path.realpath(path))  # a symlink's target: the link stays a link
        if kind == "regular" and not _same(final, st):
            raise GradwireError(f"the {what} names another process's descriptor; give the "
                                "file's own path", path=path)
        yield from _replacing(final, what, shown=path, old=st)
        return
    yield from _writing(_open_in_place(path, what), str(path), what)  # a device or FIFO


def write_output(path: str | Path, data: str | bytes, what: str = "output file") -> Path:
    """Write ``data`` (str: UTF-8) to a path the user named (see :func:`open_output`); returns
    the path. Never a bundle's collected data nor an input of this command."""
    return _write(path, data, what, guard=True)


def write_outputs(files: Sequence[tuple[str | Path, str | bytes, str]]) -> list[Path]:
    """Write several outputs of one command (path, data, what) as one: each is opened (and
    checked), written and flushed before any is put in place, so that a failure at any of
    them (a FIFO without a reader, a full disk) leaves every old file as it was (a fault that
    only the final fsync reveals, rare, may leave the later ones replaced). Returns the
    paths."""
    with contextlib.ExitStack() as stack:
        outs = [stack.enter_context(open_output(path, what)) for path, _, what in files]
        for out, (_, data, _) in zip(outs, files, strict=True):
            out.write(data)
        for out in outs:  # a write fault surfaces here, before the first rename
            out.flush()
    return [Path(path) for path, _, _ in files]


def write_bytes(path: str | Path, data: bytes, what: str = "file") -> Path:
    """Write ``data`` to one of gradwire's own files (a bundle being collected), as
    :func:`open_output` does without its guard. Raises GradwireError naming the path."""
    return _write(path, data, what, guard=False)


def write_text(path: str | Path, text: str, what: str = "file") -> Path:
    """Write UTF-8 ``text`` (see :func:`write_bytes`)."""
    return write_bytes(path, text.encode("utf-8"), what)


def write_json(path: str | Path, obj: Any, what: str = "file") -> Path:
    """Write ``obj`` as indented JSON (see :func:`write_bytes`)."""
    return write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n", what)


def _write(path: str | Path, data: str | bytes, what: str, guard: bool) -> Path:
    with open_output(path, what, guard=guard) as out:
        out.write(data)
    return Path(path)


class _ClosedOutput(io.RawIOBase):
    """Standard output the shell closed (``>&-``): every write fails as a closed
    descriptor's would (EBADF), so that the command says so in one line."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OSError(errno.EBADF, "it is closed")


def hold_closed_streams() -> None:
    """Standard streams the shell closed (``<&-``, ``>&-``, ``2>&-``) held on /dev/null, so
    that no file gradwire opens, nor a child process, takes descriptor 0, 1 or 2. A closed
    standard output still fails when written to (a one-line error, exit 2; nothing written
    to it, nothing said); what a closed standard error would have said is dropped, never
    said on standard output instead (it held a JSON document)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdin is None:
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the process's own, for its lifetime
    if sys.stdout is None:
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_ClosedOutput()))
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process's own, for its lifetime


def detach_stdout() -> None:
    """Point standard output at /dev/null, so that what it still buffers (a write failed) is
    not retried, and fails again, at exit."""
    stream = getattr(sys.stdout, "buffer", None)
    if isinstance(getattr(stream, "raw", None), _ClosedOutput):  # its buffer holds the text
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the process's own, for its lifetime
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
    finally:
        os.close(null)


def _through_descriptor(fd: int, name: str, what: str) -> Iterator[OutputFile]:
    """Write through an open descriptor: 1 and 2 through Python's own streams (in order with
    what was printed before); any other through a duplicate (same offset, same O_APPEND)."""
    if fd not in (1, 2):
        try:
            dup = os.dup(fd)
        except OSError as exc:
            raise _write_error(exc, what, name) from None
        yield from _writing(dup, name, what)
        return
    stream = sys.stdout if fd == 1 else sys.stderr
    if stream is None:
        raise GradwireError(f"cannot write to {name}: it is closed")
    out = OutputFile(stream.buffer, name, what)
    try:
        stream.flush()
        yield out
        out.flush()
    except (OSError, GradwireError):
        if fd == 1:
            detach_stdout()
        raise


def _writing(fd: int, name: str, what: str) -> Iterator[OutputFile]:
    """Write to the descriptor ``fd`` as it is (a device, a FIFO, a duplicate), closing it
    after; nothing is renamed."""
    fh = os.fdopen(fd, "wb")
    try:
        out = OutputFile(fh, name, what)
        yield out
        out.flush()
    finally:
        _close_dropping(fh)


def _close_dropping(fh: BinaryIO) -> None:
    """Close ``fh``; data it could not write (the error was already raised) is dropped."""
    with contextlib.suppress(OSError):
        fh.close()


def _replacing(final: Path, what: str, shown: Path, old: os.stat_result | None
               ) -> Iterator[OutputFile]:
    """A temporary file beside ``final`` (an old file's mode and owner copied onto it),
    renamed over it after fsync when the caller's block ends without an error; errors name
    ``shown`` (the path as the user gave it)."""
    tmp: Path | None = None
    in_block = False  # an OSError of the caller's block is its own, not a write error
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _new_temporary(final)
        fh = os.fdopen(fd, "wb")
        try:
            if old is not None:  # a private file stays private, and stays its owner's
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                if os.geteuid() == 0:
                    os.fchown(fd, old.st_uid, old.st_gid)
            out = OutputFile(fh, str(shown), what)
            in_block = True
            yield out
            in_block = False
            out.flush()
            os.fsync(fd)
        finally:
            _close_dropping(fh)
        os.replace(tmp, final)
    except BaseException as exc:  # the block failed: the old file stays as it was
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError) and not in_block:
            raise _write_error(exc, what, str(shown)) from None
        raise
    _fsync_dir(final.parent)


def _new_temporary(final: Path) -> tuple[int, Path]:
    """A new file ``.tmp-NAME.RANDOM`` beside ``final``, created with mode 0666 less the
    umask (as the kernel applies it); NAME is cut so that the name stays within 255 bytes."""
    name = final.name.encode()[:200].decode(errors="ignore")
    for _ in range(100):
        tmp = final.parent / f"{TMP_PREFIX}{name}.{secrets.token_hex(4)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(final.parent))


def _write_error(exc: OSError, what: str, name: str) -> GradwireError:
    why = exc.strerror or str(exc)
    if name == "standard output":
        return GradwireError(f"cannot write to standard output: {why}")
    return GradwireError(f"cannot write the {what}: {why}", path=name)


def is_stream(path: str | Path) -> bool:
    """Whether ``path`` is ``-`` or names this process's standard output or error."""
    try:
        if _descriptor_of(path, "output file") in (1, 2):
            return True
        st = os.stat(path)
    except (OSError, GradwireError):
        return False
    return _same(1, st) or _same(2, st)


def refuse_stdout_onto_inputs() -> None:
    """Refuse to start when the shell sent standard output into collected data or an input
    (``gradwire frames c.pcapng >> c.pcapng``), as ``cat`` does."""
    try:
        st = os.fstat(1)
        where = os.readlink("/proc/self/fd/1")
    except OSError:
        return
    if stat.S_ISREG(st.st_mode) and where.startswith("/"):
        _refuse_protected(Path(where), "standard output", st)


FILE_SUFFIXES = (".json", ".csv", ".png", ".graphml", ".txt")  # names of files, not folders


def refuse_file_name(folder: str | Path, command: str, first: str) -> None:
    """Refuse ``-o FOLDER`` that is ``-`` (standard output) or reads as a file's name
    (``pred.json``) and is not an existing folder: the command (``command``) writes several
    files into it, ``first`` the first of them. Raises GradwireError naming the path."""
    if is_stdout(folder):
        raise GradwireError("-o - names standard output, which holds one file, and "
                            f"{command}'s -o is a folder: give -o DIR, or --format json for "
                            "one document on standard output", usage=True)
    folder = Path(folder)
    if folder.suffix.lower() in FILE_SUFFIXES and not folder.is_dir():
        raise GradwireError(f"-o names the folder {command} writes its files into (DIR/"
                            f"{first}...), not a file: for one JSON document use --format "
                            f"json > {folder}", path=folder, usage=True)


def ready_folder(path: str | Path, what: str = "output folder", *, holds_outputs: bool = True
                 ) -> Path:
    """Create the folder ``path`` (and its parents) for outputs, before any long work.

    A symlink to a folder is followed. Raises GradwireError naming the path when it is not a
    folder, is collected data (a bundle, the shipped sample), or cannot be created or written.
    Folders created here that are still empty when the process exits (the work failed or was
    interrupted) are removed.
    """
    if is_stdout(path):
        raise GradwireError(f"the {what} must be a folder, not '-' (standard output)",
                            usage=True)
    path = Path(path)
    _refuse_dangling_folders(path, what, itself=True)
    if holds_outputs:  # (the folder of one output file is checked with the file instead)
        _refuse_bundle(path, what)
    if path.exists() and not path.is_dir():
        kind = "an existing file" if path.is_file() else "a device, FIFO or socket"
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
    """Check, before the long work, that ``path`` can be written as :func:`open_output` would
    (with its guard); the folder of a new or regular file is created. Returns the path.

    Raises GradwireError naming the path when it cannot be.
    """
    if _descriptor_of(path, what) is not None:
        return Path(path)
    path = Path(path)
    kind, st = _target(path, what)
    _refuse_protected(path, what, st)
    if kind in ("new", "regular"):
        final = Path(os.path.realpath(path))
        ready_folder(final.parent, f"folder of the {what}", holds_outputs=False)
    return path


def _descriptor_of(path: str | Path, what: str) -> int | None:
    """The descriptor of this process that ``path`` names: 1 for ``-``; N for ``/dev/fd/N``,
    ``/proc/self/fd/N`` or ``/proc/PID/fd/N`` with our PID, reached through any symlinks
    (``/dev/stdout``); else None. A path that is empty or ends in '/' is refused here."""
    text = str(path)
    if text == STDOUT:
        return 1
    if not text or text.endswith("/"):
        raise GradwireError(f"the {what} {'is empty' if not text else 'ends in /'}: give a "
                            "file name", path=text or None)
    p = os.path.abspath(text)
    for _ in range(_MAX_LINKS):
        m = _FD_PATH.match(p)
        if m:
            own = m.group(1) in (None, "self", "thread-self", str(os.getpid()))
            return int(m.group(2)) if own else None
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def _refuse_dangling_folders(path: Path, what: str, *, itself: bool = False) -> None:
    """Refuse a path under (``itself``: or at) a symlinked folder whose target is missing:
    gradwire does not create folders at the end of a dangling link."""
    full = Path(os.path.abspath(path))
    for q in (full, *full.parents) if itself else full.parents:
        if q.is_symlink() and not q.exists():
            whose = what if q == full else f"{what}'s folder {q}"
            raise GradwireError(f"the {whose} is a symlink to {os.readlink(q)}, which does "
                                "not exist (or loops)", path=path)


def _target(path: Path, what: str) -> tuple[str, os.stat_result | None]:
    """What ``path`` names: 'new', 'regular', 'stream' (this process's stdout/stderr), 'chr'
    or 'fifo' (written in place), with its stat; raises for anything that may not be
    written."""
    _refuse_dangling_folders(path, what)
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
            raise GradwireError(f"the {what} is (or lies under) a symlink that loops",
                                path=path) from None
        if exc.errno == errno.ENOTDIR:
            raise GradwireError(f"the {what}'s folder is a file, not a folder",
                                path=path) from None
        raise GradwireError(f"cannot use the {what}: {exc.strerror}", path=path) from None
    mode = st.st_mode
    if _same(1, st) or _same(2, st):
        return "stream", st
    if stat.S_ISREG(mode):
        return "regular", st
    if stat.S_ISDIR(mode):
        raise GradwireError(f"the {what} is a folder, where a file goes: move it, or "
                            "choose another path", path=path)
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


def _open_in_place(path: Path, what: str) -> int:
    """A descriptor on a character device or a FIFO as it is: opened without truncation and
    checked again once open (the path may have changed since it was looked at); a FIFO must
    have a reader (else an error, not a wait)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise GradwireError(f"cannot write the {what}: no process is reading this FIFO",
                                path=path) from None
        raise _write_error(exc, what, str(path)) from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        os.close(fd)
        raise GradwireError(f"the {what} changed while gradwire looked at it; run again",
                            path=path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


_made: list[Path] = []  # folders ready_folder created, each deepest first


def _remove_empty_made() -> None:
    for folder in _made:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only succeeds while empty


def refuse_collected(path: str | Path, what: str) -> None:
    """Refuse ``path`` as a place gradwire writes a file of its own (the op database) where it
    is collected data or the shipped sample (see :func:`open_output`'s guard). Raises
    GradwireError naming the path."""
    _refuse_bundle(Path(path), what)


def bundle_holding(path: str | Path) -> Path | None:
    """The bundle folder that is ``path`` or holds it (its folders resolved, the last name
    not followed: a link that lies in a bundle is the bundle's), if any: a folder whose
    ``manifest.json`` is a gradwire-bundle manifest, or one that cannot be read as JSON (a
    damaged bundle is still collected data)."""
    from gradwire import bundle  # (bundle writes through this module)

    path = Path(os.path.abspath(path))
    p = Path(os.path.realpath(path.parent)) / path.name
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


def _refuse_protected(path: Path, what: str, st: os.stat_result | None) -> None:
    """Refuse collected data (see :func:`_refuse_bundle`) and this command's inputs (``st``:
    what the path names now, None for a new path)."""
    _refuse_bundle(path, what)
    for dev, ino, name in _inputs:
        if st is not None and (st.st_dev, st.st_ino) == (dev, ino):
            raise GradwireError(f"the {what} is {name}, an input of this command: gradwire "
                                "never writes over what it reads; choose another path",
                                path=path)


def _refuse_bundle(path: Path, what: str) -> None:
    """Refuse a path that is collected data: a bundle's own files (manifest, capture, capture
    log), its ``trace/`` folder, the bundle folder itself (as an output folder), the lab's
    ``lab_result.json`` beside bundles, or the sample shipped with gradwire. Checked both where
    the path lies (a symlink in a bundle is the bundle's) and where it leads."""
    from gradwire import bundle

    here = Path(os.path.realpath(path.parent)) / path.name
    for place in dict.fromkeys((here, Path(os.path.realpath(path)))):
        if in_sample(place):
            raise GradwireError(f"the {what} is in the sample shipped with gradwire; choose "
                                "another path", path=path)
        if place.name == LAB_RESULT and _holds_bundles(place.parent):
            raise GradwireError(f"the {what} is the lab's result beside the bundles in "
                                f"{place.parent}: gradwire never writes over what was "
                                "collected; choose another path", path=path)
        folder = bundle_holding(place)
        if folder is None:
            continue
        rel = place.relative_to(folder).parts if place != folder else ()
        own = {bundle.MANIFEST, bundle.CAPTURE_LOG, *bundle.CAPTURE_NAMES}
        if not rel or rel[0] == bundle.TRACE_DIR or (len(rel) == 1 and rel[0] in own):
            where = "is the bundle" if not rel else "is collected data of the bundle"
            raise GradwireError(f"the {what} {where} {folder}: gradwire never writes over "
                                "what was collected; choose another path", path=path)


def in_sample(place: Path) -> bool:
    """Whether ``place`` (resolved) is in the sample shipped with gradwire (its bundle and
    its measured runs), which no command writes into."""
    from gradwire import bundle

    shipped = (bundle.SAMPLE_BUNDLE, bundle.SAMPLE_MEASURED)
    return any(place == s.resolve() or s.resolve() in place.parents for s in shipped)


def _holds_bundles(folder: Path) -> bool:
    """Whether ``folder`` is a bundle or holds one (a folder with a manifest.json)."""
    from gradwire import bundle

    try:
        return (folder / bundle.MANIFEST).exists() or any(
            (c / bundle.MANIFEST).exists() for c in folder.iterdir() if c.is_dir())
    except OSError:
        return False


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
