"""The job what-ifs of ``gradwire predict`` and ``gradwire optimize`` (issue 23, dPRO section 5):
a plan of passes applied to a profile's step templates and to the baselines' 1-worker phases.

Op passes (replay/oppasses.py) give each traced op a ratio, read off the profile's recorded
RunMetadata: mixed precision's compute and op fusion from the op cost database, recomputation
from the trace alone. Tensor passes (replay/tensorpasses.py, replay/transforms.py) reshape
the template: mixed precision's transfers (half the bytes), tensor partition, tensor fusion,
gradient accumulation. The passes apply in that order; each says what it changed.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gradwire.errors import PredictError
from gradwire.replay.template import DOWN, PS, UP, StepTemplate
from gradwire.replay.tensorpasses import fuse_tensors, halve_transfers, partition_tensors
from gradwire.replay.transforms import accumulate_gradients, compute_totalling, one_cluster

if TYPE_CHECKING:
    from gradwire.bundle import Bundle
    from gradwire.collector.opshapes import ExecutedOp
    from gradwire.opdb import Machine
    from gradwire.replay.opcost import CostModel
    from gradwire.replay.oppasses import OpRatios
    from gradwire.replay.profile import Profile


RECOMPUTE_CHEAP, RECOMPUTE_ALL = "cheap", "all"  # predict's --recompute choices
RECOMPUTES = (RECOMPUTE_CHEAP, RECOMPUTE_ALL)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Which passes to apply: ``mixed_precision`` (bfloat16 compute, 16-bit transfers),
    ``op_fusion`` (element-wise chains), ``recompute`` (activations recomputed for the
    backward pass: ``RECOMPUTE_CHEAP`` the cheap ones, ``RECOMPUTE_ALL`` every layer's;
    ``""``: off), ``partition`` (variables cut into at most that many slices; 1: off),
    ``fuse_bytes`` (gradient buckets of that many bytes; None: off), ``accumulate``
    (micro-steps per update; 1: off)."""

    mixed_precision: bool = False
    op_fusion: bool = False
    recompute: str = ""
    partition: int = 1
    fuse_bytes: float | None = None
    accumulate: int = 1

    def __post_init__(self) -> None:
        if self.partition < 1 or self.accumulate < 1:
            raise PredictError("--partition and --accumulate must be >= 1", usage=True)
        if self.fuse_bytes is not None and self.fuse_bytes <= 0:
            raise PredictError("--fuse-tensors must be a size > 0", usage=True)
        if self.recompute not in ("", *RECOMPUTES):
            raise PredictError(f"--recompute must be one of {', '.join(RECOMPUTES)}", usage=True)

    @property
    def needs_opdb(self) -> bool:
        """Whether a pass costs ops from the op cost database."""
        return self.mixed_precision or self.op_fusion

    @property
    def needs_ops(self) -> bool:
        """Whether a pass reads the traced ops (the profile's RunMetadata)."""
        return self.needs_opdb or self.recompute

    @property
    def empty(self) -> bool:
        return self == Plan()

    def describe(self) -> str:
        """The plan in the command line's words, e.g. ``--partition 2 --mixed-precision``."""
        words = []
        if self.mixed_precision:
            words.append("--mixed-precision")
        if self.op_fusion:
            words.append("--op-fusion")
        if self.recompute:
            words.append(f"--recompute {self.recompute}")
        if self.partition > 1:
            words.append(f"--partition {self.partition}")
        if self.fuse_bytes is not None:
            words.append(f"--fuse-tensors {self.fuse_bytes / 1e6:g}MB")
        if self.accumulate > 1:
            words.append(f"--accumulate {self.accumulate}")
        return " ".join(words) or "as profiled"


def traced_steps(bundles: Sequence[Path], what: str, compute_only: bool = True
                 ) -> list[list[ExecutedOp]]:
    """The executed ops of every recorded step of the profile's (first) traced worker
    (``compute_only``: see ``rebatch.worker_steps``)."""
    from gradwire.replay.rebatch import worker_steps

    traced = traced_worker(bundles)
    if traced is None:
        raise PredictError(f"{what}: no worker bundle with a recorded trace among the "
                           "profile's bundles")
    return worker_steps(traced, compute_only)


