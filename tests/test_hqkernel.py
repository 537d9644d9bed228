"""The kernel's host-queue links (replay/hqkernel.py) against their oracle, the same model in
Python (replay/hostqueue.py), and through the replay: ``--link hostqueue``."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import gradwire
from test_sync_ps import SYNC_BUNDLE
from test_taskgraph import chain, ends_of

from gradwire.replay.bbr import NB
from gradwire.replay.generators import async_ps_resources
from gradwire.replay.hostqueue import BASE_RTT_US, BBR_V1, MSS, HostQueue, Transfer, _Sim
from gradwire.replay.hqkernel import NHC, ack_ring, connection_table, connection_totals
from gradwire.replay.kernel import Kernel, _ack_room
from gradwire.replay.pings import ping_row
from gradwire.replay.taskgraph import JOIN, LINK, ReplayError, ResourceTable, graph_arrays

i8 = np.int64
RATE = 62.5 * MSS / 1514  # bytes of payload per us: 500 Mbit/s of goodput


def pulls_and_barrier(workers: int, pull: float, buffer: float, burst: float = 0.0,
                      bbr: float = 0.0, tsq: bool = True, pings: tuple = (),
                      answer: float = 0.0) -> tuple:
    """Every lane pulls ``pull`` bytes through one host-queue link (its shaper's bucket
    ``burst`` bytes; BBR with that window target if ``bbr`` > 0; a switch's queue, without
    TCP Small Queues, if not ``tsq``; its workers' PINGs ``pings`` us apart, answered
    ``answer`` us later), then waits at a barrier for the others: a synchronous step's pull
    phase alone."""
    graph = graph_arrays([chain([0, 1], [pull, 0.0])])
    table = ResourceTable(
        kind=np.array([LINK, JOIN], dtype=i8), acc=np.array([0, -1], dtype=i8),
        group=np.full(2, -1, dtype=i8), dest=np.zeros((workers, 2), dtype=i8),
        port2=np.full((workers, 2), -1, dtype=i8), link_cap=np.array([RATE]),
        link_fifo=np.array([3], dtype=i8), link_burst=np.array([burst]),
        link_rev=np.full(1, -1, dtype=i8), link_win=np.zeros(1), pool_cores=np.zeros(0, i8),
        join_need=np.array([workers], dtype=i8), port_cap=np.zeros((0, 1)),
        port_link=np.zeros((0, 1), dtype=i8), nports=np.zeros(0, dtype=i8), nacc=1,
        link_buf=np.array([buffer]), link_rtt=np.array([BASE_RTT_US]),
        link_bbr=np.array([bbr]), link_tsq=np.array([1.0 if tsq else 0.0]),
        link_pings=ping_row(pings, max(1, len(pings)))[None, :], link_answer=np.array([answer]))
    return graph, table


def oracle_steps(workers: int, pull: float, buffer: float, steps: int, burst: float = 0.0,
                 bbr: float = 0.0, tsq: bool = True, pings: tuple = (),
                 answer: float = 0.0) -> tuple:
    """The same loop on hostqueue.py: step ends (us), drops, held episodes. Each step's pulls
    start in the order the last step's ended (the barrier releases lanes in arrival order).
    ``bbr`` ``BBR_V1``: BBR whole."""
    cc = "bbr-v1" if bbr == BBR_V1 else "bbr" if bbr else "reno"
    sim = _Sim(HostQueue(rate=RATE, buffer=buffer, segment=MSS, bucket=burst, cc=cc,
                         bbr_target=max(bbr, 0.0), tsq=tsq, pings=pings, ping_answer=answer),
               workers)
    order, t, ends = list(range(workers)), 0.0, []
    for _ in range(steps):
        idx = {w: sim.add(Transfer(w, t, pull)) for w in order}
        sim.run(wait_for=list(idx.values()))
        order = sorted(order, key=lambda w: sim.ends[idx[w]])
        t = max(sim.ends[j] for j in idx.values())
        ends.append(t)
    out = sim.outcome()
    return ends, out.drops, out.holds, [c.state for c in out.connections]


@pytest.mark.parametrize("workers, buffer, burst, bbr, tsq", [
    (1, 625_000.0, 0.0, 0.0, True), (4, 1 << 20, 0.0, 0.0, True),
    (6, 597_700.0, 0.0, 0.0, True), (5, 298_850.0, 0.0, 0.0, True),
    (1, 625_000.0, 190_000.0, 0.0, True), (5, 298_850.0, 130_000.0, 0.0, True),
    (2, 298_850.0, 190_000.0, 180.0, True), (4, 625_000.0, 190_000.0, 140.0, True),
    (3, 625_000.0, 0.0, 140.0, True), (3, 478_000.0, 0.0, 0.0, False),
    (6, 478_000.0, 150_000.0, 0.0, False), (4, 478_000.0, 0.0, 140.0, False),
    (1, 625_000.0, 0.0, BBR_V1, True), (4, 625_000.0, 190_000.0, BBR_V1, True),
    (3, 478_000.0, 0.0, BBR_V1, False), (4, 478_000.0, 150_000.0, BBR_V1, False),
    (2, 298_850.0, 190_000.0, BBR_V1, True)])
def test_kernel_host_queue_matches_its_oracle(workers, buffer, burst, bbr, tsq):
    """Fitting queues, overflowing ones (drops, CWR cuts), one small enough to hold
    connections back, shapers with a token bucket, BBR connections (behind a bucket that
    lifts their estimate, and without one; its window-only model and BBR whole, paced), and
    a switch's queue (no TCP Small Queues): the kernel's step ends, drops and holds are the
    oracle's."""
    pull, steps = 2e6, 8
    k = Kernel(*pulls_and_barrier(workers, pull, buffer, burst, bbr, tsq), random.Random(0))
    k.run(steps)
    got = ends_of(k, workers)[0][:steps]
    want, drops, holds, states = oracle_steps(workers, pull, buffer, steps, burst, bbr, tsq)
    assert got == pytest.approx(want, rel=1e-9)
    assert connection_totals(k.S.hc) == (drops, holds)
    if bbr == BBR_V1:  # and each connection's BBR state, field by field
        for w, state in enumerate(states):
            np.testing.assert_allclose(k.S.hc[0, w, NHC - NB:], state, rtol=1e-9, atol=1e-9)
    if workers >= 5 or (bbr == BBR_V1 and not tsq):
        assert drops > 0  # the case is what it claims to be


