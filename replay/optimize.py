"""``gradwire optimize``'s search (dPRO section 5.3): which of the job passes to apply, guided
by the critical path, within a memory budget.

From the plan as profiled, each round replays the current plan once with every op recorded,
reads its critical path (``replay.critical.explain``: the share of a step each kind of op
holds), and tries every plan one pass away whose pass shortens a kind that is on that path
(``TARGETS``), each predicted by the sim for the configuration asked for. Of those whose
predicted throughput beats the current plan's beyond both 95% intervals (a gain the sim's own
noise cannot explain), the first tried (partition before fusion before precision before op
fusion; fewer slices and smaller buckets first) that the fastest does not beat beyond both
intervals is taken, so a bigger change for a gain the sim cannot tell from its noise is not;
the search goes on from it, and stops when no neighbour beats the current plan.
A plan whose estimated peak memory exceeds the budget is not taken; when the
plan as profiled already exceeds it, recomputation (which trades compute for memory) is
tried first. The search's grid (partition into M, 2M slices; fusion buckets 1, 4, 16, 64 MB)
spans the settings users pick, TensorFlow's and Horovod's defaults among them; nothing in it
was chosen on a measured job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradwire.collector.opshapes import NOT_COMPUTE
from gradwire.replay.jobwhatifs import (
    RECOMPUTE_ALL,
    RECOMPUTE_CHEAP,
    Plan,
    apply_plan,
    op_ratios,
    passes_besides,
    timed_step_device,
    timed_step_us,
    traced_machine,
)
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER
from gradwire.replay.tensorpasses import largest_bucket_bytes

if TYPE_CHECKING:
    from gradwire.collector.opshapes import ExecutedOp
    from gradwire.replay.opcost import CostModel
    from gradwire.replay.options import PredictOptions
    from gradwire.replay.profile import Profile

# the kinds of op on the critical path each pass shortens
TARGETS = {"partition": {DOWN, UP, PS}, "fuse_bytes": {UP, DELAY},
           "mixed_precision": {DOWN, UP, WORKER}, "op_fusion": {WORKER}}
FUSION_BUCKETS = (1e6, 4e6, 16e6, 64e6)  # bytes: Horovod's default fusion buffer is 64 MB


@dataclass(frozen=True, kw_only=True)
class Tried:
    """One plan predicted: examples/s and its 95% interval, the estimated peak memory
    (bytes; None without a trace to estimate it from), the critical path's share by op kind
    (only for the plans the search went on from)."""

    plan: Plan
    examples_per_s: float
    ci: tuple[float, float]
    peak_bytes: float | None
    path_share: dict[str, float] = dataclasses.field(default_factory=dict)
    why: str = ""

    def beats(self, other: Tried) -> bool:
        """Faster than ``other`` beyond both 95% intervals."""
        return self.ci[0] > other.ci[1]


def neighbours(plan: Plan, ps: int, has_opdb: bool) -> list[tuple[str, Plan]]:
    """The plans one pass away from ``plan`` (see the module), each with the pass's field."""
    out: list[tuple[str, Plan]] = []
    if ps > 1:
        for k in dict.fromkeys((ps, 2 * ps)):
            if k != plan.partition:
                out.append(("partition", dataclasses.replace(plan, partition=k)))
    for size in FUSION_BUCKETS:
        if size != plan.fuse_bytes:
            out.append(("fuse_bytes", dataclasses.replace(plan, fuse_bytes=size)))
    if has_opdb:
        for field in ("mixed_precision", "op_fusion"):
            if not getattr(plan, field):
                out.append((field, dataclasses.replace(plan, **{field: True})))
    return out


def path_kind(resource: str) -> str:
    """The template kind of a resource the critical path names (``resource_name``:
    ``downlink ps:0``, ``uplink ps:1``, ``compute ps:0``, ``worker``, ``delay``); other names
    (waits, barriers, a worker's NIC) as they are."""
    for prefix, kind in (("downlink", DOWN), ("uplink", UP), ("compute ps", PS),
                         ("worker", WORKER), ("delay", DELAY)):
        if resource.startswith(prefix):
            return kind
    return resource


