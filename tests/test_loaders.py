"""Loaders for TF timelines that exist without a bundle, on real third-party files."""

from __future__ import annotations

from collections import Counter

import pytest

from gradwire.aligner.loaders import load_chrome_trace, load_run_metadata_text
from gradwire.errors import TraceError


def test_distributed_timeline_has_recvtensor_on_every_task(realdata):
    for name in ("tfe_fork_timeline_client_ps_worker.json",
                 "tfe_fork_single_host_timeline_client_ps_worker.json"):
        trace = load_chrome_trace(realdata / name)
        # pids 1-6 and 7-12 repeat the same three devices: they merge
        assert sorted(trace.devices) == ["/job:ps/replica:0/task:0/device:CPU:0",
                                         "/job:worker/replica:0/task:0/device:CPU:0",
                                         "/job:worker/replica:0/task:1/device:CPU:0"]
        recv = [op for op in trace.ops if op.op_type == "RecvTensor"]
        assert len(recv) == 7  # SOURCES.md
        assert {op.device.split("/")[1] for op in recv} == {"job:ps", "job:worker"}
        assert all(op.end_us >= op.start_us for op in trace.ops)


def test_chrome_trace_and_run_metadata_of_one_step_agree(realdata):
    chrome = load_chrome_trace(realdata / "yaroslavvb_dynamic_stitch_gpu_timeline.json")
    proto = load_run_metadata_text(realdata / "yaroslavvb_dynamic_stitch_gpu_run_metadata.pbtxt")
    assert len(chrome.ops) == len(proto.ops) == 67  # SOURCES.md: 67 node_stats
    assert len(proto.devices) == 5 and len(proto.deps) > 0  # 2 partition graphs
    # the timeline writer drops ':MEMCPYDtoH' from names; devices and times must match
    assert Counter((o.device, o.start_us, o.end_us) for o in chrome.ops) == \
        Counter((o.device, o.start_us, o.end_us) for o in proto.ops)
    assert (proto.start_us, proto.end_us) == (1486162184520805, 1486162184535914)


_META = '{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "d Compute"}}'


def _trace(*events: str) -> str:
    """A Chrome trace's text with a Compute process (pid 1) and ``events`` (JSON texts)."""
    return '{"traceEvents": [' + ", ".join((_META, *events)) + "]}"


@pytest.mark.parametrize("content, fragment", [
    ("{", "not readable JSON"),
    ('{"events": []}', "no 'traceEvents'"),
    (_trace('{"ph": "X", "pid": 1}'),
     r"field traceEvents\[1\].ts is missing"),
    (_trace('{"ph": "X", "pid": 1, "ts": NaN}'),
     r"field traceEvents\[1\].ts is NaN, not a finite time"),
    (_trace('{"ph": "X", "pid": 1, "ts": 5, "dur": -3}'),
     r"field traceEvents\[1\].dur is -3, not a finite duration"),
    (_trace('{"ph": "X", "pid": 1, "ts": 1e400}'),
     r"field traceEvents\[1\].ts is Infinity"),
    ('{"traceEvents": [5]}', r"field traceEvents\[0\] is 5, not a trace event"),
    (_trace('{"ph": "X", "pid": [1], "ts": 5}'),
     r"field traceEvents\[1\].pid is a list of 1"),
    (_trace("[" * 50_000 + "]" * 50_000), "nested too deeply"),
    (_trace('{"ph": "X", "ts": ' + "9" * 5000 + "}"), "more than 4,300 digits"),
])
def test_bad_chrome_traces_name_the_file(tmp_path, content, fragment):
    bad = tmp_path / "t.json"
    bad.write_text(content)
    with pytest.raises(TraceError, match=fragment) as err:
        load_chrome_trace(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_a_timeline_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    import os

    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="named pipe"):
        load_chrome_trace(fifo)
    pbtxt = tmp_path / "t.pbtxt"
    os.mkfifo(pbtxt)
    with pytest.raises(TraceError, match="named pipe"):
        load_run_metadata_text(pbtxt)
