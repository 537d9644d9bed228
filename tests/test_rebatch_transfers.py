"""The batch-size what-if's transfers (replay/rebatch.py): a sparse embedding's rows move with
the batch, a variable's value and gradient do not; the sends' shapes read from RunMetadata
(collector/opshapes.py ``sent_tensors``)."""

from __future__ import annotations

import pytest
from conftest import SAMPLE

from gradwire.collector.opshapes import SentTensor
from gradwire.replay.rebatch import network_phases, of_the_batch, rebatch_transfers
from gradwire.replay.template import DELAY, DOWN, UP, WORKER, StepTemplate

WORKER_CPU = "/job:worker/replica:0/task:0/device:CPU:0"
PS_CPU = "/job:ps/replica:0/task:0/device:CPU:0"


def _recsys_step():  # type: ignore[no-untyped-def]
    """A recommendation model's step as its RunMetadata records it, batch 32: the PS gathers
    32 x 16 rows of 64 floats from a 20 MB table; the worker pushes the ids, the rows'
    gradient (512 x 64) and their indices back, and a dense kernel's gradient (1024 x 256,
    which 32 divides too); the kernel is pulled as a variable read."""
    from gradwire.collector.runmetadata import run_metadata

    meta = run_metadata()
    g = meta.partition_graphs.add()
    g.node.add(name="table", op="VarHandleOp", device=PS_CPU)
    g.node[0].attr["shape"].shape.dim.add(size=78125)
    g.node[0].attr["shape"].shape.dim.add(size=64)
    g.node[0].attr["dtype"].type = 1
    kernel = g.node.add(name="kernel", op="VarHandleOp", device=PS_CPU)
    kernel.attr["shape"].shape.dim.add(size=1024)
    kernel.attr["shape"].shape.dim.add(size=256)
    kernel.attr["dtype"].type = 1
    g.node.add(name="kernel/read", op="ReadVariableOp", device=PS_CPU, input=["kernel"])
    g.node.add(name="embedding_lookup", op="ResourceGather", device=PS_CPU,
               input=["table", "ids_recv"])
    g.node.add(name="random_uniform", op="RandomUniformInt", device=WORKER_CPU)
    g.node.add(name="grad/Reshape", op="Reshape", device=WORKER_CPU)
    g.node.add(name="grad/Reshape_1", op="Reshape", device=WORKER_CPU)
    g.node.add(name="grad/MatMul", op="MatMul", device=WORKER_CPU)
    g.node.add(name="lr", op="Const", device=WORKER_CPU)
    sends = {"edge_18_embedding_lookup": ("embedding_lookup", PS_CPU),
             "edge_23_kernel/read": ("kernel/read", PS_CPU),
             "edge_16_random_uniform": ("random_uniform", WORKER_CPU),
             "edge_96_grad/Reshape": ("grad/Reshape", WORKER_CPU),
             "edge_103_grad/Reshape_1": ("grad/Reshape_1", WORKER_CPU),
             "edge_99_grad/MatMul": ("grad/MatMul", WORKER_CPU),
             "edge_62_lr": ("lr", WORKER_CPU)}
    for edge, (src, device) in sends.items():
        n = g.node.add(name=f"send/{edge}", op="_Send", device=device, input=[src])
        n.attr["tensor_name"].s = edge.encode()
    shapes = {"embedding_lookup": (32, 16, 64), "kernel/read": (1024, 256),
              "random_uniform": (32, 16), "grad/Reshape": (512, 64), "grad/Reshape_1": (512,),
              "grad/MatMul": (1024, 256), "lr": ()}
    for device in (PS_CPU, WORKER_CPU):
        dev = meta.step_stats.dev_stats.add(device=device)
        for node, shape in shapes.items():
            if any(n.name == node and n.device == device for n in g.node):
                out = dev.node_stats.add(node_name=node).output.add(slot=0)
                out.tensor_description.dtype = 1
                for d in shape:
                    out.tensor_description.shape.dim.add(size=d)
    return meta


