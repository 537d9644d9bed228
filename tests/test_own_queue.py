"""--link overflow: the PS's own queue for the asynchronous rows whose connections overflow it
(replay/ownqueue.py): where it takes it, and what the prediction says."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import gradwire

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.replay.hostqueue import (
    GSO_SEGMENTS,
    MSS_WIRE,
    HostQueueSpec,
    fits_every_connection,
    lab_queue_bytes,
)
from gradwire.replay.options import PredictOptions

PACKET = MSS_WIRE * GSO_SEGMENTS  # one full GSO packet in the queue, bytes on the wire


def test_a_queue_fits_two_gso_packets_a_connection_or_not():
    """TCP Small Queues' floor: two full GSO packets (68,130 bytes each on the wire) per busy
    connection. The lab's smallest queue (256 KiB) takes one connection's, not two's; its
    600 Mbit/s queue (10 ms: 750 kB) five's, not six's."""
    assert fits_every_connection(1, lab_queue_bytes(20e6))
    assert not fits_every_connection(2, lab_queue_bytes(20e6))  # 272,520 > 262,144
    assert fits_every_connection(5, lab_queue_bytes(600e6))
    assert not fits_every_connection(6, lab_queue_bytes(600e6))
    assert fits_every_connection(3, 6 * PACKET) and not fits_every_connection(3, 6 * PACKET - 1)
    spec = HostQueueSpec()
    assert spec.wire_queue_bytes(600e6) == lab_queue_bytes(600e6)
    assert HostQueueSpec(queue_bytes=1e6).wire_queue_bytes(600e6) == 1e6


def _sample():
    from gradwire.replay.profile import load_profile
    return load_profile([SAMPLE_BUNDLE])


def _resolved(prof, **given):
    from gradwire.replay.predictflow import own_queue_rows, resolved
    raw = PredictOptions(bundles=(SAMPLE_BUNDLE,), workers=(1, 2), link="overflow", **given)
    opts = resolved(raw, prof)
    return opts, own_queue_rows(raw, opts, prof)


def test_link_overflow_takes_the_own_queue_only_for_overflowing_asynchronous_rows():
    """The shipped sample (an asynchronous PS, its lab's 256 KiB FIFO at 20 Mbit/s): its W = 2
    row goes through the PS's own queue, as --link hostqueue replays it (the shaper's bucket,
    each direction's window), its W = 1 row stays equally shared; a queue that takes both
    connections' packets keeps both rows shared."""
    from gradwire.replay.grid import sim_jobs

    prof = _sample()
    opts, own = _resolved(prof)
    assert opts.link == "fair" and own is not None and own.opts.link == "hostqueue"
    assert own.opts.link_windows == "ratio" and own.opts.host_queue_bytes is None
    assert not own.takes(1, 20e6, "async-ps") and own.takes(2, 20e6, "async-ps")
    assert not own.takes(2, 20e6, "sync-ps")
    assert not own.takes(2, 600e6, "async-ps")  # 750 kB at 600 Mbit/s
    jobs = sim_jobs(opts, [1], [20e6], None)
    swapped = own.swapped(jobs, [1], [20e6], None)
    assert [j.link for j in jobs] == ["fair", "fair"]
    assert [j.link for j in swapped] == ["fair", "hostqueue"]
    assert swapped[0] == jobs[0]
    assert swapped[1].burst_bytes == own.burst and min(own.burst) > 0
    bigger = dataclasses.replace(prof, lab={**prof.lab, "queue": "1m", "queue_bytes": 1e6})
    _opts, own = _resolved(bigger)  # the queue the profile's lab recorded
    assert own is not None and own.opts.host_queue_bytes == 1e6
    assert not own.takes(2, 20e6, "async-ps")
    _opts, own = _resolved(prof, host_queue_bytes=1e6)  # the one given
    assert own is not None and own.opts.host_queue_bytes == 1e6
    assert not own.takes(2, 20e6, "async-ps") and own.takes(8, 20e6, "async-ps")


def _loss_free(prof):
    """The sample as if its PS capture had retransmitted nothing (its own: 2.4%)."""
    return dataclasses.replace(prof, transport=dataclasses.replace(prof.transport,
                                                                   retransmitted=0))


def test_link_auto_shares_equally_even_where_one_worker_kept_within_the_queue():
    """--link auto keeps equal sharing for the asynchronous PS on a profile whose PS capture
    retransmitted nothing, its lab a FIFO: the rule that sent such profiles' overflowing rows
    through the PS's own queue failed its registration (docs/preregistered/
    issue21-loss-free-queue-report.md); --link overflow still takes them."""
    from gradwire.replay.predictflow import own_queue_rows, resolved

    def own(prof, **given):
        raw = PredictOptions(bundles=(SAMPLE_BUNDLE,), workers=(1, 2), **given)
        return own_queue_rows(raw, resolved(raw, prof), prof)

    clean = _loss_free(_sample())
    assert clean.transport.retransmitted_share == 0.0
    assert own(clean) is None
    taken = own(clean, link="overflow")
    assert taken is not None and taken.takes(2, 20e6, "async-ps")


@pytest.mark.parametrize("given", [
    {},  # --link auto: equal sharing for the asynchronous PS (two registrations failed)
    dict(link="fair"),
    dict(link="hostqueue"),  # every row through it already
    dict(link="overflow", mechanisms=("sync-ps",)),  # no asynchronous row
])
def test_other_links_keep_every_row(given):
    from gradwire.replay.predictflow import own_queue_rows, resolved

    prof = _sample()
    raw = PredictOptions(bundles=(SAMPLE_BUNDLE,), workers=(2,), **given)
    assert own_queue_rows(raw, resolved(raw, prof), prof) is None


def test_link_overflow_is_refused_without_a_ps():
    proc = gradwire("predict", "--sample", "--mechanism", "ring-allreduce", "--link", "overflow")
    assert proc.returncode == 2 and "--link overflow" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_predict_says_which_rows_went_through_the_own_queue(tmp_path: Path):
    """The sample at W = 1, 2 with --link overflow: the JSON lists the W = 2 row and a note
    says why; the default lists none and has no such note."""
    fast = ("--workers", "1,2", "--steps", "12", "--replications", "4",
            "--max-replications", "4", "--model", "sim")
    over = gradwire("predict", "--sample", *fast, "--link", "overflow", "-o",
                    str(tmp_path / "over"))
    assert over.returncode == 0, over.stderr
    doc = json.loads((tmp_path / "over" / "predictions.json").read_text())
    assert [r[0] for r in doc["profile"]["own_queue_rows"]] == [2]
    assert "async-ps rows at W = 2 replay each PS's downlink" in over.stderr
    fair = gradwire("predict", "--sample", *fast, "-o", str(tmp_path / "fair"))
    assert fair.returncode == 0, fair.stderr
    doc = json.loads((tmp_path / "fair" / "predictions.json").read_text())
    assert doc["profile"]["own_queue_rows"] == [] and "own drop-tail" not in fair.stderr
