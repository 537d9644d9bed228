"""A worker's pulls from one PS share one TCP connection, so the PS writes them in the order
the capture shows their first bytes: in a template, no pull is sendable before the one the
same PS wrote ahead of it (replay/template.py, ``build_template``; docs/predict.md, "The PS's
write order")."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import SAMPLE

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.replay.template import DOWN


def _pulls(tpl) -> dict[int, list[tuple[int, float, float]]]:
    """Per PS, its pulls in write order: (prio, sendable after the step's start, first byte
    after the step's start), us. The request delay is the op added just before its pull."""
    start = tpl.obs_start[tpl.name.index("step start")]
    out: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for d, kind in enumerate(tpl.kind):
        if kind != DOWN:
            continue
        req = d - 1
        assert tpl.name[req].startswith("request ") and d in tpl.succ[req]
        out[tpl.ps[d]].append((int(tpl.prio[d]), tpl.amount[req], tpl.obs_start[d] - start))
    return {ps: sorted(v) for ps, v in out.items()}


@pytest.mark.parametrize("bundle", [SAMPLE_BUNDLE, SAMPLE], ids=["shipped-sample", "small-lab"])
def test_no_pull_is_sendable_before_the_one_written_ahead_of_it(bundle):
    from gradwire.replay.profile import load_profile

    templates = load_profile([bundle]).templates
    assert templates
    checked = 0
    for tpl in templates:
        for pulls in _pulls(tpl).values():
            sendable = [s for _, s, _ in pulls]
            assert sendable == sorted(sendable)  # in the write order
            for _, s, first in pulls:
                # after the step's start, and never after the pull's own first byte
                assert 0.0 <= s <= first + 1e-6
            checked += len(pulls)
    assert checked >= 2 * len(templates)
