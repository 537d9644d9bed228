"""scripts/diag_shares.py, issue 21's link-sharing diagnostic: its pure parts on hand-made
bins whose answer is known, and the command on the small lab fixture's PS capture (1 worker,
so no newcomers, and every bin of a direction is that worker's alone)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from conftest import SAMPLE  # noqa: E402
from diag_shares import (  # noqa: E402
    beside_reverse,
    binned,
    by_flows,
    main,
    newcomer_shares,
    timeline,
    transfer_starts,
)

A, B = "10.0.0.1", "10.0.0.2"


def test_transfer_starts_cut_at_gaps_and_drop_small_runs() -> None:
    series = {0: 10, 1: 10, 2: 10, 9: 5, 20: 100, 21: 100}
    # gap 2: runs at 0 (30 bytes), 9 (5), 20 (200)
    assert transfer_starts(series, 2, 20) == [0, 20]
    assert transfer_starts(series, 2, 1) == [0, 9, 20]
    assert transfer_starts(series, 20, 1) == [0]  # one run across the gaps


def test_a_newcomer_behind_a_fifo_gets_nothing_first_and_a_fair_one_half() -> None:
    # A runs from bin 0 to 59 at 100 bytes/bin; B starts at bin 10 (1 ms bins)
    fifo = {("down", A): {k: 100 for k in range(60)},
            ("down", B): {k: 1 if k == 10 else 100 for k in list(range(10, 11))
                          + list(range(60, 100))}}
    rows = newcomer_shares(fifo, "down", gap_bins=60, min_bytes=1000, busy_bins=3,
                           busy_bytes=50, bin_ms=1.0)
    assert len(rows) == 1
    first, *_, last = rows[0]
    assert first < 0.01  # 0-2 ms: its one byte against A's 200
    assert last == 0.0  # 20-40 ms: A alone while B waits
    fair = {("down", A): {k: 50 if k >= 10 else 100 for k in range(60)},
            ("down", B): {k: 50 for k in range(10, 60)}}
    rows = newcomer_shares(fair, "down", 5, 1000, 3, 50, 1.0)
    assert rows == [[0.5] * 5]
    # the other direction has no transfers: no newcomers there
    assert newcomer_shares(fair, "up", 5, 1000, 3, 50, 1.0) == []


def test_rates_beside_reverse_data() -> None:
    bins = {("down", A): {0: 100, 1: 40, 2: 40},
            ("up", B): {1: 90, 2: 90},
            ("up", A): {5: 30}}
    rev = beside_reverse(bins, "down", cap_bytes=100.0)
    assert rev == {"alone": [1.0], "beside": [0.4, 0.4]}
    # A's own reverse data (its push) do not count as another worker's
    up = beside_reverse(bins, "up", cap_bytes=100.0)
    assert up["beside"] == [0.9, 0.9] and up["alone"] == [0.3]


def test_rates_by_flows_count_only_steady_bins() -> None:
    cap = 100.0
    # pulls a (bins 0-9) and b (5-19, faster from 12) beside a push c (0-19); a flow is
    # steady where it moved data 2 bins either side
    bins = {("down", "a"): {k: 50 for k in range(0, 10)},
            ("down", "b"): {k: 50 for k in range(5, 20)},
            ("up", "c"): {k: 90 for k in range(0, 20)}}
    bins[("down", "b")].update({k: 80 for k in range(12, 20)})
    got = by_flows(bins, "down", cap, 0, 20)
    assert got == {(1, 2): [1.0],  # bin 7: both steady
                   (1, 1): [0.5] * 5 + [0.8] * 6}  # a alone (2-4), b alone (10-17)
    up = by_flows(bins, "up", cap, 0, 20)  # c steady in 2-17
    assert {k: len(v) for k, v in up.items()} == {(1, 1): 11, (2, 1): 5}
    assert all(x == 0.9 for v in up.values() for x in v)


def test_timeline_marks() -> None:
    lines = timeline({("down", A): {0: 2, 1: 20, 2: 50, 3: 90}}, 0, 5, 100.0)
    assert lines == [f"down {A:>15} | .oO |"]


def test_the_fixture_has_one_worker_and_no_newcomers(capsys) -> None:
    bins = binned(SAMPLE / "ps0", 1_000_000)
    assert {d for d, _ in bins} == {"down", "up"}
    assert len({a for _, a in bins}) == 1
    assert sum(bins[k][b] for k in bins for b in bins[k]) > 1_000_000
    assert main([str(SAMPLE), "--rate-mbit", "957", "--min-mb", "0.1",
                 "--timeline", "0", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "down: 0 newcomers" in out and "up: 0 newcomers" in out
    assert out.count("|") >= 4  # two timeline lines


def test_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path), "--rate-mbit", "100"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("diag_shares: error: ") and err.count("\n") == 1
    assert "manifest.json" in err and "Traceback" not in err
