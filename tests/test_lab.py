"""The lab: real TensorFlow PS clusters in network namespaces with tc-shaped links.

Needs root (namespaces, tc); the cluster tests also need TensorFlow. Whole file: well under a
minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

from conftest import gradwire, need_root, need_tf  # noqa: E402
from lab.cluster import LabConfig, run_lab  # noqa: E402

from gradwire.bundle import open_bundle  # noqa: E402
from gradwire.collector.summary import summarize  # noqa: E402
from gradwire.replay import netns  # noqa: E402
from gradwire.replay.netns import LabError, Topology, list_lab_namespaces, pid_alive  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.root]


@pytest.fixture(autouse=True)
def _root() -> None:
    need_root()


@pytest.fixture
def _tf() -> None:
    need_tf()


def _proc_cmdlines_containing(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (read-only scan of /proc)."""
    hits = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmd and pid_alive(int(entry)):
                hits.append(int(entry))
    return hits


@pytest.mark.usefixtures("_tf")
def test_cluster_1ps_2workers_at_200mbit(tmp_path: Path) -> None:
    cfg = LabConfig(
        model="mlp",
        model_mb=8,
        batch_size=16,
        steps=6,
        workers=2,
        ps=1,
        bandwidth="200mbit",
        work_dir=str(tmp_path),
        timeout_s=120,
        # the PS link's headers where tcpdump is installed (CI installs it)
        headers_dir=str(tmp_path / "headers") if shutil.which("tcpdump") else None,
    )
    r = run_lab(cfg)
    assert r["throughput_examples_per_s"] > 0
    assert set(r["per_worker"]) == {"worker0", "worker1"}
    # the PS link's headers: each worker's pulls (out) and pushes (in), ~8 MB a step each. A
    # busy machine may pause a pull between tensors for longer than the gap that ends a
    # transfer, so the bytes are counted in all, not per transfer.
    if cfg.headers_dir:
        h = r["headers"]["ps0"]
        assert h["file"] == str(tmp_path / "headers" / "ps0.headers.pcap") and h["peers"] == 2
        for way in ("out", "in"):
            assert h[way]["transfers"] >= 2 * 6 and h[way]["bytes"] > 2 * 6 * 7e6
            assert h[way]["median_rate_bps"] < 1.2 * 200e6
    # the machine's busy cores cover the nodes' own; each is read in 10 ms ticks, so on a
    # machine busy throughout a reading may pass its cores by a tick or two over the window
    assert r["cpu_share_window_total"] <= r["host_cpu_window"] + 0.1
    assert r["host_cpu_window"] <= r["cpu_count"] + 0.05
    assert 0 <= r["host_softirq_window"] <= r["host_cpu_window"]
    assert 0 <= r["host_steal_window"] <= r["cpu_count"]
    for w in r["per_worker"].values():
        assert w["steps"] == 6 and len(w["step_end_times_s"]) == 6
        assert w["finished"] and w["exit_code"] == 0
        assert w["examples_per_s"] > 0
        assert w["param_bytes"] > 7e6
    # 2 workers move ~8 MB each way per step through one 200 Mbit/s PS link: >= 0.6 s a step.
    assert all(w["median_step_s"] > 0.5 for w in r["per_worker"].values())
    assert set(r["cpu_share"]) == {"ps0", "worker0", "worker1"}
    assert all(0 <= c["lifetime"] <= 2.5 for c in r["cpu_share"].values())
    assert r["prefix"].startswith("gwl")
    assert list_lab_namespaces(r["prefix"]) == []
    assert r["pids"] and not [p for p in r["pids"] if pid_alive(p)]


@pytest.mark.usefixtures("_tf")
def test_ring_all_reduce_cluster_of_3_workers_at_200mbit(tmp_path: Path) -> None:
    # --mode ring: no PS; each step every worker sends 2 (W - 1) / W of its 8 MB of gradients
    # (the collective ring all-reduce) on its own 200 Mbit/s link: ~0.45 s a step
    cfg = LabConfig(model="mlp", model_mb=8, batch_size=16, steps=5, workers=3, ps=0,
                    mode="ring", shape="all", bandwidth="200mbit", work_dir=str(tmp_path),
                    timeout_s=120)
    r = run_lab(cfg)
    assert r["throughput_examples_per_s"] > 0 and set(r["cpu_share"]) == {
        "worker0", "worker1", "worker2"}
    for w in r["per_worker"].values():
        assert w["steps"] == 5 and w["finished"] and w["exit_code"] == 0
        assert w["param_bytes"] > 7e6
    assert all(w["median_step_s"] > 0.4 for w in r["per_worker"].values())
    ends = [w["step_end_times_s"][-1] for w in r["per_worker"].values()]
    assert max(ends) - min(ends) < 0.2  # synchronous: the workers end their steps together
    assert list_lab_namespaces(r["prefix"]) == []


