"""`gradwire collect`: bad inputs, attach mode with each capture tool, and signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_one_line_error, gradwire, need_root
from loopback import free_ports

from gradwire.bundle import open_bundle
from gradwire.collector.collect import cluster_ports
from gradwire.collector.pcapfile import PcapReader
from gradwire.errors import CollectError


def test_port_filter_folds_ranges():
    from gradwire.collector.capture import port_filter

    assert port_filter([2223, 2222]) == "tcp and (portrange 2222-2223)"
    assert port_filter([3000, 2222, 2224, 2223]) == "tcp and (portrange 2222-2224 or port 3000)"
    assert port_filter(list(range(1, 65536))) == "tcp and (portrange 1-65535)"  # no E2BIG


def test_cluster_ports_from_tf_config():
    cfg = {"cluster": {"ps": ["a:2222"], "worker": ["b:2223", "c:2223"]}}
    assert cluster_ports(json.dumps(cfg)) == [2222, 2223]
    assert cluster_ports(None) == []
    with pytest.raises(CollectError, match="not valid JSON"):
        cluster_ports("{nope")
    with pytest.raises(CollectError, match="no 'cluster'"):
        cluster_ports("{}")
    # TensorFlow's resolver also takes each job's tasks by index
    by_index = {"cluster": {"ps": {"0": "a:2222"}, "worker": {"0": "b:2223", "1": "c:2224"}}}
    assert cluster_ports(json.dumps(by_index)) == [2222, 2223, 2224]
    with pytest.raises(CollectError, match="field cluster.ps is 'a:2222', not a list"):
        cluster_ports('{"cluster": {"ps": "a:2222"}}')
    with pytest.raises(CollectError, match="no 'cluster'"):
        cluster_ports("[1]")


def test_a_broken_tf_config_beside_ports_is_left_out_of_the_bundle(tmp_path):
    """With --ports, a TF_CONFIG that is not JSON was a traceback, and one of another shape
    made a bundle its own reader refused ("field task is 'ps', not an object")."""
    need_root()
    for k, tf_config in enumerate(('{"cluster": ', '{"cluster":{"ps":["h:2222"]},"task":"ps"}')):
        out = tmp_path / f"b{k}"
        proc = gradwire("collect", "--out", str(out), "--iface", "lo", "--ports", "9", "--",
                        "true", env=dict(os.environ, TF_CONFIG=tf_config))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "warning: TF_CONFIG" in proc.stderr and "not recorded" in proc.stderr
        m = open_bundle(out).manifest  # readable
        assert m["task"] is None and any("not recorded" in p for p in m["problems"])


BAD = [
    ("no command", ["--ports", "2222"], {}, "nothing to run"),
    ("command not found", ["--ports", "2222", "--", "no-such-cmd-xyz"], {}, "command not found"),
    ("no such path", ["--ports", "2222", "--", "./no-such-cmd-xyz"], {},
     "cannot run ./no-such-cmd-xyz: no such file"),
    ("no ports", ["--", "true"], {}, "which ports?"),
    ("bad TF_CONFIG", ["--", "true"], {"TF_CONFIG": "{oops"}, "TF_CONFIG is not valid JSON"),
    ("TF_CONFIG of another shape", ["--", "true"], {"TF_CONFIG": '{"cluster": {"ps": "h:1"}}'},
     "TF_CONFIG: field cluster.ps is 'h:1', not a list of 'host:port' strings"),
    ("port out of range", ["--ports", "70000", "--", "true"], {},
     "not a TCP port (1-65535): 70000"),
    ("ports not numbers", ["--ports", "ab", "--", "true"], {}, "comma-separated numbers"),
    ("half-open port range", ["--ports", "2222-", "--", "true"], {},
     "(2222,2223 or 2222-2225): '2222-'"),
    ("attach with command", ["--attach", "--ports", "1", "--", "true"], {}, "give no command"),
    ("negative duration", ["--attach", "--duration", "-1", "--ports", "1"], {}, "positive"),
    ("tiny snaplen", ["--snaplen", "10", "--ports", "1", "--", "true"], {},
     "argument --snaplen: must be at least 64 bytes: '10'"),
    ("zero duration with a command", ["--duration", "0", "--ports", "1", "--", "true"], {},
     "--duration must be positive seconds, not 0"),
    ("no buffer", ["--buffer-mib", "-5", "--ports", "1", "--", "true"], {},
     "argument --buffer-mib: must be at least 1 MiB: '-5'"),
    ("snaplen not a number", ["--snaplen", "big", "--ports", "1", "--", "true"], {},
     "argument --snaplen: not a whole number of bytes: 'big'"),
    ("an empty port", ["--ports", "2222,,2223", "--", "true"], {}, "empty item in '2222,,2223'"),
    # the options' own faults come before the question of the ports
    ("no ports and no command", [], {}, "nothing to run"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_one_line(tmp_path, case):
    _, args, env, fragment = case
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"} | env
    proc = gradwire("collect", "--out", str(tmp_path / "b"), *args, env=env)
    assert_one_line_error(proc, fragment)
    assert proc.returncode == (127 if case[0] in ("command not found", "no such path") else 2)
    assert not (tmp_path / "b").exists()  # refused before anything was made


def test_existing_bundle_is_never_overwritten(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "manifest.json").write_text('{"keep": true}')
    proc = gradwire("collect", "--out", str(out), "--ports", "1", "--", "true")
    assert_one_line_error(proc, "already holds a bundle", str(out))
    assert (out / "manifest.json").read_text() == '{"keep": true}'
    # a failed run's bundle: said, with what to do, and still kept
    (out / "manifest.json").write_text('{"status": "failed"}')
    proc = gradwire("collect", "--out", str(out), "--ports", "1", "--", "true")
    assert_one_line_error(proc, "already holds a failed bundle", "delete it to collect there")
    assert (out / "manifest.json").read_text() == '{"status": "failed"}'


def test_bad_interface_names_it(tmp_path):
    need_root()
    proc = gradwire("collect", "--out", str(tmp_path / "b"), "--iface", "nosuchif0",
                    "--ports", "1", "--", "true")
    assert_one_line_error(proc, "did not start on interface 'nosuchif0'")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["status"] == "failed"


def _wait_for_manifest(out, ready, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if ready(json.loads((out / "manifest.json").read_text())):
                return
        except FileNotFoundError:
            pass
        assert time.monotonic() < deadline, "collect never got ready"
        time.sleep(0.1)


def _echo_server(port: int, stop: threading.Event) -> socket.socket:
    srv = socket.create_server(("127.0.0.1", port))
    srv.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return srv


@pytest.mark.root
@pytest.mark.parametrize("tool, iface", [("dumpcap", "lo"), ("tcpdump", "lo"), ("scapy", "lo"),
                                         ("dumpcap", "any"), ("tcpdump", "any")])
def test_attach_captures_traffic_beside_a_running_server(tmp_path, tool, iface):
    """Each tool, on loopback (NULL/Ethernet link types) and on 'any' (Linux cooked SLL/SLL2)."""
    need_root()
    (port,) = free_ports(1)
    stop = threading.Event()
    srv = _echo_server(port, stop)
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradwire", "collect", "--attach", "--duration", "4",
         "--out", str(out), "--iface", iface, "--ports", str(port), "--tool", tool],
        stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_manifest(out, lambda m: m["capture"] is not None)
        time.sleep(0.5)
        payload = os.urandom(200_000)
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(payload)
            c.shutdown(socket.SHUT_WR)
            echoed = b""
            while chunk := c.recv(65536):
                echoed += chunk
        assert echoed == payload
        _, err = proc.communicate(timeout=30)
    finally:
        _close(stop, srv, proc)
    assert proc.returncode == 0, err
    bundle = open_bundle(out)
    m = bundle.manifest
    assert m["status"] == "complete" and m["mode"] == "attach"
    assert m["host"]["cpu_count"] >= 1  # the cores this host gives (predict's PS-core note)
    assert any(p["role"] == "listener" and p["pid"] == os.getpid() for p in m["processes"])
    # bytes of the stream each way: the union of the segments' sequence ranges, since a
    # segment can appear twice (seen with scapy on lo, about 1 run in 10: 219,968 bytes of
    # segments for the 200,000 sent)
    pkts = list(PcapReader(bundle.capture_file))
    sent = _stream_bytes([p for p in pkts if p.dport == port])
    back = _stream_bytes([p for p in pkts if p.sport == port])
    assert sent == back == len(payload), (tool, iface, sent, back, m["capture"])
    assert m["capture"]["tool"] == tool
    assert (out / "capture.log").read_text().strip(), "every tool leaves its capture.log"
    assert m["clock_samples"]["end"]["realtime_ns"] > m["clock_samples"]["start"]["realtime_ns"]


@pytest.mark.root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_is_forwarded_and_bundle_closed(tmp_path, sig):
    need_root()
    out = tmp_path / "b"
    marker = tmp_path / "got-signal"
    child = (f"import signal,sys,time; signal.signal({int(sig)}, lambda *a: "
             f"(open({str(marker)!r},'w').write('x'), sys.exit(3))); time.sleep(60)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradwire", "collect", "--out", str(out), "--iface", "lo",
         "--ports", "9", "--", sys.executable, "-c", child],
        stderr=subprocess.PIPE, text=True)
    _wait_for_manifest(out, lambda m: any(p["role"] == "command" for p in m["processes"]))
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert marker.exists(), "the command did not receive the signal"
    assert proc.returncode == 3, err
    m = open_bundle(out).manifest
    assert m["status"] == "stopped" and m["stop_signal"] == int(sig) and m["exit_code"] == 3
    assert m["capture"]["packets_captured"] == 0
    assert list(PcapReader(out / "capture.pcapng")) == []


@pytest.mark.root
@pytest.mark.parametrize("how", ["duration", "SIGUSR1"])
def test_the_capture_can_end_while_the_command_runs_on(tmp_path, how):
    """`--duration` with a command, or SIGUSR1 to collect, stops the capture and leaves the
    command running: traffic after the end is not in the capture, the command's exit code and
    the bundle's completeness are kept, and the manifest says when and why it ended."""
    need_root()
    (port,) = free_ports(1)
    stop = threading.Event()
    srv = _echo_server(port, stop)
    out = tmp_path / "b"
    go_on = tmp_path / "go-on"
    # the command sends 1 KB now, waits for the test's word, then 2 KB, then exits 0
    child = ("import os, socket, sys, time\n"
             "def send(n):\n"
             f"    with socket.create_connection(('127.0.0.1', {port})) as c:\n"
             "        c.sendall(b'x' * n); c.shutdown(socket.SHUT_WR)\n"
             "        while c.recv(65536): pass\n"
             "send(1000)\n"
             f"while not os.path.exists({str(go_on)!r}): time.sleep(0.05)\n"
             "send(2000)\n")
    extra = ["--duration", "2"] if how == "duration" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradwire", "collect", "--out", str(out), "--iface", "lo",
         "--ports", str(port), *extra, "--", sys.executable, "-c", child],
        stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_manifest(out, lambda m: any(p["role"] == "command" for p in m["processes"]))
        if how == "SIGUSR1":
            time.sleep(1.0)
            proc.send_signal(signal.SIGUSR1)
        _wait_for_manifest(out, lambda m: m.get("capture_ended") is not None)
        go_on.write_text("x")
        _, err = proc.communicate(timeout=30)
    finally:
        _close(stop, srv, proc)
    assert proc.returncode == 0, err
    assert "the command runs on" in err
    m = open_bundle(out).manifest
    assert m["status"] == "complete"
    assert m["capture_ended"] == ("--duration 2 s" if how == "duration" else "SIGUSR1")
    assert m["capture"]["stopped_ns"] < m["clock_samples"]["end"]["realtime_ns"]
    # the machine's CPU over the capture (to its end, not the command's): the capture and the
    # command kept something busy; what the hypervisor took is measured, not known here
    cpu = m["host_cpu"]
    started_s = m["capture"]["started_ns"] / 1e9
    assert 0 < cpu["seconds"] <= m["capture"]["stopped_ns"] / 1e9 - started_s + 1.0
    assert 0 < cpu["busy_cores"] <= m["host"]["cpu_count"] + 0.5
    assert 0 <= cpu["stolen_cores"] <= m["host"]["cpu_count"]
    shown = gradwire("inspect", str(out))
    # a plain command, no TF_CONFIG: no task, so its missing steps are a note, not a problem
    assert shown.returncode == 0, shown.stderr
    assert "no recorded steps: the bundle names no TensorFlow task" in shown.stdout
    assert f"machine over the capture: {cpu['busy_cores']:.2f} cores busy" in shown.stdout
    pkts = list(PcapReader(out / "capture.pcapng"))
    assert _stream_bytes([p for p in pkts if p.dport == port]) == 1000  # not the later 2000


