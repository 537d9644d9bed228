"""The host-queue model (replay/hostqueue.py): Reno connections through their sender's own
drop-tail queue under TCP Small Queues, checked against closed forms and Linux's rules."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from gradwire.replay.hostqueue import (
    GSO_SEGMENTS,
    INITIAL_WINDOW,
    LAB_HOST_QUEUE,
    MSS,
    MSS_WIRE,
    Connection,
    HostQueue,
    HostQueueSpec,
    Transfer,
    _on_ack,
    _restart_after_idle,
    _Sim,
    bbr_window,
    simulate,
)

RATE = 62.5  # bytes/us: 500 Mbit/s
PACKET = MSS_WIRE * GSO_SEGMENTS  # bytes of one full GSO packet in the queue


def wire(size: float) -> float:
    """Bytes a transfer takes in the queue: whole segments."""
    return math.ceil(size / MSS_WIRE) * MSS_WIRE


def test_one_connection_runs_at_the_link_rate():
    q = HostQueue(rate=RATE, buffer=625_000)
    out = simulate(q, [Transfer(0, 0.0, 10e6)])
    serial = wire(10e6) / RATE
    assert out.drops == 0 and out.holds == 0
    # slow start from 10 segments costs a few round trips of the empty queue, no more
    assert serial <= out.ends[0] <= serial * 1.01


def test_a_token_bucket_sends_its_bytes_at_once_after_the_queue_was_idle():
    """A shaper's bucket of three GSO packets: a transfer on a full bucket ends three packets'
    time before its bytes at the rate (the tokens also refill while slow start leaves the queue
    empty, which the plain rate loses); one handed over the moment the last ended gets only what
    refilled meanwhile; a bucket of 0 is the plain rate to the microsecond."""
    bucket, size = 3 * PACKET, 5e6
    plain = simulate(HostQueue(rate=RATE, buffer=625_000), [Transfer(0, 0.0, size)]).ends[0]
    q = HostQueue(rate=RATE, buffer=625_000, bucket=bucket)
    alone = simulate(q, [Transfer(0, 0.0, size)]).ends[0]
    assert alone == pytest.approx((wire(size) - bucket) / RATE, abs=1.0)
    assert plain > wire(size) / RATE
    assert simulate(HostQueue(rate=RATE, buffer=625_000, bucket=0.0),
                    [Transfer(0, 0.0, size)]).ends[0] == plain
    sim = _Sim(q, 1)
    first = sim.add(Transfer(0, 0.0, size))
    sim.run(wait_for=[first])
    t = sim.ends[first]
    second = sim.add(Transfer(0, t, size))
    idle = sim.add(Transfer(0, 10 * t, size))  # the bucket full again long before
    sim.run()
    assert sim.ends[second] - t == pytest.approx(plain, rel=0.01)
    assert sim.ends[idle] - 10 * t == pytest.approx(alone, rel=0.01)


def test_bbr_fills_the_queue_where_reno_keeps_two_packets_and_holds_the_newcomer():
    """Two connections, a 312.5 kB queue (the lab's at 250 Mbit/s) behind a shaper whose
    bucket passes three packets at once, the second connection starting 1 ms after the first
    on every round: Reno's TCP Small Queues keep each at two packets, which both fit; BBR's
    estimate reads the host's speed, so nothing but its window (four packets here) holds the
    first, the newcomer's first packet finds the queue full, is dropped with nothing in flight,
    and waits for its probe timer. A local drop does not cut BBR's window, and BBR does not
    restart after idle."""
    rate, queue, bucket = 31.25, 312_500.0, 3 * PACKET
    out = {}
    for cc in ("reno", "bbr"):
        q = HostQueue(rate=rate, buffer=queue, bucket=bucket, cc=cc, bbr_target=180.0)
        sim = _Sim(q, 2)
        t = 0.0
        for _ in range(4):
            a, b = sim.add(Transfer(0, t, 1.2e6)), sim.add(Transfer(1, t + 1000.0, 1.2e6))
            sim.run(wait_for=[a, b])
            t = max(sim.ends[a], sim.ends[b]) + 80_000.0  # idle: the pushes, elsewhere
        out[cc] = sim.outcome()
    assert out["reno"].holds == 0
    assert out["bbr"].holds >= 1 and out["bbr"].drops > out["reno"].drops
    assert [c.cwnd for c in out["bbr"].connections] == [180.0, 180.0]


def test_bbr_window_target_is_three_gso_packets_and_its_bdp():
    """bbr_set_cwnd's target on a LAN: 2 x the BDP (at 250 Mbit/s over 100 us: 2 x 2.1
    segments, rounded up) plus three 45-segment packets, even: 140 segments (the lab's
    samples: 138-150)."""
    assert bbr_window(31.25, 100.0, MSS_WIRE, GSO_SEGMENTS) == 140.0
    assert bbr_window(31.25, 0.0, MSS_WIRE, GSO_SEGMENTS) == 136.0


def test_connections_whose_two_packets_fit_share_equally():
    """Four connections in congestion avoidance, their pacing rate low (TCP Small Queues keeps
    two GSO packets each queued, 545 kB), through a 1 MiB queue: nothing is dropped and the
    four transfers end within 1% of each other, after 4 x the bytes at the link's rate."""
    sim = _Sim(HostQueue(rate=RATE, buffer=1 << 20), 4)
    for c in sim.conns:
        c.cwnd, c.ssthresh, c.srtt = 120.0, 100.0, 10_000.0
    for k in range(4):
        sim.add(Transfer(k, 0.0, 10e6))
    sim.run()
    out = sim.outcome()
    assert out.drops == 0
    serial = 4 * wire(10e6) / RATE
    assert min(out.ends) > 0.99 * serial
    assert max(out.ends) <= serial * 1.001