def traced_worker(bundles: Sequence[Path]) -> Bundle | None:
    """The profile's first worker bundle with a recorded trace (None: none has one)."""
    from gradwire.bundle import find_bundles, open_bundle

    opened = (open_bundle(p) for given in bundles for p in find_bundles(given))
    return next((b for b in opened if b.task.startswith("worker") and b.step_files), None)


def traced_machine(bundles: Sequence[Path]) -> Machine | None:
    """The machine the profile's (first) traced worker ran its ops on (its session.json's:
    processor, TensorFlow, intra-op threads); None where no worker bundle has a trace."""
    from gradwire.collector.opingest import bundle_machine

    traced = traced_worker(bundles)
    return None if traced is None else bundle_machine(traced.session, traced.path)


def over_steps(steps: Sequence[Sequence[ExecutedOp]],
               one: Callable[[Sequence[ExecutedOp]], OpRatios]) -> OpRatios:
    """One pass's OpRatios over every recorded step (each op's ratio, the shares' medians)."""
    from gradwire.replay.oppasses import OpRatios

    each = [one(ops) for ops in steps if ops]
    ratios: dict[str, float] = {}
    for r in each:
        ratios.update(r.ratios)
    return OpRatios(ratios=ratios,
                    compute_factor=statistics.median(r.compute_factor for r in each),
                    changed_share=statistics.median(r.changed_share for r in each))


def timed_step_us(bundles: Sequence[Path], opdb: Path | None, fingerprint: str | None,
                  device: str) -> float | None:
    """The profile's traced worker step run whole and timed on machine ``fingerprint``
    (``gradwire opdb step``; ``device`` ``XLA_CPU`` with ``--xla``, else ``CPU``): the
    ``steps`` row of its graph in the database ``opdb``, µs; None where there is no database,
    machine, recorded graph or row."""
    from gradwire.bundle import GRAPH_FILE, TRACE_DIR
    from gradwire.collector.graphstep import graph_digest
    from gradwire.opdb import OpDatabase

    worker = traced_worker(bundles)
    graph = None if worker is None else worker.path / TRACE_DIR / GRAPH_FILE
    if opdb is None or fingerprint is None or graph is None or not graph.is_file():
        return None
    with OpDatabase(opdb) as db:
        row = db.step(graph_digest(graph), fingerprint, device)
    return None if row is None else row.median_us


def timed_step_device(plan: Plan) -> str | None:
    """Which of the profile's steps timed whole ``plan`` runs, where its graph is the
    profile's own (no mixed precision, no recomputation): op fusion alone, one XLA cluster
    (``XLA_CPU``: the cluster's time); accumulation or tensor fusion without op fusion, the
    step's compute away from the transfers (``CPU``: a rerun micro-step; the rate of the
    compute the buckets move away from the pushes); None: neither."""
    if plan.mixed_precision or plan.recompute:
        return None
    if plan.op_fusion:
        return "XLA_CPU" if plan.accumulate == 1 else None
    return "CPU" if plan.accumulate > 1 or plan.fuse_bytes is not None else None


def passes_besides(plan: Plan, step_us: float | None) -> Plan:
    """The plan whose op passes cost the traced ops: ``plan`` without op fusion's where its
    one cluster's time was measured whole (``step_us`` of ``timed_step_device`` XLA_CPU),
    ``plan`` otherwise."""
    return (dataclasses.replace(plan, op_fusion=False)
            if step_us is not None and timed_step_device(plan) == "XLA_CPU" else plan)


