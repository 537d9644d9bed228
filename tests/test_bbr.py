"""Linux's BBR whole (replay/bbr.py), rule by rule against net/ipv4/tcp_bbr.c, tcp_rate.c and
lib/win_minmax.c, and through the host-queue oracle (replay/hostqueue.py, ``cc="bbr-v1"``)."""

from __future__ import annotations

import numpy as np
import pytest

from gradwire.replay import bbr
from gradwire.replay.bbr import (
    B_CA,
    B_DLV,
    B_FULLR,
    B_LTBW,
    B_LTU,
    B_MINRTT,
    B_MODE,
    B_NEXT,
    B_PACE,
    B_PG,
    B_PRIOR,
    B_SEGOUT,
    B_W0V,
    PROBE_BW,
    PROBE_RTT,
)
from gradwire.replay.hostqueue import MSS, HostQueue, Transfer, simulate


def fresh(now: float = 0.0, rtt0: float = 100.0) -> np.ndarray:
    b = bbr.state_vector()
    bbr.init(b, now, rtt0, 1.0)
    return b


def test_the_bandwidth_filter_is_the_max_of_the_last_ten_rounds():
    """lib/win_minmax.c's running max over 10 rounds, kept as three samples: a max ages out
    once ten rounds pass without a sample as high, the best of the later ones taking over."""
    b = fresh()
    seen = []
    for t, v in [(0, 5.0), (1, 3.0), (2, 4.0), (3, 4.0), (8, 2.0), (11, 1.0), (14, 0.5)]:
        bbr._running_max(b, bbr.BW_RTTS, float(t), v)
        seen.append(b[B_W0V])
    # the 5 of round 0 holds through round 8, is gone by round 11 (the 4 of round 3 is the
    # max then) and that one by round 14 (round 8's 2)
    assert seen == [5.0, 5.0, 5.0, 5.0, 5.0, 4.0, 2.0]


def test_pacing_spaces_packets_at_the_rate_and_forgives_half_when_late():
    """tcp_update_skb_after_send: the next packet's earliest departure is this one's bytes at
    the pacing rate later; a sender late by d gets min(d, half of it) back; the first 10
    segments are not paced."""
    b = fresh()
    b[B_PACE] = 0.05  # segments/us: 72.4 bytes/us
    rate = 0.05 * MSS
    bbr.after_send(b, 0.0, 65160.0, float(MSS))
    assert b[B_NEXT] == 0.0  # no segment out yet: unpaced
    b[B_SEGOUT] = 45.0
    b[B_NEXT] = -np.inf
    bbr.after_send(b, 0.0, 65160.0, float(MSS))
    assert b[B_NEXT] == pytest.approx(65160.0 / rate)
    first = b[B_NEXT]
    bbr.after_send(b, first + 100.0, 65160.0, float(MSS))
    assert b[B_NEXT] == pytest.approx(first + 100.0 + 65160.0 / rate - 100.0)
    second = b[B_NEXT]  # late by far more than half a packet's time: half of it back, no more
    bbr.after_send(b, second + 5000.0, 65160.0, float(MSS))
    assert b[B_NEXT] == pytest.approx(second + 5000.0 + 65160.0 / rate / 2.0)


def test_tso_goal_is_a_millisecond_of_the_pacing_rate():
    """bbr_tso_segs_goal: 2^-10 s of the pacing rate in whole segments, at least 2 (1 below
    1.2 Mbit/s), at most a 64 KiB packet's."""
    b = fresh()
    b[B_PACE] = 60.0 / MSS  # 480 Mbit/s
    assert bbr.tso_segs(b, float(MSS)) == 40.0  # 58,593 bytes
    b[B_PACE] = 0.1 / MSS  # 0.8 Mbit/s
    assert bbr.tso_segs(b, float(MSS)) == 1.0
    b[B_PACE] = 10_000.0 / MSS  # 80 Gbit/s
    assert bbr.tso_segs(b, float(MSS)) == 45.0  # (65536 - 1 - 320) // 1448


def ack(b: np.ndarray, now: float, segs: float, rtt: float, in_flight: float, cwnd: float,
        losses: float = 0.0) -> float:
    """One ACK of ``segs`` segments, its packet sent ``rtt`` before ``now`` with the delivered
    count as it was then less ``in_flight`` (what was out beside it), ``losses`` learned
    just before it; returns the window."""
    if losses:
        bbr.on_loss(b, losses, in_flight, cwnd)
    pkt = np.array([max(b[B_DLV] - in_flight, 0.0), now - rtt, now - rtt - 1000.0, 0.0])
    return bbr.on_ack(b, now, segs, rtt, now - rtt, pkt, in_flight + segs, in_flight, cwnd,
                      float(MSS))


