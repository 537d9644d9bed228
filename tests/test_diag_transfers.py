"""scripts/diag_transfers.py, issue 21's transport diagnostic, on the small lab fixture's PS
capture (MLP 0.2 MB at 1 Gbit/s, 1 worker): its pulls leave the PS, its pushes arrive."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from conftest import SAMPLE  # noqa: E402
from diag_transfers import main, transfers  # noqa: E402

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