def op_ratios(plan: Plan, steps: Sequence[Sequence[ExecutedOp]], model: CostModel | None,
              say: Callable[[str], None]) -> dict[str, float]:
    """Each traced op's time after the plan's op passes over before (their product)."""
    from gradwire.replay import oppasses

    passes: list[tuple[str, Callable[[Sequence[ExecutedOp]], OpRatios]]] = []
    if plan.mixed_precision and model is not None:
        passes.append(("mixed precision (bfloat16 compute, from the op database)",
                       lambda ops: oppasses.precision_ratios(ops, model)))
    if plan.op_fusion and model is not None:
        passes.append(("op fusion of element-wise chains, and XLA's own code for the other "
                       "ops (from the op database)" if oppasses.has_xla_rows(model) else
                       "op fusion of element-wise chains (from the op database; it has no "
                       "rows timed as XLA compiles ops, so XLA's code is taken as fast as "
                       "TensorFlow's kernels: `gradwire opdb build --xla` times them)",
                       lambda ops: oppasses.fusion_ratios(ops, model)))
    if plan.recompute == RECOMPUTE_CHEAP:
        passes.append(("recomputation of the activations the backward pass reads",
                       oppasses.recompute))
    elif plan.recompute == RECOMPUTE_ALL:
        passes.append(("recomputation of every layer's forward pass",
                       lambda ops: oppasses.recompute(ops, everything=True)))
    total: dict[str, float] = {}
    for what, one in passes:
        r = over_steps(steps, one)
        for name, ratio in r.ratios.items():
            total[name] = total.get(name, 1.0) * ratio
        say(f"{what}: compute x{r.compute_factor:.3f} ({100 * r.changed_share:.0f}% of the "
            "traced compute changed)")
    return total


def apply_plan(prof: Profile, plan: Plan, ratios: dict[str, float],
               say: Callable[[str], None],
               steps: Sequence[Sequence[ExecutedOp]] | None = None,
               model: CostModel | None = None,
               step_us: float | None = None) -> Profile:
    """``prof`` after ``plan``: its templates through the passes (``ratios``: the op passes'
    ``op_ratios``), its batch per step times the micro-steps, the baselines' phases moved
    alike (compute by the templates' compute, transfers by their bytes; under op fusion the
    worker's phase is the templates' mean compute, seconds, as one cluster runs it all between
    the pulls and the pushes). ``steps``: the
    profile's traced steps' compute ops, from which accumulation costs its micro-steps away
    from the transfers (replay/rerun.py; ``model``, the op cost database, where it times an
    op below its least traced time); without them it costs each the template's own compute
    and the PS's work per step as the adds. ``step_us``: the job's step run whole and timed
    on the machine (``gradwire opdb step``, µs; which, ``timed_step_device``): under op
    fusion, compiled by XLA, each template's one cluster then takes it, in place of its ops
    costed one by one; under accumulation, each rerun micro-step's compute takes it; under
    tensor fusion, the compute the buckets move away from the pushes runs at its rate
    (``rerun.step_scale``)."""
    from gradwire.replay.rebatch import rebatch_template
    from gradwire.replay.transforms import is_compute

    def totals(ts: Sequence[StepTemplate]) -> dict[str, float]:
        out = {"worker": 0.0, "downlink": 0.0, "uplink": 0.0, "server": 0.0}
        for t in ts:
            for k, n, a in zip(t.kind, t.name, t.amount, strict=True):
                key = ("worker" if is_compute(k, n) else "downlink" if k == DOWN else
                       "uplink" if k == UP else "server" if k == PS else None)
                if key:
                    out[key] += a
        return out

    before = totals(prof.templates)
    device = timed_step_device(plan) if step_us is not None else None
    templates = [rebatch_template(t, ratios) if ratios else t for t in prof.templates]
    if plan.mixed_precision:
        templates = [halve_transfers(t) for t in templates]
    if plan.partition > 1:
        templates = [partition_tensors(t, plan.partition, beta_us=prof.push_beta_us,
                                       pull_beta_us=prof.beta_us) for t in templates]
        cut = len(templates[0].var_bytes) - len(prof.templates[0].var_bytes)
        say(f"tensor partition: {cut} more variable slices (a variable of N bytes in "
            f"min({plan.partition}, ceil(N / 256 KiB)) slices, as TensorFlow's "
            "min_max_variable_partitioner)")
    if plan.fuse_bytes is not None:
        from gradwire.replay import rerun

        rate = rerun.elementwise_rate(steps) if steps else None
        was_quiet = [rerun.quiet_members(t) for t in templates]
        templates = [fuse_tensors(t, plan.fuse_bytes, prof.push_beta_us, rate)
                     for t in templates]
        if steps:  # the backward pass the buckets hold the pushes behind runs quiet
            quiet_us = rerun.quiet_times_us(steps, model)
            if device == "CPU" and step_us is not None:  # the step run whole (`opdb step`)
                moved = rerun.moved_names(templates, was_quiet)
                scale = rerun.step_scale(quiet_us, moved, step_us)
                quiet_us = {n: us * scale if n in moved else us for n, us in quiet_us.items()}
                say(f"tensor fusion: the compute the buckets move away from the pushes at "
                    f"{scale:.3f} of its ops' least traced times, so that the step's compute "
                    f"comes to {step_us / 1e3:.2f} ms, the job's step run whole on the "
                    "machine (`gradwire opdb step`)")
            templates = [rerun.run_quiet(t, q, quiet_us)
                         for t, q in zip(templates, was_quiet, strict=True)]
        say(f"tensor fusion: {sum(k == UP for k in templates[0].kind)} pushes a step "
            f"(was {sum(k == UP for k in prof.templates[0].kind)}); "
            + (f"a bucket's copies {rerun.copy_us(1e6, rate) / 1e3:.3f} ms per MB each, at "
               "the traced element-wise ops' memory rate" if rate else
               "its copies not costed (no traced element-wise op with its shapes)"))
    if plan.accumulate > 1:
        templates = accumulated(templates, plan.accumulate, ratios, steps, say, model,
                                step_us if device == "CPU" else None)
    if plan.op_fusion:
        templates = [one_cluster(t) for t in templates]
        say("op fusion: the worker's compute runs as one XLA cluster, which starts when all "
            "its inputs (the pulls) are in and hands its outputs (the pushes) over at its end")
        if step_us is not None and device == "XLA_CPU":
            costed = sum(totals([t])["worker"] for t in templates) / len(templates)
            templates = [compute_totalling(t, step_us) for t in templates]
            say(f"op fusion: the cluster takes {step_us / 1e3:.2f} ms, the job's step "
                f"compiled whole and timed on the machine (`gradwire opdb step --xla`), where "
                f"the profile's traced compute took {costed / 1e3:.2f} ms")
    after = totals(templates)
    phases = {k: v * (after[k] / before[k] if before.get(k) else 1.0)
              for k, v in prof.phases.items()} if prof.phases else prof.phases
    if plan.op_fusion and phases and "worker" in phases:
        # one cluster is one kernel: the worker's phase, between its pulls and its pushes,
        # is all of its compute, where the profile's overlapped the transfers layer by layer
        phases["worker"] = after["worker"] / len(templates) / 1e6
    return dataclasses.replace(prof, templates=templates,
                               batch_size=prof.batch_size * plan.accumulate, phases=phases)


