"""The TCP congestion control a profile's PS hosts ran: recorded by collect in every manifest,
read into the profile (the lab's record first), given in predict's JSON, and deciding whether
the note on the PS's own queue points a synchronous job to BBR whole."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO, gradwire

from gradwire.bundle import new_manifest, tcp_congestion_control
from gradwire.errors import GradwireError
from gradwire.replay.grid import measured_window_bytes
from gradwire.replay.mechanisms import ASYNC_PS, SYNC_PS
from gradwire.replay.notes import host_queue_note
from gradwire.replay.options import PredictOptions
from gradwire.replay.predictflow import bbr_window_of
from gradwire.replay.profile import load_profile, ps_congestion_control
from gradwire.schema import check_manifest

SYNC_BUNDLE = Path(__file__).resolve().parent / "data" / "small_sync_bundle"
SHIPPED = REPO / "gradwire" / "data" / "sample_bundle"  # predict --sample's: a lab FIFO, BBR


def _bundle(cc: str | None, *, worker: bool = False) -> SimpleNamespace:
    host = {"hostname": "h", "addresses": [], "cpu_count": 2}
    if cc is not None:
        host["tcp_congestion_control"] = cc
    return SimpleNamespace(manifest={"host": host}, step_files=[Path("s")] if worker else [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_new_manifest_records_this_namespaces_congestion_control_and_validates():
    """The manifest's host says what /proc says (a word such as 'cubic' or 'bbr'); the schema
    takes it, takes a manifest of before (without it), and refuses a number there."""
    proc = Path("/proc/sys/net/ipv4/tcp_congestion_control")
    man = new_manifest(created_by="collect", mode="run")
    cc = man["host"]["tcp_congestion_control"]
    assert cc == tcp_congestion_control() == proc.read_text().split()[0]
    check_manifest(man, "manifest.json")
    del man["host"]["tcp_congestion_control"]
    check_manifest(man, "manifest.json")
    man["host"]["tcp_congestion_control"] = 3
    with pytest.raises(GradwireError, match="tcp_congestion_control"):
        check_manifest(man, "manifest.json")


def test_the_profile_takes_the_labs_congestion_control_first_then_the_ps_manifests():
    """The lab's --tcp-cc, else the host default its lab_result recorded, else the one value
    every PS bundle's manifest records (workers' bundles not counted); None where they differ
    or none says."""
    ps_bbr, ps_cubic = _bundle("bbr"), _bundle("cubic")
    assert ps_congestion_control({"tcp_cc": "reno", "tcp_cc_run": "bbr"}, [ps_cubic]) == "reno"
    assert ps_congestion_control({"tcp_cc": None, "tcp_cc_run": "bbr"}, [ps_cubic]) == "bbr"
    assert ps_congestion_control({}, [ps_bbr, _bundle("bbr"), _bundle("cubic", worker=True)]) \
        == "bbr"
    assert ps_congestion_control({}, [ps_bbr, ps_cubic]) is None
    assert ps_congestion_control({}, [_bundle(None), _bundle("cubic", worker=True)]) is None


def test_the_own_queue_note_points_to_bbr_whole_only_where_the_ps_may_have_run_bbr():
    """Reno's queue on a synchronous profile: a profile whose PSes ran BBR is told so, one that
    says nothing is told about clusters running BBR, one that ran CUBIC is not pointed to
    BBR whole; all three say what the queue leaves out."""
    opts = PredictOptions(bundles=("b",), link="hostqueue", mechanisms=(SYNC_PS,))
    said = {cc: host_queue_note(opts, cc) for cc in ("bbr", None, "cubic")}
    assert all(n is not None and "BBR's held connections are left out" in n
               for n in said.values())
    assert "this profile's PSes ran BBR: --tcp bbr-v1" in said["bbr"]
    assert "on a cluster running BBR: --tcp bbr-v1" in said[None]
    assert "--tcp bbr-v1" not in said["cubic"]
    asynchronous = PredictOptions(bundles=("b",), link="hostqueue", mechanisms=(ASYNC_PS,))
    assert "--tcp bbr-v1" not in host_queue_note(asynchronous, "bbr")


@pytest.fixture(scope="module")
def cubic_sample(tmp_path_factory):
    """The shipped sample's bundle, its lab's record saying the nodes ran CUBIC."""
    bundle = tmp_path_factory.mktemp("cubic") / "bundle"
    shutil.copytree(SHIPPED, bundle)
    lab = bundle / "lab_result.json"
    doc = json.loads(lab.read_text())
    doc["config"]["tcp_cc"] = "cubic"
    lab.write_text(json.dumps(doc))
    return bundle


def _predicted(path, *more: str) -> dict:
    proc = gradwire("predict", str(path), "--format", "json", "-q", *more, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _queue_notes(doc: dict) -> list[str]:
    return [n for n in doc["notes"] if "drop-tail queue" in n]


def test_an_asynchronous_lab_profile_under_cubic_takes_both_queues_by_default(cubic_sample):
    """The shipped sample (asynchronous, its lab a FIFO under BBR) is replayed on fairly
    shared links; the same bundle whose lab ran CUBIC goes through the PS's own queue and the
    switch's, Reno's connections in them (docs/preregistered/issue21-cubic-reno-queues.md),
    and the note says so; --link fair still takes equal sharing."""
    assert _queue_notes(_predicted(SHIPPED, "--workers", "1,2")) == []
    [note] = _queue_notes(_predicted(cubic_sample, "--workers", "1,2"))
    assert "its uplink as the switch's queue" in note and "Reno connection" in note
    assert "this profile's ran cubic) it is the default on a lab FIFO" in note
    assert _queue_notes(_predicted(cubic_sample, "--workers", "1,2", "--link", "fair")) == []


def test_sync_and_async_ps_in_one_sweep_each_take_their_own_queues(cubic_sample):
    """Asked together on the CUBIC profile, sync-ps and async-ps resolve as each would alone:
    two groups, both through the PS's own queue, the switch's queue for the asynchronous PS
    only; the async-ps row the same as asked alone."""
    args = ("--workers", "2", "--model", "sim")
    both = _predicted(cubic_sample, *args, "--mechanism", "sync-ps,async-ps")
    assert [(g["mechanisms"], g["link"], g["uplink_queue"])
            for g in both["mechanism_groups"]] == [(["sync-ps"], "hostqueue", False),
                                                   (["async-ps"], "hostqueue", True)]
    alone = _predicted(cubic_sample, *args)

    def rate(doc: dict) -> float:
        return next(r["examples_per_s"] for r in doc["rows"] if r["mechanism"] == "async-ps")
    assert rate(both) == pytest.approx(rate(alone), rel=1e-9)


@pytest.mark.parametrize("cc, bbr_window", [("bbr", True), ("cubic", False)])
def test_a_bundle_from_no_lab_takes_its_ps_manifests_congestion_control(tmp_path, cc,
                                                                        bbr_window):
    """The small synchronous bundle without its lab's record: the PS manifest's congestion
    control is the profile's, and decides --tcp bbr's window target (the capture's pull window
    where it ran BBR, BBR's own, 0.0, where it did not)."""
    bundle = tmp_path / "bundle"
    shutil.copytree(SYNC_BUNDLE, bundle)
    (bundle / "lab_result.json").unlink()
    manifest = bundle / "ps0" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["host"]["tcp_congestion_control"] = cc
    manifest.write_text(json.dumps(doc))
    prof = load_profile([bundle], batch_size=32)
    assert prof.lab == {} and prof.ps_congestion_control == cc
    window = bbr_window_of("bbr", prof)
    assert window == (measured_window_bytes(prof)[0] if bbr_window else 0.0)
    assert (window > 0) is bbr_window
