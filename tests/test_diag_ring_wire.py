"""``scripts/diag_ring_wire.py``: a ring run's hops from the workers' headers-only captures,
on hand-made packets and pcaps (``tests/badcaptures.py``' builders)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import diag_ring_wire as diag  # noqa: E402
from badcaptures import pcap, tcp_frame  # noqa: E402

W0, W1 = "10.0.0.100", "10.0.0.101"
KB = 64 * 1024


def _hop(src: str, dst: str, t0: float, packets: int, every: float = 0.0005
         ) -> list[tuple[float, str, str, int]]:
    return [(t0 + k * every, src, dst, KB) for k in range(packets)]


def _ring_steps(src: str, dst: str, steps: int, start: float = 0.0
                ) -> list[tuple[float, str, str, int]]:
    """Each step: a 10-packet hop (4.5 ms), 3 ms idle, a 20-packet hop (9.5 ms), then 40 ms
    idle to the next step (57 ms a step); the peer's hops come in meanwhile."""
    out = []
    for s in range(steps):
        t = start + s * 0.057
        out += _hop(src, dst, t, 10) + _hop(src, dst, t + 0.0075, 20)
        out += _hop(dst, src, t + 0.001, 10)  # inbound: not this node's hops
    return out


def test_hops_are_grouped_into_steps_at_the_longest_gaps() -> None:
    # the capture starts inside a step: its second hop first, then 4 whole steps
    pkts = _hop(W0, W1, -0.0495, 20) + _ring_steps(W0, W1, 4)
    r = diag.ring_steps("w0", pkts, per_step=2)
    assert r.steps == 4
    assert r.hop_s == pytest.approx([0.0045, 0.0095])
    assert r.hop_bytes == [10 * KB, 20 * KB]
    assert r.between_s == pytest.approx(0.003)
    assert r.boundary_s == pytest.approx(0.040)
    assert r.step_s == pytest.approx(0.057)


def test_a_step_cut_short_at_the_end_is_dropped() -> None:
    pkts = _ring_steps(W0, W1, 3) + _hop(W0, W1, 3 * 0.057, 10)  # a last step's first hop
    assert diag.ring_steps("w0", pkts, per_step=2).steps == 3
    with pytest.raises(ValueError, match="at least one hop"):
        diag.group_steps([], 0)


def test_the_command_reads_a_runs_captures(tmp_path: Path, capsys) -> None:
    # a W = 2 ring: each link carries the one pair of addresses, each worker's own hops out
    port = {W0: 40000, W1: 40001}
    for name, (me, peer) in {"worker0": (W0, W1), "worker1": (W1, W0)}.items():
        frames = [(round(t * 1e9), tcp_frame(0, b"\0" * 50_000, src=(s, port[s]),
                                             dst=(d, port[d])))
                  for t, s, d, _ in _ring_steps(me, peer, 5)]
        (tmp_path / f"{name}.headers.pcap").write_bytes(pcap(frames))
    out = tmp_path / "rows.json"
    assert diag.main([str(tmp_path), "--rate", "1gbit", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for node in ("worker0", "worker1"):  # hop 1: 0.5 MB, 4 ms at 1 Gbit/s; hop 2: 1 MB, 8 ms
        assert f"| {node} | 5 | 4.5 | 0.50 | 4.0 | 9.5 | 1.00 | 8.0 | 3.0 | 40.0 | 57.0 |" \
            in text
    rows = json.loads(out.read_text())
    assert rows["per_step"] == 2 and [n["node"] for n in rows["nodes"]] == ["worker0",
                                                                            "worker1"]


def test_a_folder_without_captures_is_one_line(tmp_path: Path, capsys) -> None:
    assert diag.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no *.headers.pcap" in err