def test_tc_rate_matches_configured_bandwidth() -> None:
    with Topology(num_ps=1, num_workers=2, bandwidth="100mbit") as topo:
        ps, w0, w1 = topo.nodes
        assert ps.shaped and not w0.shaped
        down = netns.measure_throughput_bps(topo, ps, w0, nbytes=10_000_000, limit_s=3)
        up = netns.measure_throughput_bps(topo, w0, ps, nbytes=10_000_000, limit_s=3)
        free = netns.measure_throughput_bps(topo, w0, w1, nbytes=50_000_000, limit_s=2)
        qdiscs = subprocess.run(["ip", "netns", "exec", ps.ns, "tc", "qdisc", "show", "dev",
                                 ps.iface], capture_output=True, text=True, check=True).stdout
        prefix = topo.prefix
    assert "bfifo 10:" in qdiscs and "limit 256Kb" in qdiscs, qdiscs  # the default buffer
    for measured in (down, up):  # TCP goodput is ~95% of the L2 rate HTB enforces
        assert 0.88e8 < measured < 1.05e8, f"{measured / 1e6:.1f} Mbit/s for a 100mbit link"
    assert free > 3e8  # the unshaped worker-worker path is not limited
    assert list_lab_namespaces(prefix) == []


def test_a_fair_qdisc_gives_each_other_node_a_class_and_one_flow_the_whole_rate() -> None:
    def tc(ns: str, *args: str) -> str:
        return subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True,
                              text=True, check=True).stdout

    with Topology(num_ps=1, num_workers=2, bandwidth="100mbit", qdisc="fair") as topo:
        ps, w0, _w1 = topo.nodes
        down = netns.measure_throughput_bps(topo, ps, w0, nbytes=10_000_000, limit_s=3)
        sides = [(ps.ns, ps.iface), (topo.switch_ns, ps.peer)]  # PS egress; towards the PS
        shown = [(tc(ns, "class", "show", "dev", dev), tc(ns, "filter", "show", "dev", dev),
                  tc(ns, "qdisc", "show", "dev", dev)) for ns, dev in sides]
    for classes, filters, qdiscs in shown:
        # a class per worker and one for what no filter matches, each under the rate class
        assert all(f"class htb 1:{k} parent 1:1" in classes for k in (9, 10, 11)), classes
        assert "flowid 1:10" in filters and "flowid 1:11" in filters, filters
        assert qdiscs.count("bfifo") == 3 and "default 0x9" in qdiscs, qdiscs
    assert 0.88e8 < down < 1.05e8  # alone, a flow borrows the whole rate


def test_an_ackfirst_qdisc_sends_pure_acks_ahead_of_the_data_fifo() -> None:
    def tc(ns: str, *args: str) -> str:
        return subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True,
                              text=True, check=True).stdout

    with Topology(num_ps=1, num_workers=1, bandwidth="100mbit", qdisc="ackfirst") as topo:
        ps, w0 = topo.nodes
        # data one way, its ACKs the other: both sides' prio bands see traffic
        down = netns.measure_throughput_bps(topo, ps, w0, nbytes=10_000_000, limit_s=3)
        sides = [(ps.ns, ps.iface), (topo.switch_ns, ps.peer)]  # PS egress; towards the PS
        shown = [(tc(ns, "-s", "qdisc", "show", "dev", dev), tc(ns, "filter", "show", "dev",
                                                               dev)) for ns, dev in sides]
    for qdiscs, filters in shown:
        assert "default 0x3" in qdiscs, qdiscs
        assert "qdisc pfifo 102: parent 1:2" in qdiscs and "bfifo 103: parent 1:3" in qdiscs
        assert "flowid 1:2" in filters and "0000ff80 at 0" in filters, filters
    sent = [_sent_packets(q) for q, _ in shown]
    # the PS's egress: the data (thousands of GSO packets) in the FIFO, little in the ACK band;
    # towards the PS: the worker's ACKs in the ACK band, in the FIFO only the few packets
    # that are not pure ACKs (the handshake, the request, IPv6's neighbour and multicast
    # messages, whose number varies from run to run)
    assert sent[0]["103:"] > 100 and sent[0]["102:"] * 10 < sent[0]["103:"], sent
    assert sent[1]["102:"] > 100 and sent[1]["103:"] * 10 < sent[1]["102:"], sent
    assert 0.88e8 < down < 1.05e8


