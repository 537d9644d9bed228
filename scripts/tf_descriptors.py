"""Write collector/tf_runmetadata.pbtxt: the descriptors of TensorFlow's RunMetadata message
and every .proto file it depends on, as a text FileDescriptorSet, so that gradwire reads a
trace's RunMetadata without importing TensorFlow (collector/runmetadata.py).

Run with TensorFlow installed, after a TensorFlow upgrade that changes these protos:

    .venv/bin/python scripts/tf_descriptors.py            # rewrites the file
    .venv/bin/python scripts/tf_descriptors.py --check    # exit 1 if it differs

tests/test_runmetadata.py runs the check wherever TensorFlow is installed. The protos are
TensorFlow's (Apache-2.0), unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "collector" / "tf_runmetadata.pbtxt"


def descriptor_text() -> str:
    """The text FileDescriptorSet of the installed TensorFlow's RunMetadata, its files in
    dependency order (each after those it imports)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from google.protobuf import descriptor_pb2, text_format
    from tensorflow.core.protobuf import config_pb2

    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def walk(f: object) -> None:
        if f.name in files:  # type: ignore[attr-defined]
            return
        for dep in f.dependencies:  # type: ignore[attr-defined]
            walk(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        f.CopyToProto(proto)  # type: ignore[attr-defined]
        files[f.name] = proto  # type: ignore[attr-defined]

    walk(config_pb2.RunMetadata.DESCRIPTOR.file)
    body = text_format.MessageToString(descriptor_pb2.FileDescriptorSet(file=files.values()))
    return ("# TensorFlow's RunMetadata and the .proto files it imports (Apache-2.0), as a text\n"
            "# FileDescriptorSet: written by scripts/tf_descriptors.py; do not edit.\n" + body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is not current")
    args = ap.parse_args()
    text = descriptor_text()
    if args.check:
        same = OUT.is_file() and OUT.read_text() == text
        print(f"{OUT}: {'current' if same else 'differs from the installed TensorFlow'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
