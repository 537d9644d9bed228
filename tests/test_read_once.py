"""``gradwire predict`` reads its profile once: each bundle's manifest parsed once, each capture
opened and read once (the PS capture's TCP statistics come from the pass that gives its
streams), every other file of the profile (session, steps, lab_result.json) read once."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from conftest import SAMPLE

from gradwire import cli, schema
from gradwire.aligner import nodes
from gradwire.bundle import SAMPLE_BUNDLE, open_bundle
from gradwire.collector import pcapfile
from gradwire.collector.transport import TransportStats, transport_stats
from gradwire.replay.profile import load_profile


def _count_reads(monkeypatch: pytest.MonkeyPatch, argv: list[str]
                 ) -> tuple[Counter, Counter, Counter, int]:
    """Run ``gradwire predict argv`` (a small sweep) in this process, its bundles read in it
    too; returns the files
    opened (``os.open``, by resolved path), the capture passes (PcapReader iterations), the
    manifests validated, and the exit code."""
    opened: Counter = Counter()
    passes: Counter = Counter()
    manifests: Counter = Counter()
    real_open, real_iter = os.open, pcapfile.PcapReader.__iter__
    real_check = schema.check_manifest

    def counting_open(path, *args, **kw):  # type: ignore[no-untyped-def]
        if isinstance(path, (str, Path)):
            opened[Path(path).resolve()] += 1
        return real_open(path, *args, **kw)

    def counting_iter(self):  # type: ignore[no-untyped-def]
        passes[Path(self.path).resolve()] += 1
        return real_iter(self)

    def counting_check(doc, path, *args, **kw):  # type: ignore[no-untyped-def]
        manifests[Path(path).resolve()] += 1
        return real_check(doc, path, *args, **kw)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(pcapfile.PcapReader, "__iter__", counting_iter)
    monkeypatch.setattr(schema, "check_manifest", counting_check)
    monkeypatch.setattr(cli, "_stop_on_signals", lambda: None)  # pytest keeps its handlers
    # every bundle read here, one after the other, where the counts see it (with more cores
    # each capture is read in a process of its own: tests/test_procpool.py)
    monkeypatch.setattr(nodes, "usable_cpus", lambda: 1)
    code = cli.main(["predict", *argv, "--workers", "1,2", "--jobs", "1", "-q",
                     "--replications", "2", "--max-replications", "2"])
    return opened, passes, manifests, code


@pytest.mark.parametrize("argv, root", [([str(SAMPLE)], SAMPLE), (["--sample"], SAMPLE_BUNDLE)],
                         ids=["small_bundle", "sample"])
def test_predict_reads_each_capture_and_manifest_once(monkeypatch, argv, root, capsys):
    opened, passes, manifests, code = _count_reads(monkeypatch, argv)
    assert code == 0, capsys.readouterr().err
    root = root.resolve()
    bundles = sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())
    assert [b.name for b in bundles] == ["ps0", "worker0"]
    for b in bundles:
        assert opened[b / "capture.pcapng"] == passes[b / "capture.pcapng"] == 1, (opened,
                                                                                    passes)
        assert opened[b / "manifest.json"] == manifests[b / "manifest.json"] == 1, (opened,
                                                                                     manifests)
    assert opened[root / "worker0" / "trace" / "session.json"] == 1
    assert opened[root / "lab_result.json"] == 1
    inside = {p: n for p, n in opened.items() if p.is_relative_to(root)}
    assert len(inside) >= 8 and set(inside.values()) == {1}, inside  # the step files too


def test_the_profiles_transport_is_that_of_its_ps_capture_read_alone():
    """The statistics observed with the streams are those ``transport_stats`` gives reading
    the PS capture again: the same counts and queueing delays."""
    ps = open_bundle(SAMPLE / "ps0")
    alone = transport_stats(ps.capture_file, ps.manifest["host"].get("addresses") or (),
                            ps.ports)
    assert alone.data_segments > 0
    assert load_profile([SAMPLE]).transport == TransportStats.merge([alone])
