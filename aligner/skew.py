"""Do a host's capture timestamps and TF timestamps share a clock? Measure, report, correct.

Both should read CLOCK_REALTIME (dumpcap/tcpdump stamp packets with it; TF's step stats use
``EnvTime::NowMicros``, also realtime). Two kinds of same-host events bound the skew
``delta = capture clock - TF clock``: a receive op cannot end before the receiver's capture saw
the last DATA of its tensor (``delta >= last_data - recv_end``), and a tensor's producer op ends
before the sender's capture sees its first DATA (``delta <= first_data - producer_end``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

from gradwire.aligner.transfers import Transfer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkewCheck:
    """Feasible capture-minus-TF skew of one domain, microseconds, and the correction applied.

    ``lo_us``/``hi_us`` are -inf/inf where no event bounds that side; ``samples`` counts the
    bounding events. ``applied_us`` is 0 when 0 is feasible, else the feasible value nearest 0.
    """

    domain: str
    lo_us: float
    hi_us: float
    samples: int
    applied_us: float

    @property
    def consistent(self) -> bool:
        """True when the two clocks agree within the bounds (no correction needed)."""
        return self.applied_us == 0.0


def capture_skew(transfers: Iterable[Transfer]) -> dict[str, SkewCheck]:
    """Check every domain that has both traced ops and a capture seeing the same transfers."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    count: dict[str, int] = {}
    for t in transfers:
        if t.recv is not None and t.at_receiver is not None and t.at_receiver.last_data_ns:
            d = t.dst_domain
            lo[d] = max(lo.get(d, -math.inf), t.at_receiver.last_data_ns / 1000 - t.recv.end_us)
            count[d] = count.get(d, 0) + 1
        if t.producer is not None and t.at_sender is not None and t.at_sender.first_data_ns:
            d = t.src_domain
            hi[d] = min(hi.get(d, math.inf),
                        t.at_sender.first_data_ns / 1000 - t.producer.end_us)
            count[d] = count.get(d, 0) + 1
    out: dict[str, SkewCheck] = {}
    for d in sorted(count):
        a, b = lo.get(d, -math.inf), hi.get(d, math.inf)
        if a <= 0.0 <= b:
            applied = 0.0
        elif a > b:  # contradictory: take the middle, it is the least wrong
            applied = (a + b) / 2
        else:
            applied = a if a > 0 else b
        if applied:
            log.warning("capture clock of %s differs from its TF clock: skew in [%.1f, %.1f] us, "
                        "correcting capture times by %.1f us", d, a, b, -applied)
        out[d] = SkewCheck(d, a, b, count[d], applied)
    return out