def test_the_sends_shapes_say_which_tensors_are_the_batchs() -> None:
    pytest.importorskip("google.protobuf", reason="the [predict] extra's protobuf is missing")
    from gradwire.collector.opshapes import sent_tensors

    sent = {t.edge: t for t in sent_tensors(_recsys_step())}
    assert sent["edge_18_embedding_lookup"] == SentTensor(
        edge="edge_18_embedding_lookup", shape=(32, 16, 64), from_variable=False)
    assert sent["edge_23_kernel/read"].from_variable  # a variable's value
    assert sent["edge_99_grad/MatMul"].from_variable  # a gradient: of the kernel's shape
    batch = {e for e, t in sent.items() if of_the_batch(t, 32)}
    assert batch == {"edge_18_embedding_lookup", "edge_16_random_uniform",
                     "edge_96_grad/Reshape", "edge_103_grad/Reshape_1"}
    assert {e for e, t in sent.items() if of_the_batch(t, 24)} == set()
    # an empty tensor (TensorFlow sends some of shape (0,)) and an unrecorded one are not
    assert not of_the_batch(SentTensor(edge="e", shape=(0,), from_variable=False), 32)
    assert not of_the_batch(SentTensor(edge="e", shape=None, from_variable=False), 32)


def test_the_batchs_transfers_and_their_parses_scale_and_the_rest_stay() -> None:
    t = StepTemplate(step=0)
    pull = t.add(DOWN, 131_110.0, "pull edge_18_embedding_lookup")
    rows = t.add(DELAY, 530.0, "parse edge_18_embedding_lookup", [pull])
    dense = t.add(DOWN, 1_048_600.0, "pull edge_23_kernel/read")
    kernel = t.add(DELAY, 2000.0, "parse edge_23_kernel/read", [dense])
    c = t.add(WORKER, 900.0, "compute x..", [rows, kernel])
    push = t.add(UP, 131_107.0, "push edge_96_grad/Reshape", [c])
    t.add(DELAY, 439.0, "parse edge_96_grad/Reshape", [push])
    ids = t.add(UP, 4128.0, "push edge_16_random_uniform", [c])
    t.add(DELAY, 100.0, "parse edge_16_random_uniform", [ids])  # under the push fit's beta
    edges = {"edge_18_embedding_lookup", "edge_96_grad/Reshape", "edge_16_random_uniform"}
    out, changed = rebatch_transfers(t, edges, 2.0, pull_beta_us=130.0, push_beta_us=439.0)
    assert changed == 3
    assert out.amount == [262_220.0, 130 + 400 * 2, 1_048_600.0, 2000.0, 900.0,
                          262_214.0, 439.0, 8256.0, 100.0]
    assert t.amount[0] == 131_110.0  # the profile's template is not changed
    phases = network_phases({"downlink": 0.1, "uplink": 0.2, "worker": 0.5}, [t], [out])
    assert phases["downlink"] == pytest.approx(0.1 * (262_220 + 1_048_600) / (131_110
                                                                              + 1_048_600))
    assert phases["uplink"] == pytest.approx(0.2 * 2) and phases["worker"] == 0.5
    assert network_phases({}, [t], [out]) == {}


def test_a_dense_models_what_if_moves_no_transfer() -> None:
    """The shipped sample (an MLP: every send a variable's value or gradient) at any batch."""
    pytest.importorskip("google.protobuf", reason="the [predict] extra's protobuf is missing")
    from gradwire.bundle import open_bundle
    from gradwire.collector.opingest import recorded_steps
    from gradwire.collector.opshapes import sent_tensors
    from gradwire.replay.profile import load_profile
    from gradwire.replay.rebatch import batch_edges

    b = open_bundle(SAMPLE / "worker0")
    sent = [t for _, meta in recorded_steps(b) for t in sent_tensors(meta)]
    assert all(t.shape is not None for t in sent)
    moved = {n.split(" ", 1)[1] for t in load_profile([SAMPLE]).templates
             for k, n in zip(t.kind, t.name, strict=True) if k in (DOWN, UP)}
    assert moved <= {t.edge for t in sent} and len(moved) == 17  # 8 pulls, 9 pushes
    assert batch_edges(b, 32) == set()