def test_exit_code_of_the_command_is_kept(tmp_path):
    need_root()
    proc = gradwire("collect", "--out", str(tmp_path / "b"), "--iface", "lo", "--ports", "9",
                    "--", sys.executable, "-c", "import sys; sys.exit(7)")
    assert proc.returncode == 7
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["status"] == "failed" and "exited with code 7" in m["problems"][0]


def test_a_crash_by_signal_is_a_failure_not_a_stop(tmp_path):
    need_root()
    proc = gradwire("collect", "--out", str(tmp_path / "b"), "--iface", "lo", "--ports", "9",
                    "--", "sh", "-c", "kill -ABRT $$")
    assert proc.returncode == 128 + signal.SIGABRT
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["status"] == "failed" and m["problems"] == ["command killed by signal 6 (SIGABRT)"]


@pytest.mark.root
def test_sigterm_reaches_what_the_command_started(tmp_path):
    """Off a terminal the command has its own process group, and a signal goes to all of it
    (a wrapper script's training process too)."""
    need_root()
    out = tmp_path / "b"
    pidfile = tmp_path / "grandchild.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradwire", "collect", "--out", str(out), "--iface", "lo",
         "--ports", "9", "--", "sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_manifest(out, lambda m: any(p["role"] == "command" for p in m["processes"]))
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    time.sleep(0.2)
    assert not Path(f"/proc/{grandchild}").exists() or \
        Path(f"/proc/{grandchild}/stat").read_text().split(")")[1].split()[0] == "Z"
    assert open_bundle(out).manifest["status"] == "stopped"