@pytest.mark.parametrize("workers, buffer, burst, bbr", [
    (6, 597_700.0, 0.0, 0.0), (5, 298_850.0, 130_000.0, 0.0),
    (2, 298_850.0, 190_000.0, 180.0), (4, 298_850.0, 190_000.0, BBR_V1)])
def test_kernel_ends_holds_at_the_workers_pings_as_its_oracle_does(workers, buffer, burst,
                                                                    bbr):
    """With the workers' PINGs (intervals of 30, 55 and 170 ms in turn, each connection
    from its own start, answered 0.2 ms later) a held connection tries again at its next one:
    the kernel's step ends, drops and holds are still the oracle's, and the held steps end
    sooner than with the probe timer alone."""
    pull, steps, pings = 2e6, 8, (30e3, 55e3, 170e3)
    k = Kernel(*pulls_and_barrier(workers, pull, buffer, burst, bbr, True, pings, 200.0),
               random.Random(0))
    k.run(steps)
    got = ends_of(k, workers)[0][:steps]
    want, drops, holds, _ = oracle_steps(workers, pull, buffer, steps, burst, bbr, True, pings,
                                         200.0)
    assert got == pytest.approx(want, rel=1e-9)
    assert connection_totals(k.S.hc) == (drops, holds)
    timer, _, timer_holds, _ = oracle_steps(workers, pull, buffer, steps, burst, bbr)
    assert holds > 0 and timer_holds > 0 and want[-1] < timer[-1]


def test_a_switch_queue_takes_whole_windows_where_the_hosts_own_keeps_two_packets():
    """Without TCP Small Queues each connection puts its whole window in the queue: three
    Reno connections through a switch's queue lose more packets there than through their
    own host's, where TSQ keeps each to about two GSO packets (4 drops in 8 steps against 9)."""
    buffer = 478_000.0  # 10 ms at 400 Mbit/s; three connections' two GSO packets fit it
    drops = {}
    for tsq in (True, False):
        k = Kernel(*pulls_and_barrier(3, 2e6, buffer, tsq=tsq), random.Random(0))
        k.run(8)
        drops[tsq] = connection_totals(k.S.hc)[0]
    assert drops[False] > drops[True]


