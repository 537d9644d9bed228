"""Analytical throughput baselines: Lin et al.'s MVA models and Cynthia's formula for
asynchronous PS training, and two closed forms of synchronous PS training (``sync-sum``: a
step's pulls, compute and pushes one after another, all W workers' transfers sharing the PS
links, Chang et al.'s baseline iteration; ``sync-max``: the optimistic bound, a round as long
as its busiest resource or one worker's step, whichever is longer), and two of ring
all-reduce (``ring-ab``: the alpha-beta cost with alpha 0, compute then communication;
``ring-max``: the longer of the two, as if they overlapped perfectly).

The MVA models and Cynthia's predict asynchronous parameter-server (PS) training throughput for W
workers from the mean phase times of a 1-worker profile (``PhaseTimes``), the inputs of MASCOTS'18
section III-A: "downlink time S^D (weights transmission from server to worker), worker time S^W
(gradient computation), uplink time S^U (gradient transmission from worker to server), server time
S^S (gradient application)".

Lin et al. (mascots18 section III-B/C), a closed network where "task k visits the kth worker node
(an infinite server, IS, station), the uplink station (a processor sharing, PS, station), the
parameter server (a first-come first-served, FCFS, station), and the downlink station (another PS
station)". So downlink, uplink and ps are queueing stations shared by all workers; each worker's
compute is a delay (IS) station. Models:

- ``mva-exact``: Eq. (1) at all three queueing stations (the FCFS PS assumed exponential, as the
  paper's product-form requirement says).
- ``mva-approx``: Eq. (2), the approximate MVA for FCFS with deterministic service, "for l = D, U";
  the ps station keeps Eq. (1) as the paper states.
- ``mva-hybrid``: Eq. (3), ``g*Eq.(1) + (1-g)*Eq.(2)`` on D and U, with g from Eq. (4).

Eq. (2) is an approximation: it can predict more than a link can carry (W = 2 tasks on one
deterministic station of 1 s give 4/3 steps/s, not 1) and need not grow with W; the paper notes
"the non-monotonic trend of Approximate MVA [...] is due to the error associated with this
solution method". We keep the paper's equations as written (no clamping of throughput).

Each worker is its own class with one task, but all classes have the same service times, so by
symmetry every class has the same mean values at any population with n tasks, and the multi-class
recursion over population vectors reduces to the single-class recursion over n = 1..W used here
(exact for Eq. (1); Eq. (2)-(3) are defined on the same symmetric quantities).

Cynthia, as quoted in icpe20 section 1: examples/s = ``W K / (T_P max(1, W U_1) + 2 T_C)``, K the
batch size, "T_P is the time required to process a batch and T_C is the model/updates transmission
time", U_1 "the network utilization measured for a single worker". The mapping from the four phase
times is our choice, see ``_cynthia``.

Multiple PS (M): each PS with its own link sends, receives and applies its variables' share of
the bytes, in parallel. We model the M PSes as one station holding the busiest PS's share:
S^D, S^U and S^S are multiplied by it (``share``: 1/M for parameters split evenly, the papers'
case; ``gradwire predict`` gives the largest share under the same placement the sim uses,
replay/placement.py). A generalisation of our own: it ignores the fork-join wait for the other
shards and the worker's own NIC; Lin's model, too, "abstracts the network fabric as one
non-blocking switch" whose shared ports are the PS's downlink and uplink.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

from gradwire.errors import GradwireError

ASYNC_BASELINES = ("mva-exact", "mva-approx", "mva-hybrid", "cynthia")
SYNC_BASELINES = ("sync-sum", "sync-max")  # synchronous PS training's closed forms
RING_BASELINES = ("ring-ab", "ring-max")  # ring all-reduce's
BASELINES = ASYNC_BASELINES + SYNC_BASELINES + RING_BASELINES
_RESOURCES = ("downlink", "uplink", "ps", "worker")
_LINKS = ("downlink", "uplink")


@dataclass(frozen=True, kw_only=True)
class PhaseTimes:
    """Mean 1-worker phase durations, seconds, and the batch size (examples per step)."""

    downlink_s: float  # S^D: parameters PS -> worker, seconds
    worker_s: float  # S^W: gradient computation at the worker, seconds
    uplink_s: float  # S^U: gradients worker -> PS, seconds
    server_s: float  # S^S: gradient application at the PS, seconds
    batch_size: int  # examples per step

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "batch_size":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise GradwireError(f"batch_size must be an integer >= 1, got {value!r}")
            elif not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise GradwireError(f"{f.name} must be a finite time >= 0 s, got {value!r}")
        if self.downlink_s + self.worker_s + self.uplink_s + self.server_s <= 0:
            raise GradwireError("phase times are all zero: a step must take some time")


@dataclass(frozen=True, kw_only=True)
class BaselineResult:
    """A baseline's prediction for one configuration."""

    model: str  # 'mva-exact' | 'mva-approx' | 'mva-hybrid' | 'cynthia'
    workers: int
    ps: int
    steps_per_s: float  # SGD steps (mini-batches) applied per second, all workers
    examples_per_s: float  # steps_per_s * batch_size
    bottleneck: str  # the busiest resource: 'downlink', 'uplink', 'ps' or 'worker'
    utilisation: float  # its utilisation (busy fraction of one station), 0..1


