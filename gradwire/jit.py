"""numba's ``njit`` as gradwire uses it: cached on disk where it can be, optional at import.

numba is a core dependency; without it (``AVAILABLE`` is False) the decorated functions stay
plain Python, and callers with a pure-Python path take it.
"""

from __future__ import annotations

import logging

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
