"""TensorFlow's RunMetadata message without importing TensorFlow.

A trace's ``step-*.runmeta.pb`` (and a ``.pbtxt`` RunMetadata) is read with a message class
built from TensorFlow's own descriptors, shipped as ``tf_runmetadata.pbtxt`` (written by
``scripts/tf_descriptors.py`` from the installed TensorFlow; tests check it is current), in a
descriptor pool of its own. Only the ``protobuf`` package is needed: importing TensorFlow
costs 5-8 s of every ``predict`` with a job what-if, and an offline machine that replays
bundles need not have it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

DESCRIPTORS = Path(__file__).resolve().parent / "tf_runmetadata.pbtxt"


@functools.cache
def _run_metadata_class() -> Any:
    from google.protobuf import descriptor_pool, message_factory, text_format
    from google.protobuf.descriptor_pb2 import FileDescriptorSet

    files = text_format.Parse(DESCRIPTORS.read_text(), FileDescriptorSet())
    pool = descriptor_pool.DescriptorPool()  # not the default one TensorFlow fills
    for f in files.file:  # in dependency order
        pool.Add(f)
    desc = pool.FindMessageTypeByName("tensorflow.RunMetadata")
    if hasattr(message_factory, "GetMessageClass"):  # newer protobuf
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)  # older protobuf


def run_metadata() -> Any:
    """An empty ``tensorflow.RunMetadata`` message (fields as TensorFlow names them)."""
    return _run_metadata_class()()


def missing_step_stats(meta: Any, empty: bool) -> str | None:
    """Why a parsed RunMetadata (``meta``; ``empty``: its file held nothing) is not a traced
    step's, or None when it is: a traced step's carries each device's step statistics."""
    if meta.step_stats.dev_stats:
        return None
    return "holds no step statistics (" + ("an empty file" if empty else
                                           "not a traced step's RunMetadata") + ")"
