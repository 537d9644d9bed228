"""Align the bundles of all nodes: match transfers, check capture clocks, solve offsets.

>>> from gradwire.aligner.align import align   # doctest: +SKIP
>>> result = align(["bundles/"])                 # doctest: +SKIP
>>> result.offsets.offset_us                     # doctest: +SKIP
{'vm/198.19.243.10': 0.0, 'vm/198.19.243.100': -0.125}
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradwire.aligner.clock import Offsets, precedences, solve_offsets
from gradwire.aligner.nodes import (
    Domains,
    NodeData,
    bundle_names,
    drop_uncovered,
    load_nodes,
    map_domains,
)
from gradwire.aligner.skew import SkewCheck, capture_skew
from gradwire.aligner.transfers import Transfer, match_transfers
from gradwire.bundle import Bundle


@dataclass(frozen=True)
class Alignment:
    """Everything the aligner derived; inputs are untouched, times stay local in the records.

    ``aligned_us(domain, local_us)`` maps a TF time to the reference clock; capture times need
    ``capture_aligned_us`` (which also removes the capture's skew from its TF clock).
    """

    nodes: list[NodeData]
    domains: Domains
    transfers: list[Transfer]
    skew: dict[str, SkewCheck]
    offsets: Offsets

    def aligned_us(self, domain: str, local_us: float) -> float:
        """A TF timestamp of ``domain`` on the reference clock, microseconds."""
        return local_us - self.offsets.offset_us.get(domain, 0.0)

    def capture_aligned_us(self, domain: str, local_ns: int) -> float:
        """A capture timestamp of ``domain`` on the reference clock, microseconds."""
        skew = self.skew[domain].applied_us if domain in self.skew else 0.0
        return self.aligned_us(domain, local_ns / 1000 - skew)

    def summary(self) -> dict[str, Any]:
        """The offsets.json document (see docs/align.md)."""
        names = bundle_names(self.nodes)
        tasks: dict[str, list[str]] = {}
        for task, dom in self.domains.by_task.items():
            tasks.setdefault(dom, []).append(task)
        used = Counter(t.direction for t in self.transfers)
        both = sum(1 for t in self.transfers if t.at_sender and t.at_receiver)

        def num(v: float) -> float | None:
            return round(v, 3) + 0.0 if math.isfinite(v) else None  # + 0.0: no "-0.0"

        return {
            "reference": self.offsets.reference,
            "objective": self.offsets.objective,
            "hosts": [{
                "domain": d,
                "bundles": names.get(d, ""),
                "tasks": sorted(tasks.get(d, [])),
                "offset_us": num(self.offsets.offset_us[d]),
                "interval_us": [num(v) for v in self.offsets.interval_us[d]],
                "capture_skew": None if d not in self.skew else {
                    "feasible_us": [num(self.skew[d].lo_us), num(self.skew[d].hi_us)],
                    "samples": self.skew[d].samples,
                    "applied_us": num(self.skew[d].applied_us),
                    "consistent": self.skew[d].consistent,
                    "outlying_stamps": self.skew[d].outliers},
            } for d in sorted(self.offsets.offset_us)],
            "transfers": {"total": len(self.transfers), "pull": used["pull"],
                          "push": used["push"], "other": used["other"],
                          "seen_by_both_captures": both,
                          "traced": sum(1 for t in self.transfers if t.recv is not None)},
            "constraints": {"precedences": self.offsets.precedences,
                            "domain_pairs": self.offsets.pairs,
                            "ignored_op_stamps": [{"transfer": label, "short_by_us": us}
                                                  for label, us in self.offsets.ignored]},
            "solve_s": round(self.offsets.solve_s, 4),
            "captures_set_aside": {n.name: n.capture_problem for n in self.nodes
                                   if n.capture_problem},
        }


def align_nodes(nodes: Sequence[NodeData], objective: str = "centre",
                reference: str | None = None, bandwidth_bps: float | None = None) -> Alignment:
    """Align already-loaded nodes (see ``align``)."""
    domains = map_domains(nodes)
    drop_uncovered(nodes, domains)
    transfers = match_transfers(nodes, domains)
    skew = capture_skew(transfers)
    precs = precedences(transfers, bandwidth_bps,
                        {d: s.applied_us for d, s in skew.items()})
    all_domains = sorted({n.domain for n in nodes} | {t.src_domain for t in transfers}
                         | {t.dst_domain for t in transfers})
    ref = _reference(nodes, all_domains, reference)
    offsets = solve_offsets(precs, all_domains, ref, objective)
    return Alignment(list(nodes), domains, transfers, skew, offsets)


def _reference(nodes: Sequence[NodeData], domains: list[str], reference: str | None) -> str:
    """The reference domain: given by bundle name or domain, else the first PS bundle's."""
    if reference is None:
        ps = [n for n in nodes if n.name.startswith("ps")]
        return (ps or list(nodes))[0].domain if nodes else domains[0]
    for n in nodes:
        if reference in (n.name, n.domain):
            return n.domain
    if reference in domains:
        return reference
    from gradwire.errors import AlignmentInfeasible
    raise AlignmentInfeasible(f"reference {reference!r} is neither a bundle name nor a clock "
                              f"domain (bundles: {', '.join(n.name for n in nodes)})")


def align(paths: Sequence[str | Path | Bundle], objective: str = "centre",
          reference: str | None = None, bandwidth_bps: float | None = None,
          progress: Callable[[str], None] | None = None) -> Alignment:
    """Read the bundles under ``paths`` (folders, or bundles already opened: not opened
    again) and align them.

    ``bandwidth_bps`` (bits per second of the links, when known) tightens the op-level bounds
    by each tensor's wire time. ``reference`` names the bundle (or domain) whose clock the others
    are aligned to; the first PS bundle by default.
    """
    nodes = load_nodes(paths, progress)
    if progress:
        progress("matching transfers and solving clock offsets")
    return align_nodes(nodes, objective, reference, bandwidth_bps)