def two_way_table(paired: bool, buffers: tuple[float, float] = (478_000.0, 478_000.0)
                  ) -> ResourceTable:
    """Two host-queue links (0: the PS's own queue; 1: a switch's, no TCP Small Queues) of
    ``buffers`` bytes, lane 0 on link 0 and lane 1 on link 1, then a barrier; ``paired``:
    one link's two directions."""
    return ResourceTable(
        kind=np.array([LINK, JOIN], dtype=i8), acc=np.array([0, -1], dtype=i8),
        group=np.full(2, -1, dtype=i8), dest=np.array([[0, 0], [1, 0]], dtype=i8),
        port2=np.full((2, 2), -1, dtype=i8), link_cap=np.array([RATE, RATE]),
        link_fifo=np.array([3, 3], dtype=i8), link_burst=np.zeros(2),
        link_rev=np.array([1, 0] if paired else [-1, -1], dtype=i8), link_win=np.zeros(2),
        pool_cores=np.zeros(0, i8), join_need=np.array([2], dtype=i8),
        port_cap=np.zeros((0, 1)), port_link=np.zeros((0, 1), dtype=i8),
        nports=np.zeros(0, dtype=i8), nacc=1, link_buf=np.array(buffers),
        link_rtt=np.full(2, BASE_RTT_US), link_bbr=np.zeros(2), link_tsq=np.array([1.0, 0.0]))


def test_the_ack_ring_holds_what_waits_behind_the_bigger_queue_and_a_bucket():
    """A host queue's ACKs wait behind its host-queue reverse's bytes, which may be the
    bigger queue: its ring has room for every departure within that wait, and for a shaper's
    bucket sent at once; a bad link_tsq is refused."""
    small, big = 100_000.0, 1_000_000.0
    table = two_way_table(True, (small, big))
    assert _ack_room(table, 0) == ack_ring(BASE_RTT_US, RATE, big, RATE)
    assert _ack_room(table, 0) > ack_ring(BASE_RTT_US, RATE, small, RATE)
    bucket = table._replace(link_burst=np.array([150_000.0, 0.0]))
    assert _ack_room(bucket, 0) == ack_ring(BASE_RTT_US, RATE, big, RATE) + 104  # 150 kB / MSS
    graph = graph_arrays([chain([0, 1], [1e6, 0.0])])
    for bad in (np.array([1.0]), np.array([1.0, 0.5])):
        with pytest.raises(ReplayError, match="link_tsq"):
            Kernel(graph, table._replace(link_tsq=bad), random.Random(0))


def pull_beside_push(paired: bool, size: float = 2e6) -> tuple:
    """Lane 0 pulls ``size`` bytes through the PS's own queue (link 0) while lane 1 pushes
    as many through the switch's queue toward the PS (link 1, no TCP Small Queues),
    both Reno, a barrier after; ``paired``: the links are one link's two directions, each
    direction's ACKs behind the other's queue. Returns the mean step over 8 steps and the
    pull's and the push's smoothed round trips at the end (us)."""
    graph = graph_arrays([chain([0, 1], [size, 0.0])])
    k = Kernel(graph, two_way_table(paired), random.Random(0))
    k.run(8)
    ends = ends_of(k, 2)[0][:8]
    table = connection_table(k.S.hc)  # (host-queue link, lane, [window, ssthresh, srtt...])
    return ends[-1] / len(ends), table[0, 0, 2], table[1, 1, 2]


def test_each_directions_acks_wait_behind_the_other_queues_bytes():
    """A pull beside a push, each through its direction's queue: paired, each direction's
    ACKs wait behind the bytes the other queue holds (the push keeps its whole window in
    the switch's queue, the pull about two GSO packets in the PS's): the pull's round trips
    grow by milliseconds, and the push, which overflows the switch's queue, learns of its
    losses later: the step is slower."""
    step, pull_rtt, push_rtt = pull_beside_push(paired=False)
    step2, pull_rtt2, push_rtt2 = pull_beside_push(paired=True)
    assert step == pytest.approx(2e6 / RATE, rel=0.1)  # about the link's rate each way
    assert step2 > step
    assert pull_rtt2 > pull_rtt + 2_000  # behind the push's window: milliseconds more
    # the push's own round trips are its window in the switch's queue: cut by its losses,
    # which it learns of later beside the pull, it keeps less there
    assert push_rtt2 < push_rtt


