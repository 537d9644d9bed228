"""Clock offsets per host from happens-before constraints, solved with CVXPY.

Each clock domain ``h`` reads ``local = true + offset_h``. A matched transfer gives events that
must happen in order across two domains ("the receiver cannot see a byte before the sender sent
it"): ``true(after) >= true(before) + gap``, i.e.
``offset_after - offset_before <= after_local - before_local - gap``. These are difference
constraints: per ordered pair of domains only the tightest one matters, so thousands of
transfers reduce to at most two bounds per pair before the solver sees them. A system of
difference constraints is feasible exactly when its constraint graph has no negative cycle; when
there is one, the transfers on the cycle are the conflict, and the error names them.

Objectives (all under the same constraints, offsets relative to a reference domain):

- ``centre`` (default): least squares to the centre of each directly bounded pair's feasible
  interval. With symmetric one-way latencies the centre is the true offset; the error is half the
  difference of the two directions' minimum latencies.
- ``min-norm``: dPRO's choice, the feasible offsets nearest zero (sum of squares, reference
  pinned at 0). It lands on the edge of the feasible interval nearest zero, off by up to a
  one-way latency (see ``scripts/bench_align.py``).
- ``max-slack``: maximise the smallest slack of any bound (a Chebyshev-style centre).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gradwire.aligner.transfers import Transfer
from gradwire.errors import AlignmentInfeasible, MissingExtra

log = logging.getLogger(__name__)
OBJECTIVES = ("centre", "min-norm", "max-slack")


@dataclass(frozen=True)
class Precedence:
    """``before`` (on ``before_domain``'s clock) happened at least ``gap_us`` before ``after``."""

    before_domain: str
    before_us: float
    after_domain: str
    after_us: float
    gap_us: float
    label: str
    from_ops: bool = False  # from TF's op stamps (software), not from packets on both ends

    @property
    def bound_us(self) -> float:
        """Upper bound on ``offset_after - offset_before``, microseconds."""
        return self.after_us - self.before_us - self.gap_us


def _us(ns: int | None, skew_us: float = 0.0) -> float | None:
    """Capture nanoseconds as microseconds on the domain's TF clock."""
    return None if ns is None else ns / 1000.0 - skew_us


def precedences(transfers: Iterable[Transfer], bandwidth_bps: float | None = None,
                capture_skew_us: dict[str, float] | None = None) -> list[Precedence]:
    """Happens-before pairs across clock domains from matched transfers.

    Packets seen by both captures: the request leaves the receiver (gRPC client) before the
    sender's capture sees it; the first and last response DATA leave the sender before the
    receiver's capture sees them (the last only where the receiver saw the response end: a
    capture stopped during a transfer saw part of it). Traced ops: the tensor's producer ends
    before the receive op ends (plus the tensor's wire time when ``bandwidth_bps`` is given),
    and the sender's last DATA precedes the receive op's end. (A receive op's *start* is no
    bound: TF stamps it up to milliseconds after the request leaves.) ``capture_skew_us``
    (capture clock minus TF clock per domain, see ``skew.capture_skew``) is subtracted from
    capture times. Same-domain pairs carry no offset information and are skipped.
    """
    skew = capture_skew_us or {}
    out: list[Precedence] = []
    for t in transfers:
        if t.src_domain == t.dst_domain:
            continue
        s, r, d = t.src_domain, t.dst_domain, t.txn
        snd, rcv = t.at_sender, t.at_receiver
        ks, kr = skew.get(s, 0.0), skew.get(r, 0.0)
        pairs: list[tuple[str, float | None, str, float | None, float, str, bool]] = []
        if snd is not None and rcv is not None:
            pairs += [
                (r, _us(rcv.request_ns, kr), s, _us(snd.request_ns, ks), 0.0, "request", False),
                (s, _us(snd.first_data_ns, ks), r, _us(rcv.first_data_ns, kr), 0.0,
                 "first DATA", False),
            ]
            if rcv.end_ns is not None:
                # a receiver's capture that stopped before the response ended (``gradwire
                # collect --duration``, SIGUSR1) saw an earlier DATA as its last one
                pairs.append((s, _us(snd.last_data_ns, ks), r, _us(rcv.last_data_ns, kr), 0.0,
                              "last DATA", False))
        if t.recv is not None:
            if t.producer is not None:
                wire = 8e6 * t.bytes_ / bandwidth_bps if bandwidth_bps and t.bytes_ else 0.0
                pairs.append((s, t.producer.end_us, r, t.recv.end_us, wire, "producer->recv op",
                              True))
            if snd is not None:
                pairs.append((s, _us(snd.last_data_ns, ks), r, t.recv.end_us, 0.0,
                              "DATA->recv op end", True))
        for bd, bt, ad, at, gap, what, ops in pairs:
            if bt is not None and at is not None:
                out.append(Precedence(bd, float(bt), ad, float(at), gap, f"{d} ({what})", ops))
    return out


@dataclass(frozen=True)
class Bound:
    """Tightest bound ``offset[b] - offset[a] <= bound_us`` and the transfer that set it."""

    bound_us: float
    label: str
    count: int


def reduce_bounds(precs: Iterable[Precedence]) -> dict[tuple[str, str], Bound]:
    """Per ordered domain pair (a, b), the tightest of all bounds on ``offset_b - offset_a``."""
    best: dict[tuple[str, str], Bound] = {}
    for p in precs:
        key = (p.before_domain, p.after_domain)
        b = p.bound_us
        old = best.get(key)
        if old is None:
            best[key] = Bound(b, p.label, 1)
        elif b < old.bound_us:
            best[key] = Bound(b, p.label, old.count + 1)
        else:
            best[key] = Bound(old.bound_us, old.label, old.count + 1)
    return best


def shortest_paths(domains: Sequence[str], bounds: dict[tuple[str, str], Bound]) -> np.ndarray:
    """Floyd-Warshall over the constraint graph: ``D[i, j]`` is the tightest implied bound on
    ``offset_j - offset_i`` (inf where nothing links them); raises AlignmentInfeasible on a
    negative cycle, naming its transfers."""
    idx = {d: i for i, d in enumerate(domains)}
    n = len(domains)
    dist = np.full((n, n), math.inf)
    np.fill_diagonal(dist, 0.0)
    for (a, b), bd in bounds.items():
        dist[idx[a], idx[b]] = min(dist[idx[a], idx[b]], bd.bound_us)
    for k in range(n):
        dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
    if (np.diag(dist) < -1e-9).any():
        raise AlignmentInfeasible(_cycle_message(domains, bounds))
    return dist


def screen_op_stamps(precs: Sequence[Precedence]
                     ) -> tuple[list[Precedence], list[tuple[Precedence, float]]]:
    """Drop op-stamp precedences that contradict the packets both captures saw.

    Packets give bounds within microseconds; TF's op stamps are software clocks read by a busy
    process and have, rarely, put a receive op's end milliseconds before its producer's. When
    the packet bounds alone are consistent, every op-stamp bound that closes a negative cycle
    with them is ignored. Returns (kept, [(ignored, by how many us it contradicts)]). Without
    packet bounds, or when they contradict each other, nothing is dropped (the solver then
    names the conflict).
    """
    packets = [p for p in precs if not p.from_ops]
    if not packets or len(packets) == len(precs):
        return list(precs), []
    bounds = reduce_bounds(packets)
    names = sorted({d for pair in bounds for d in pair})
    try:
        dist = shortest_paths(names, bounds)
    except AlignmentInfeasible:
        return list(precs), []
    idx = {d: i for i, d in enumerate(names)}
    kept, ignored = [], []
    for p in precs:
        a, b = idx.get(p.before_domain), idx.get(p.after_domain)
        short = 0.0  # how far the cycle through the packet bounds falls below zero
        if p.from_ops and a is not None and b is not None:
            short = -(p.bound_us + float(dist[b, a]))
        if short > 1e-6:
            ignored.append((p, float(short)))
        else:
            kept.append(p)
    return kept, ignored


def _cycle_message(domains: Sequence[str], bounds: dict[tuple[str, str], Bound]) -> str:
    """Find one negative cycle (Bellman-Ford) and describe its transfers."""
    dist = dict.fromkeys(domains, 0.0)
    pred: dict[str, tuple[str, str]] = {}
    last = None
    for _ in range(len(domains)):
        last = None
        for (a, b), bd in bounds.items():
            if dist[a] + bd.bound_us < dist[b] - 1e-9:
                dist[b] = dist[a] + bd.bound_us
                pred[b] = (a, b)
                last = b
    node = last or domains[0]
    for _ in range(len(domains)):
        node = pred[node][0] if node in pred else node
    cycle, cur = [], node
    while True:
        a, b = pred[cur]
        cycle.append(bounds[(a, b)])
        cur = a
        if cur == node or len(cycle) > len(domains):
            break
    total = sum(b.bound_us for b in cycle)
    parts = "; ".join(f"{b.label} allows at most {b.bound_us:.1f} us" for b in reversed(cycle))
    return (f"clock constraints contradict each other (cycle short by {-total:.1f} us): {parts}. "
            "Check that the bundles come from the same run and that each host's clock did not "
            "jump during it")


def _solve(prob: object) -> None:
    """Solve with Clarabel (interior point: accurate on these small QPs), else the default."""
    import cvxpy as cp

    try:
        prob.solve(solver=cp.CLARABEL)  # type: ignore[attr-defined]
    except (cp.error.SolverError, ValueError):
        prob.solve()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Offsets:
    """Solved clock offsets, microseconds, of each domain relative to ``reference``.

    ``offset_us[h]`` is what to subtract from a timestamp of ``h`` to put it on the reference's
    clock. ``interval_us[h]`` is the feasible range of that offset (inf where unconstrained).
    """

    reference: str
    objective: str
    offset_us: dict[str, float]
    interval_us: dict[str, tuple[float, float]]
    precedences: int
    pairs: int  # the host pairs a bound links, either way or both
    solve_s: float
    ignored: tuple[tuple[str, float], ...] = ()  # op-stamp bounds dropped: (label, short by us)


def solve_offsets(precs: Sequence[Precedence], domains: Sequence[str] | None = None,
                  reference: str | None = None, objective: str = "centre") -> Offsets:
    """Offsets of every domain under all precedences (see module docstring for objectives)."""
    import time

    try:
        import cvxpy as cp
    except ImportError:
        raise MissingExtra("cvxpy", "predict") from None
    if objective not in OBJECTIVES:
        raise AlignmentInfeasible(f"unknown objective {objective!r}: use one of "
                                  f"{', '.join(OBJECTIVES)}")
    t0 = time.perf_counter()
    bounds = reduce_bounds(precs)
    names = sorted(set(domains or ()) | {d for pair in bounds for d in pair})
    if not names:
        raise AlignmentInfeasible("no clock domains to align")
    ref = reference if reference is not None else names[0]
    if ref not in names:
        raise AlignmentInfeasible(f"reference {ref!r} is not one of the domains: "
                                  f"{', '.join(names)}")
    ignored: list[tuple[Precedence, float]] = []
    try:
        dist = shortest_paths(names, bounds)
    except AlignmentInfeasible:
        # only a contradiction can hold an op stamp the packets overrule: screen on failure
        kept, ignored = screen_op_stamps(precs)
        if not ignored:
            raise
        worst = max(ignored, key=lambda x: x[1])
        log.warning("%d op-stamp bound(s) contradict the captures and were ignored (worst: %s, "
                    "short by %.1f us)", len(ignored), worst[0].label, worst[1])
        bounds = reduce_bounds(kept)
        dist = shortest_paths(names, bounds)
    idx = {d: i for i, d in enumerate(names)}
    r = idx[ref]
    interval = {d: (-float(dist[idx[d], r]), float(dist[r, idx[d]])) for d in names}
    # Solve in milliseconds for small corrections around a feasible guess (the centre of each
    # domain's interval), so the solver never sees epoch-sized or badly scaled numbers.
    base = np.array([sum(interval[d]) / 2 if all(map(math.isfinite, interval[d])) else 0.0
                     for d in names]) / 1000.0
    y = cp.Variable(len(names))
    rhs = {k: bd.bound_us / 1000.0 - (base[idx[k[1]]] - base[idx[k[0]]])
           for k, bd in bounds.items()}
    slack = cp.Variable() if objective == "max-slack" else 0.0
    cons = [y[idx[b]] - y[idx[a]] + slack <= rhs[(a, b)] for (a, b) in bounds]
    cons.append(y[r] == 0)
    if objective == "centre":
        two_sided = [(a, b) for (a, b) in bounds if a < b and (b, a) in bounds]
        terms = [cp.square(y[idx[b]] - y[idx[a]] - (rhs[(a, b)] - rhs[(b, a)]) / 2)
                 for a, b in two_sided]
        terms.append(1e-6 * cp.sum_squares(y))  # tie-break: stay at the interval centres
        prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms))), cons)
    elif objective == "min-norm":  # sum of squared offsets, constant term dropped
        prob = cp.Problem(cp.Minimize(cp.sum_squares(y) + 2 * base @ y), cons)
    else:
        prob = cp.Problem(cp.Maximize(slack), [*cons, slack <= 1e6])
    _solve(prob)
    if prob.status not in ("optimal", "optimal_inaccurate") or y.value is None:
        raise AlignmentInfeasible(f"the solver ended with status {prob.status!r}")
    values = (base + np.asarray(y.value, dtype=float)) * 1000.0
    values = values - values[r]
    unlinked = [d for d in names if not all(math.isfinite(v) for v in interval[d])]
    for d in unlinked:
        log.warning("no transfer bounds the clock of %s from both sides; its offset is a guess", d)
    return Offsets(reference=ref, objective=objective,
                   offset_us={d: float(values[idx[d]]) for d in names}, interval_us=interval,
                   precedences=len(precs), pairs=len({frozenset(k) for k in bounds}),
                   solve_s=time.perf_counter() - t0,
                   ignored=tuple((p.label, round(v, 3)) for p, v in ignored))
