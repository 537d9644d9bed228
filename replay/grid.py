"""The configurations of a prediction sweep: how each one's workers start (``--start auto``
reads the profile's PS captures for an overflowing queue), each worker's NIC, the rate the
profile ran at, and the analytical baselines' rows."""

from __future__ import annotations

import argparse

from gradwire.collector.transport import TransportStats
from gradwire.errors import GradwireError
from gradwire.replay.predict import GOODPUT, Prediction
from gradwire.replay.template import Profile

LOSSY_SHARE = 0.003  # retransmitted share of data segments above which a link counts as lossy

# a sweep rate this close to the profile's is the profile's: a profile without the lab's
# configured rate has only its measured goodput (on the lab's lossy MLP profile 216 Mbit/s of
# a 250 Mbit/s link)
PROFILE_RATE_TOLERANCE = 0.20

def is_lossy(stats: TransportStats | None) -> bool:
    """Whether the profile's PS captures show an overflowing queue (more than LOSSY_SHARE of
    their data segments retransmitted)."""
    return stats is not None and stats.retransmitted_share > LOSSY_SHARE

def at_profile_rate(bandwidth_bps: float, profile_bps: float | None) -> bool:
    """Whether a sweep's rate is the profile's own (within PROFILE_RATE_TOLERANCE)."""
    return profile_bps is not None and (
        abs(bandwidth_bps - profile_bps) <= PROFILE_RATE_TOLERANCE * profile_bps)

def start_mode(start: str, stats: TransportStats | None, bandwidth_bps: float,
               profile_bps: float | None) -> str:
    """How a configuration's workers start: ``--start auto`` is ``stratified`` (each worker in
    its own slot of the step) at the rate of a profile whose queue overflowed, where the
    lab's workers settle into taking turns on the link (docs/predict.md, "Lossy links"), and
    ``random`` otherwise (at another rate the queue may not overflow); any other ``--start``
    as given. Rates in bits per second."""
    if start != "auto":
        return start
    lossy_here = is_lossy(stats) and at_profile_rate(bandwidth_bps, profile_bps)
    return "stratified" if lossy_here else "random"

def profile_bandwidth_bps(prof: Profile) -> float:
    """The link rate the profile ran at: as configured when known, else its measured goodput
    over the TCP payload share, bits per second."""
    return prof.profile_bandwidth_bps or prof.link_rate_bps / GOODPUT

def worker_nic_bps(args: argparse.Namespace, bandwidth_bps: float) -> float | None:
    """The worker NIC rate (bits per second) for a PS link rate: ``--worker-bandwidth``
    ``same`` -> that rate, ``unlimited`` -> None, else the given rate."""
    nic = getattr(args, "worker_bandwidth", "same")
    return bandwidth_bps if nic == "same" else None if nic == "unlimited" else float(nic)

def baseline_rows(prof: Profile, models: list[str], workers: list[int], ps_list: list[int],
                  bandwidths: list[float]) -> list[Prediction]:
    """The analytical baselines for every configuration."""
    from gradwire.replay.baselines import PhaseTimes, baseline

    if not prof.phases:
        raise GradwireError("the baselines need the 1-worker phases from the worker's capture, "
                            "and none were found")
    # the baselines divide the shared stations' times by M; a profile recorded with M0 PSes
    # already shows them divided by M0, so scale back to one PS first
    m0 = max(1, len(prof.ps_tasks))
    phases = PhaseTimes(downlink_s=prof.phases["downlink"] * m0, worker_s=prof.phases["worker"],
                        uplink_s=prof.phases["uplink"] * m0,
                        server_s=prof.phases["server"] * m0, batch_size=prof.batch_size)
    base_bw = profile_bandwidth_bps(prof)
    rows = []
    for model in models:
        for m in ps_list:
            for bw in bandwidths:
                for w in workers:
                    r = baseline(model, phases, w, m, bw / base_bw)
                    rows.append(Prediction(
                        model=model, workers=w, ps=m, bandwidth_bps=bw, order="-",
                        flow_control=True, examples_per_s=r.examples_per_s,
                        steps_per_s=r.steps_per_s, ci=(r.examples_per_s, r.examples_per_s),
                        steps=0, bottleneck=r.bottleneck, utilisation=r.utilisation, events=0))
    return rows
