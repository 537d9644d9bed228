"""numba's ``njit`` as gradwire uses it: cached on disk where it can be, optional at import.

numba is a core dependency; without it (``AVAILABLE`` is False) the decorated functions stay
plain Python, and callers with a pure-Python path take it.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

log = logging.getLogger(__name__)

try:
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a core dependency
    AVAILABLE = False


def njit(cache: bool = False, **options):
    """numba's ``njit``, cached on disk (``__pycache__`` beside the module, else numba's user
    cache or ``$NUMBA_CACHE_DIR``), or in memory only where no cache location is writable."""

    def wrap(f):
        if not AVAILABLE:  # pragma: no cover
            return f
        try:
            return numba.njit(cache=cache, **options)(f)
        except RuntimeError as err:  # no writable cache location
            log.debug("compiling %s without an on-disk cache: %s", f.__name__, err)
            return numba.njit(**options)(f)

    return wrap


def drop_stale_cache(module_file: str, *dependencies: str) -> bool:
    """Delete ``module_file``'s numba cache (``__pycache__/<module>.*.nbi`` and ``.nbc``) where
    the sources it was compiled against have changed; returns whether it did.

    numba keys a cached function on its own source file only: a function it inlined from
    another module (``hqkernel``'s into ``kernel``'s loop) or a constant it froze from one
    (``hostqueue.MSS``) stays as compiled when that other module changes, and the replay runs
    the old code without a word. So the modules that compile against others call this at
    import with those others' files: their sources' SHA-256 is kept beside the cache
    (``<module>.deps``), and where it differs the cache goes and numba compiles afresh.
    Best effort: a cache elsewhere (``$NUMBA_CACHE_DIR``, numba's user cache) or a folder it
    cannot write is left alone."""
    cache = Path(module_file).parent / "__pycache__"
    stem = Path(module_file).stem
    digest = hashlib.sha256()
    for dep in dependencies:
        digest.update(Path(dep).read_bytes())
    stamp = cache / f"{stem}.deps"
    try:
        if stamp.read_text() == digest.hexdigest():
            return False
    except OSError:
        pass
    dropped = False
    try:
        for f in [*cache.glob(f"{stem}.*.nbi"), *cache.glob(f"{stem}.*.nbc")]:
            f.unlink(missing_ok=True)
            dropped = True
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError as err:
        log.debug("could not refresh %s's numba cache: %s", stem, err)
    return dropped