def accumulated(templates: Sequence[StepTemplate], k: int, ratios: dict[str, float],
                steps: Sequence[Sequence[ExecutedOp]] | None,
                say: Callable[[str], None],
                model: CostModel | None = None,
                step_us: float | None = None) -> list[StepTemplate]:
    """``templates`` as updates of ``k`` micro-steps (``transforms.accumulate_gradients``),
    each rerun micro-step the job's step run whole and timed on the machine (``step_us``,
    ``gradwire opdb step``) where given, else costed from the traced ``steps``
    (``rerun.rerun_compute_us``, after the op passes' ``ratios``; with ``model``, the
    database's time where less), and its adds at the traced element-wise ops' memory rate;
    the template's own compute and the PS's work per step where the steps give neither."""
    from gradwire.replay import rerun

    if step_us is not None:
        rerun_us = step_us
    else:
        rerun_us = rerun.rerun_compute_us(steps, ratios, model) if steps else 0.0
    rate = rerun.elementwise_rate(steps) if steps else None
    out = []
    for t in templates:
        pushed = t.bytes_by(UP)
        adds = (rerun.add_us(pushed, rate) if rate else
                sum(a for kind, a in zip(t.kind, t.amount, strict=True) if kind == PS))
        out.append(accumulate_gradients(t, k, adds, rerun_us if rerun_us > 0 else None))
    if rerun_us > 0:
        how = ("the job's step run whole on the machine, `gradwire opdb step`" if step_us
               is not None else "each traced op at its least time over the traced steps"
               + (", or the op database's where less" if model is not None else ""))
        say(f"gradient accumulation: each rerun micro-step {rerun_us / 1e3:.2f} ms of compute "
            f"({how}), its adds "
            + (f"{rerun.add_us(1e6, rate) / 1e3:.3f} ms per MB of gradients" if rate
               else "the PS's work per step"))
    return out
