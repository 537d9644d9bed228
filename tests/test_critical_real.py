"""The critical path on the aligned real timeline (aligner/critical.py): hand-made graphs with a
known answer, then a traced step of the small lab fixture."""

from __future__ import annotations

import json
import math
from itertools import pairwise

import networkx as nx
import pytest
from conftest import SAMPLE

from gradwire.aligner.align import align_nodes
from gradwire.aligner.critical import (
    CriticalPath,
    Segment,
    critical_path,
    critical_path_document,
)
from gradwire.aligner.dfg import build_dfg
from gradwire.aligner.nodes import load_nodes
from gradwire.errors import GradwireError


def _graph(nodes: dict[str, tuple[str, float, float]], edges: list[tuple[str, str]],
           step: int = 1, bundle: str = "w0") -> nx.DiGraph:
    """A DFG from ``{id: (kind, start_us, end_us)}``; the node id is also its name."""
    g = nx.DiGraph()
    for n, (kind, start, end) in nodes.items():
        g.add_node(n, kind=kind, bundle=bundle, step=step, name=n, start_us=start, end_us=end,
                   duration_us=end - start)
    g.add_edges_from(edges)
    return g


def _seg(node: str, kind: str, start: float, end: float, name: str | None = None) -> Segment:
    return Segment(node=node, kind=kind, name=name or node, start_us=start, end_us=end,
                   duration_us=end - start)


def _wait(node: str, before: str, start: float, end: float) -> Segment:
    return _seg(node, "wait", start, end, f"wait before {before}")


def test_diamond_takes_the_longer_branch():
    g = _graph({"fwd": ("worker", 0, 10), "push": ("uplink", 10, 50),
                "other": ("worker", 10, 20), "apply": ("ps", 55, 60)},
               [("fwd", "push"), ("fwd", "other"), ("push", "apply"), ("other", "apply")])
    cp = critical_path(g, 1)
    assert cp.segments == (_seg("fwd", "worker", 0, 10), _seg("push", "uplink", 10, 50),
                           _wait("apply", "ps", 50, 55), _seg("apply", "ps", 55, 60))
    assert cp.total_us == 60 and cp.span_us == 60 and cp.overlap_us == 0
    assert cp.by_kind_us == {"ps": 5, "uplink": 40, "wait": 5, "worker": 10}
    assert cp.top[0] == ("push", 40) and len(cp.top) == 4
    assert cp.bundle == "w0" and cp.step == 1


def test_chain_with_gaps_and_a_later_sink():
    g = _graph({"recv": ("downlink", 0, 4), "mm": ("worker", 7, 17), "grad": ("worker", 20, 30),
                "early": ("worker", -5, 1)}, [("recv", "mm"), ("mm", "grad")])
    cp = critical_path(g, 1)
    assert [s.name for s in cp.segments] == ["recv", "wait before worker", "mm",
                                             "wait before worker", "grad"]
    assert cp.total_us == 30 and cp.span_us == 35  # "early" is outside the path
    assert cp.by_kind_us == {"downlink": 4, "wait": 6, "worker": 20}
    assert cp.top == (("grad", 10), ("mm", 10), ("wait before worker", 6), ("recv", 4))


def test_overlap_is_clamped_and_counted():
    # the receive op is launched before its tensor's last byte arrives
    g = _graph({"read": ("ps", 0, 5), "pull": ("downlink", 5, 30), "recv": ("worker", 12, 40)},
               [("read", "pull"), ("pull", "recv")])
    cp = critical_path(g, 1)
    assert cp.segments == (_seg("read", "ps", 0, 5), _seg("pull", "downlink", 5, 30),
                           _seg("recv", "worker", 12, 40))
    assert cp.overlap_us == 18 and cp.total_us == 40
    assert cp.by_kind_us == {"downlink": 25, "ps": 5, "worker": 28}
    assert sum(cp.by_kind_us.values()) == cp.total_us + cp.overlap_us