def pull_start(request: bool, offset_us: float) -> tuple[float, float]:
    """Lane 1 pushes 2 MB through the switch's queue toward the PS from time 0; lane 0 pulls
    as much through the PS's own queue from ``offset_us``, its request crossing the switch's
    queue where ``request``. Returns when lane 0's pull started (us) and lane 0's first step
    end."""
    table = two_way_table(True)
    if request:
        table = table._replace(link_request=np.array([1, -1], dtype=i8))
    graph = graph_arrays([chain([0, 1], [2e6, 0.0])])
    k = Kernel(graph, table, random.Random(0), offsets_us=(offset_us, 0.0), record=True)
    k.run(1)
    ri, rf = k.rows()
    start = min(rf[x, 1] for x in range(len(ri)) if ri[x, 0] == 0 and ri[x, 2] == 0)
    return float(start), ends_of(k, 2)[0][0]


def test_a_pulls_request_waits_behind_the_bytes_queued_toward_the_ps():
    """A pull's request crosses the switch's queue toward the PS (``link_request``): sent
    while the other lane's push fills that queue, it waits until the bytes ahead of it have
    left (at most the queue, drained at the rate); sent once the push is over, it waits for
    nothing, and the replay is the one without the crossing."""
    start, end = pull_start(False, 5_000.0)
    assert start == pytest.approx(5_000.0)
    start_q, end_q = pull_start(True, 5_000.0)
    assert 5_000.0 + 1_000.0 < start_q <= 5_000.0 + 478_000.0 / RATE + 1e-6
    assert end_q > end
    late = 2e6 / RATE + 30_000.0  # the push long over: its queue empty
    assert pull_start(True, late) == pull_start(False, late)


def test_a_request_crosses_a_host_queue_or_nothing():
    graph = graph_arrays([chain([0, 1], [1e6, 0.0])])
    table = two_way_table(True)
    for bad, says in ((np.array([1], dtype=i8), "one link index"),
                      (np.array([1.0, -1.0]), "one link index"),
                      (np.array([2, -1], dtype=i8), "link 0's requests cross link 2: not another"),
                      (np.array([-2, -1], dtype=i8), "cross link -2: not another"),
                      (np.array([0, -1], dtype=i8), "link 0's requests cross link 0: not another"),
                      ):
        with pytest.raises(ReplayError, match=says):
            Kernel(graph, table._replace(link_request=bad), random.Random(0))
    fair = table._replace(link_fifo=np.array([3, 0], dtype=i8), link_rev=np.full(2, -1, i8),
                          link_request=np.array([1, -1], dtype=i8))
    with pytest.raises(ReplayError, match="not a host queue"):
        Kernel(graph, fair, random.Random(0))


@pytest.mark.parametrize("link, uplink_queue, pull_requests, want", [
    ("hostqueue", True, True, [2, 3, -1, -1]),  # each PS's pulls' requests cross its uplink
    ("hostqueue", True, False, [-1] * 4),  # a synchronous PS: its requests went earlier
    ("hostqueue", False, True, [-1] * 4),  # no switch's queue toward the PS to cross
    ("fair", False, True, [-1] * 4),
])
def test_the_asynchronous_ps_pulls_requests_cross_the_switchs_queue_only(
        link, uplink_queue, pull_requests, want):
    """``async_ps_resources``: with 2 PSes, downlinks 0-1 and uplinks 2-3; only the
    downlinks' transfers (pulls) are requested across a queue, never the pushes."""
    table = async_ps_resources(2, 2, RATE, link, host_queue_bytes=478_000.0,
                               uplink_queue=uplink_queue, pull_requests=pull_requests)
    assert table.link_request.tolist() == want