def test_a_burst_size_sets_the_bucket_of_the_rate_class() -> None:
    with Topology(num_ps=1, num_workers=1, bandwidth="100mbit", burst="512k") as topo:
        ps = topo.nodes[0]
        shown = subprocess.run(["ip", "netns", "exec", ps.ns, "tc", "-d", "class", "show",
                                "dev", ps.iface], capture_output=True, text=True,
                               check=True).stdout
    assert "class htb 1:1" in shown and " burst 512Kb" in shown, shown


def _sent_packets(stats: str) -> dict[str, int]:
    """Packets each qdisc of a ``tc -s qdisc show`` has sent, by handle."""
    out, handle = {}, None
    for line in stats.splitlines():
        if line.startswith("qdisc "):
            handle = line.split()[2]
        elif line.strip().startswith("Sent ") and handle:
            out[handle] = int(line.split()[3])
    return out


def test_addresses_and_names_stay_in_bounds() -> None:
    with Topology(num_ps=2, num_workers=3) as topo:
        for n in topo.nodes:
            assert n.addr.startswith(("198.18.", "198.19.")) and len(n.iface) <= 15
            out = subprocess.run(
                ["ip", "-n", n.ns, "-4", "-o", "addr"], capture_output=True, text=True, check=True
            ).stdout
            addrs = [line.split()[3] for line in out.splitlines()]
            assert sorted(addrs) == sorted(["127.0.0.1/8", f"{n.addr}/24"])
        assert all(ns.startswith(topo.prefix) for ns in topo.namespaces())
        prefix = topo.prefix
    assert list_lab_namespaces(prefix) == []


def test_tcp_cc_is_set_in_every_namespace() -> None:
    allowed = netns.allowed_tcp_cc()
    assert allowed, "the kernel lists no allowed TCP congestion control"
    cc = allowed[-1]
    with Topology(num_ps=1, num_workers=1, tcp_cc=cc) as topo:
        for ns in topo.namespaces():
            out = subprocess.run(
                ["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.tcp_congestion_control"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
            assert out == cc, ns


def test_teardown_on_exception_kills_children_and_deletes_namespaces() -> None:
    pid, prefix = None, None
    with pytest.raises(RuntimeError, match="boom"), Topology(1, 1, bandwidth="50mbit") as topo:
        prefix = topo.prefix
        proc = topo.spawn(topo.workers[0], [sys.executable, "-c", "import time; time.sleep(60)"])
        pid = proc.pid
        assert pid_alive(pid) and len(list_lab_namespaces(prefix)) == 3
        time.sleep(0.3)  # let `ip netns exec` exec python
        status = Path(f"/proc/{pid}/status").read_text()
        blocked = next(x for x in status.splitlines() if x.startswith("SigBlk:")).split()[1]
        assert int(blocked, 16) & (1 << (signal.SIGTERM - 1)) == 0  # nodes must see SIGTERM
        raise RuntimeError("boom")
    assert not pid_alive(pid)
    assert list_lab_namespaces(prefix) == []


def test_teardown_on_sigterm(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(SCRIPTS)!r})
        from gradwire.replay.netns import Topology
        with Topology(1, 2, bandwidth="10mbit") as topo:
            p = topo.spawn(topo.ps[0], [sys.executable, "-c", "import time; time.sleep(60)"])
            print(topo.prefix, p.pid, flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        prefix, child = proc.stdout.readline().split()
        assert len(list_lab_namespaces(prefix)) == 4
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert not pid_alive(int(child))
    assert list_lab_namespaces(prefix) == []


@pytest.mark.usefixtures("_tf")
def test_failing_worker_is_reported_and_cleaned_up(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(
        f'#!/bin/sh\ncase "$*" in *"--role worker"*) exit 3;; esac\nexec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    prefix = netns.new_prefix()
    cfg = LabConfig(
        model_mb=2,
        steps=3,
        workers=2,
        bandwidth="100mbit",
        python=str(fake),
        work_dir=str(tmp_path / "work"),
        timeout_s=60,
    )
    t0 = time.monotonic()
    with pytest.raises(LabError, match=r"worker\d exited with code 3"):
        run_lab(cfg, prefix=prefix)
    assert time.monotonic() - t0 < 30
    assert list_lab_namespaces(prefix) == []
    subnet = netns.subnet_for(prefix)
    assert _proc_cmdlines_containing(f'"{subnet}.10:2222"') == []  # the PS is gone too


def test_cli_bad_argument_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "lab"), "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "workers" in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "lab"), "--bandwidth", "fast"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "bad rate 'fast'" in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--collect", "{afile}"], "it is a file, not a folder"),
    (["--collect", "{tmp}/b", "--steps", "6"], "steps 6 <= trace-first 10"),
    (["--collect", "{tmp}/b", "--trace-steps", "0"], "trace-steps 0 >= 1"),
    (["--collect", "{tmp}/old"], "worker0 already hold(s) bundles"),
    (["--out", "{afile}/r.json"], "not a folder"),
    (["--timeout", "-1"], "bad timeout -1.0"),
])
def test_cli_checks_its_outputs_before_building_a_cluster(tmp_path: Path, args, fragment) -> None:
    need_root()
    (tmp_path / "afile").write_text("")
    (tmp_path / "old" / "worker0").mkdir(parents=True)
    (tmp_path / "old" / "worker0" / "manifest.json").write_text("{}")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "lab"),
         *(a.format(afile=tmp_path / "afile", tmp=tmp_path) for a in args)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert fragment in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 20  # refused up front, no cluster built