@dataclass(frozen=True)
class _Demands:
    """Service time per step at each resource, seconds, after bandwidth and PS scaling."""

    downlink: float
    uplink: float
    ps: float
    worker: float

    def queueing(self) -> dict[str, float]:
        """The shared (queueing) stations and their service times, seconds."""
        return {"downlink": self.downlink, "uplink": self.uplink, "ps": self.ps}


def g_load(rho: float) -> float:
    """Eq. (4): weight of processor sharing in the hybrid, 0 below utilisation 0.8, 1 at 1."""
    return min(1.0, max(0.0, (rho - 0.8) / 0.2))


def _ps_time(s: float, n_prev: float, rho_prev: float) -> float:
    """Eq. (1): response time, seconds, of a PS (or exponential FCFS) station."""
    return s * (1.0 + n_prev)


def _fcfs_time(s: float, n_prev: float, rho_prev: float) -> float:
    """Eq. (2): approximate FCFS response time, seconds, deterministic service (residual S/2)."""
    return s + s * (n_prev - 0.5 * rho_prev)


def _hybrid_time(s: float, n_prev: float, rho_prev: float) -> float:
    """Eq. (3): ``g PS + (1 - g) FCFS`` with g = g_load(link utilisation), seconds.

    The paper writes gamma = g(rho_k^l(n)) and says the model "considers overlapping
    transmissions only when the link utilization is higher than 0.8". We read rho as the link's
    total utilisation (a single class's share, <= 1/W, would never reach 0.8) and evaluate it at
    n - e_k, like every load term of Eq. (2); this keeps the recursion explicit (no fixed point).
    """
    gamma = g_load(rho_prev)
    return gamma * _ps_time(s, n_prev, rho_prev) + (1 - gamma) * _fcfs_time(s, n_prev, rho_prev)


_LinkRule = Callable[[float, float, float], float]


def _mva(d: _Demands, workers: int, link_time: _LinkRule) -> float:
    """MVA recursion over populations n = 1..workers; steps/s at the PS with ``workers`` tasks.

    ``link_time(S, N(n-1), rho(n-1))`` gives the downlink/uplink response time; the ps station
    always uses Eq. (1) and the worker is a delay station (response time S^W).
    """
    stations = d.queueing()
    queue = dict.fromkeys(stations, 0.0)  # N^l(n - 1), tasks
    util = dict.fromkeys(stations, 0.0)  # rho^l(n - 1)
    x = 0.0
    for n in range(1, workers + 1):
        resp = {
            name: (link_time if name in _LINKS else _ps_time)(s, queue[name], util[name])
            for name, s in stations.items()
        }
        x = n / (sum(resp.values()) + d.worker)
        queue = {name: x * r for name, r in resp.items()}  # Little's law
        util = {name: x * s for name, s in stations.items()}
    return x


def _cynthia(d: _Demands, workers: int) -> float:
    """Cynthia's formula divided by K: steps/s.

    Mapping (our choice, the quote defines no phase split): T_P = S^W + S^S (all processing),
    T_C = (S^D + S^U) / 2 (one transmission, so 2 T_C is the step's network time), and U_1 =
    2 T_C / (T_P + 2 T_C), the fraction of a 1-worker step that the network is busy. Then W = 1
    gives the profiled step 1 / (S^D + S^W + S^U + S^S). icpe20 section 4.4 supports a single
    network resource for both directions: halving T_C was its tweak "accounting for separate
    uplink/downlink network resources". Note: for W -> inf this tends to 1 / (T_P U_1), which
    can exceed the link capacity 1 / (S^D + S^U); the reading U_1 = 2 T_C / T_P would instead
    tend to that capacity but would not reproduce the 1-worker step when 2 T_C > T_P.
    """
    t_p = d.worker + d.ps
    t_c = (d.downlink + d.uplink) / 2
    u_1 = 2 * t_c / (t_p + 2 * t_c)
    return workers / (t_p * max(1.0, workers * u_1) + 2 * t_c)


def _sync_sum(d: _Demands, workers: int) -> float:
    """Synchronous PS, nothing overlapped: every step all W workers pull through the shared
    downlink (W S^D), compute (S^W), push through the shared uplink (W S^U), and the PS
    applies the update (S^S); W steps (one per worker) per such round. Chang et al.'s
    baseline iteration, 2 W (model bytes) / B plus compute. Steps/s."""
    return workers / (workers * (d.downlink + d.uplink) + d.worker + d.ps)


def _sync_max(d: _Demands, workers: int) -> float:
    """Synchronous PS, the optimistic bound: a round lasts as long as its busiest resource,
    each shared link's W transfers, and at least one worker's own step (its pull, compute,
    push and update; so W = 1 is the profiled step). Steps/s."""
    return workers / max(workers * d.downlink, workers * d.uplink,
                         d.downlink + d.worker + d.uplink + d.ps)