def test_fresh_connections_in_slow_start_queue_more_than_two_packets():
    """Fresh connections pace at twice their window per RTT, and TCP Small Queues lets a
    connection queue about 1 ms of its pacing rate: the faster ones keep more queued and end
    first (the lab's samples: 3-5 packets early in a pull). The link stays busy throughout."""
    q = HostQueue(rate=RATE, buffer=1 << 20)
    out = simulate(q, [Transfer(k, 0.0, 10e6) for k in range(4)])
    serial = 4 * wire(10e6) / RATE
    assert min(out.ends) < 0.9 * serial
    assert max(out.ends) == pytest.approx(serial, rel=1e-3)


def test_a_queue_too_small_cuts_late_connections_for_the_whole_transfer():
    """Six connections want 12 packets of a queue that holds 9: local drops halve some
    windows, Reno regrows them one segment per round trip, and the transfers end apart; the
    link stays busy, so the last still ends when all the bytes are through."""
    q = HostQueue(rate=RATE, buffer=625_000)
    out = simulate(q, [Transfer(k, 0.0, 10e6) for k in range(6)])
    serial = 6 * wire(10e6) / RATE
    assert out.drops > 0
    assert min(out.ends) < 0.9 * max(out.ends)
    assert serial <= max(out.ends) <= serial * 1.01
    assert any(c.drops for c in out.connections)


def test_a_local_drop_halves_the_window_and_holds_a_connection_with_nothing_in_flight():
    q = HostQueue(rate=RATE, buffer=2 * PACKET)
    sim = _Sim(q, 2)
    sim.backlog = 2 * PACKET  # another connection's two packets fill the queue
    c = sim.conns[0]
    c.cwnd, c.unsent = 80.0, 1000
    c.targets.append((1000, 0))  # one transfer of 1000 segments waiting
    sim.try_send(0, now=5_000.0)
    assert sim.drops == 1 and c.drops == 1
    assert c.cwnd == c.ssthresh == 40  # tcp_enter_cwr: max(cwnd / 2, 2)
    assert c.unsent == 1000 and c.sent == 0  # the dropped packet was not sent
    assert c.holds == 1 and c.probe_at == 5_000.0 + q.base_rtt + q.rto_min  # probe timer
    sim.try_send(0, now=6_000.0)  # a second drop in the same window does not cut again
    assert c.cwnd == 40 and c.drops == 2 and c.holds == 1