def test_ties_are_broken_by_start_then_node_id():
    g = _graph({"a": ("worker", 0, 10), "b": ("worker", 2, 10), "c": ("worker", 2, 10),
                "z": ("ps", 10, 11)}, [("a", "z"), ("b", "z"), ("c", "z")])
    assert [s.node for s in critical_path(g, 1).segments] == ["c", "z"]


def test_only_the_steps_nodes_and_bundle_are_walked():
    g = _graph({"x": ("worker", 0, 10), "y": ("worker", 10, 20)}, [("x", "y")], step=2)
    g.add_node("prev", kind="worker", bundle="w0", step=1, name="prev", start_us=-5,
               end_us=9.5)
    g.add_edge("prev", "x")  # no edge crosses steps in build_dfg; one would be ignored here
    assert [s.node for s in critical_path(g, 2).segments] == ["x", "y"]
    g.add_node("w1y", kind="worker", bundle="w1", step=2, name="y", start_us=0, end_us=99)
    with pytest.raises(GradwireError, match="several bundles"):
        critical_path(g, 2)
    assert [s.node for s in critical_path(g, 2, bundle="w0").segments] == ["x", "y"]
    assert critical_path(g, 2, bundle="w1").total_us == 99
    with pytest.raises(GradwireError, match=r"no node of step 7.*w0 step 1"):
        critical_path(g, 7)


def test_document_is_json_ready():
    g = _graph({"a": ("worker", 0, 1.5), "b": ("uplink", 2, 4)}, [("a", "b")])
    doc = critical_path_document(critical_path(g, 1))
    assert json.loads(json.dumps(doc)) == doc
    assert doc["format"] == "gradwire-critical-path" and doc["total_us"] == 4
    assert [s["kind"] for s in doc["segments"]] == ["worker", "wait", "uplink"]
    assert doc["top"][0] == {"name": "b", "duration_us": 2}


@pytest.fixture(scope="module")
def small_dfg() -> nx.DiGraph:
    g, report = build_dfg(align_nodes(load_nodes([SAMPLE])))
    assert report.problems == []
    return g


def test_small_fixture_middle_step(small_dfg, capsys):
    g = small_dfg
    steps = sorted({d["step"] for _, d in g.nodes(data=True)})
    step = steps[len(steps) // 2]
    cp = critical_path(g, step)
    assert isinstance(cp, CriticalPath) and cp == critical_path(g, step)  # deterministic
    ops = [s for s in cp.segments if s.kind != "wait"]
    assert len(ops) > 10
    for a, b in pairwise(ops):  # a connected chain of the step
        assert g.has_edge(a.node, b.node) and g.nodes[a.node]["step"] == step
    for i, s in enumerate(cp.segments):  # a wait belongs to the node after it
        if s.kind == "wait":
            nxt = cp.segments[i + 1]
            assert s.node == nxt.node and s.end_us == nxt.start_us and s.duration_us > 0
    assert not any(p for p in g.predecessors(ops[0].node) if g.nodes[p]["step"] == step)
    in_step = [d for _, d in g.nodes(data=True) if d["step"] == step]
    assert ops[-1].end_us == max(d["end_us"] for d in in_step)
    span = max(d["end_us"] for d in in_step) - min(d["start_us"] for d in in_step)
    assert cp.span_us == pytest.approx(span, rel=1e-12)
    assert 0 < cp.total_us <= span
    assert math.isclose(sum(cp.by_kind_us.values()), cp.total_us + cp.overlap_us, rel_tol=1e-6)
    assert {"worker", "ps", "wait"} <= set(cp.by_kind_us) <= {"worker", "ps", "downlink",
                                                               "uplink", "wait"}
    # the path crosses the wire both ways: the PS's variable is pulled, the gradient pushed
    assert {"downlink", "uplink"} <= {s.kind for s in ops}
    assert 0 <= cp.overlap_us < cp.total_us
    doc = critical_path_document(cp)
    assert json.loads(json.dumps(doc)) == doc
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_module_doctest():
    import doctest

    from gradwire.aligner import critical

    assert doctest.testmod(critical).failed == 0
