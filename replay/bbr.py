"""Linux's BBR, whole: one connection's congestion control as ``net/ipv4/tcp_bbr.c`` runs it
(BBR v1, mainline Linux 6.x), with the delivery-rate samples of ``net/ipv4/tcp_rate.c`` and
the windowed max filter of ``lib/win_minmax.c``, for the host-queue links' packets
(``--tcp bbr-v1``; ``replay/hostqueue.py`` and ``replay/hqkernel.py`` call it).

Why: the lab's connections run BBR, and on a shared queue its own dynamics set who gets the
link (docs/notes/issue21-bbr-v1.md): a connection whose packets were lost heavily for a few
round trips takes its delivery rate then as a policer's (``lt_bw``) and paces at it for 48
round trips, a push starving at a tenth of the link beside two others; a connection whose RTT
never fell back to its minimum for 10 s spends 200 ms at four packets in flight (PROBE_RTT).
The window-only model (``--tcp bbr``) has neither: every connection keeps one window target.

Everything below is Linux's, function for function, in its names: the constants are the
kernel's (``bbr_*``), none fitted. The state is a float64 vector (the ``B_*`` indices), so the
compiled kernel keeps it beside the rest of a connection (``hc``) and the Python oracle in
its ``Connection``. Units: time in us, windows and delivered counts in segments, bandwidth in
segments per us, the pacing rate in bytes per us; ``mss`` is the bytes a segment counts (the
kernel's payload MSS; the oracle's ``HostQueue.segment``, which tests set to the same).

What differs from Linux, and why:
- one ACK per packet the queue sends (a GSO packet of up to 45 segments), not per two
  segments: the model's ACK clock (``hostqueue.py``); the samples are per packet;
- no STARTUP's first cwnd from a handshake: a connection starts with the initial window, an
  RTT estimate of ``rtt0`` (the link's empty round trip) and its pacing rate from them, as
  ``bbr_init`` does after a handshake;
- losses are learned as ``hostqueue.py`` learns them (a switch's drop, a round trip later),
  and enter Recovery then (``tcp_enter_recovery``), which ends once everything outstanding at
  entry is delivered (``high_seq``); no RTO and no undo;
- ``get_random_u32_below`` (the gain cycle's random start) is a hash of the connection's seed
  and a counter, so that the kernel and the oracle draw alike;
- an RTT sample is a whole GSO packet's (sent to acked), so it holds that packet's time at
  the bottleneck (about 1 ms at 500 Mbit/s), where Linux's first partial ACK of it gives one
  nearer the empty round trip: the minimum RTT stays at ``rtt0`` until PROBE_RTT first
  refreshes it, then reads about that much more (a larger BDP term in the window);
- a loss notice whose Recovery already ends at the next ACK (nothing else was out) skips
  packet conservation and the restore.
"""

from __future__ import annotations

import math

import numpy as np

from gradwire.jit import drop_stale_cache, njit
from gradwire.replay import hostqueue
from gradwire.replay.hostqueue import INITIAL_WINDOW, PACING_SHIFT

# its functions freeze hostqueue's constants (gradwire.jit.drop_stale_cache)
drop_stale_cache(__file__, hostqueue.__file__)

__all__ = ["B_MINRTT", "B_MODE", "B_NEXT", "B_PACE", "MODES", "NB", "PROBE_BW", "PROBE_RTT",
           "STARTUP", "after_send", "app_limited_check", "estimate", "init", "on_ack",
           "on_loss", "on_send", "pacing_rate", "rate_fields", "state_vector", "tso_segs",
           "tx_start"]

# modes (enum bbr_mode)
STARTUP, DRAIN, PROBE_BW, PROBE_RTT = 0, 1, 2, 3
_OPEN, _RECOVERY = 0, 1  # the TCP_CA states BBR tells apart here