def test_tsq_keeps_two_packets_queued_while_the_pacing_rate_is_low():
    q = HostQueue(rate=RATE, buffer=10 << 20)
    sim = _Sim(q, 1)
    c = sim.conns[0]
    c.cwnd, c.ssthresh, c.srtt, c.unsent = 300.0, 100.0, 20_000.0, 10_000
    c.targets.append((10_000, 0))
    sim.try_send(0, now=0.0)
    # 300 segments per 20 ms is 26 kB per ms of pacing: below two packets, so two packets
    assert c.queued == 2 * PACKET and c.in_flight == 2 * GSO_SEGMENTS


def test_restart_after_idle_halves_per_rto_down_to_the_initial_window():
    q = HostQueue(rate=RATE, buffer=625_000)
    c = Connection(cwnd=160.0, ssthresh=math.inf, srtt=10_000.0, last_send=0.0)
    rto = 10_000.0 + q.rto_min
    _restart_after_idle(q, c, now=2.5 * rto)  # 2.5 RTOs idle: the loop halves twice
    assert c.cwnd == 40.0
    assert c.ssthresh == 120.0  # at least 3/4 of the window before
    c2 = Connection(cwnd=160.0, srtt=10_000.0, last_send=0.0)
    _restart_after_idle(q, c2, now=100 * rto)
    assert c2.cwnd == INITIAL_WINDOW
    c3 = Connection(cwnd=160.0, srtt=10_000.0, last_send=0.0)
    _restart_after_idle(q, c3, now=0.5 * rto)  # less than one RTO: untouched
    assert c3.cwnd == 160.0


def test_reno_growth_slow_start_then_one_segment_per_window():
    c = Connection(cwnd=10.0, ssthresh=20.0, in_flight=10, max_in_flight=10)
    _on_ack(c, 10)  # slow start: +10, capped at ssthresh
    assert c.cwnd == 20.0
    c.in_flight, c.cwnd_limited = 20, True
    _on_ack(c, 20)  # congestion avoidance: one window acked, +1
    assert c.cwnd == 21.0
    c.in_flight, c.cwnd_limited = 10, False
    _on_ack(c, 10)  # not limited by the window: no growth
    assert c.cwnd == 21.0


def test_connections_keep_their_state_between_transfers():
    q = HostQueue(rate=RATE, buffer=625_000)
    out = simulate(q, [Transfer(0, 0.0, 1e6), Transfer(0, 0.0, 1e6), Transfer(1, 50.0, 1e6)])
    assert all(math.isfinite(e) for e in out.ends)
    assert out.ends[0] < out.ends[1]  # one connection's transfers go in order
    assert max(out.ends) >= 3 * wire(1e6) / RATE


@pytest.mark.parametrize("kwargs, match", [
    ({"rate": 0.0, "buffer": 1e6}, "rate"),
    ({"rate": RATE, "buffer": 100.0}, "buffer"),
    ({"rate": RATE, "buffer": 1e6, "base_rtt": -1.0}, "base_rtt"),
    ({"rate": RATE, "buffer": 1e6, "bucket": -1.0}, "bucket"),
    ({"rate": RATE, "buffer": 1e6, "cc": "cubic"}, "cc"),
    ({"rate": RATE, "buffer": 1e6, "cc": "bbr", "bbr_target": -1.0}, "bbr_target"),
])
def test_bad_queue_parameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HostQueue(**kwargs)


def test_bad_transfers_are_refused():
    q = HostQueue(rate=RATE, buffer=625_000)
    with pytest.raises(ValueError, match="connection 3"):
        simulate(q, [Transfer(3, 0.0, 1e6)], connections=2)
    with pytest.raises(ValueError, match="positive size"):
        simulate(q, [Transfer(0, 0.0, 0.0)])