def test_cli_result_json(tmp_path: Path) -> None:
    need_tf()
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "lab"),
            "--model",
            "convnet",
            "--batch-size",
            "8",
            "--steps",
            "4",
            "--workers",
            "1",
            "--bandwidth",
            "100mbit",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["throughput_examples_per_s"] > 0 and r["per_worker"]["worker0"]["steps"] == 4
    assert "throughput" in proc.stdout
    assert list_lab_namespaces(r["prefix"]) == []


def test_collect_wraps_every_node_and_passes_grpc_options(tmp_path: Path) -> None:
    from lab.cluster import _node_command, _node_env

    cfg = LabConfig(collect_dir=str(tmp_path / "bundles"), grpc_options="grpc.http2.bdp_probe=0",
                    ps_strategy="round-robin")
    node = netns.Node("worker", 1, "gwl000000-w1", "gwl000000n2", "gwl000000b2", "198.18.0.101")
    cluster = {"ps": ["198.18.0.10:2222"], "worker": ["198.18.0.100:2222", "198.18.0.101:2222"]}
    cmd = _node_command(cfg, node, cluster, tmp_path / "worker1.json")
    sep = cmd.index("--")
    assert cmd[1:4] == ["-m", "gradwire", "collect"]
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "bundles" / "worker1")
    assert cmd[cmd.index("--iface") + 1] == "gwl000000n2"
    assert cmd[cmd.index("--ports") + 1] == "2222"
    assert cmd[sep + 1 :][1:3] == ["-m", "lab.node"]
    assert cmd[cmd.index("--ps-strategy") + 1] == "round-robin"
    with pytest.raises(LabError, match="bad ps strategy 'random'"):
        LabConfig(ps_strategy="random").validate()
    env = _node_env(cfg, node, cluster)
    assert env["TF_GRPC_DEFAULT_OPTIONS"] == "grpc.http2.bdp_probe=0"
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


