"""scripts/diag_holds.py: the probe timer's holds of a PS's pulls, from a headers capture."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from badcaptures import pcap, tcp_frame

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import diag_holds  # noqa: E402

PS, W0, W1 = "10.0.0.10", "10.0.0.100", "10.0.0.101"


def _from_ps(worker: str, port: int, times_bytes: list[tuple[float, int]]) -> list:
    return [(int(ts * 1e9), tcp_frame(0, b"x" * n, src=(PS, 2222), dst=(worker, port)))
            for ts, n in times_bytes]


def _run(tmp_path: Path) -> Path:
    """A run at 100 Mbit/s: W1 pulls for 300 ms; W0 joins it 2 ms in, is held 216 ms after
    its first packets, probes (one MSS), waits 44 ms for the ACK and goes on. Later W1's
    connection is silent 250 ms and starts again with a small frame and its data at once:
    a request's first frame, not a probe."""
    cfg = tmp_path / "recsys-100mbit"
    (cfg / "logs" / "w2" / "headers").mkdir(parents=True)
    (cfg / "config.json").write_text(json.dumps({"bandwidth": "100mbit"}))
    (cfg / "w2.json").write_text(json.dumps({"throughput_window_s": [0.0, 1.0],
                                             "throughput_examples_per_s": 123.0}))
    w1 = [(0.004 * k, 65160) for k in range(76)]  # 0 .. 0.300 s
    w1 += [(0.550, 1448), (0.5502, 65160), (0.554, 65160)]  # silence, then at once
    w0 = [(0.002, 65160), (0.006, 65160), (0.010, 65160),
          (0.226, 1448), (0.270, 65160), (0.274, 65160)]
    frames = sorted(_from_ps(W1, 40001, w1) + _from_ps(W0, 40000, w0))
    (cfg / "logs" / "w2" / "headers" / "ps0.headers.pcap").write_bytes(pcap(frames))
    return cfg


def test_a_probe_after_the_timers_silence_is_a_hold_a_requests_frame_is_not(tmp_path) -> None:
    cfg = _run(tmp_path)
    found = diag_holds.holds(diag_holds.data_packets(
        cfg / "logs" / "w2" / "headers" / "ps0.headers.pcap"))
    assert found == [diag_holds.Hold(W0, pytest.approx(0.010), pytest.approx(0.226))]
    run = diag_holds.run_holds(cfg / "w2.json", 100e6)
    assert (run.holds, run.joins, run.held_joins) == (1, 1, 1)
    assert run.held_s == pytest.approx(0.216)


def test_the_table_gives_the_held_share_of_the_workers_time(tmp_path, capsys) -> None:
    cfg = _run(tmp_path)
    assert diag_holds.main([str(cfg), "--workers", "1,2"]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row == "| recsys-100mbit | 2 | 1 | 123.0 | 1 | 10.8% | 1 of 1 |"  # 0.216 / (2 x 1 s)


def test_a_folder_without_its_rate_is_a_one_line_error(tmp_path, capsys) -> None:
    (tmp_path / "x").mkdir()
    assert diag_holds.main([str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("diag_holds: ") and "config.json" in err and "\n" not in err