CYCLE_LEN = 8
BW_RTTS = CYCLE_LEN + 2  # bbr_bw_rtts: the bandwidth filter's window, rounds
MIN_RTT_WIN_US = 10e6  # bbr_min_rtt_win_sec
PROBE_RTT_MODE_US = 200e3  # bbr_probe_rtt_mode_ms
MIN_TSO_RATE = 1_200_000 / 8 / 1e6  # bbr_min_tso_rate (1.2 Mbit/s), bytes per us
PACING_MARGIN = 0.99  # 1 - bbr_pacing_margin_percent / 100
HIGH_GAIN = (256 * 2885 // 1000 + 1) / 256  # bbr_high_gain, 2/ln(2) in BBR_UNIT
DRAIN_GAIN = (256 * 1000 // 2885) / 256  # bbr_drain_gain
CWND_GAIN = 2.0  # bbr_cwnd_gain
PACING_GAIN = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # bbr_pacing_gain
CYCLE_RAND = 7  # bbr_cycle_rand
CWND_MIN_TARGET = 4  # bbr_cwnd_min_target
FULL_BW_THRESH = 1.25  # bbr_full_bw_thresh
FULL_BW_CNT = 3  # bbr_full_bw_cnt
LT_INTVL_MIN_RTTS = 4  # bbr_lt_intvl_min_rtts
LT_LOSS_THRESH = 50 / 256  # bbr_lt_loss_thresh (lost/delivered above it: lossy)
LT_BW_RATIO = 1 / 8  # bbr_lt_bw_ratio
LT_BW_DIFF = 4000 / 8  # bbr_lt_bw_diff, bytes per second
LT_BW_MAX_RTTS = 48  # bbr_lt_bw_max_rtts
EXTRA_ACKED_WIN_RTTS = 5  # bbr_extra_acked_win_rtts
EXTRA_ACKED_MAX_US = 100e3  # bbr_extra_acked_max_us
ACK_EPOCH_RESET = float(1 << 20)  # bbr_ack_epoch_acked_reset_thresh
INIT_CWND = float(INITIAL_WINDOW)  # TCP_INIT_CWND
TSO_MAX_BYTES = 65536 - 1 - 320  # GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER
TSO_MAX_SEGS = 0x7F
PACED_AFTER = 10  # tcp_update_skb_after_send: the first 10 segments go unpaced

# the state vector: tcp_sock's rate fields, then struct bbr's
(B_DLV, B_DLVT, B_FTX, B_APPL, B_LOST, B_SEGOUT, B_RTTMIN,  # tcp_sock
 B_RTTC, B_NRD, B_RSTART,  # rounds
 B_W0V, B_W0T, B_W1V, B_W1T, B_W2V, B_W2T,  # the bandwidth max filter (value, round)
 B_MINRTT, B_MINRTTS, B_PRDONE, B_PRRD,  # min_rtt and PROBE_RTT
 B_MODE, B_CYC, B_CYCT, B_PG, B_CG,  # mode and gains
 B_PRIOR, B_CA, B_PCA, B_PCONS, B_HIGH, B_PEND,  # loss recovery
 B_FULLR, B_FULLBW, B_FULLC,  # STARTUP's full pipe
 B_LTS, B_LTRC, B_LTU, B_LTBW, B_LTLD, B_LTLT, B_LTLL,  # the long-term (policer) estimate
 B_XA0, B_XA1, B_XAR, B_XAI, B_AEPT, B_AEPA,  # ACK aggregation
 B_IDLE, B_PACE, B_NEXT, B_SEED, B_RAND) = range(52)
NB = 52
# tcp_sock: delivered (segments), delivered_mstamp (us), first_tx_mstamp (us), app_limited
# (0, or the delivered count that ends it), lost (segments), data_segs_out, the least RTT
# seen (tcp_min_rtt); B_PEND: losses learned since the last ACK (its rate sample's losses);
# B_HIGH: Recovery ends once this many segments are delivered; B_PACE: the pacing rate
# (bytes/us); B_NEXT: the earliest departure time of the next packet (tcp_wstamp_ns, us);
# B_SEED, B_RAND: the gain cycle's random draws.


@njit(cache=True)
def init(b, now, rtt0, seed):
    """``bbr_init`` on a new connection at ``now`` whose handshake measured ``rtt0`` us,
    with the initial window of ``INIT_CWND`` segments; ``seed`` its random draws'."""
    b[:] = 0.0
    b[B_DLVT] = now
    b[B_FTX] = now
    b[B_RTTMIN] = rtt0
    b[B_MINRTT] = rtt0
    b[B_MINRTTS] = now
    b[B_NEXT] = -math.inf
    b[B_AEPT] = now
    b[B_SEED] = seed
    b[B_MODE] = STARTUP
    b[B_PG] = HIGH_GAIN
    b[B_CG] = HIGH_GAIN
    b[B_CA] = _OPEN
    b[B_PCA] = _OPEN
    # bbr_init_pacing_rate_from_rtt: high_gain x the initial window over the RTT
    b[B_PACE] = INIT_CWND / max(rtt0, 1.0) * HIGH_GAIN * PACING_MARGIN


@njit(cache=True, inline='always')
def _rand_below(b, n):
    """``get_random_u32_below(n)``: a hash of the seed and a counter (Lehmer, 2^31 - 1)."""
    b[B_RAND] += 1.0
    h = (int(b[B_SEED]) * 1000003 + int(b[B_RAND])) % 2147483647
    h = h * 48271 % 2147483647
    h = h * 48271 % 2147483647
    return h % n


@njit(cache=True)
def pacing_rate(b, mss):
    """The connection's pacing rate, bytes per us (``sk_pacing_rate``)."""
    return b[B_PACE] * mss


@njit(cache=True)
def tso_segs(b, mss):
    """``bbr_tso_segs_goal``: segments per TSO packet, about 1/1024 s of the pacing rate,
    at least 2 (1 below 1.2 Mbit/s), at most a 64 KiB packet's."""
    rate = b[B_PACE] * mss  # bytes/us
    nbytes = min(math.floor(rate * 1e6 / (1 << PACING_SHIFT)), float(TSO_MAX_BYTES))
    least = 1.0 if rate < MIN_TSO_RATE else 2.0
    return min(max(math.floor(nbytes / mss), least), float(TSO_MAX_SEGS))


@njit(cache=True, inline='always')
def _max_bw(b):
    return b[B_W0V]


@njit(cache=True, inline='always')
def _bw(b):
    return b[B_LTBW] if b[B_LTU] > 0.0 else b[B_W0V]


estimate = _bw  # ``bbr_bw``: the rate BBR runs on (segments per us), for diagnostics
MODES = {STARTUP: "STARTUP", DRAIN: "DRAIN", PROBE_BW: "PROBE_BW", PROBE_RTT: "PROBE_RTT"}


@njit(cache=True, inline='always')
def _minmax_reset(b, t, v):
    b[B_W0V], b[B_W0T] = v, t
    b[B_W1V], b[B_W1T] = v, t
    b[B_W2V], b[B_W2T] = v, t


@njit(cache=True)
def _running_max(b, win, t, v):
    """``minmax_running_max`` (lib/win_minmax.c): the max of ``v`` over ``win`` rounds, kept
    as three samples."""
    if v >= b[B_W0V] or t - b[B_W2T] > win:
        _minmax_reset(b, t, v)
        return
    if v >= b[B_W1V]:
        b[B_W2V], b[B_W2T] = v, t
        b[B_W1V], b[B_W1T] = v, t
    elif v >= b[B_W2V]:
        b[B_W2V], b[B_W2T] = v, t
    # minmax_subwin_update
    dt = t - b[B_W0T]
    if dt > win:
        b[B_W0V], b[B_W0T] = b[B_W1V], b[B_W1T]
        b[B_W1V], b[B_W1T] = b[B_W2V], b[B_W2T]
        b[B_W2V], b[B_W2T] = v, t
        if t - b[B_W0T] > win:
            b[B_W0V], b[B_W0T] = b[B_W1V], b[B_W1T]
            b[B_W1V], b[B_W1T] = b[B_W2V], b[B_W2T]
            b[B_W2V], b[B_W2T] = v, t
    elif b[B_W1T] == b[B_W0T] and dt > win // 4:
        b[B_W2V], b[B_W2T] = v, t
        b[B_W1V], b[B_W1T] = v, t
    elif b[B_W2T] == b[B_W1T] and dt > win // 2:
        b[B_W2V], b[B_W2T] = v, t


@njit(cache=True, inline='always')
def _bdp(b, bw, gain):
    """``bbr_bdp``: ceil(bw x min_rtt x gain), segments (``init`` gives the minimum RTT its
    first value, so Linux's initial window before any RTT sample does not arise)."""
    return math.ceil(bw * b[B_MINRTT] * gain - 1e-9)


@njit(cache=True, inline='always')
def _quantization_budget(b, cwnd, mss):
    """``bbr_quantization_budget``: three TSO packets more, rounded up to even, and 2 more in
    the gain cycle's probing phase."""
    cwnd += 3.0 * tso_segs(b, mss)
    cwnd = cwnd + (cwnd % 2.0)
    if b[B_MODE] == PROBE_BW and b[B_CYC] == 0.0:
        cwnd += 2.0
    return cwnd


@njit(cache=True, inline='always')
def _inflight(b, bw, gain, mss):
    return _quantization_budget(b, _bdp(b, bw, gain), mss)


@njit(cache=True, inline='always')
def _in_net_at_edt(b, inflight_now, now, mss):
    """``bbr_packets_in_net_at_edt``: what will still be in the network when the next packet
    leaves (its earliest departure time)."""
    interval = max(b[B_NEXT], now) - now
    delivered = _bw(b) * interval
    at_edt = inflight_now
    if b[B_PG] > 1.0:
        at_edt += tso_segs(b, mss)
    return 0.0 if delivered >= at_edt else at_edt - delivered


@njit(cache=True, inline='always')
def _set_pacing_rate(b, bw, gain):
    """``bbr_set_pacing_rate`` (segments per us kept; ``pacing_rate`` gives bytes)."""
    rate = bw * gain * PACING_MARGIN
    if b[B_FULLR] > 0.0 or rate > b[B_PACE]:
        b[B_PACE] = rate


@njit(cache=True, inline='always')
def _save_cwnd(b, cwnd):
    if b[B_PCA] < _RECOVERY and b[B_MODE] != PROBE_RTT:
        b[B_PRIOR] = cwnd
    else:
        b[B_PRIOR] = max(b[B_PRIOR], cwnd)


@njit(cache=True, inline='always')
def _advance_cycle_phase(b):
    b[B_CYC] = float((int(b[B_CYC]) + 1) & (CYCLE_LEN - 1))
    b[B_CYCT] = b[B_DLVT]


@njit(cache=True, inline='always')
def _reset_probe_bw_mode(b):
    b[B_MODE] = PROBE_BW
    b[B_CYC] = float(CYCLE_LEN - 1 - _rand_below(b, CYCLE_RAND))
    _advance_cycle_phase(b)


@njit(cache=True, inline='always')
def _reset_mode(b):
    if b[B_FULLR] == 0.0:
        b[B_MODE] = STARTUP
    else:
        _reset_probe_bw_mode(b)


@njit(cache=True, inline='always')
def _check_probe_rtt_done(b, now, cwnd):
    """``bbr_check_probe_rtt_done``; returns the window."""
    if not (b[B_PRDONE] > 0.0 and now > b[B_PRDONE]):
        return cwnd
    b[B_MINRTTS] = now
    cwnd = max(cwnd, b[B_PRIOR])
    _reset_mode(b)
    return cwnd


@njit(cache=True, inline='always')
def _reset_lt_interval(b):
    b[B_LTLT] = math.floor(b[B_DLVT] / 1000.0)  # ms
    b[B_LTLD] = b[B_DLV]
    b[B_LTLL] = b[B_LOST]
    b[B_LTRC] = 0.0


@njit(cache=True, inline='always')
def _reset_lt(b):
    b[B_LTBW] = 0.0
    b[B_LTU] = 0.0
    b[B_LTS] = 0.0
    _reset_lt_interval(b)


@njit(cache=True)
def _lt_bw_sampling(b, losses, app_limited, mss):
    """``bbr_lt_bw_sampling``: two intervals of 4-16 rounds in a row, each losing at least
    50/256 (about 20%) of what it delivered at about the same rate, are a policer's: pace at
    their rate (``lt_bw``) for 48 rounds."""
    if b[B_LTU] > 0.0:
        if b[B_MODE] == PROBE_BW and b[B_RSTART] > 0.0:
            b[B_LTRC] += 1.0
            if b[B_LTRC] >= LT_BW_MAX_RTTS:
                _reset_lt(b)
                _reset_probe_bw_mode(b)
        return
    if b[B_LTS] == 0.0:
        if losses == 0.0:
            return
        _reset_lt_interval(b)
        b[B_LTS] = 1.0
    if app_limited:
        _reset_lt(b)
        return
    if b[B_RSTART] > 0.0:
        b[B_LTRC] += 1.0
    if b[B_LTRC] < LT_INTVL_MIN_RTTS:
        return
    if b[B_LTRC] > 4 * LT_INTVL_MIN_RTTS:
        _reset_lt(b)
        return
    if losses == 0.0:
        return
    lost = b[B_LOST] - b[B_LTLL]
    delivered = b[B_DLV] - b[B_LTLD]
    if delivered <= 0.0 or lost < LT_LOSS_THRESH * delivered:
        return
    t = math.floor(b[B_DLVT] / 1000.0) - b[B_LTLT]
    if t < 1.0:
        return
    bw = delivered / (t * 1000.0)
    # bbr_lt_bw_interval_done
    if b[B_LTBW] > 0.0:
        diff = abs(bw - b[B_LTBW])
        if diff <= LT_BW_RATIO * b[B_LTBW] or diff * mss * 1e6 * PACING_MARGIN <= LT_BW_DIFF:
            b[B_LTBW] = (bw + b[B_LTBW]) / 2.0
            b[B_LTU] = 1.0
            b[B_PG] = 1.0
            b[B_LTRC] = 0.0
            return
    b[B_LTBW] = bw
    _reset_lt_interval(b)


@njit(cache=True)
def on_send(b, now, in_flight, segs, out):
    """``tcp_rate_skb_sent`` for a packet of ``segs`` segments sent at ``now`` with
    ``in_flight`` segments already out: its rate fields into ``out`` (the delivered count,
    its time, the send phase's start, app-limited 1/0), for its ACK to bring back."""
    if in_flight <= 0.0:
        b[B_FTX] = now
        b[B_DLVT] = now
    out[0] = b[B_DLV]
    out[1] = b[B_DLVT]
    out[2] = b[B_FTX]
    out[3] = 1.0 if b[B_APPL] > 0.0 else 0.0
    b[B_SEGOUT] += segs


@njit(cache=True)
def tx_start(b, now, cwnd):
    """``bbr_cwnd_event(CA_EVENT_TX_START)``: a send with nothing in flight; from idle while
    app-limited, BBR restarts at its estimated rate. Returns the window."""
    if b[B_APPL] == 0.0:
        return cwnd
    b[B_IDLE] = 1.0
    b[B_AEPT] = now
    b[B_AEPA] = 0.0
    if b[B_MODE] == PROBE_BW:
        _set_pacing_rate(b, _bw(b), 1.0)
    elif b[B_MODE] == PROBE_RTT:
        cwnd = _check_probe_rtt_done(b, now, cwnd)
    return cwnd


@njit(cache=True)
def after_send(b, now, nbytes, mss):
    """``tcp_update_skb_after_send``: the next packet's earliest departure, ``nbytes`` at the
    pacing rate after this one's (half of it forgiven where the connection was late), the
    first ``PACED_AFTER`` segments unpaced."""
    start = max(b[B_NEXT], now)
    credit = start - b[B_NEXT] if math.isfinite(b[B_NEXT]) else 0.0
    b[B_NEXT] = start
    rate = b[B_PACE] * mss
    if rate > 0.0 and b[B_SEGOUT] >= PACED_AFTER:
        t = nbytes / rate
        t -= min(t / 2.0, credit)
        b[B_NEXT] = start + t


@njit(cache=True)
def app_limited_check(b, unsent, queued, in_flight, cwnd):
    """``tcp_rate_check_app_limited``, as the application writes: nothing left to send,
    nothing in the host's queue and the window not full mark the samples until what is out
    now is delivered as the application's, not the network's."""
    if unsent < 1.0 and queued <= 0.0 and in_flight < cwnd:
        b[B_APPL] = max(b[B_DLV] + in_flight, 1.0)


@njit(cache=True)
def on_loss(b, lost, in_flight, cwnd):
    """``lost`` segments learned lost (``in_flight``: what is still out without them): they
    count as lost, are the next ACK's losses, and enter Recovery (``tcp_enter_recovery``,
    ``bbr_ssthresh`` saving the window) until everything out now and those are delivered."""
    b[B_LOST] += lost
    b[B_PEND] += lost
    if b[B_CA] == _OPEN:
        _save_cwnd(b, cwnd)
        b[B_CA] = _RECOVERY
        b[B_HIGH] = b[B_DLV] + in_flight + lost


@njit(cache=True)
def on_ack(b, now, segs, rtt, sent, pkt, prior_in_flight, in_flight, cwnd, mss):
    """An ACK at ``now`` of ``segs`` segments sent at ``sent`` (``rtt`` its sample, us;
    ``pkt`` the rate fields ``on_send`` gave it; ``prior_in_flight``/``in_flight``: before and
    after it): ``tcp_rate_skb_delivered`` and ``tcp_rate_gen``'s sample, then ``bbr_main``.
    Returns the new window (segments)."""
    b[B_DLV] += segs
    if rtt < b[B_RTTMIN]:
        b[B_RTTMIN] = rtt
    # tcp_rate_skb_delivered: the most recently sent packet acked (here: this one)
    prior_delivered, prior_mstamp = pkt[0], pkt[1]
    app_limited = pkt[3] > 0.0
    snd_us = sent - pkt[2]
    b[B_FTX] = sent
    # tcp_rate_gen
    if b[B_APPL] > 0.0 and b[B_DLV] > b[B_APPL]:
        b[B_APPL] = 0.0
    b[B_DLVT] = now
    losses = b[B_PEND]
    b[B_PEND] = 0.0
    delivered = b[B_DLV] - prior_delivered
    interval = max(snd_us, now - prior_mstamp)
    if interval < b[B_RTTMIN]:
        interval = -1.0
    if b[B_CA] == _RECOVERY and b[B_DLV] >= b[B_HIGH]:  # snd_una passed high_seq
        b[B_CA] = _OPEN
    # bbr_main: bbr_update_model
    # bbr_update_bw
    b[B_RSTART] = 0.0
    if interval > 0.0:  # a valid sample (its delivered count is never negative here)
        if prior_delivered >= b[B_NRD]:
            b[B_NRD] = b[B_DLV]
            b[B_RTTC] += 1.0
            b[B_RSTART] = 1.0
            b[B_PCONS] = 0.0
        _lt_bw_sampling(b, losses, app_limited, mss)
        bw = delivered / interval
        if not app_limited or bw >= _max_bw(b):
            _running_max(b, BW_RTTS, b[B_RTTC], bw)
    # bbr_update_ack_aggregation
    if segs > 0.0 and interval > 0.0:
        if b[B_RSTART] > 0.0:
            b[B_XAR] = min(31.0, b[B_XAR] + 1.0)
            if b[B_XAR] >= EXTRA_ACKED_WIN_RTTS:
                b[B_XAR] = 0.0
                b[B_XAI] = 1.0 - b[B_XAI]
                if b[B_XAI] == 0.0:
                    b[B_XA0] = 0.0
                else:
                    b[B_XA1] = 0.0
        expected = math.floor(_bw(b) * (b[B_DLVT] - b[B_AEPT]))
        if b[B_AEPA] <= expected or b[B_AEPA] + segs >= ACK_EPOCH_RESET:
            b[B_AEPA] = 0.0
            b[B_AEPT] = b[B_DLVT]
            expected = 0.0
        b[B_AEPA] = min(float(0xFFFFF), b[B_AEPA] + segs)
        extra = min(b[B_AEPA] - expected, cwnd)
        if b[B_XAI] == 0.0:
            b[B_XA0] = max(b[B_XA0], extra)
        else:
            b[B_XA1] = max(b[B_XA1], extra)
    # bbr_update_cycle_phase
    if b[B_MODE] == PROBE_BW:
        full_length = b[B_DLVT] - b[B_CYCT] > b[B_MINRTT]
        if b[B_PG] == 1.0:
            nxt = full_length
        else:
            inflight = _in_net_at_edt(b, prior_in_flight, now, mss)
            if b[B_PG] > 1.0:
                nxt = full_length and (losses > 0.0 or inflight >= _inflight(
                    b, _max_bw(b), b[B_PG], mss))
            else:
                nxt = full_length or inflight <= _inflight(b, _max_bw(b), 1.0, mss)
        if nxt:
            _advance_cycle_phase(b)
    # bbr_check_full_bw_reached
    if b[B_FULLR] == 0.0 and b[B_RSTART] > 0.0 and not app_limited:
        if _max_bw(b) >= b[B_FULLBW] * FULL_BW_THRESH:
            b[B_FULLBW] = _max_bw(b)
            b[B_FULLC] = 0.0
        else:
            b[B_FULLC] += 1.0
            if b[B_FULLC] >= FULL_BW_CNT:
                b[B_FULLR] = 1.0
    # bbr_check_drain
    if b[B_MODE] == STARTUP and b[B_FULLR] > 0.0:
        b[B_MODE] = DRAIN
    if (b[B_MODE] == DRAIN
            and _in_net_at_edt(b, in_flight, now, mss) <= _inflight(b, _max_bw(b), 1.0, mss)):
        _reset_probe_bw_mode(b)
    # bbr_update_min_rtt
    expired = now > b[B_MINRTTS] + MIN_RTT_WIN_US
    if rtt >= 0.0 and (rtt < b[B_MINRTT] or expired):
        b[B_MINRTT] = rtt
        b[B_MINRTTS] = now
    if expired and b[B_IDLE] == 0.0 and b[B_MODE] != PROBE_RTT:
        b[B_MODE] = PROBE_RTT
        _save_cwnd(b, cwnd)
        b[B_PRDONE] = 0.0
    if b[B_MODE] == PROBE_RTT:
        b[B_APPL] = max(b[B_DLV] + in_flight, 1.0)
        if b[B_PRDONE] == 0.0 and in_flight <= CWND_MIN_TARGET:
            b[B_PRDONE] = now + PROBE_RTT_MODE_US
            b[B_PRRD] = 0.0
            b[B_NRD] = b[B_DLV]
        elif b[B_PRDONE] > 0.0:
            if b[B_RSTART] > 0.0:
                b[B_PRRD] = 1.0
            if b[B_PRRD] > 0.0:
                cwnd = _check_probe_rtt_done(b, now, cwnd)
    if delivered > 0.0:
        b[B_IDLE] = 0.0
    # bbr_update_gains
    mode = b[B_MODE]
    if mode == STARTUP:
        b[B_PG], b[B_CG] = HIGH_GAIN, HIGH_GAIN
    elif mode == DRAIN:
        b[B_PG], b[B_CG] = DRAIN_GAIN, HIGH_GAIN
    elif mode == PROBE_BW:
        b[B_PG] = 1.0 if b[B_LTU] > 0.0 else PACING_GAIN[int(b[B_CYC])]
        b[B_CG] = CWND_GAIN
    else:
        b[B_PG], b[B_CG] = 1.0, 1.0
    bw = _bw(b)
    _set_pacing_rate(b, bw, b[B_PG])
    return _set_cwnd(b, losses, segs, bw, b[B_CG], in_flight, cwnd, mss)


@njit(cache=True)
def _set_cwnd(b, losses, acked, bw, gain, in_flight, cwnd, mss):
    """``bbr_set_cwnd`` with ``bbr_set_cwnd_to_recover_or_restore``."""
    if acked > 0.0:
        if losses > 0.0:
            cwnd = max(cwnd - losses, 1.0)
        state, prev = b[B_CA], b[B_PCA]
        if state == _RECOVERY and prev != _RECOVERY:
            b[B_PCONS] = 1.0
            b[B_NRD] = b[B_DLV]
            cwnd = in_flight + acked
        elif prev >= _RECOVERY and state < _RECOVERY:
            cwnd = max(cwnd, b[B_PRIOR])
            b[B_PCONS] = 0.0
        b[B_PCA] = state
        if b[B_PCONS] > 0.0:
            cwnd = max(cwnd, in_flight + acked)
        else:
            target = _bdp(b, bw, gain)
            if b[B_FULLR] > 0.0:  # bbr_ack_aggregation_cwnd
                target += min(max(b[B_XA0], b[B_XA1]), math.floor(bw * EXTRA_ACKED_MAX_US))
            target = _quantization_budget(b, target, mss)
            if b[B_FULLR] > 0.0:
                cwnd = min(cwnd + acked, target)
            elif cwnd < target or b[B_DLV] < INIT_CWND:
                cwnd = cwnd + acked
            cwnd = max(cwnd, float(CWND_MIN_TARGET))
    if b[B_MODE] == PROBE_RTT:
        cwnd = min(cwnd, float(CWND_MIN_TARGET))
    return cwnd


def state_vector() -> np.ndarray:
    """A fresh, zeroed state vector (``init`` fills it)."""
    return np.zeros(NB, dtype=np.float64)


def rate_fields() -> np.ndarray:
    """Room for one packet's rate fields (``on_send`` fills it)."""
    return np.zeros(4, dtype=np.float64)