@pytest.mark.usefixtures("_tf")
def test_lab_run_under_collect_gives_complete_bundles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundles = tmp_path / "bundles"
    monkeypatch.chdir(tmp_path)  # a relative --collect is the caller's, not the nodes' cwd
    res = run_lab(LabConfig(model="mlp", model_mb=2.0, workers=1, ps=1, steps=8,
                            bandwidth="200mbit", collect_dir="bundles", trace_first=3,
                            trace_steps=2, work_dir=str(tmp_path / "work")))
    assert res["throughput_examples_per_s"] > 0
    assert list_lab_namespaces(res["prefix"]) == []
    ps, worker = open_bundle(bundles / "ps0"), open_bundle(bundles / "worker0")
    assert ps.manifest["status"] == "stopped" and worker.manifest["status"] == "complete"
    assert worker.steps == [3, 4]
    for b in (ps, worker):
        cap = b.manifest["capture"]
        assert cap["packets_captured"] > 0
        assert cap["drops_kernel"] == cap["drops_capturer"] == cap["drops_iface"] == 0
        assert b.manifest["host"]["addresses"][0].startswith("198.1")  # the node's own netns
    report = summarize(worker)
    assert report["problems"] == [] and report["nodes"] == ["ps:0", "worker:0"]
    for step in report["steps"]:
        assert set(step["trace_bytes"]) == {"ps:0 -> worker:0", "worker:0 -> ps:0"}
        for direction, tensor_bytes in step["trace_bytes"].items():
            assert tensor_bytes <= step["capture_bytes"][direction] <= 1.02 * tensor_bytes + 4096
    # the sent gradients found in the worker's capture and held until they left it: a
    # 1.2 MB gradient takes 50 ms at 200 Mbit/s, so it outlives its last reader. How the
    # estimate sits against TensorFlow's records varies from run to run on this small job
    # (the socket's buffer may take a gradient whole, gRPC may release it late on a busy
    # host): docs/opdb.md, "Peak memory"; the accuracy is the registered report's
    from gradwire.collector.opingest import own_steps
    from gradwire.replay.memory import estimated_peak_bytes
    from gradwire.replay.sentholds import bundle_holds

    steps = list(own_steps(worker, compute_only=False))
    holds, note = bundle_holds(worker)
    assert note is None and len(holds) == len(steps) == 2
    longer = []
    for held, (_, _, _, mine) in zip(holds, steps, strict=True):
        assert len(held) >= 2, held  # the gradients
        ends = {o.name: o.end_us for o in mine}
        assert all(t >= ends[node] for (node, _), t in held.items() if node in ends)
        with_holds = estimated_peak_bytes(mine, received=False, held_until=held)
        freed = estimated_peak_bytes(mine, received=False)
        assert with_holds >= freed
        longer.append(with_holds > freed)
    assert any(longer)


@pytest.mark.slow
@pytest.mark.usefixtures("_tf")
def test_capture_steps_end_every_capture_and_the_job_runs_on(tmp_path: Path) -> None:
    """`--capture-steps 8` of 18: once the worker has run 8 steps every node's `gradwire
    collect` ends its capture (SIGUSR1) and the job runs on, with `--uncaptured-s 3` beyond
    its 18 steps (of about 0.2 s) until 3 s after the captures ended; the hook times every
    step, so the profile holds captured and uncaptured steps, and predict says what it
    compared. The
    work dir holds an earlier run's result (a bench run again): its 18 step ends must not be
    read as this run's, which would end the captures at once."""
    bundles = tmp_path / "bundles"
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "worker0.json").write_text(json.dumps(
        {"step_end_times_s": [time.time() - 60 + i for i in range(18)], "done": True}))
    res = run_lab(LabConfig(model="mlp", model_mb=2.0, workers=1, ps=1, steps=18,
                            bandwidth="200mbit", collect_dir=str(bundles), capture_steps=8,
                            uncaptured_s=3.0, trace_first=3, trace_steps=2,
                            work_dir=str(tmp_path / "work")))
    (bundles / "lab_result.json").write_text(json.dumps(res))
    ps, worker = open_bundle(bundles / "ps0"), open_bundle(bundles / "worker0")
    for b in (ps, worker):
        assert b.manifest["capture_ended"] == "SIGUSR1"
        assert b.manifest["capture"]["packets_captured"] > 0
    assert worker.manifest["status"] == "complete" and worker.steps == [3, 4]
    starts = worker.session["step_starts_unix_s"]
    ends = res["per_worker"]["worker0"]["step_end_times_s"]
    assert len(starts) == len(ends) > 18  # ran on past --steps
    assert res["capture_ended_s"] + 3.0 <= ends[-1] < res["capture_ended_s"] + 3.0 + 1.0
    ended = max(b.manifest["capture"]["stopped_ns"] for b in (ps, worker)) / 1e9
    assert starts[8] <= ended < starts[-1]  # the capture ended after step 8, before the end
    from gradwire.replay.profile import load_profile

    captured, free = load_profile([bundles]).recording_cycles_us
    assert len(captured) >= 2 and len(free) >= 5
    out = tmp_path / "p.json"
    proc = gradwire("predict", str(bundles), "--workers", "1", "--quiet", "--json", str(out),
                    timeout=600)
    assert proc.returncode == 0, proc.stderr
    cost = json.loads(out.read_text())["profile"]["recording_cost"]
    assert (cost["captured_steps"], cost["uncaptured_steps"]) == (len(captured), len(free))
    # the steps after the captures ended, their rate and CPU: the host's bound on the rows
    after = res["uncaptured"]
    assert ended < after["window_s"][0] < after["window_s"][1] <= starts[-1] + 5
    assert after["steps_per_s"] > 0 and 0 < after["cpu_share_total"] <= res["cpu_count"]
    assert 0 < after["host_cpu"] <= res["cpu_count"]
    ticks = res["per_worker"]["worker0"]["host_ticks_at_step_end"]
    assert len(ticks) == len(ends) and all(len(k) == 3 for k in ticks)  # busy, softirq, steal
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(ticks, ticks[1:], strict=False))
    bound = json.loads(out.read_text())["profile"]["host_cpu"]
    assert bound["cores"] == res["cpu_count"] and bound["rows_lowered"] == 0
    assert bound["cpu_s_per_step"] == pytest.approx(after["host_cpu"] / after["steps_per_s"])
    with pytest.raises(LabError, match="bad capture-steps 4: it must cover the traced steps"):
        LabConfig(collect_dir=str(tmp_path / "x"), capture_steps=4, trace_first=3,
                  trace_steps=2).validate()
    with pytest.raises(LabError, match="give --collect"):
        LabConfig(capture_steps=12).validate()
    with pytest.raises(LabError, match="bad uncaptured-s 2.0: it needs capture-steps"):
        LabConfig(uncaptured_s=2.0).validate()