CHECK = Path(__file__).resolve().parent.parent / "scripts" / "hostqueue_check.py"
SYNC_BUNDLE = Path(__file__).resolve().parent / "data" / "small_sync_bundle"


def test_the_closed_loop_check_runs_on_a_synchronous_profile():
    """scripts/hostqueue_check.py on the small synchronous lab profile: its G and c from the
    replay, one row per W and queue, the lab's numbers beside where given; a bad W is one
    line and exit 2."""
    proc = subprocess.run([sys.executable, str(CHECK), str(SYNC_BUNDLE), "--bandwidth", "1gbit",
                           "--workers", "2", "--queue", "1250000", "--steps", "6",
                           "--measured", "2@1250000=7000"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 2 | 1250000 |")]
    assert len(rows) == 1 and rows[0].split("|")[8].strip() == "7000.0"
    assert "G = 0.20 MB" in proc.stdout
    bad = subprocess.run([sys.executable, str(CHECK), str(SYNC_BUNDLE), "--bandwidth", "1gbit",
                          "--workers", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "bad --workers 'x'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_predictions_host_queue_settings_in_the_replays_units():
    """HostQueueSpec: the lab's queue (10 ms of 250 Mbit/s, 312,500 bytes on the wire) as TCP
    payload; Reno has no BBR target; BBR's is the bytes given, in segments, or Linux's formula
    (two BDPs over the base round trip and three GSO packets: 140 segments at 250 Mbit/s)."""
    assert LAB_HOST_QUEUE.payload_queue_bytes(250e6) == pytest.approx(312_500 * MSS / MSS_WIRE)
    assert HostQueueSpec(queue_bytes=1e6).payload_queue_bytes(250e6) == pytest.approx(
        1e6 * MSS / MSS_WIRE)
    assert LAB_HOST_QUEUE.bbr_segments(250e6) == 0.0
    assert HostQueueSpec(bbr_window_bytes=100 * MSS).bbr_segments(250e6) == 100
    assert HostQueueSpec(bbr_window_bytes=0.0).bbr_segments(250e6) == 140


def _queue_sweep(mechanisms: str, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "gradwire", "predict", str(SYNC_BUNDLE),
                           "--workers", "2", "--mechanism", mechanisms, "--model", "sim",
                           "--format", "json", *extra],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _queue_notes(doc: dict) -> list[str]:
    return [n for n in doc["notes"] if "own" in n and "queue" in n]


def _sync_rate(doc: dict) -> float:
    return next(r["examples_per_s"] for r in doc["rows"] if r["mechanism"] == "sync-ps")


def test_sync_ps_beside_another_mechanism_reads_as_it_does_alone():
    """--link auto on a lab FIFO profile: sync-ps takes the PS's own queue (and says so)
    whether asked alone or beside ring all-reduce, whose rows share the links equally: the
    same sync-ps row either way, the two groups named in the JSON; the user's --link holds
    for every row; no queue where no sync-ps row is asked."""
    alone, mixed = _queue_sweep("sync-ps"), _queue_sweep("sync-ps,ring-allreduce")
    assert len(_queue_notes(alone)) == 1 and "drop-tail queue" in _queue_notes(alone)[0]
    assert _queue_notes(mixed) == _queue_notes(alone)
    assert _sync_rate(mixed) == pytest.approx(_sync_rate(alone), rel=1e-9)
    assert [(g["mechanisms"], g["link"]) for g in mixed["mechanism_groups"]] == [
        (["sync-ps"], "hostqueue"), (["ring-allreduce"], "fair")]
    fair = _queue_sweep("sync-ps,ring-allreduce", "--link", "fair")
    assert _queue_notes(fair) == [] and _sync_rate(fair) != _sync_rate(alone)
    assert _queue_notes(_queue_sweep("async-ps,ring-allreduce")) == []