def _close(stop: threading.Event, srv: socket.socket, proc: subprocess.Popen) -> None:
    """Stop the echo server and kill collect if it is still running."""
    stop.set()
    srv.close()
    if proc.poll() is None:
        proc.kill()


def _stream_bytes(pkts: list) -> int:
    """Bytes of one TCP direction covered by its segments (sequence numbers modulo 2**32)."""
    if not pkts:
        return 0
    base = pkts[0].seq
    spans = sorted(((p.seq - base) % 2**32, (p.seq - base) % 2**32 + p.payload_bytes)
                   for p in pkts if p.payload_bytes)
    covered, end = 0, -1
    for a, b in spans:
        if b > end:
            covered += b - max(a, end)
            end = b
    return covered


@pytest.mark.root
@pytest.mark.slow
def test_wrong_ports_are_said_at_the_start_and_the_end(tmp_path):
    """Captured on a port the cluster does not use: the TraceHook recorded steps and the
    capture nothing, and the bundle was 'complete' with no problem."""
    need_root()
    from conftest import need_tf

    need_tf()
    (port,) = free_ports(1)
    out = tmp_path / "b"
    tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{port + 1}"]},
                            "task": {"type": "worker", "index": 0}})
    proc = subprocess.run(
        [sys.executable, "-m", "gradwire", "collect", "--out", str(out), "--iface", "lo",
         "--ports", str(port), "--", sys.executable, str(Path(__file__).parent / "hook_loop.py"),
         str(out)],
        env=dict(os.environ, TF_CONFIG=tf_config, HOOK_LOOP_STEPS="3"), capture_output=True,
        text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"TF_CONFIG's cluster listens on port(s) {port + 1}, which --ports leaves out" \
        in proc.stderr
    assert "though the TraceHook recorded 2 step(s)" in proc.stderr
    problems = open_bundle(out).manifest["problems"]
    assert any("no packet captured, though the TraceHook recorded 2" in p for p in problems)


@pytest.mark.root
def test_an_attach_that_captured_nothing_says_so(tmp_path):
    need_root()
    (port,) = free_ports(1)
    out = tmp_path / "b"
    proc = gradwire("collect", "--attach", "--duration", "1", "--out", str(out), "--iface", "lo",
                    "--ports", str(port))
    assert proc.returncode == 0, proc.stderr
    assert f"no packet on port(s) {port} of lo: is the training running there" in proc.stderr
    assert open_bundle(out).manifest["problems"] == ["no packet captured"]


def test_out_places_that_are_no_new_bundle_folder_are_refused(tmp_path):
    """`-o -` made a folder named '-'; a dangling link said 'File exists'; the shipped sample
    took a bundle, and then --sample no longer predicted."""
    from gradwire.bundle import SAMPLE_BUNDLE

    (tmp_path / "dl").symlink_to(tmp_path / "nowhere" / "zz")
    for out, fragment in (("-", "--out must be a folder ('-', standard output, is not one)"),
                          (str(tmp_path / "dl"), "--out is a symbolic link to nothing"),
                          (str(SAMPLE_BUNDLE / "worker1"),
                           "--out is in the sample shipped with gradwire")):
        proc = gradwire("collect", "--out", out, "--ports", "2222", "--", "true", cwd=tmp_path)
        assert_one_line_error(proc, fragment)
    assert not (tmp_path / "-").exists() and not (SAMPLE_BUNDLE / "worker1").exists()


def test_quiet_collect_says_its_warnings_only(tmp_path):
    need_root()
    proc = gradwire("collect", "-q", "--out", str(tmp_path / "b"), "--iface", "lo", "--ports",
                    "9", "--", "true", env=dict(os.environ, TF_CONFIG='{"cluster": '))
    assert proc.returncode == 0 and proc.stderr.startswith("gradwire collect: warning: "), \
        proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "capturing" not in proc.stderr