@pytest.mark.usefixtures("_tf")
def test_run_together_keeps_every_worker_stepping_until_all_have_their_steps(
        tmp_path: Path) -> None:
    """Two asynchronous workers of 12 short steps (a 2 MB MLP at 500 Mbit/s), started apart
    by TensorFlow's start: with run_together each runs on past its 12 until every worker has
    ended 12 (the orchestrator's flag), so the window in which both run reaches past every
    worker's 12th step, where without it the first to finish would close it early. The
    work dir holds an earlier run's flag, which must not stop these workers at once."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "all_stepped").write_text(repr(time.time() - 60))
    res = run_lab(LabConfig(model="mlp", model_mb=2.0, workers=2, ps=1, steps=12,
                            bandwidth="500mbit", run_together=True,
                            work_dir=str(tmp_path / "work")))
    ends = [w["step_end_times_s"] for w in res["per_worker"].values()]
    assert len(ends) == 2 and all(len(e) >= 12 for e in ends)
    flag = res["all_stepped_s"]
    assert flag >= max(e[11] for e in ends)  # written once both had 12 steps
    # each ran on until its first step end after the flag (a step is well under a second)
    assert all(flag - 0.5 < e[-1] < flag + 2.0 for e in ends)
    t0, t1 = res["throughput_window_s"]
    assert t1 >= max(e[11] for e in ends) - 0.1 and res["throughput_examples_per_s"] > 0
    assert res["config"]["run_together"] is True
    for bad in (LabConfig(run_together=True, mode="sync"),
                LabConfig(run_together=True, collect_dir=str(tmp_path / "b"), capture_steps=12,
                          uncaptured_s=2.0, trace_first=3, trace_steps=2)):
        with pytest.raises(LabError, match="run-together is for asynchronous workers"):
            bad.validate()


def test_a_worker_runs_on_until_some_seconds_after_the_captures_ended(tmp_path: Path) -> None:
    from lab.node import runs_on

    flag = tmp_path / "captures_ended"
    assert not runs_on(None, 3.0, 0.0)  # no file to wait for: --steps only
    assert runs_on(str(flag), 3.0, 0.0)  # the captures have not ended yet
    flag.touch()  # no time in it: its modification time
    written = flag.stat().st_mtime
    assert runs_on(str(flag), 3.0, written + 2.9)
    assert not runs_on(str(flag), 3.0, written + 3.0)
    # the orchestrator writes the time the captures ended (its clock, not the file's coarse
    # one, which can be a tick behind: a worker stopped 5 ms early once)
    flag.write_text(repr(1000.0))
    assert runs_on(str(flag), 3.0, 1002.999) and not runs_on(str(flag), 3.0, 1003.0)


def test_uncaptured_cpu_comes_from_the_step_ends_when_the_sampler_missed_the_window() -> None:
    """A job of 50 ms steps runs 0.4 s after its captures: the sampler (every 0.5 s) reads
    the machine once in it, the workers' step-end readings give its CPU all the same."""
    from lab.cluster import _HostCpu, uncaptured_measures

    from gradwire.procstat import CLK_TCK

    ended = 100.0
    ends = [ended + 0.03 + 0.05 * i for i in range(10)]  # 0.05 s steps after the capture
    # 1.5 cores busy (softirq 0.1, 0.2 stolen) from counters at 1000, 10 and 50 ticks when
    # the capture ended
    ticks = [tuple(round(c + r * CLK_TCK * (t - ended)) for c, r in ((1000, 1.5), (10, 0.1),
                                                                      (50, 0.2)))
             for t in ends]
    host = _HostCpu(samples=[(ended - 0.2, 0, 0, 0), (ended + 0.3, 1045, 13, 56)])
    after = uncaptured_measures(
        {"worker0": {"step_end_times_s": ends, "host_ticks_at_step_end": ticks}},
        ended, [], host)
    assert after is not None
    assert after["steps_per_s"] == pytest.approx(20.0)
    assert after["host_cpu"] == pytest.approx(1.5, rel=0.05)
    assert after["host_steal"] == pytest.approx(0.2, rel=0.1)
    # without the workers' readings one sample lies in the window: no measure
    no_ticks = {"worker0": {"step_end_times_s": ends}}
    assert uncaptured_measures(no_ticks, ended, [], host) is None


