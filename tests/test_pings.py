"""The workers' HTTP/2 PINGs on the pull connections: read from a capture
(collector/h2pings.py), timed for the replay (replay/pings.py), and ending a held connection's
wait in the host-queue oracle (replay/hostqueue.py) and the kernel (tests/test_hqkernel.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import gradwire
from test_sync_ps import SYNC_BUNDLE

from gradwire.aligner.nodes import load_node
from gradwire.collector.h2pings import PingLog, PingTimes
from gradwire.records import Frame
from gradwire.replay.hostqueue import HostQueue, Transfer, _Sim
from gradwire.replay.pings import next_ping, ping_row, ping_seed

PS, WORKER = "10.0.0.1", "10.0.0.2"


def frame(ms: float, conn: int, src: str, dst: str, kind: int, flags: int = 0,
          path: str | None = None) -> Frame:
    return Frame(ts_ns=int(ms * 1e6), conn=conn, src=src, dst=dst, stream_id=0, type=kind,
                 flags=flags, length=8, path=path)


def test_next_ping_walks_the_intervals_in_turn_from_the_connections_start():
    """PINGs ``intervals`` apart, in turn and over again, from the fraction ``seed % 1000 /
    1000`` of their cycle: the next one after ``now`` is strictly after it, and the times
    are those of enumerating the cycle by hand."""
    iv = np.array([100.0, 300.0, 50.0, 0.0, 0.0])  # zeros after the intervals: not read
    seed = 1250  # starts 250/1000 of the 450 us cycle in, with the third interval (1250 % 3)
    start = 0.25 * 450.0
    times, t, j = [], start - 2 * 450.0, seed % 3
    while t < 2000.0:
        times.append(t)
        t += iv[j]
        j = (j + 1) % 3
    for now in (-300.0, 0.0, 112.4, 112.5, 112.6, 400.0, 1234.5, 1699.9):
        want = min(x for x in times if x > now)
        assert next_ping(now, iv, seed) == pytest.approx(want)
    assert next_ping(start, iv, seed) == pytest.approx(start + 50.0)  # strictly after


def test_no_intervals_no_ping():
    assert next_ping(5.0, np.zeros(3), 7) == math.inf
    assert next_ping(5.0, ping_row((), 1), 7) == math.inf


def test_ping_row_keeps_the_positive_finite_intervals_then_zeros():
    np.testing.assert_array_equal(ping_row((5.0, 0.0, math.inf, 7.0), 4), [5.0, 7.0, 0.0, 0.0])
    np.testing.assert_array_equal(ping_row((5.0, 6.0, 7.0), 2), [5.0, 6.0])
    assert ping_row((), 0).shape == (1,)


def test_connections_draw_their_own_start():
    assert len({ping_seed(0, k) % 1000 for k in range(8)}) == 8
    assert ping_seed(1, 0) != ping_seed(0, 1)


def test_the_log_takes_the_clients_pings_on_the_connections_the_host_serves():
    """Connection 0: the worker's requests come to the PS (it serves it); its PINGs at 10,
    110 and 410 ms, the PS's ACKs 0.1 and 0.2 ms later. Connection 1: the PS is the client
    (its requests go to the worker): the worker's PINGs there, the PS's own PINGs and the
    worker's ACKs to them are not the pull connection's."""
    log = PingLog((PS,))
    p, w = f"{PS}:2222", f"{WORKER}:40000"
    frames = [frame(0.0, 0, w, p, 1, path="/tensorflow.WorkerService/RecvTensor"),
              frame(1.0, 1, f"{PS}:50000", f"{WORKER}:2222", 1, path="/x/RecvTensor"),
              frame(10.0, 0, w, p, 6), frame(10.1, 0, p, w, 6, flags=1),
              frame(50.0, 0, p, w, 6), frame(50.2, 0, w, p, 6, flags=1),  # the PS's own
              frame(60.0, 1, f"{WORKER}:2222", f"{PS}:50000", 6),
              frame(60.3, 1, f"{PS}:50000", f"{WORKER}:2222", 6, flags=1),
              frame(110.0, 0, w, p, 6), frame(110.2, 0, p, w, 6, flags=1),
              frame(210.0, 1, f"{WORKER}:2222", f"{PS}:50000", 6),
              frame(410.0, 0, w, p, 6)]  # not answered in the capture
    for f in frames:
        log.frame(f)
    got = log.times()
    assert got.intervals_us == pytest.approx((100e3, 300e3))
    assert got.answers_us == pytest.approx((100.0, 200.0))
    assert got.answer_us == pytest.approx(150.0)
    both = PingTimes.merge([got, PingTimes((5.0,), (1.0,))])
    assert both.intervals_us == pytest.approx((100e3, 300e3, 5.0))
    assert PingTimes().answer_us == 0.0


def test_a_real_ps_capture_shows_the_workers_pings():
    """The small synchronous lab bundle's PS capture: the worker pinged its pull connection
    100 ms and more apart (gRPC's bandwidth-delay probe starts at 100 ms and slows while its
    estimate holds), and the PS answered within milliseconds."""
    node = load_node(SYNC_BUNDLE / "ps0")
    assert node.pings is not None and len(node.pings.intervals_us) >= 2
    assert min(node.pings.intervals_us) > 90e3
    assert 10.0 < node.pings.answer_us < 5e3


def held_run(pings: tuple[float, ...]) -> tuple[list[float], int]:
    """``test_hostqueue``'s BBR case: two connections through a 312.5 kB queue behind a
    shaper whose bucket passes three packets at once, the second connection's 1.2 MB handed
    over 1 ms after the first's, four rounds 80 ms apart: the newcomer's first packet finds
    the queue full with nothing in flight (held). Returns each round's end (us) and the
    holds."""
    q = HostQueue(rate=31.25, buffer=312_500.0, bucket=3.0 * 45 * 1514, cc="bbr",
                  bbr_target=180.0, pings=pings, ping_answer=150.0 if pings else 0.0)
    sim = _Sim(q, 2)
    t, ends = 0.0, []
    for _ in range(4):
        a, b = sim.add(Transfer(0, t, 1.2e6)), sim.add(Transfer(1, t + 1000.0, 1.2e6))
        sim.run(wait_for=[a, b])
        t = max(sim.ends[a], sim.ends[b])
        ends.append(t)
        t += 80_000.0
    return ends, sim.outcome().holds


def test_a_held_connection_goes_at_its_workers_next_ping_answered():
    """Without PINGs a held round lasts its probe timer (over 200 ms); with PINGs every
    20 ms the held connection tries again at its next one plus the PS's answer (0.15 ms)
    and goes once the queue has room: every held round ends over 100 ms sooner, and the
    rounds hold as often."""
    timer, holds = held_run(())
    assert holds >= 1
    ping, holds_p = held_run((20e3,))
    assert holds_p == holds
    rounds = np.diff([0.0, *timer]) - np.diff([0.0, *ping])
    assert np.all(rounds > 100e3)


def test_predict_replays_the_captures_pings_where_asked(tmp_path):
    """On the small synchronous lab bundle (its PS's own queue, `--link auto`) the JSON names
    the PINGs its PS capture shows and whether the host-queue rows replay them: with
    `--pings capture`, and by default (`auto`) with BBR whole's connections only (as
    registered, docs/preregistered/issue22-sync-pings-report.md); `--pings none` keeps the
    intervals in the JSON and replays none. `--pings none` beside a link with no
    connections is refused in one line."""
    docs = {}
    for name, extra in (("capture", ["--pings", "capture"]), ("none", ["--pings", "none"]),
                        ("auto", []), ("auto-bbr1", ["--tcp", "bbr-v1"])):
        out = tmp_path / name
        r = gradwire("predict", str(SYNC_BUNDLE), "--workers", "2", "--model", "sim", "-q",
                     *extra, "--format", "json", "-o", str(out))
        assert r.returncode == 0, r.stderr
        docs[name] = json.loads((out / "predictions.json").read_text())["profile"]["pings"]
    assert docs["capture"]["replayed"] is True and docs["none"]["replayed"] is False
    assert docs["auto"]["replayed"] is False and docs["auto-bbr1"]["replayed"] is True
    assert docs["capture"]["intervals_us"] == docs["none"]["intervals_us"]
    assert len(docs["capture"]["intervals_us"]) >= 2 and docs["capture"]["answer_us"] > 0
    r = gradwire("predict", str(SYNC_BUNDLE), "--workers", "2", "--link", "fair", "--pings",
                 "none")
    assert r.returncode == 2
    assert "--pings none is for the connections of --link hostqueue" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_log_knows_the_host_by_an_endpoint_it_serves_and_reads_ipv6():
    """A cluster on loopback: every task's address is 127.0.0.1, so the PS is known by the
    endpoint it serves (its cluster spec's); IPv6 endpoints are ``[ip]:port``. A host known
    by neither gives no PINGs."""
    served = PingLog((), {("127.0.0.1", 2222), ("::1", 2223)})
    nobody = PingLog(())
    for f in (frame(0.0, 0, "127.0.0.1:40000", "127.0.0.1:2222", 1, path="/x/RecvTensor"),
              frame(1.0, 1, "[::1]:40001", "[::1]:2223", 1, path="/x/RecvTensor"),
              frame(10.0, 0, "127.0.0.1:40000", "127.0.0.1:2222", 6),
              frame(10.1, 0, "127.0.0.1:2222", "127.0.0.1:40000", 6, flags=1),
              frame(20.0, 1, "[::1]:40001", "[::1]:2223", 6),
              frame(60.0, 0, "127.0.0.1:40000", "127.0.0.1:2222", 6),
              frame(120.0, 1, "[::1]:40001", "[::1]:2223", 6),
              frame(120.3, 1, "[::1]:2223", "[::1]:40001", 6, flags=1)):
        served.frame(f)
        nobody.frame(f)
    got = served.times()
    assert got.intervals_us == pytest.approx((50e3, 100e3))
    assert got.answers_us == pytest.approx((100.0, 300.0))
    assert nobody.times() == PingTimes()


def test_the_resources_give_the_pings_to_the_pull_links_only():
    """``async_ps_resources``: the M downlinks (host queues) carry the intervals and the
    answer, the uplinks and a worker NIC's links none; without the host queue, none."""
    from gradwire.replay.generators import async_ps_resources

    t = async_ps_resources(3, 2, 40.0, "hostqueue", host_queue_bytes=300_000.0,
                           nic_rate_bytes_per_us=40.0, joins=1, pings_us=(5e3, 7e3),
                           ping_answer_us=90.0)
    np.testing.assert_array_equal(t.link_pings[:2], [[5e3, 7e3], [5e3, 7e3]])
    assert not t.link_pings[2:].any()
    np.testing.assert_array_equal(t.link_answer, [90.0, 90.0] + [0.0] * (len(t.link_cap) - 2))
    fair = async_ps_resources(3, 2, 40.0, "fair", pings_us=(5e3,), ping_answer_us=90.0)
    assert not fair.link_pings.any() and not fair.link_answer.any()


@pytest.mark.parametrize("args, said", [
    (["tests/data/small_bundle", "--workers", "2", "--pings", "none"],
     "--pings none is for the connections of the PS's own queue, and --link auto replays"),
    ([str(SYNC_BUNDLE), "--workers", "2", "--mechanism", "ring-allreduce", "--pings", "none"],
     "--pings none set the parameter servers")])
def test_pings_none_where_no_host_queue_runs_is_refused(args, said):
    """The asynchronous profile's links are shared (`--link auto`), and a ring has no PS:
    `--pings none` would change nothing there, so it is refused in one line, as `--tcp` is."""
    r = gradwire("predict", *args)
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("pings, answer, said", [
    (np.zeros((2, 1)), np.zeros(1), "link_pings must be one row"),
    (np.array([[-5.0]]), np.zeros(1), "link_pings must be one row"),
    (np.array([[math.inf]]), np.zeros(1), "link_pings must be one row"),
    (np.array([[5e3]]), np.array([-1.0]), "link_pings must be one row"),
    (np.array([[5e3]]), None, "link_pings and link_answer come together")])
def test_the_table_check_refuses_pings_it_cannot_replay(pings, answer, said):
    """A row per link of finite intervals >= 0 and an answer >= 0 per link, both or neither."""
    from test_hqkernel import pulls_and_barrier

    from gradwire.replay.taskgraph import ReplayError, check

    graph, table = pulls_and_barrier(2, 1e6, 300_000.0)
    with pytest.raises(ReplayError, match=said):
        check(graph, table._replace(link_pings=pings, link_answer=answer))