def _ring_ab(d: _Demands, workers: int) -> float:
    """Ring all-reduce, the alpha-beta cost with alpha 0 (no per-message latency): compute,
    then 2 (W - 1) / W of the gradients' uplink time, then the update; W steps per round.
    Steps/s."""
    return workers / (d.worker + d.ps + 2 * (workers - 1) / workers * d.uplink)


def _ring_max(d: _Demands, workers: int) -> float:
    """Ring all-reduce, the optimistic bound: a step lasts as long as the longer of its
    compute (and update) and its communication, 2 (W - 1) / W of the gradients' uplink time,
    as if the two overlapped perfectly; W steps per round. Steps/s."""
    return workers / max(d.worker + d.ps, 2 * (workers - 1) / workers * d.uplink)


_MODELS: dict[str, Callable[[_Demands, int], float]] = {
    "mva-exact": lambda d, w: _mva(d, w, _ps_time),
    "mva-approx": lambda d, w: _mva(d, w, _fcfs_time),
    "mva-hybrid": lambda d, w: _mva(d, w, _hybrid_time),
    "cynthia": _cynthia,
    "sync-sum": _sync_sum,
    "sync-max": _sync_max,
    "ring-ab": _ring_ab,
    "ring-max": _ring_max,
}


def _check_config(model: str, workers: int, ps: int, bandwidth_scale: float) -> None:
    """Raise GradwireError naming the first bad argument."""
    if model not in _MODELS:
        raise GradwireError(f"unknown baseline model {model!r}; choose one of {BASELINES}")
    for name, value in (("workers", workers), ("ps", ps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GradwireError(f"{name} must be an integer >= 1, got {value!r}")
    ok = isinstance(bandwidth_scale, (int, float)) and math.isfinite(bandwidth_scale)
    if not ok or bandwidth_scale <= 0:
        raise GradwireError(f"bandwidth_scale must be a finite number > 0, got {bandwidth_scale!r}")


def _demands(phases: PhaseTimes, share: tuple[float, float], bandwidth_scale: float
             ) -> _Demands:
    """Per-step service times: links / bandwidth_scale, links and server x the busiest PS's
    share of the pulled and pushed bytes (module doc)."""
    down, up = share
    return _Demands(
        downlink=phases.downlink_s / bandwidth_scale * down,
        uplink=phases.uplink_s / bandwidth_scale * up,
        ps=phases.server_s * up,
        worker=phases.worker_s,
    )


def _busiest(d: _Demands, steps_per_s: float, workers: int) -> tuple[str, float]:
    """The resource with the highest utilisation and that utilisation (capped at 1).

    Utilisation is throughput x service time; for 'worker' it is one worker's (steps / W). The
    cap matters only for approximations (Eq. (2), Cynthia) that can overshoot a capacity.
    """
    util = {
        "downlink": steps_per_s * d.downlink,
        "uplink": steps_per_s * d.uplink,
        "ps": steps_per_s * d.ps,
        "worker": steps_per_s * d.worker / workers,
    }
    name = max(_RESOURCES, key=lambda r: util[r])  # ties: first in _RESOURCES
    return name, min(1.0, util[name])


def _ring_busiest(d: _Demands, steps_per_s: float, workers: int) -> tuple[str, float]:
    """A ring's busier resource, each worker's own (a ring has no PS): its compute and update
    (``worker``) or its link out, which carries 2 (W - 1) / W of the gradients a step
    (``worker NIC out``, as the sim's ring rows name it); utilisation capped at 1."""
    per_worker = steps_per_s / workers
    util = {"worker": per_worker * (d.worker + d.ps),
            "worker NIC out": per_worker * 2 * (workers - 1) / workers * d.uplink}
    name = max(util, key=lambda r: util[r])  # ties: the compute
    return name, min(1.0, util[name])


def baseline(
    model: str, phases: PhaseTimes, workers: int, ps: int = 1, bandwidth_scale: float = 1.0,
    share: tuple[float, float] | None = None,
) -> BaselineResult:
    """Predict throughput with ``model`` (one of ``BASELINES``) for ``workers`` and ``ps`` PS.

    ``bandwidth_scale`` = target / profiled bandwidth: downlink and uplink times are divided by it.
    ``share``: the busiest PS's share of the pulled and of the pushed bytes (default 1/ps each,
    an even split).

    >>> p = PhaseTimes(downlink_s=0.072, worker_s=0.029, uplink_s=0.072, server_s=0.018,
    ...                batch_size=50)
    >>> round(baseline("mva-exact", p, workers=1).steps_per_s, 3)  # 1 / 0.191 s
    5.236
    >>> baseline("mva-exact", p, workers=10).bottleneck
    'downlink'
    """
    _check_config(model, workers, ps, bandwidth_scale)
    d = _demands(phases, share or (1 / ps, 1 / ps), bandwidth_scale)
    steps = _MODELS[model](d, workers)
    name, rho = (_ring_busiest if model in RING_BASELINES else _busiest)(d, steps, workers)
    return BaselineResult(
        model=model,
        workers=workers,
        ps=ps,
        steps_per_s=steps,
        examples_per_s=steps * phases.batch_size,
        bottleneck=name,
        utilisation=rho,
    )