class Search:
    """The search over one profile and configuration (``opts``: one W, one M, one rate)."""

    def __init__(self, prof: Profile, opts: PredictOptions,
                 steps: Sequence[Sequence[ExecutedOp]] | None, model: CostModel | None,
                 budget_bytes: float | None, say: Callable[[str], None],
                 holds: Sequence[Mapping[tuple[str, int], float]] | None = None) -> None:
        self.prof, self.opts, self.model = prof, opts, model
        # ``steps``: every op of the traced steps, for the memory estimator (as ``opdb
        # check`` reads them), and ``holds`` beside them: when each sent tensor left the
        # worker (replay/sentholds.py); the op passes read their compute ops, as predict's do
        self.all_steps = steps
        self.holds = list(holds or [])
        self.steps = None if steps is None else [
            [o for o in s if o.op not in NOT_COMPUTE] for s in steps]
        self.budget, self.say = budget_bytes, say
        self.config = (opts.workers[0], (opts.ps or (prof.ps_count,))[0],
                       (opts.bandwidths_bps or (None,))[0])
        self.tried: dict[Plan, Tried] = {}
        self._ratios: dict[tuple[bool, bool, str], dict[str, float]] = {}
        from gradwire.replay.grid import profile_bandwidth_bps
        from gradwire.replay.predictflow import link_settings

        # the link rate and the links' WIN, bursts and windows: the profile's captures', the
        # same whatever the plan
        self.rate_bps = self.config[2] or profile_bandwidth_bps(prof)
        self.links = link_settings(opts, prof, lambda _: None)[:3]
        machine = traced_machine(opts.bundles) if opts.opdb is not None else None
        fp = opts.opdb_machine or (machine.fingerprint if machine else None)
        self.step_us = {d: timed_step_us(opts.bundles, opts.opdb, fp, d)
                        for d in ("CPU", "XLA_CPU")}

    def profile_of(self, plan: Plan) -> Profile:
        """The profile after ``plan`` (under op fusion alone, its one cluster for the job's
        step timed whole where the database has it, and under accumulation its micro-steps:
        ``jobwhatifs.timed_step_device``)."""
        device = timed_step_device(plan)
        step_us = self.step_us[device] if device else None
        costed = passes_besides(plan, step_us)
        key = (costed.mixed_precision, costed.op_fusion, costed.recompute)
        if key not in self._ratios:
            self._ratios[key] = (op_ratios(costed, self.steps, self.model, lambda _: None)
                                 if self.steps and costed.needs_ops else {})
        return apply_plan(self.prof, plan, self._ratios[key], lambda _: None, self.steps,
                          self.model, step_us)

    def peak_bytes(self, plan: Plan) -> float | None:
        """The plan's estimated peak memory of a worker step (replay/memory.py), or None."""
        if not self.all_steps:
            return None
        from gradwire.replay.memory import estimated_peak_bytes
        from gradwire.replay.oppasses import recomputed_ops

        mid = len(self.all_steps) // 2
        ops: list[Any] = list(self.all_steps[mid])
        # a sent tensor held until the profile's run sent it (a slower link or more workers
        # hold it longer); a fused bucket is counted whole below, its members freed
        held = (self.holds[mid] if len(self.holds) == len(self.all_steps)
                and plan.fuse_bytes is None else None)
        if plan.recompute:
            ops = recomputed_ops(ops, everything=plan.recompute == RECOMPUTE_ALL)
        if plan.mixed_precision:  # the float tensors in 16 bits
            ops = [dataclasses.replace(o, output_bytes=tuple(b // 2 for b in o.output_bytes))
                   if o.dtype == "float32" else o for o in ops]
        peak = estimated_peak_bytes(ops, held_until=held)
        if plan.accumulate > 1:  # the accumulators: a copy of every gradient
            peak += sum(self.prof.templates[0].var_bytes)
        if plan.fuse_bytes is not None:  # the fusion buffer: the largest bucket
            peak += largest_bucket_bytes(self.prof.templates[0], plan.fuse_bytes)
        return peak

    def fits(self, t: Tried) -> bool:
        return self.budget is None or t.peak_bytes is None or t.peak_bytes <= self.budget

    def predict(self, plan: Plan, why: str = "", path: bool = False) -> Tried:
        """``plan`` predicted (once: remembered), with its critical path if ``path``."""
        from gradwire.replay.grid import recorded_run, sim_jobs
        from gradwire.replay.predictflow import explain_run
        from gradwire.replay.sweep import run_jobs

        t = self.tried.get(plan)
        if t is not None and (t.path_share or not path):
            return t
        prof = self.profile_of(plan)
        (w, m, _), bw = self.config, self.rate_bps
        win, burst, windows = self.links
        if t is None:
            jobs = sim_jobs(self.opts, [m], [bw], win, burst, windows)
            pred = run_jobs(prof, jobs, self.opts.jobs, False)[0]
            t = Tried(plan=plan, examples_per_s=pred.examples_per_s, ci=pred.ci,
                      peak_bytes=self.peak_bytes(plan), why=why)
            self.say(f"{plan.describe()}: {t.examples_per_s:.1f} examples/s"
                     + (f", peak {t.peak_bytes / 1e6:.0f} MB" if t.peak_bytes else ""))
        if path:
            sim = recorded_run(self.opts, prof, win, (w, m, bw), burst, windows)
            t = dataclasses.replace(t, path_share=explain_run(sim, (w, m, bw))["share"])
        self.tried[plan] = t
        return t

    def run(self) -> list[Tried]:
        """The search (see the module): the plans it went through, the first as profiled,
        the last the best."""
        current = self.predict(Plan(), "as profiled", path=True)
        chosen = [current]
        for which in (RECOMPUTE_CHEAP, RECOMPUTE_ALL):  # the cheap activations first
            if self.fits(current):
                break
            again = self.predict(Plan(recompute=which), f"recomputation ({which}): the plan "
                                 "as profiled exceeds the memory budget", path=True)
            if self.fits(again):
                current = again
                chosen.append(current)
        ps = self.config[1]
        while True:
            better: list[Tried] = []
            for field, plan in neighbours(current.plan, ps, self.model is not None):
                hit = {r: v for r, v in current.path_share.items()
                       if v > 0 and path_kind(r) in TARGETS[field]}
                if not hit:
                    continue
                shown = [f"{r} {100 * v:.0f}%" for r, v in hit.items() if v >= 0.005]
                t = self.predict(plan, f"{field.replace('_', ' ')}: critical path "
                                 + ", ".join(shown or ["under 1%"]))
                if self.fits(t) and t.beats(current):
                    better.append(t)
            if not better:
                return chosen
            # the simplest (first tried) of those the fastest does not beat beyond both
            # intervals: a bigger change for a gain the sim cannot tell from noise is not taken
            fastest = max(better, key=lambda x: x.examples_per_s)
            best = next(x for x in better if not fastest.beats(x))
            current = self.predict(best.plan, best.why, path=True)
            chosen.append(current)
