"""scripts/diag_transfers.py, issue 21's transport diagnostic, on the small lab fixture's PS
capture (MLP 0.2 MB at 1 Gbit/s, 1 worker): its pulls leave the PS, its pushes arrive."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from conftest import SAMPLE  # noqa: E402
from diag_transfers import Transfer, main, overlap_shares, transfers  # noqa: E402

CAPTURE = SAMPLE / "ps0" / "capture.pcapng"


def test_transfers_of_the_fixture_go_both_ways() -> None:
    ts = transfers(CAPTURE, None, gap_ms=5.0, stall_ms=1.0, rate_bps=1e9)
    down = [t for t in ts if t.direction == "down" and t.bytes > 10_000]
    up = [t for t in ts if t.direction == "up" and t.bytes > 10_000]
    # the PS sends the model's parameters and receives its gradients, every step
    assert down and up
    assert sum(t.bytes for t in down) > 500_000 and sum(t.bytes for t in up) > 500_000
    for t in ts:
        assert t.end_ns >= t.start_ns and t.segments > 0 and t.context in (
            "alone", "reverse", "same")
        assert 0.0 <= t.burst <= t.bytes
    # the PS's own data have their ACKs in the capture: bytes in flight per segment
    assert any(t.inflight for t in down)
    assert not any(t.inflight for t in up)


def test_a_missing_capture_is_one_line(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path / "none.pcapng")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("diag_transfers: error: ") and err.count("\n") == 1
    assert "none.pcapng" in err and "Traceback" not in err


def _transfer(conn: int, direction: str, marks_ms: list[tuple[float, int]]) -> Transfer:
    """A hand-made transfer: (ms, bytes so far) per segment."""
    t = Transfer(("10.0.0.1", conn, "10.0.0.2", 2222), direction,
                 int(marks_ms[0][0] * 1e6), int(marks_ms[-1][0] * 1e6))
    t.marks = [(int(ms * 1e6), b) for ms, b in marks_ms]
    t.bytes = marks_ms[-1][1]
    return t


def test_the_earlier_transfer_s_share_while_both_run() -> None:
    # a from 0 to 40 ms; b joins at 10 ms; while both run (10-40 ms] a sends 300 kB, b 100 kB
    a = _transfer(1, "down", [(0, 100_000), (10, 200_000), (20, 300_000), (40, 500_000)])
    b = _transfer(2, "down", [(10, 0), (20, 50_000), (40, 100_000), (50, 200_000)])
    other_way = _transfer(3, "up", [(15, 100_000), (30, 200_000)])
    same_conn = _transfer(1, "down", [(12, 100_000), (25, 200_000)])
    rows = overlap_shares([a, b, other_way, same_conn], min_mb=0.0)
    assert len(rows) == 2  # a and b; b and the later transfer of a's connection
    direction, head_ms, share, mbit, window = rows[0]
    assert (direction, head_ms, share) == ("down", 10.0, 0.75)
    assert mbit == pytest.approx(8 * 400_000 / 30e-3 / 1e6)  # their bytes over the 30 ms
    assert window is None  # no in-flight samples in hand-made transfers
