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
SEG = 50_000  # bytes of one data packet
HOP = 20 * SEG  # a hop: 1 MB


def _burst(src: str, dst: str, t0: float, packets: int, every: float = 0.0005
           ) -> list[tuple[float, str, str, int]]:
    return [(t0 + k * every, src, dst, SEG) for k in range(packets)]


def _step(me: str, peer: str, t: float) -> list[tuple[float, str, str, int]]:
    """One W = 2 ring step as ``me``'s link sees it (ms from ``t``): hop 1 out at 0-9.5 (its
    first 2 packets, then 2 ms idle, as TCP restarts after idle), hop 1 in at 3-12.5, a
    control message, hop 2 out at 20.5-30 and in at 20.5-30 (a relay of 8 ms after the hop
    received), then 40 ms to the next step's first hop at 70."""
    return (_burst(me, peer, t, 2) + _burst(me, peer, t + 0.0025, 18, 0.0004)
            + _burst(peer, me, t + 0.003, 20) + [(t + 0.015, me, peer, 120)]
            + _burst(me, peer, t + 0.0205, 20) + _burst(peer, me, t + 0.0205, 20))


def _run(me: str, peer: str, steps: int) -> list[tuple[float, str, str, int]]:
    return [p for s in range(steps) for p in _step(me, peer, 0.070 * s)]


def test_hops_end_where_their_bytes_are_in_even_back_to_back() -> None:
    pkts = _run(W0, W1, 2) + _burst(W1, W0, 0.2, 40)  # two hops in, with no idle time between
    sent, got = diag.hops(pkts, W0, HOP)
    assert [(round(h.first, 4), round(h.last, 4)) for h in sent] == [
        (0.0, 0.0093), (0.0205, 0.03), (0.07, 0.0793), (0.0905, 0.1)]
    assert len(got) == 6 and (round(got[-2].last, 4), round(got[-1].first, 4)) == (0.2095, 0.21)


def test_steps_give_hops_waits_relays_and_boundaries() -> None:
    pkts = _run(W0, W1, 5)
    r = diag.ring_steps("worker0", *diag.hops(pkts, W0, HOP), per_step=2, skip=1)
    assert r.steps == 4
    assert r.hop_s == pytest.approx([0.0093, 0.0095])
    assert r.wait_s == pytest.approx([0.0125 - 0.0093, 0.0])
    assert r.relay_s == pytest.approx([0.008])
    assert r.boundary_s == pytest.approx(0.040)
    assert r.step_s == pytest.approx(0.070)
    with pytest.raises(ValueError, match="at least one hop"):
        diag.ring_steps("w", [], [], 0)


def test_the_command_reads_a_runs_captures(tmp_path: Path, capsys) -> None:
    # a W = 2 ring: each link carries the one pair of addresses, each worker's own hops out
    port = {W0: 40000, W1: 40001}
    for name, (me, peer) in {"worker0": (W0, W1), "worker1": (W1, W0)}.items():
        frames = [(round(t * 1e9), tcp_frame(0, b"\0" * n, src=(s, port[s]), dst=(d, port[d])))
                  for t, s, d, n in _run(me, peer, 5)]
        (tmp_path / f"{name}.headers.pcap").write_bytes(pcap(frames))
    out = tmp_path / "rows.json"
    assert diag.main([str(tmp_path), "--hop-mb", "1", "--rate", "1gbit", "--skip", "1",
                      "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for node in ("worker0", "worker1"):  # a 1 MB hop: 8 ms at 1 Gbit/s
        assert f"| {node} | 4 | 9.3 | 9.5 | 8.0 | 3.2 | 0.0 | 8.0 | 40.0 | 70.0 |" in text
    rows = json.loads(out.read_text())
    assert rows["per_step"] == 2 and [n["node"] for n in rows["nodes"]] == ["worker0",
                                                                            "worker1"]


@pytest.mark.parametrize("args, fault", [([], "no *.headers.pcap"),
                                         (["--hop-mb", "0.001"], "a hop must exceed")])
def test_bad_input_is_one_line(tmp_path: Path, capsys, args, fault) -> None:
    if args:
        (tmp_path / "worker0.headers.pcap").write_bytes(pcap([]))
        (tmp_path / "worker1.headers.pcap").write_bytes(pcap([]))
    assert diag.main([str(tmp_path), *(args or ["--hop-mb", "1"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fault in err
