"""One exception hierarchy for every stage of gradwire.

Each error carries the offending path (when there is one) and renders as a single readable
line, so the CLI can print ``str(err)`` and exit non-zero without a traceback.
"""

from __future__ import annotations

from pathlib import Path


class GradwireError(Exception):
    """Base class of every error gradwire raises for a user's input or environment."""

    exit_code = 2  # what the CLI exits with

    def __init__(self, message: str, *, path: str | Path | None = None,
                 usage: bool = False) -> None:
        """``usage``: the fault is in how the command was called (an option's value, a
        missing or contradicting argument), so the CLI points to its ``--help`` as the
        parser's own errors do; a fault in a file or the environment is not."""
        self.message = message
        self.path = str(path) if path is not None else None
        self.usage = usage
        super().__init__(f"{self.path}: {message}" if self.path else message)

    def __reduce__(self) -> tuple:
        """Pickled whole (from a worker process: gradwire/procpool.py), its path and message
        apart as raised, whatever the subclass's ``__init__`` takes."""
        return _restore, (type(self), self.args, self.__dict__)


def fault_of(exc: OSError | UnicodeDecodeError) -> str:
    """What went wrong reading (or writing) a file, in words rather than the exception's
    class: "Permission denied", "a symbolic link that loops", "not UTF-8 text (byte 12)"."""
    import errno

    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    if exc.errno == errno.ELOOP:
        return "a symbolic link that loops (or too many links in its path)"
    return (exc.strerror or type(exc).__name__).rstrip(".")


def _restore(cls: type[GradwireError], args: tuple, state: dict) -> GradwireError:
    """The error ``__reduce__`` pickled, made again without calling its ``__init__``."""
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class BundleError(GradwireError):
    """A bundle folder or one of its files is missing, corrupt or of an unknown schema."""


class CaptureError(GradwireError):
    """A packet capture could not be started, stopped or read."""


class CollectError(GradwireError):
    """``gradwire collect`` was given something it cannot run."""


class PredictError(GradwireError):
    """``gradwire predict`` was given options it cannot run (a value out of range, two that
    contradict each other, a sweep too large)."""


class ReplayError(GradwireError):
    """The replayer was given a task graph or resource table it cannot run (a generator's
    mistake, or an input that produced an impossible graph), named with what is wrong."""


class TraceError(GradwireError):
    """A TensorFlow trace (RunMetadata, step stats, timeline) could not be understood."""


class LabError(GradwireError):
    """The lab could not build or run a cluster."""


class AlignmentInfeasible(GradwireError):
    """Clock-offset constraints contradict each other."""


class MissingExtra(GradwireError):
    """An optional heavy dependency is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"this needs the Python package '{module}', which comes with gradwire's "
            f"'{extra}' extra: pip install 'gradwire[{extra}]'"
        )
        self.module = module
        self.extra = extra
