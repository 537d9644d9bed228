"""scripts/diag_ring_hop_link.py: a ring hop timed across a shaped lab link (real TensorFlow in
two network namespaces), kept as database rows that ``predict --ring-hop link`` reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need_root, need_tf

from gradwire.collector.opgrid import LINK_ATTR, RING_HOP
from gradwire.opdb import OpDatabase, machine_of

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "diag_ring_hop_link.py"

pytestmark = [pytest.mark.slow, pytest.mark.root]


def test_the_hops_across_a_link_go_into_the_database_beside_its_loopback_rows(tmp_path):
    # two chunk sizes across a 200 Mbit/s link, two runs each, both links captured: the
    # loopback rows (three pairs) and the link's, keyed by its measured payload rate, below
    # the 200 Mbit/s of tc
    need_root()
    need_tf()
    db = tmp_path / "hops.sqlite"
    m = machine_of("cpu x", 2, "2.21.0", threads=1)
    with OpDatabase(db, create=True) as d:
        d.add_machine(m)
    cap = tmp_path / "cap"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--bandwidth", "200mbit", "--chunks",
                           "62500,125000", "--reps", "2", "--db", str(db), "--capture", str(cap)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| 0.25 |" in proc.stdout and "4 CollectiveRingHop rows kept" in proc.stdout
    # both links' headers, for diag_ring_wire.py (a 0.5 MB chunk is hundreds of packets)
    assert all((cap / f"worker{k}.headers.pcap").stat().st_size > 20_000 for k in (0, 1))
    twice = subprocess.run([sys.executable, str(SCRIPT), "--bandwidth", "200mbit,300mbit",
                            "--capture", str(tmp_path / "new")], capture_output=True, text=True)
    assert twice.returncode == 2 and "one --bandwidth" in twice.stderr
    with OpDatabase(db) as d:
        rows = list(d.timings(op=RING_HOP))
    links = [r for r in rows if LINK_ATTR in dict(r.attrs)]
    assert len(rows) == 4 and len(links) == 2
    assert all(r.reps == 3 * 2 for r in rows if r not in links)  # three pairs
    assert {r.reps for r in links} == {2}
    assert all(150e6 < dict(r.attrs)[LINK_ATTR] < 200e6 for r in links)
    again = subprocess.run([sys.executable, str(SCRIPT), "--db", str(db), "--db-machine", "x"],
                           capture_output=True, text=True)
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert "no machine x" in again.stderr
