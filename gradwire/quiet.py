"""Quiet imports of native libraries that log to standard error on their own.

TensorFlow (2.16 on) writes its start-up notes (absl's "before InitializeLog", oneDNN, CUDA
drivers) to file descriptor 2 from C++ at import, whatever ``TF_CPP_MIN_LOG_LEVEL`` says. A
gradwire command that imports it only to read a protobuf or time an op shows none of them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the block (native libraries write there
    directly, past ``sys.stderr``); Python's own errors still surface after it. The whole
    process's fd 2 moves, so no other thread should write to it meanwhile (gradwire's callers
    are single-threaded there; the sweep's workers are processes), and a native abort inside
    the block dies without its message."""
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