def test_summary_notes_a_cpu_bound_run(capsys) -> None:
    """The shipped sample's real lab result, as if its nodes had used 1.9 of 2 cores."""
    from lab.cli import _summary

    r = json.loads((ROOT / "tests/data/small_bundle/lab_result.json").read_text())
    _summary(r)
    assert "cores in the window" not in capsys.readouterr().err
    r.update(cpu_share_window_total=1.9, cpu_count=2)
    _summary(r)
    err = capsys.readouterr().err
    assert "used 1.90 of this machine's 2 cores in the window" in err
    assert "hypervisor" not in err  # the sample predates the steal's record
    r.update(host_steal_window=0.15)
    _summary(r)
    assert "hypervisor" not in capsys.readouterr().err  # within a tenth of the 2 cores
    r.update(host_steal_window=0.66)
    _summary(r)
    assert "the machine lost 0.66 of its 2 cores to its hypervisor" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("_tf")
def test_predict_counts_the_retransmissions_of_an_overflowing_queue(tmp_path: Path) -> None:
    """A real 1-worker profile through a 250 Mbit/s link with a 128 KiB queue and loss-based
    Reno, which overflows it: `gradwire predict` counts the retransmissions, says so, and
    starts each worker in its own slot of the step at every rate (--start auto)."""
    bundles = tmp_path / "bundles"
    res = run_lab(LabConfig(model="mlp", model_mb=8.0, workers=1, ps=1, steps=10,
                            bandwidth="250mbit", queue="128k", tcp_cc="reno",
                            collect_dir=str(bundles), trace_first=3, trace_steps=3,
                            work_dir=str(tmp_path / "work")))
    (bundles / "lab_result.json").write_text(json.dumps(res))  # the profile's rate, batch size
    out = tmp_path / "p.json"
    proc = gradwire("predict", str(bundles), "--workers", "2", "--bandwidth", "250Mbit,1Gbit",
                    "--replications", "2", "--max-replications", "2", "--quiet", "--json",
                    str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["profile"]["transport"]["retransmitted_share"] > 0.003
    starts = {r["bandwidth_bps"]: r["start"] for r in doc["rows"]}
    assert starts == {250e6: "stratified", 1e9: "stratified"}
    note = next(n for n in doc["notes"] if "retransmitted" in n)
    assert "start each worker in its own slot of the step (--start auto)" in note
    assert f"{100 * doc['profile']['transport']['retransmitted_share']:.1f}%" in note
