"""A one-step template and a linear stand-in for its replay, shared by the tests of the time
ops' corrections (``--trace-cost``, ``--recording-cost``)."""

from __future__ import annotations

from gradwire.replay.template import DELAY, DOWN, GAP, PS, UP, WORKER, Profile, StepTemplate


def template() -> StepTemplate:
    """A request delay of 1 ms, a 1 MB pull, 4 ms of compute, a 1 MB push, 0.5 ms of the
    PS's work and the client's 2 ms gap."""
    t = StepTemplate(step=0)
    r = t.add(DELAY, 1_000.0, "request")
    d = t.add(DOWN, 1e6, "pull", [r])
    c = t.add(WORKER, 4_000.0, "compute", [d])
    u = t.add(UP, 1e6, "push", [c])
    s = t.add(PS, 500.0, "apply", [u])
    t.add(WORKER, 2_000.0, GAP, [s])
    return t


def linear_step(prof: Profile) -> float:
    """A replay stand-in: the step is 80 ms of transfers plus the template's time ops x 8
    (us; 124 ms for ``template()``)."""
    t = prof.templates[0]
    return 80e3 + sum(a for k, n, a in zip(t.kind, t.name, t.amount, strict=True)
                      if k in (WORKER, PS, DELAY) and n != GAP) * 8
