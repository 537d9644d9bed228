"""A pull whose tensor the PS computes from a push of the same step (an embedding lookup on the
ids the worker pushed; over 2 PSes, the worker's fetch of an update's completion) is sendable
only after that PS work, not at a delay from the step's start (replay/template.py,
``build_template``, ``_PsSide``; docs/predict.md, "Pulls that wait for PS work")."""

from __future__ import annotations

from dfgsteps import PS0, WK, op, op_named, step, transfer

from gradwire.aligner.dfg import DfgStep
from gradwire.replay.template import DOWN, PS, UP, build_template

OVERHEAD = (0.0, 0.0, 0.0, 0.0)


def _step(lookup_needs: str = "ids") -> DfgStep:
    """One worker, one PS (us): the worker computes ids (0-50) and pushes them (60-70); the PS
    looks the embedding up on them (80-200); the worker pulls a 1000-byte weight w (20-1020)
    and then, on the same connection, the 100-byte embedding (1030-1130), computes (1140-1500),
    makes the gradient (1500-1600) and pushes it (1610-2610); the PS applies it (2620-2700).
    ``lookup_needs``: the push the lookup waits for ("g" makes a cycle no trace can show)."""
    ops = [op("ids", WK, 0, 50), op("w/read", PS0, 0, 10), op("lookup", PS0, 80, 200),
           op("fwd", WK, 1140, 1500), op("grad", WK, 1500, 1600),
           op("apply", PS0, 2620, 2700)]
    rec = {o.name: o.record for o in ops}
    transfers = (
        transfer("ids", WK, PS0, rec["ids"], 0, 60, 70, 80),
        transfer("w", PS0, WK, rec["w/read"], 0, 20, 1020, 1030),
        transfer("emb", PS0, WK, rec["lookup"], 5, 1030, 1130, 1140),
        transfer("g", WK, PS0, rec["grad"], 0, 1610, 2610, 2620),
    )
    deps = [(f"{lookup_needs}_R", "lookup", PS0), ("g_R", "apply", PS0),
            ("w_R", "fwd", WK), ("emb_R", "fwd", WK), ("fwd", "grad", WK)]
    return step(ops, transfers, deps)


def test_a_pull_of_a_lookup_on_pushed_ids_waits_for_the_lookup():
    tpl = build_template(_step(), OVERHEAD, {"ps:0": 0}, None, 0.0)
    preds = tpl.predecessors()
    lookup = op_named(tpl, "apply lookup")
    ids_push = op_named(tpl, "push ids")
    request = op_named(tpl, "request emb")
    assert tpl.kind[lookup] == PS and tpl.kind[ids_push] == UP
    # the lookup waits for the ids' push (its parse at the PS), the pull for the lookup and
    # for w's request: the PS wrote w ahead of it on the connection
    w = op_named(tpl, "request w")
    assert preds[lookup] == [ids_push + 1]
    assert sorted(preds[request]) == sorted([lookup, w])
    # its delay counts from the lookup's end (200): the link was busy with w until 1020,
    # so the server's own latency is the 10 us from then to its first byte
    assert tpl.amount[request] == 10.0
    # the lookup's chunk lasts from the ids' arrival to its end
    assert tpl.amount[lookup] == 200 - 80
    # w, which no push feeds, is timed from the step's start as before (first byte at 20)
    assert preds[w] == [op_named(tpl, "step start")] and tpl.amount[w] == 20.0
    # both pulls still come before the compute that needs them, the gradient after it
    fwd = op_named(tpl, "compute fwd")
    assert set(preds[fwd]) >= {op_named(tpl, "parse w"), op_named(tpl, "parse emb")}
    assert preds[op_named(tpl, "push g")] == [fwd]
    # every op after those it waits for: the order the engine needs
    assert all(p < i for i, ps in enumerate(preds) for p in ps)
    # a pull that waits for PS work is floored by no pull of the step's start
    emb = op_named(tpl, "pull emb")
    assert tpl.kind[emb] == DOWN and tpl.unfloored[emb][1] >= 2


def test_a_cycle_no_trace_can_show_times_the_pull_from_the_steps_start():
    """A lookup waiting for the gradient push, whose producer needs the lookup's pull: the
    parts cannot be ordered, so every pull is timed from the step's start, as before."""
    tpl = build_template(_step("g"), OVERHEAD, {"ps:0": 0}, None, 0.0)
    preds = tpl.predecessors()
    request = op_named(tpl, "request emb")
    assert preds[request] == [op_named(tpl, "step start")]
    # requested at 5, behind w until 1020, first byte at 1030; floored by w's 20
    assert tpl.amount[request] == 20.0
    assert all(p < i for i, ps in enumerate(preds) for p in ps)
