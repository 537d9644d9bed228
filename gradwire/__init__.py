"""gradwire: predict distributed TensorFlow training throughput from traces of a small run.

The two lines a training script needs::

    from gradwire import TraceHook
    hooks = [TraceHook()]          # writes into $GRADWIRE_BUNDLE (set by `gradwire collect`)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["TraceHook", "__version__"]


def __getattr__(name: str) -> Any:
    # TensorFlow is imported only when the hook is asked for, never by `import gradwire`.
    if name == "TraceHook":
        from gradwire.collector.hook import TraceHook

        return TraceHook
    raise AttributeError(f"module 'gradwire' has no attribute {name!r}")
