"""Do a host's capture timestamps and TF timestamps share a clock? Measure, report, correct.

Both should read CLOCK_REALTIME (dumpcap/tcpdump stamp packets with it; TF's step stats use
``EnvTime::NowMicros``, also realtime). Two kinds of same-host events bound the skew
``delta = capture clock - TF clock``: a receive op cannot end before the receiver's capture saw
the last DATA of its tensor (``delta >= last_data - recv_end``), and a tensor's producer op ends
before the sender's capture sees its first DATA (``delta <= first_data - producer_end``).

A skewed capture moves every event; a bad op stamp moves one. So events contradicting a shared
clock by more than ``OUTLIER_US`` are set aside as outlying stamps, not taken as skew, when they
are at most ``OUTLIER_SHARE`` of the host's events.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gradwire.aligner.transfers import Transfer

log = logging.getLogger(__name__)
OUTLIER_US = 1000.0
OUTLIER_SHARE = 0.02


@dataclass(frozen=True)
class SkewCheck:
    """Feasible capture-minus-TF skew of one domain, microseconds, and the correction applied.

    ``lo_us``/``hi_us`` are -inf/inf where no event bounds that side; ``samples`` counts the
    bounding events. ``applied_us`` is 0 when 0 is feasible, else the feasible value nearest 0.
    ``outliers`` counts events set aside as bad op stamps (left out of the bounds).
    """

    domain: str
    lo_us: float
    hi_us: float
    samples: int
    applied_us: float
    outliers: int = 0

    @property
    def consistent(self) -> bool:
        """True when the two clocks agree within the bounds (no correction needed)."""
        return self.applied_us == 0.0


def capture_skew(transfers: Iterable[Transfer]) -> dict[str, SkewCheck]:
    """Check every domain that has both traced ops and a capture seeing the same transfers."""
    lows: dict[str, list[float]] = defaultdict(list)  # each: delta >= value
    highs: dict[str, list[float]] = defaultdict(list)  # each: delta <= value
    for t in transfers:
        if t.recv is not None and t.at_receiver is not None and t.at_receiver.last_data_ns:
            lows[t.dst_domain].append(t.at_receiver.last_data_ns / 1000 - t.recv.end_us)
        if t.producer is not None and t.at_sender is not None and t.at_sender.first_data_ns:
            highs[t.src_domain].append(t.at_sender.first_data_ns / 1000 - t.producer.end_us)
    out: dict[str, SkewCheck] = {}
    for d in sorted(set(lows) | set(highs)):
        lo_v, hi_v = lows.get(d, []), highs.get(d, [])
        samples = len(lo_v) + len(hi_v)
        far = sum(1 for v in lo_v if v > OUTLIER_US) + sum(1 for v in hi_v if v < -OUTLIER_US)
        outliers = far if 0 < far <= OUTLIER_SHARE * samples else 0
        if outliers:
            lo_v = [v for v in lo_v if v <= OUTLIER_US]
            hi_v = [v for v in hi_v if v >= -OUTLIER_US]
            log.warning("%s: %d of %d op stamps contradict the capture by more than %.0f us; "
                        "set aside as bad stamps, not taken as clock skew", d, outliers,
                        samples, OUTLIER_US)
        a, b = max(lo_v, default=-math.inf), min(hi_v, default=math.inf)
        if a <= 0.0 <= b:
            applied = 0.0
        elif a > b:  # contradictory: take the middle, it is the least wrong
            applied = (a + b) / 2
        else:
            applied = a if a > 0 else b
        if a > b:
            log.warning("the capture and the TF stamps of %s contradict any one clock (the skew "
                        "would have to be at least %.1f us and at most %.1f us): are these the "
                        "captures of the traced run? Correcting capture times by %.1f us",
                        d, a, b, -applied)
        elif applied:
            log.warning("capture clock of %s differs from its TF clock: skew in [%.1f, %.1f] us, "
                        "correcting capture times by %.1f us", d, a, b, -applied)
        out[d] = SkewCheck(d, a, b, samples, applied, outliers)
    return out
