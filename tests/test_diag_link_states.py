"""scripts/diag_link_states.py: how the workers occupy a PS link, in the lab and the replay.

The states and goodputs are checked on hand-made packets and chunk spans; the whole script on
the shipped sample profile, as a bench configuration folder made for the test around it, with
one lab run whose headers capture is made for the test (a pull, then a push beside it, then
the push alone).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_link_states  # noqa: E402
from badcaptures import pcap, tcp_frame  # noqa: E402
from conftest import sample_bench_config  # noqa: E402
from lab import headers  # noqa: E402

SCRIPT = ROOT / "scripts" / "diag_link_states.py"
PS, W0, W1 = "10.0.0.10", "10.0.0.100", "10.0.0.101"
RATE = 80e6  # bits/s: a 10 ms bin holds 95.6 KB of TCP payload
PER_MS = int(RATE * 1448 / 1514 / 8 / 1000)  # payload bytes a ms at the full rate


def _flow(src: str, dst: str, start_ms: int, end_ms: int, share: float = 1.0
          ) -> list[tuple[float, str, str, int]]:
    return [(k / 1000, src, dst, int(PER_MS * share)) for k in range(start_ms, end_ms)]


def _packets() -> list[tuple[float, str, str, int]]:
    # worker 0 pulls 0-200 ms; worker 1 pushes 100-300 ms, at 0.8 of the rate beside the pull
    return (_flow(PS, W0, 0, 200) + _flow(W1, PS, 100, 200, 0.8) + _flow(W1, PS, 200, 300)
            + [(0.250, PS, W1, 80)])  # an ACK-sized reply moves nothing


def test_a_bins_state_counts_the_workers_moving_each_way() -> None:
    moving = {("down", "a"): [True, True, False], ("down", "b"): [True, False, False],
              ("up", "a"): [False, True, False]}
    assert diag_link_states.states(moving, 3) == [(2, 0), (1, 1), (0, 0)]
    share = diag_link_states.shares(Counter({(2, 0): 1, (1, 1): 3, (0, 0): 6}))
    assert share == {(1, 1): 0.75, (2, 0): 0.25}
    assert diag_link_states.one_way(share) == 0.25
    assert diag_link_states.shares(Counter({(0, 0): 4})) == {}


def test_a_captured_link_gives_states_and_steady_goodputs() -> None:
    per_bin, rates, unequal = diag_link_states.lab_link(_packets(), 0.0, 0.300, RATE, 0.010)
    assert per_bin == [(1, 0)] * 10 + [(1, 1)] * 10 + [(0, 1)] * 10
    # steady bins only: none beside a start or a stop
    assert rates[(1, 1)]["down"] == pytest.approx([1.0] * 8, rel=0.01)
    assert rates[(1, 1)]["up"] == pytest.approx([0.8] * 8, rel=0.01)
    assert len(rates[(1, 0)]["down"]) == 8 and "up" not in rates[(1, 0)]
    assert not unequal  # never two workers one way
    assert diag_link_states.lab_link([], 0.0, 0.1, RATE, 0.01) == ([], {}, {})


def test_two_workers_one_way_show_how_unequally_they_share_it() -> None:
    # two pushes 0-200 ms at 0.6 and 0.3 of the rate; a pull beside them from 100 ms
    packets = (_flow(W0, PS, 0, 200, 0.6) + _flow(W1, PS, 0, 200, 0.3)
               + _flow(PS, W0, 100, 200))
    per_bin, _, unequal = diag_link_states.lab_link(packets, 0.0, 0.200, RATE, 0.010)
    assert per_bin == [(0, 2)] * 10 + [(1, 2)] * 10
    assert unequal["up"] == pytest.approx([2.0] * 16, rel=0.02)  # steady: bins 1-8, 11-18
    assert "down" not in unequal


def test_a_workers_share_carried_to_its_next_transfer_pairs_its_relative_rates() -> None:
    def t(peer: str, first: float, last: float, nbytes: int) -> headers.Transfer:
        return headers.Transfer(peer, PS, False, first, last, nbytes)

    found = [t(W0, 0.0, 1.0, 200), t(W1, 0.0, 2.0, 200),  # W0 twice W1's rate
             t(W0, 2.0, 3.0, 300), t(W1, 2.5, 4.0, 150),  # then 3x as fast
             t(W0, 9.0, 9.5, 10)]  # overlapping none: no pair with it
    pairs = diag_link_states.carried_over(found)
    assert pairs["up"] == [pytest.approx((2.0, 3.0)), pytest.approx((0.5, 1 / 3))]
    assert "down" not in pairs


def test_replayed_chunks_move_in_the_bins_they_cover_on_their_own_ps() -> None:
    spans = [(0, "down", 0, 0.0, 20_000.0), (1, "up", 0, 10_000.0, 30_000.0),
             (1, "down", 1, 0.0, 30_000.0),  # another PS's link
             (0, "up", 0, 29_900.0, 30_000.0)]  # 1% of a bin: not moving
    assert diag_link_states.replay_link_states(spans, 0, 0.0, 30_000.0, 10_000.0) == [
        (1, 0), (1, 1), (0, 1)]
    assert diag_link_states.replay_link_states(spans, 1, 0.0, 30_000.0, 10_000.0) == [
        (1, 0)] * 3


def test_a_workers_transfers_on_two_links_are_paired_by_overlap_and_their_ends_spread(
) -> None:
    spans = {
        ("a", "down", 0): [(0.0, 0.1), (0.2, 0.25), (0.251, 0.3), (0.5, 0.6)],
        ("a", "down", 1): [(0.005, 0.12), (0.2, 0.31), (0.65, 0.7)],  # 0.5-0.6 met nothing
        ("a", "up", 0): [(0.13, 0.18)],
        ("a", "up", 1): [(0.12, 0.17)],
        ("b", "down", 0): [(0.0, 0.1)],  # b's other link carried nothing of its pulls
    }
    got = diag_link_states.end_spreads(spans, 0.002)
    assert got["down"] == [pytest.approx((0.02, 0.1075)), pytest.approx((0.01, 0.105))]
    assert got["up"] == [pytest.approx((0.01, 0.05))]


def test_the_labs_two_ps_captures_give_each_workers_end_spread(tmp_path: Path) -> None:
    cfg = tmp_path / "two-ps"
    headers = cfg / "logs" / "w1" / "headers"
    headers.mkdir(parents=True)
    (cfg / "w1.json").write_text(json.dumps({"throughput_window_s": [0.0, 1.0]}))
    for k, (ps, end_ms) in enumerate(((PS, 100), ("10.0.0.11", 130))):
        frames = [(int(ts * 1e9), tcp_frame(0, b"x" * n, src=(src, 2222), dst=(dst, 40000)))
                  for ts, src, dst, n in _flow(ps, W0, 0, end_ms)]
        (headers / f"ps{k}.headers.pcap").write_bytes(pcap(frames))
    found = diag_link_states.lab_states(cfg, 1, RATE, 0.01)
    counts, runs, got = found.counts, found.runs, found.spreads
    assert runs == 1 and counts[(1, 0)] == 23  # 10 bins of PS 0's pull, 13 of PS 1's
    assert got["down"] == [pytest.approx((0.030, 0.1145), abs=1e-3)]
    assert "up" not in got


def _config(tmp_path: Path) -> Path:
    cfg = sample_bench_config(tmp_path, {"throughput_window_s": [0.0, 0.300]},
                              name="sample-80mbit", config={"ps": 1, "bandwidth": "80mbit"},
                              max_replications=4)
    headers = cfg / "logs" / "w2" / "headers"
    headers.mkdir(parents=True)
    ports = {W0: 40000, W1: 40001}
    frames = []
    for ts, src, dst, n in _packets():
        peer = dst if src == PS else src
        a, b = ((src, 2222), (dst, ports[peer])) if src == PS else ((src, ports[peer]), (dst, 2222))
        frames.append((int(ts * 1e9), tcp_frame(0, b"x" * n, src=a, dst=b)))
    (headers / "ps0.headers.pcap").write_bytes(pcap(frames))
    return cfg


def test_the_script_sets_the_labs_states_beside_the_replays_on_the_sample(
        tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    def cells(start: str) -> list[str]:  # a table row's cells, its name left out
        row = next(x for x in lines if x.startswith(start))
        return [c.replace("\\", "") for c in row.strip("| ").split(" | ")]

    keys = ["name", *cells("| | ")]
    lab = dict(zip(keys, cells("| lab |"), strict=True))
    assert (lab["1|0"], lab["1|1"], lab["0|1"], lab["one-way"]) == ("33", "33", "33", "67")
    replay = cells("| replay |")[1:]
    assert sum(int(c) for c in replay[:-1]) in (99, 100, 101)  # the replay's busy bins
    assert "1\\|1 down 1.00 (8), up 0.80 (8)" in proc.stdout


def test_a_folder_without_its_rate_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    (cfg / "config.json").write_text(json.dumps({"batch_size": 32, "ps": 1}))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith("diag_link_states: ") and "config.json" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_recording_the_replications_leaves_their_throughputs_as_they_were(capsys) -> None:
    from gradwire.cli import main as gradwire_main
    from gradwire.replay import predict as replay_predict

    argv = ["predict", "--sample", "--workers", "2,3", "--model", "sim", "--jobs", "1",
            "--replications", "4", "--max-replications", "4", "--format", "json", "-q"]
    spans: list[int] = []
    rows = []
    for record in (False, True):
        replay_predict.RECORD_REPLICATIONS = record
        observe = lambda sim, window, rate: spans.append(len(sim.transfer_spans()))  # noqa: E731
        replay_predict.REPLICATION_OBSERVERS.append(observe)
        try:
            assert gradwire_main(argv) == 0
        finally:
            replay_predict.RECORD_REPLICATIONS = False
            replay_predict.REPLICATION_OBSERVERS.remove(observe)
        rows.append([r["examples_per_s"] for r in json.loads(capsys.readouterr().out)["rows"]])
    assert rows[0] == rows[1]
    assert spans[:8] == [0] * 8 and all(n > 0 for n in spans[8:]) and len(spans) == 16
