"""Compute chunks without the recorded run's waits between ops (``--executor-gaps drop``).

A template's compute chunk (``replay/template.py``) lasts its *busy extension*: from the moment
it could start (its pulls in, the chunk before it done) to its last op's end, as the traced
step timed it, so the executor's waits between its ops count. In a profile's traced steps those
waits are the recorded run's: the TraceHook's FULL_TRACE, the captures and the worker's own
receive path on the same cores. The deep MLP over 3 PSes at 550 Mbit/s (2026-11-29,
docs/notes/issue21-3ps-pair-lockstep.md) had 29-61 ms of busy extension a traced step against
12-19 ms of its ops' own time, where the job's uncaptured steps end their compute about 1 ms
after their last pull. ``drop`` makes each chunk last the sum of its ops' own traced times
(the lab's nodes run one intra-op and one inter-op thread, so a chunk's ops do not overlap);
the client's gap between steps, which has no ops, is kept.

``auto`` (the default, ``auto_executor_gaps``) drops them where every mechanism predicted
exchanges the gradients after the compute without a PS (ring all-reduce, its multicast form,
butterfly mixing; not ``@overlap``) and the profile was recorded under a PS: such a step
computes with its links idle, so the waits on the PS's transfers a PS profile's chunks hold are
not in it (docs/notes/issue22-ring-wire.md: a W = 2 ring's traced compute ops took 17.0-20.2 ms
a step where the PS profile's chunks last 28.8). Elsewhere it keeps them.

``alone`` (asked for; not the default) drops them too and scales the compute chunks of such a
mechanism to the profile's worker step run whole on the machine (``gradwire opdb step`` in
``--opdb``: its compute with no transfer beside it; ``with_compute_alone``): in a PS profile
even the ops' own times ran beside the worker's and the PS's transfers on the same cores (the
convnet b32 ring at 1.2 Gbit/s, traced at W = 2, ran its compute ops in 0.66 of the PS
profile's time; its step run alone took 38.6 ms against the profile's 61.5 ms of ops,
docs/notes/issue22-ring-convnet-w2.md). Registered as the default on three jobs never run, it
was nearer the lab at W = 2 on one of them (docs/preregistered/issue22-ring-alone.md), so it
stays an option.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from gradwire.replay.mechanisms import OVERLAP, PEER_MECHANISMS, base_mechanism, modifiers
from gradwire.replay.profile import Profile
from gradwire.replay.template import GAP, WORKER, StepTemplate

__all__ = ["auto_executor_gaps", "links_idle", "with_compute_alone", "without_executor_gaps"]


def links_idle(mechanism: str) -> bool:
    """Whether ``mechanism``'s workers compute with their links idle: a peer mechanism (no PS)
    exchanging the gradients after the whole compute (not ``@overlap``)."""
    return base_mechanism(mechanism) in PEER_MECHANISMS and OVERLAP not in modifiers(mechanism)


def auto_executor_gaps(mechanisms: Sequence[str], recorded: str) -> str:
    """``--executor-gaps auto`` for a sweep of ``mechanisms`` (resolved) from a profile
    recorded under ``recorded``: ``drop`` where every one of them computes with its links
    idle and the profile's did not (a PS profile), else ``keep`` (module docstring)."""
    idle = [links_idle(m) for m in mechanisms]
    return "drop" if idle and all(idle) and not links_idle(recorded) else "keep"


def _own_time(t: StepTemplate) -> list[float]:
    """Each op's amount, a compute chunk's at most its ops' own traced time (us)."""
    return [min(a, sum(d for _, d in t.members[i])) if k == WORKER and t.name[i] != GAP
            and t.members[i] else a
            for i, (k, a) in enumerate(zip(t.kind, t.amount, strict=True))]


def without_executor_gaps(prof: Profile) -> tuple[Profile, float]:
    """``prof`` with every compute chunk at its ops' own time, and the share of the templates'
    compute time that removes (0-1)."""
    before = sum(_compute_us(t) for t in prof.templates)
    templates = [dataclasses.replace(t, amount=_own_time(t)) for t in prof.templates]
    after = sum(_compute_us(t) for t in templates)
    return dataclasses.replace(prof, templates=templates), (1 - after / before if before else 0.0)


def _compute_us(t: StepTemplate) -> float:
    """The template's compute chunks' time (us): its worker ops but the client's gap."""
    return sum(a for k, a, n in zip(t.kind, t.amount, t.name, strict=True)
               if k == WORKER and n != GAP)


def with_compute_alone(prof: Profile, step_us: float) -> tuple[Profile, float]:
    """``prof`` with every template's compute chunks scaled by one factor, so that their
    median step of compute is ``step_us`` (us: the worker's step run whole on the machine,
    ``gradwire opdb step``), and that factor; ``prof`` and 1.0 where it has no compute. The
    client's gap, the transfers and the PS's work are kept."""
    traced = statistics.median(_compute_us(t) for t in prof.templates)
    if traced <= 0 or step_us <= 0:
        return prof, 1.0
    f = step_us / traced
    templates = [dataclasses.replace(t, amount=[a * f if k == WORKER and n != GAP else a
                                                for k, a, n in zip(t.kind, t.amount, t.name,
                                                                   strict=True)])
                 for t in prof.templates]
    return dataclasses.replace(prof, templates=templates), f