def test_a_host_queue_needs_its_size():
    graph, table = pulls_and_barrier(2, 1e6, 625_000.0)
    with pytest.raises(ReplayError, match="at least one segment"):
        Kernel(graph, table._replace(link_buf=np.array([100.0])), random.Random(0))
    with pytest.raises(ReplayError, match="link_buf and link_rtt"):
        Kernel(graph, table._replace(link_buf=None), random.Random(0))


def test_predict_link_hostqueue_on_the_sample():
    """Through the command line: one worker alone runs as fast as with equal sharing (a lone
    connection fills the link), and the rows of two workers come out; a bad --host-queue is
    one line naming it."""
    rows = {}
    for link in ("fair", "hostqueue"):
        proc = gradwire("predict", "--sample", "--workers", "1,2", "--link", link,
                        "--format", "json", timeout=300)
        assert proc.returncode == 0, proc.stderr
        rows[link] = {r["workers"]: r["examples_per_s"] for r in json.loads(proc.stdout)["rows"]
                      if r["model"] == "sim"}
    assert rows["hostqueue"][1] == pytest.approx(rows["fair"][1], rel=0.02)
    assert rows["hostqueue"][2] > 0
    proc = gradwire("predict", "--sample", "--link", "hostqueue", "--host-queue", "lots")
    assert proc.returncode == 2 and "--host-queue" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_predict_bbr_whole_on_the_sample():
    """--tcp bbr-v1 through the command line, both queues: one worker alone is within 3% of
    equal sharing (a lone paced connection finds the link's rate), two workers' rows come
    out, the note names it, and a BBR whole window target in a resource table is accepted
    where a negative one of any other value is refused."""
    proc = gradwire("predict", "--sample", "--workers", "1,2", "--link", "hostqueue",
                    "--uplink-queue", "--tcp", "bbr-v1", "--format", "json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["workers"]: r["examples_per_s"] for r in doc["rows"] if r["model"] == "sim"}
    fair = gradwire("predict", "--sample", "--workers", "1", "--link", "fair", "--format",
                    "json", timeout=300)
    alone = [r["examples_per_s"] for r in json.loads(fair.stdout)["rows"] if r["model"] == "sim"]
    assert rows[1] == pytest.approx(alone[0], rel=0.03)
    assert rows[2] > rows[1]  # two workers do more than one (the lab's sample: 93 against 77)
    assert any("--tcp bbr-v1" in n for n in doc["notes"])
    graph, table = pulls_and_barrier(2, 1e6, 478_000.0, bbr=BBR_V1)
    Kernel(graph, table, random.Random(0))
    with pytest.raises(ReplayError, match="BBR window"):
        Kernel(graph, table._replace(link_bbr=np.array([-2.0])), random.Random(0))


@pytest.mark.parametrize("lab, mechanisms, cc, want", [
    ({"qdisc": "fifo", "queue": None, "queue_bytes": 625000}, ("sync-ps",), None,
     ("hostqueue", None, False)),
    ({"queue": "1m", "queue_bytes": 1048576}, ("sync-ps",), "bbr", ("hostqueue", 1048576.0, False)),
    ({"qdisc": "fifo", "queue_bytes": 625000}, ("async-ps",), None, ("fair", None, False)),
    ({"qdisc": "fifo", "queue_bytes": 625000}, ("async-ps",), "bbr", ("fair", None, False)),
    ({"qdisc": "fifo", "queue_bytes": 625000}, ("async-ps",), "cubic", ("hostqueue", None, True)),
    ({"queue": "1m", "queue_bytes": 1048576}, ("async-ps",), "reno",
     ("hostqueue", 1048576.0, True)),
    ({"qdisc": "fifo", "queue_bytes": 625000}, ("async-ps", "sync-ps"), "cubic",
     ("fair", None, False)),
    ({"qdisc": "fifo", "queue_bytes": 625000}, ("sync-ps", "ring-allreduce"), None,
     ("fair", None, False)),
    ({"qdisc": "fair", "queue_bytes": 625000}, ("sync-ps",), None, ("fair", None, False)),
    ({"qdisc": "fair", "queue_bytes": 625000}, ("async-ps",), "cubic", ("fair", None, False)),
    ({"queue": "kernel", "queue_bytes": None}, ("sync-ps",), None, ("fair", None, False)),
    ({"delay": "5ms", "queue_bytes": 625000}, ("sync-ps",), None, ("fair", None, False)),
    ({}, ("sync-ps",), None, ("fair", None, False)),
    ({}, ("async-ps",), "cubic", ("fair", None, False)),
])
def test_link_auto_takes_the_host_queue_only_where_the_lab_had_one(lab, mechanisms, cc, want):
    """--link auto: the PS's own queue for a profile whose lab queued the PS's traffic in a
    bfifo (the default size at each rate, or the bytes it recorded), for a synchronous PS, and
    for an asynchronous one whose PSes ran a loss-based congestion control (``cc``: CUBIC or
    Reno), then with the switch's queue too (--uplink-queue); equal sharing for anything else:
    an asynchronous PS under BBR or nothing recorded, mixed mechanisms, a fair queue, the
    kernel's queue, netem's, or a profile from no lab."""
    from gradwire.replay.predictflow import auto_link

    assert auto_link(lab, mechanisms, cc) == want


def test_bbr_takes_the_pull_window_the_capture_shows_where_the_ps_ran_bbr_by_default():
    """--tcp bbr's window target is the pull window the profile's capture shows wherever the
    profile's lab ran BBR: asked for, or the host's default, which the lab records beside a
    config that left it None (the small synchronous profile's case); else BBR's own."""
    import dataclasses

    from gradwire.replay.grid import measured_window_bytes
    from gradwire.replay.predictflow import bbr_window_of
    from gradwire.replay.profile import load_profile

    prof = load_profile([SYNC_BUNDLE])
    assert prof.lab["tcp_cc"] is None and prof.lab["tcp_cc_run"] == "bbr"
    assert prof.ps_congestion_control == "bbr"  # tests/test_congestion_control.py: the rule
    assert bbr_window_of("bbr", prof) == measured_window_bytes(prof)[0] > 0
    reno = dataclasses.replace(prof, ps_congestion_control="reno")
    assert bbr_window_of("bbr", reno) == 0.0 and bbr_window_of("reno", prof) is None


def test_a_synchronous_lab_profile_is_replayed_through_its_queue_and_says_so():
    """--link auto on the small synchronous lab profile (its lab's 1.25 MB bfifo) takes the
    host queue and a note says so, with what it leaves out; --link fair has no such note."""
    auto = gradwire("predict", str(SYNC_BUNDLE), "--workers", "2", "--format", "json",
                    timeout=300)
    assert auto.returncode == 0, auto.stderr
    doc = json.loads(auto.stdout)
    notes = doc["notes"]
    assert any("own drop-tail queue of the lab's default size" in n and "BBR" in n
               for n in notes)
    # the lab ran its host's BBR: the JSON says so, and the note points to BBR whole
    assert doc["profile"]["congestion_control"] == "bbr"
    assert any("this profile's PSes ran BBR: --tcp bbr-v1" in n for n in notes)
    fair = gradwire("predict", str(SYNC_BUNDLE), "--workers", "2", "--link", "fair",
                    "--format", "json", timeout=300)
    assert fair.returncode == 0, fair.stderr
    assert not any("drop-tail" in n for n in json.loads(fair.stdout)["notes"])


def test_predict_tcp_bbr_runs_the_connections_as_bbr_and_says_so():
    """--tcp bbr on the small synchronous lab profile: its host queue's connections run BBR
    (the note says so, and the replay differs from Reno's at W = 4); --tcp with a link that
    has no connections is one line, exit 2."""
    rows, notes = {}, {}
    for tcp in ("reno", "bbr"):
        proc = gradwire("predict", str(SYNC_BUNDLE), "--workers", "4", "--tcp", tcp,
                        "--format", "json", timeout=300)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        rows[tcp] = [r["examples_per_s"] for r in doc["rows"] if r["model"] == "sim"][0]
        notes[tcp] = " ".join(doc["notes"])
    assert "a Reno connection" in notes["reno"] and "a BBR connection" in notes["bbr"]
    assert rows["bbr"] > 0 and rows["bbr"] != rows["reno"]
    bad = gradwire("predict", str(SYNC_BUNDLE), "--tcp", "bbr", "--link", "fair")
    assert bad.returncode == 2 and "--tcp bbr" in bad.stderr and "Traceback" not in bad.stderr
    # --link auto takes equal sharing for the asynchronous what-if: --tcp has nothing to run
    fair = gradwire("predict", str(SYNC_BUNDLE), "--tcp", "bbr", "--mechanism", "async-ps")
    assert fair.returncode == 2 and "--link auto replays this profile's links as fair" in (
        fair.stderr) and "Traceback" not in fair.stderr


def test_predict_uplink_queue_replays_the_pushes_through_a_queue_and_says_so():
    """--uplink-queue on the shipped sample: the rows of two and four workers move from the
    PS's own queue alone's, the note names the switch's queue; asked without --link
    hostqueue it is one line naming both, exit 2."""
    rows, notes = {}, {}
    for extra in ((), ("--uplink-queue",)):
        proc = gradwire("predict", "--sample", "--workers", "2,4", "--link", "hostqueue",
                        *extra, "--format", "json", timeout=300)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        rows[extra] = [r["examples_per_s"] for r in doc["rows"] if r["model"] == "sim"]
        notes[extra] = " ".join(doc["notes"])
    assert all(r > 0 for r in rows[("--uplink-queue",)])
    assert rows[("--uplink-queue",)] != rows[()]
    assert "the switch's queue toward it" in notes[("--uplink-queue",)]
    assert "the switch's queue" not in notes[()]
    bad = gradwire("predict", "--sample", "--uplink-queue")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--uplink-queue is for --link hostqueue only" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    # a ring has no PS: the option is named among the PS options to drop
    ring = gradwire("predict", "--sample", "--mechanism", "ring-allreduce", "--link",
                    "hostqueue", "--uplink-queue")
    assert ring.returncode == 2 and "--link hostqueue and --uplink-queue set the parameter " \
        "servers" in ring.stderr, ring.stderr


def test_ps_options_are_refused_where_no_mechanism_has_a_ps():
    """--ps, --link hostqueue and --tcp with ring all-reduce alone: one line naming them, exit
    2 (they were taken without a word and the rows showed M = 0)."""
    for extra, named in ((["--ps", "2"], "--ps"), (["--link", "hostqueue"], "--link hostqueue"),
                         (["--link", "hostqueue", "--tcp", "bbr"], "--tcp bbr")):
        proc = gradwire("predict", "--sample", "--workers", "2", "--mechanism", "ring-allreduce",
                        *extra)
        assert proc.returncode == 2 and named in proc.stderr and "ring-allreduce has none" in (
            proc.stderr) and "Traceback" not in proc.stderr


def test_bbr_whole_on_a_synchronous_profile_says_how_it_scored_there():
    """--tcp bbr-v1 on a synchronous profile: the note says how its held pulls end and how it
    scored on the registered synchronous sets (docs/preregistered/
    issue22-sync-bbr-second-report.md gives the three together);
    on the asynchronous sample it does not."""
    for bundle, want in ((str(SYNC_BUNDLE), True), ("--sample", False)):
        proc = gradwire("predict", bundle, "--workers", "1", "--tcp", "bbr-v1", "--link",
                        "hostqueue", "--format", "json", "-q", timeout=300)
        assert proc.returncode == 0, proc.stderr
        note = next(n for n in json.loads(proc.stdout)["notes"] if "--tcp bbr-v1" in n)
        assert ("for synchronous training a pull starting beside" in note) is want, note
        assert ("issue22-sync-bbr-second-report.md" in note) is want


def test_the_host_queue_note_says_what_it_missed_for_the_asynchronous_ps():
    """The sample is asynchronous: through the host queue its note gives the lab's verdict on
    the asynchronous PS and the default queue's floor."""
    proc = gradwire("predict", "--sample", "--workers", "1", "--link", "hostqueue", "--format",
                    "json", "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    note = next(n for n in json.loads(proc.stdout)["notes"] if "drop-tail queue" in n)
    assert "at least 256 KiB" in note and "without --uplink-queue it missed" in note
    assert "where its PSes ran BBR or nothing records it --link fair is the default" in note
    # its lab ran BBR, but the pointer to BBR whole is the synchronous PS's
    assert "holds them" not in note
