"""A trace's RunMetadata read without TensorFlow (collector/runmetadata.py), against
TensorFlow's own message class where TensorFlow is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import need_tf

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.collector.runmetadata import DESCRIPTORS, run_metadata
from gradwire.collector.stepstats import parse_run_metadata

STEP = SAMPLE_BUNDLE / "worker0" / "trace" / "step-00000003.runmeta.pb"
ROOT = Path(__file__).resolve().parent.parent


def test_the_sample_step_is_read_with_tensorflow_unimportable():
    code = ("import sys; sys.modules['tensorflow'] = None  # any import of it fails\n"
            "from gradwire.collector.opingest import read_run_metadata\n"
            "from gradwire.collector.stepstats import parse_run_metadata\n"
            "from pathlib import Path\n"
            f"meta = read_run_metadata(Path({str(STEP)!r}))\n"
            "trace = parse_run_metadata(meta, 3)\n"
            "print(len(trace.ops), len(meta.partition_graphs), len(trace.devices))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    ops, graphs, devices = map(int, out.stdout.split())
    assert ops == 91 and graphs == 2 and devices >= 2


def test_it_parses_as_tensorflows_own_class_does():
    need_tf()
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    raw = STEP.read_bytes()
    theirs, ours = RunMetadata(), run_metadata()
    theirs.ParseFromString(raw)
    ours.ParseFromString(raw)
    assert ours.SerializeToString(deterministic=True) == \
        theirs.SerializeToString(deterministic=True)
    assert str(ours) == str(theirs)  # every field known to both, none left unknown
    a, b = parse_run_metadata(ours, 3), parse_run_metadata(theirs, 3)
    assert a.ops == b.ops and a.deps == b.deps and a.devices == b.devices


def test_the_shipped_descriptors_are_the_installed_tensorflows():
    need_tf()
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "tf_descriptors.py"),
                          "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert DESCRIPTORS.is_file() and "current" in out.stdout
