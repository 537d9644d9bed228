"""scripts/diag_ring_cores.py: which ops count as compute, busy spans, and ops running at once,
on hand-made step traces."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from diag_ring_cores import (  # noqa: E402
    compute_ops,
    main,
    running_counts,
    step_summary,
    union_us,
)

from gradwire.bundle import write_step  # noqa: E402
from gradwire.records import OpRecord, StepTrace  # noqa: E402

W0 = "/job:worker/replica:0/task:0/device:CPU:0"


def _op(name: str, start: int, end: int, op_type: str = "Conv2D", device: str = W0,
        tensor: str = "") -> OpRecord:
    return OpRecord(step=1, name=name, op_type=op_type, device=device, start_us=start,
                    end_us=end, tensor=tensor)


def test_the_collective_transfers_and_other_devices_are_not_compute() -> None:
    step = StepTrace(step=1, devices=(W0,), deps=(), ops=(
        _op("a", 0, 10), _op("ring", 10, 50, op_type="CollectiveReduceV2"),
        _op("recv", 0, 5, op_type="_Recv", tensor="edge_1"), _op("zero", 7, 7),
        _op("ps", 0, 9, device="/job:ps/replica:0/task:0/device:CPU:0"), _op("b", 5, 20)))
    assert [o.name for o in compute_ops(step)] == ["a", "b"]
    # summed op time 25 us over a busy span of 20 us (a and b overlap by 5)
    assert step_summary([step]) == (0.025, 0.020)


def test_busy_spans_merge_overlapping_and_touching_ops() -> None:
    ops = [_op("c", 30, 40), _op("a", 0, 10), _op("b", 10, 15), _op("d", 35, 50)]
    assert union_us(ops) == [(0, 15), (30, 50)]


def test_ops_running_at_once_count_each_boundary_once() -> None:
    times, counts = running_counts([_op("a", 0, 10), _op("b", 5, 10), _op("c", 10, 12)])
    # 0-5: a; 5-10: a and b; 10-12: c (a and b end where c starts); then none
    assert times == [0, 5, 10, 12]
    assert counts == [1, 2, 1, 0]


def test_two_workers_computing_at_once_against_their_profile(tmp_path: Path, capsys) -> None:
    """Two traced workers whose one op each ran 0-20 ms and 10-30 ms (the same op took 10 ms
    in the profile): both compute in the whole window the two traces share (10-20 ms); each op
    ran twice its profile's time. A folder with no traced worker is a one-line error."""
    def trace(folder: Path, start: int, end: int) -> None:
        (folder / "trace").mkdir(parents=True)
        t0 = 1_796_000_000_000_000  # us since the epoch (2026-11-30)
        write_step(folder, StepTrace(step=1, devices=(W0,), deps=(),
                                     ops=(_op("conv", t0 + start, t0 + end),)), b"")

    trace(tmp_path / "run" / "worker0", 0, 20_000)
    trace(tmp_path / "run" / "worker1", 10_000, 30_000)
    trace(tmp_path / "profile" / "worker0", 0, 10_000)
    assert main([str(tmp_path / "run"), "--profile", str(tmp_path / "profile")]) == 0
    out = capsys.readouterr().out
    # the window is 10-20 ms (the latest first op to the earliest last one): both computing
    assert "k=2: 100.0%" in out
    # each op ran twice its profile's 10 ms; at worker0's op's midpoint (10 ms) worker1's had
    # started, at worker1's (20 ms) worker0's had ended: one op in each count
    assert "            1      1      2.00            1.00" in out
    assert "            2      1      2.00            1.00" in out
    assert "  all              2      2.00" in out
    assert main([str(tmp_path / "profile" / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no worker bundle with traced steps" in err
