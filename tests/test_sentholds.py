"""A sent tensor held until its last byte left the worker (replay/sentholds.py) and the memory
estimator's ``held_until`` (replay/memory.py)."""

from __future__ import annotations

import pytest
from conftest import SAMPLE

from gradwire.collector.opshapes import ExecutedOp
from gradwire.records import Stream
from gradwire.replay.memory import estimated_peak_bytes
from gradwire.replay.sentholds import ps_sends, step_holds

WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
PS = "/job:ps/replica:0/task:0/device:CPU:0"


def op(name: str, kind: str, start: float, end: float, out: int, *reads: str) -> ExecutedOp:
    return ExecutedOp(name=name, op=kind, device="CPU", inputs=(), outputs=(), dtype="float32",
                      attrs=(), duration_us=end - start, input_nodes=reads, start_us=start,
                      end_us=end, output_bytes=(out,))


def stream(edge: str, step_id: int, first_us: float, last_us: float) -> Stream:
    """A RecvTensor response the worker sent: ``edge``'s tensor of TF step ``step_id``."""
    return Stream(conn=1, client="ps", server="worker", stream_id=2 * step_id + 1,
                  path="/tensorflow.WorkerService/RecvTensor", status="0",
                  tensor=f"{WORKER};1;{PS};{edge};0:0", step_id=step_id, request_ns=0,
                  first_data_ns=int(first_us * 1e3), last_data_ns=int(last_us * 1e3),
                  end_ns=int(last_us * 1e3), request_bytes=100, response_bytes=1000,
                  intervals_ns=())


def test_a_held_tensor_lives_until_then_through_its_views_and_is_not_written_over() -> None:
    # two gradients g1, g2 (100 B each) made one after the other; g1 sent through a view
    ops = [op("g1", "MatMul", 0, 1, 100), op("v1", "Identity", 1, 1, 100, "g1"),
           op("g2", "MatMul", 2, 3, 100)]
    assert estimated_peak_bytes(ops) == 100  # freed at once, never alive together
    # held until 10 (its last byte left the worker) through the view it was sent as
    assert estimated_peak_bytes(ops, held_until={("v1", 0): 10.0}) == 200
    assert estimated_peak_bytes(ops, held_until={("g1", 0): 2.5}) == 200
    assert estimated_peak_bytes(ops, held_until={("g1", 0): 2.0}) == 100  # gone as g2 starts
    # an element-wise op may not write into a buffer the rendezvous still holds
    relu = [op("g1", "MatMul", 0, 1, 100), op("r", "Relu", 1, 2, 100, "g1")]
    assert estimated_peak_bytes(relu) == 100
    assert estimated_peak_bytes(relu, held_until={("g1", 0): 5.0}) == 200


def test_each_send_is_matched_to_its_stream_in_the_step_that_ran() -> None:
    sent = {"edge_1_g1": ("g1", 0), "edge_2_g2": ("g2", 0), "edge_3_none": ("g3", 0)}
    ops = [op("g1", "MatMul", 1000, 2000, 100), op("g2", "MatMul", 2000, 3000, 100)]
    streams = [
        stream("edge_1_g1", 7, 500, 900),      # the step before: began before this one
        stream("edge_2_g2", 7, 600, 950),
        stream("edge_1_g1", 8, 2100, 2600),    # this step's pushes, began inside it
        stream("edge_2_g2", 8, 3000, 4200),
        stream("edge_1_g1", 9, 9000, 9500),    # the next step's
        stream("edge_9_other", 8, 2100, 2200),  # a tensor this step did not send
    ]
    assert step_holds(sent, streams, ops) == {("g1", 0): 2600.0, ("g2", 0): 4200.0}
    assert step_holds(sent, [], ops) == {}  # no capture: freed as before
    assert step_holds(sent, streams[:2], ops) == {}  # no push began in the step


def test_the_sends_to_a_ps_are_read_from_the_partition_graphs() -> None:
    pytest.importorskip("google.protobuf", reason="the [predict] extra's protobuf is missing")
    from gradwire.collector.runmetadata import run_metadata

    meta = run_metadata()
    g = meta.partition_graphs.add()
    to_ps = g.node.add(name="send_g", op="_Send", device=WORKER, input=["gradients/g:1"])
    to_ps.attr["tensor_name"].s = b"edge_4_gradients/g"
    to_ps.attr["recv_device"].s = PS.encode()
    local = g.node.add(name="send_local", op="_Send", device=WORKER, input=["x"])
    local.attr["tensor_name"].s = b"edge_5_x"
    local.attr["recv_device"].s = WORKER.encode()
    ps_side = g.node.add(name="send_p", op="_Send", device=PS, input=["w/read"])
    ps_side.attr["tensor_name"].s = b"edge_6_w"
    ps_side.attr["recv_device"].s = WORKER.encode()
    assert ps_sends(meta, {WORKER}) == {"edge_4_gradients/g": ("gradients/g", 1)}


def test_the_samples_sends_are_held_until_they_left_its_worker() -> None:
    """The shipped sample's worker: its 9 gradients a step matched in its capture, each
    leaving after its producer ended; the estimate that holds them is never below the one
    that frees them at once (`opdb check` reports both: the slow test in test_opdb.py)."""
    pytest.importorskip("google.protobuf", reason="the [predict] extra's protobuf is missing")
    from gradwire.bundle import open_bundle
    from gradwire.collector.opingest import own_steps
    from gradwire.replay.sentholds import bundle_holds

    b = open_bundle(SAMPLE / "worker0")
    holds, note = bundle_holds(b)
    assert note is None
    steps = list(own_steps(b, compute_only=False))
    assert [len(h) for h in holds] == [9] * len(steps) == [9, 9, 9]
    for h, (_, _, _, mine) in zip(holds, steps, strict=True):
        ends = {o.name: o.end_us for o in mine}
        t0 = min(o.start_us for o in mine)
        assert all(ends[node] <= t < t0 + 1e6 for (node, _), t in h.items())
        held = estimated_peak_bytes(mine, received=False, held_until=h)
        assert held >= estimated_peak_bytes(mine, received=False) > 0


def test_a_worker_without_a_readable_capture_frees_its_sends_at_once(tmp_path) -> None:
    """No capture, or one that is not a capture: the sends are freed at their last local
    reader and a note says so (`opdb check` and `optimize` print it and go on)."""
    pytest.importorskip("google.protobuf", reason="the [predict] extra's protobuf is missing")
    import shutil

    from gradwire.bundle import open_bundle
    from gradwire.replay.sentholds import bundle_holds

    copy = tmp_path / "worker0"
    shutil.copytree(SAMPLE / "worker0", copy)
    (copy / "capture.pcapng").write_text("not a capture\n")
    holds, note = bundle_holds(open_bundle(copy))
    assert holds == [{}, {}, {}]
    assert "not a pcap or pcapng file" in note and "freed at its last local reader" in note
    (copy / "capture.pcapng").unlink()
    holds, note = bundle_holds(open_bundle(copy))
    assert holds == [{}, {}, {}] and "no capture" in note