def test_probe_rtt_after_ten_seconds_without_a_lower_rtt():
    """bbr_update_min_rtt: RTT samples that never fall to the minimum for 10 s expire it:
    PROBE_RTT, the window at 4 segments until 200 ms have passed at 4 in flight and a round
    with them; then PROBE_BW again, the window saved before it back (and at once capped by
    the target, as bbr_set_cwnd does)."""
    b = fresh(rtt0=100.0)
    cwnd, now = 100.0, 0.0
    while now < 10e6:
        now += 1000.0
        cwnd = ack(b, now, 10.0, 5000.0, 50.0, cwnd)
    assert b[B_MODE] != PROBE_RTT
    now += 1000.0
    cwnd = ack(b, now, 10.0, 5000.0, 50.0, cwnd)
    assert b[B_MODE] == PROBE_RTT and cwnd == 4.0
    assert b[B_MINRTT] == 5000.0  # the expired minimum takes the sample
    assert b[B_PRIOR] > 4.0  # the window before it, to come back
    entered = now
    while b[B_MODE] == PROBE_RTT:
        now += 1000.0
        cwnd = ack(b, now, 2.0, 5000.0, 2.0, cwnd)
    assert 200e3 < now - entered <= 210e3
    assert b[B_MODE] == PROBE_BW and cwnd > 4.0


def test_two_lossy_intervals_at_one_rate_are_a_policer():
    """bbr_lt_bw_sampling: losing over 20% of what is delivered for two intervals of at least
    4 rounds at about the same rate sets the long-term bandwidth, paced at gain 1; after 48
    more rounds gain cycling resumes without it."""
    b = fresh()
    b[B_MODE], b[B_FULLR] = PROBE_BW, 1.0
    cwnd, now = 100.0, 0.0
    for _ in range(12):  # 10 segments a ms, each ACK a round, 5 lost before each
        now += 1000.0
        cwnd = ack(b, now, 10.0, 1000.0, 0.0, cwnd, losses=5.0)
    assert b[B_LTU] == 1.0
    assert b[B_LTBW] == pytest.approx(0.01)  # segments per us
    assert b[B_PG] == 1.0
    assert b[B_PACE] == pytest.approx(0.01 * bbr.PACING_MARGIN)
    for _ in range(50):
        now += 1000.0
        cwnd = ack(b, now, 10.0, 1000.0, 0.0, cwnd)
    assert b[B_LTU] == 0.0


def test_recovery_conserves_packets_then_restores_the_window():
    """bbr_set_cwnd_to_recover_or_restore: entering Recovery the window is what is in flight
    plus what this ACK delivered; once everything out at entry is delivered, the window
    saved at entry comes back."""
    b = fresh()
    bbr.on_loss(b, 10.0, 50.0, 100.0)
    assert b[B_CA] == 1.0 and b[B_PRIOR] == 100.0
    cwnd = ack(b, 1000.0, 5.0, 500.0, 45.0, 100.0)
    assert cwnd == 50.0  # 45 still out + 5 acked
    now = 1000.0
    while b[B_CA] == 1.0:
        now += 1000.0
        cwnd = ack(b, now, 5.0, 500.0, 40.0, cwnd)
    assert cwnd >= 100.0


def test_a_lone_connection_finds_the_link_rate_and_settles_in_probe_bw():
    """STARTUP, DRAIN and PROBE_BW through a switch's queue: the bandwidth estimate is the
    link's rate and a long transfer ends within 3% of its bytes at that rate."""
    rate = 60.0  # bytes/us
    q = HostQueue(rate=rate, buffer=600_000.0, segment=MSS, cc="bbr-v1", tsq=False)
    out = simulate(q, [Transfer(0, 0.0, 20e6)])
    s = out.connections[0].state
    assert s[B_MODE] == PROBE_BW and s[B_FULLR] == 1.0
    assert s[B_W0V] * MSS == pytest.approx(rate, rel=0.05)
    assert out.ends[0] == pytest.approx(20e6 / rate, rel=0.03)


def shares(cc: str) -> list[float]:
    """Three connections through a switch's 600 kB queue at 60 bytes/us, 50 ms apart, each
    sending 150 transfers of 500 kB: each one's share of the link between 1 and 3 s."""
    q = HostQueue(rate=60.0, buffer=600_000.0, segment=MSS, cc=cc, tsq=False)
    trs = [Transfer(k, 50_000.0 * k, 500_000.0) for k in range(3) for _ in range(150)]
    ends = np.array(simulate(q, trs).ends).reshape(3, 150)
    done = [np.sum((e > 1e6) & (e <= 3e6)) * 500_000.0 for e in ends]
    return [x / (60.0 * 2e6) for x in done]


def test_bbr_whole_shares_a_switch_queue_unequally_where_one_window_splits_it_evenly():
    """Through a FIFO BBR connections do not split a link evenly: the one that came first
    keeps more (the lab's pushes, docs/notes/issue21-bbr-v1.md); the window-only model,
    every connection one window target, splits it in three."""
    whole, window = shares("bbr-v1"), shares("bbr")
    assert sum(whole) == pytest.approx(1.0, abs=0.05)
    assert whole[0] == max(whole) and whole[0] > 1.3 * min(whole)
    assert max(window) < 1.1 * min(window)
