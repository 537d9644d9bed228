"""Network namespaces, veth pairs, a bridge and ``tc`` shaping: the lab's and the emulator's links.

Every node (parameter server or worker) lives in its own network namespace. A "switch" namespace
holds a Linux bridge; each node namespace is joined to it by a veth pair. Nothing is created in
the root namespace: veth pairs are created inside the switch namespace with their node end moved
straight into the node namespace. Addresses come only from 198.18.0.0/15 (RFC 2544 benchmarking).

Names carry a per-run prefix, ``gwl`` + 6 hex chars (e.g. ``gwl3fa9c1``), so parallel runs never
collide and leftovers are recognisable: namespaces ``<prefix>-ps0``, ``<prefix>-w1``,
``<prefix>-sw``; links ``<prefix>n<k>`` (node side), ``<prefix>b<k>`` (bridge side) and
``<prefix>br`` (all <= 15 characters, the Linux limit).

Shaping (per shaped link, both directions): an HTB root with one class at the requested rate on
the node-side veth (node egress, e.g. PS -> workers) and on the bridge-side veth (egress towards
the node, e.g. workers -> PS); a ``netem`` delay child under each class when a delay is asked for
(needs ``sch_netem`` in the kernel; a clear error otherwise).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from gradwire.bundle import tcp_congestion_control
from gradwire.replay.hostqueue import lab_queue_bytes

log = logging.getLogger(__name__)

LAB_PREFIX = "gwl"
MAX_PS, MAX_WORKERS = 50, 100  # the most nodes of each kind one Topology builds
PORT = 2222
# the last byte of each node's address: ps i at PS_HOST0 + i, worker i at WORKER_HOST0 + i
PS_HOST0, WORKER_HOST0 = 10, 100
_PREFIX_RE = re.compile(r"^gwl[0-9a-f]{6}$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)?\s*$", re.IGNORECASE)
_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s)?\s*$", re.IGNORECASE)
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


class LabError(Exception):
    """A lab failure with a one-line message (bad argument, missing kernel feature, ip/tc error)."""


def parse_rate_bps(rate: str) -> float:
    """Parse a tc-style rate ('100mbit', '1gbit', '500kbit', '1000000') into bits per second."""
    m = _RATE_RE.match(str(rate))
    if not m:
        raise LabError(f"bad rate {rate!r}: expected e.g. '100mbit' or '1gbit'")
    bps = float(m.group(1)) * _RATE_UNITS[(m.group(2) or "bit").lower()]
    if bps <= 0:
        raise LabError(f"bad rate {rate!r}: must be > 0")
    return bps



BURSTS = ("gso", "mtu")  # the shaped links' HTB burst (Topology.burst)
QDISCS = ("fifo", "fair", "ackfirst")  # how a shaped link's buffer serves its flows
ACK_BYTES = 128  # an IP packet shorter than this is a pure ACK or a request ('ackfirst')
MTU_FRAME = 1514  # bytes of a full Ethernet frame (1500 MTU + 14 header)


def queue_bytes(queue: str | None, rate_bps: float | None) -> int | None:
    """The bottleneck buffer of a shaped link, bytes, from a ``--queue`` value.

    None or '': the lab's default, 10 ms of ``rate_bps`` and at least 256 KiB (a switch port's
    buffer, not the seconds of queue the kernel's default holds with GSO packets); 'kernel':
    None, the kernel's default queue (``txqueuelen`` packets); else a size in bytes, with k/m
    for KiB/MiB ('512k', '2m', '300000').
    """
    text = "" if queue is None else str(queue).strip().lower()
    if text == "kernel":
        return None
    if text == "":
        return int(lab_queue_bytes(rate_bps or 0))  # one definition, the replay's too
    value = size_bytes(text)
    if value is None:
        raise LabError(f"bad queue {queue!r}: expected bytes (512k, 2m), or 'kernel'")
    if value < 2 * 65536:
        raise LabError(f"bad queue {queue!r}: need >= 128k (two 64 KiB GSO packets)")
    return value


def size_bytes(text: str) -> int | None:
    """Bytes of a size as the lab's options write it ('512k', '2m', '300000'; k and m are KiB
    and MiB), None if it is not one."""
    text = text.strip().lower()
    scale = {"k": 1024, "m": 1024 * 1024}.get(text[-1:], 1)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value > 0 else None


def burst_bytes(burst: str, rate_bps: float) -> int:
    """The HTB burst (bytes) of a link of ``rate_bps`` for a ``--burst`` value: 'gso',
    max(128 KiB, 1 ms of the rate), since veths pass GSO packets of up to 64 KiB and HTB's
    timer granularity must not cap the rate; 'mtu' (GSO off), max(4 frames, 1 ms); or a size,
    at least the 'gso' one (a smaller bucket would cap the rate with GSO on)."""
    gso = max(65536 * 2, int(rate_bps / 8 / 1000))
    if burst == "gso":
        return gso
    if burst == "mtu":
        return max(4 * MTU_FRAME, int(rate_bps / 8 / 1000))
    value = size_bytes(burst)
    if value is None:
        raise LabError(f"bad burst {burst!r}: expected {' or '.join(BURSTS)}, or a size (512k)")
    if value < gso:
        raise LabError(f"bad burst {burst!r}: a bucket under {gso:,} bytes (128 KiB or 1 ms of "
                       f"the rate) caps the rate with GSO on; use 'mtu' for a small one")
    return value


def check_qdisc(qdisc: str, queue: int | None, delay_s: float) -> None:
    """Refuse a ``qdisc`` (``QDISCS``) that cannot apply: 'fair' and 'ackfirst' need a byte
    queue and no delay (netem would bring its own FIFO)."""
    if qdisc not in QDISCS:
        raise LabError(f"bad qdisc {qdisc!r}: expected {', '.join(QDISCS)}")
    if qdisc != "fifo" and (queue is None or delay_s):
        raise LabError(f"qdisc {qdisc!r} needs a byte queue (not 'kernel') and no delay")


def _htb_class(ns: str, dev: str, parent: str, classid: str, rate: str, ceil: str,
               burst: int, quantum: int, prio: int | None = None) -> None:
    """An HTB class on ``dev`` guaranteed ``rate``, borrowing up to ``ceil`` (tc rates), of
    HTB priority ``prio`` if given (0 is served first)."""
    _tc(ns, "class", "add", "dev", dev, "parent", parent, "classid", classid, "htb",
        "rate", rate, "ceil", ceil, "burst", str(burst), "cburst", str(burst),
        "quantum", str(quantum), *(() if prio is None else ("prio", str(prio))))


def _bfifo(ns: str, dev: str, parent: str, handle: str, limit_bytes: int) -> None:
    """A byte FIFO of ``limit_bytes`` under class ``parent`` of ``dev``."""
    _tc(ns, "qdisc", "add", "dev", dev, "parent", parent, "handle", handle, "bfifo", "limit",
        str(limit_bytes))


def _proc_words(name: str) -> list[str]:
    path = Path("/proc/sys/net/ipv4") / name
    return path.read_text().split() if path.exists() else []


def allowed_tcp_cc() -> list[str]:
    """TCP congestion controls a lab namespace may use: the kernel lets a namespace other than
    the host's pick only those in the host's ``net.ipv4.tcp_allowed_congestion_control``."""
    return _proc_words("tcp_allowed_congestion_control")


def host_tcp_cc() -> str | None:
    """The congestion control a new namespace starts with (the host's default)."""
    return tcp_congestion_control()


def check_tcp_cc(cc: str | None) -> None:
    """Raise LabError unless ``cc`` is None or a congestion control a namespace may use."""
    if cc is None:
        return
    allowed = allowed_tcp_cc()
    if cc not in allowed:
        raise LabError(
            f"bad tcp-cc {cc!r}: a namespace may use only the host's "
            f"net.ipv4.tcp_allowed_congestion_control ({' '.join(allowed) or 'none'})"
        )


def parse_delay_s(delay: str | None) -> float:
    """Parse a tc-style delay ('1ms', '200us', '0') into seconds; None or '' means 0."""
    if delay is None or str(delay).strip() in ("", "0"):
        return 0.0
    m = _TIME_RE.match(str(delay))
    if not m:
        raise LabError(f"bad delay {delay!r}: expected e.g. '1ms' or '200us'")
    return float(m.group(1)) * _TIME_UNITS[(m.group(2) or "s").lower()]


def run(cmd: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run an ip/tc command; raise LabError with its stderr on failure when ``check``."""
    log.debug("run: %s", " ".join(cmd))
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def _tc(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``tc ARGS`` inside network namespace ``ns``."""
    return run(["ip", "netns", "exec", ns, "tc", *args], check=check)


def new_prefix() -> str:
    """A fresh run prefix: 'gwl' + 6 random hex characters."""
    return LAB_PREFIX + secrets.token_hex(3)


def list_lab_namespaces(prefix: str = LAB_PREFIX) -> list[str]:
    """Names of existing network namespaces that start with ``prefix`` (default: any lab run)."""
    out = run(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix))


def cleanup_stale(prefix: str) -> list[str]:
    """Delete every namespace whose name starts with ``prefix``; return the names deleted.

    Deleting a namespace destroys the veths inside it (and so their peers). ``prefix`` must be a
    run prefix (``gwl`` + 6 hex) or exactly ``gwl`` (all lab runs: only when none is running).
    """
    if prefix != LAB_PREFIX and not _PREFIX_RE.match(prefix):
        raise LabError(f"refusing to clean prefix {prefix!r}: not 'gwl' or 'gwl' + 6 hex chars")
    deleted = []
    for name in list_lab_namespaces(prefix):
        if run(["ip", "netns", "del", name], check=False).returncode == 0:
            deleted.append(name)
    return deleted


def subnet_for(prefix: str) -> str:
    """The run's /24 inside 198.18.0.0/15 as 'a.b.c' (first three octets), from the prefix bits."""
    h = int(prefix[-4:], 16) % 512
    return f"198.{18 + h // 256}.{h % 256}"


@dataclass
class Node:
    """One lab node: its namespace, its node-side interface and its address (port 2222)."""

    role: str  # "ps" or "worker"
    index: int
    ns: str
    iface: str  # node-side veth name, inside ``ns``
    peer: str  # bridge-side veth name, inside the switch namespace
    addr: str  # IPv4 address, no prefix length
    shaped: bool = False

    @property
    def name(self) -> str:
        """'ps0', 'worker1', ..."""
        return f"{self.role}{self.index}"

    @property
    def endpoint(self) -> str:
        """'addr:2222', the TensorFlow server address of this node."""
        return f"{self.addr}:{PORT}"


def _terminate_tree(pid: int, grace_s: float) -> None:
    """SIGTERM ``pid``, wait up to ``grace_s`` seconds, then SIGKILL it and its descendants.

    Everything is addressed by PID (and by the process group the lab created for the child),
    never by name.
    """
    descendants = descendant_pids(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    for p in [pid, *descendants, *descendant_pids(pid)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # children were started with start_new_session=True


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def descendant_pids(pid: int) -> list[int]:
    """PIDs of all live descendants of ``pid`` (from /proc/*/stat parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@dataclass
class Topology:
    """Context manager: M PS + W worker namespaces on one bridge, PS links shaped both ways.

    Args:
        num_ps: number of parameter servers (1..50; 0 for a cluster of workers only, as ring
            all-reduce runs, which needs ``shape='all'``).
        num_workers: number of workers (1..100).
        bandwidth: tc rate of each shaped link, each direction ('100mbit', '1gbit'); None: no
            shaping.
        delay: one-way delay added on each shaped link, each direction ('1ms'); None/'0': none.
        shape: which links to shape: 'ps' (the parameter servers' links, default) or 'all'.
        queue: bottleneck buffer of each shaped link (a ``bfifo`` under the rate class), as
            ``queue_bytes`` reads it: None for 10 ms of the rate (at least 256 KiB), 'kernel'
            for the kernel's ``txqueuelen`` (1000) packets, which with 64 KiB GSO packets hold
            up to 64 MB (2 s at 250 Mbit/s), or a size ('512k').
        tcp_cc: TCP congestion control of every namespace, one of ``allowed_tcp_cc()`` ('reno',
            'bbr' on the dev VM); None keeps what a new namespace gets from the host.
        burst: 'gso' (default): the HTB burst is max(128 KiB, 1 ms of the rate), since veths
            pass GSO packets of up to 64 KiB; after an idle spell a link then sends 128 KiB at
            line rate, which shortens a transfer of a few hundred KB by a quarter at 20 Mbit/s.
            'mtu': GSO off on the shaped veths (gso_max_size one MTU) and a burst of
            max(4 MTU, 1 ms of the rate), so that a link is a plain rate at any size. A size
            ('512k', at least the 'gso' one): that bucket, GSO on (``burst_bytes``).
        qdisc: how each shaped link's buffer serves its flows: 'fifo' (default, one ``bfifo``
            of ``queue`` bytes: first come, first served) or 'fair' (an HTB class per node at
            the other end, each guaranteed an equal share of the rate and allowed all of it,
            with its share of ``queue``: HTB's round robin between the nodes, the equal
            sharing the replayer assumes; this kernel has no fq or sfq), or 'ackfirst' (one
            ``bfifo`` for the data, with pure ACKs and other small TCP packets sent ahead of
            it: the FIFO's sharing without its two directions' ACK coupling). 'fair' and
            'ackfirst' need a byte queue (not 'kernel') and no delay.
        prefix: run prefix; a fresh 'gwl' + 6 hex by default.
        stop_grace_s: seconds between SIGTERM and SIGKILL for children still running at teardown.
    """

    num_ps: int = 1
    num_workers: int = 1
    bandwidth: str | None = None
    delay: str | None = None
    shape: str = "ps"
    queue: str | None = None
    tcp_cc: str | None = None
    burst: str = "gso"
    qdisc: str = "fifo"
    prefix: str = field(default_factory=new_prefix)
    nodes: list[Node] = field(default_factory=list, init=False)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list, init=False)
    _created: list[str] = field(default_factory=list, init=False)
    stop_grace_s: float = 3.0
    _old_handlers: dict[int, Any] = field(default_factory=dict, init=False)
    _deferring: bool = field(default=False, init=False)
    _deferred: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise LabError(f"bad prefix {self.prefix!r}: expected 'gwl' + 6 hex chars")
        if not 0 <= self.num_ps <= MAX_PS:
            raise LabError(f"bad number of parameter servers {self.num_ps}: expected 0..{MAX_PS}")
        if self.num_ps == 0 and self.bandwidth and self.shape != "all":
            raise LabError("no parameter servers and shape 'ps': nothing would be shaped; "
                           "shape 'all'")
        if not 1 <= self.num_workers <= MAX_WORKERS:
            raise LabError(f"bad number of workers {self.num_workers}: expected 1..{MAX_WORKERS}")
        if self.shape not in ("ps", "all"):
            raise LabError(f"bad shape {self.shape!r}: expected 'ps' or 'all'")
        self.rate_bps = parse_rate_bps(self.bandwidth) if self.bandwidth else None
        burst_bytes(self.burst, self.rate_bps or 0.0)  # refuses a bad one
        self.delay_s = parse_delay_s(self.delay)
        self.queue_bytes = queue_bytes(self.queue, self.rate_bps)
        check_tcp_cc(self.tcp_cc)
        if self.delay_s and not self.rate_bps:
            raise LabError("a delay needs a bandwidth too (the delay hangs under the rate class)")
        check_qdisc(self.qdisc, self.queue_bytes, self.delay_s)
        self.switch_ns = f"{self.prefix}-sw"
        self.bridge = f"{self.prefix}br"
        self.subnet = subnet_for(self.prefix)

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Topology:
        self._install_signal_handlers()
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def _raise(signum: int, _frame: FrameType | None) -> None:
            if self._deferring:
                self._deferred = signum
                return
            self._raise_for(signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise)

    @staticmethod
    def _raise_for(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    def teardown(self) -> None:
        """Stop every child by PID, delete every namespace of this run. Idempotent."""
        # Ignore further Ctrl-C/SIGTERM while cleaning so teardown itself is not interrupted.
        blocked = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                blocked[sig] = signal.signal(sig, signal.SIG_IGN)
        try:
            for proc in self.procs:
                if proc.poll() is None:
                    _terminate_tree(proc.pid, grace_s=self.stop_grace_s)
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)
            for ns in reversed(self._created):
                run(["ip", "netns", "del", ns], check=False)
            self._created.clear()
            # Anything of this run still there (e.g. a half-built namespace) goes too.
            cleanup_stale(self.prefix)
        finally:
            for sig, handler in blocked.items():
                signal.signal(sig, handler)
            self._restore_signal_handlers()

    # -- building ----------------------------------------------------------------------------

    def _add_ns(self, ns: str) -> None:
        run(["ip", "netns", "add", ns])
        self._created.append(ns)
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        if self.tcp_cc:
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                 f"net.ipv4.tcp_congestion_control={self.tcp_cc}"])

    def _build(self) -> None:
        sw = self.switch_ns
        self._add_ns(sw)
        run(["ip", "-n", sw, "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "-n", sw, "link", "set", self.bridge, "up"])
        roles = [("ps", i) for i in range(self.num_ps)]
        roles += [("worker", i) for i in range(self.num_workers)]
        for k, (role, i) in enumerate(roles):
            host = (PS_HOST0 + i) if role == "ps" else (WORKER_HOST0 + i)
            node = Node(
                role=role,
                index=i,
                ns=f"{self.prefix}-{'ps' if role == 'ps' else 'w'}{i}",
                iface=f"{self.prefix}n{k}",
                peer=f"{self.prefix}b{k}",
                addr=f"{self.subnet}.{host}",
                shaped=bool(self.rate_bps) and (role == "ps" or self.shape == "all"),
            )
            self._add_ns(node.ns)
            run(
                [
                    "ip",
                    "-n",
                    sw,
                    "link",
                    "add",
                    node.peer,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    node.iface,
                    "netns",
                    node.ns,
                ]
            )
            run(["ip", "-n", sw, "link", "set", node.peer, "master", self.bridge])
            run(["ip", "-n", sw, "link", "set", node.peer, "up"])
            run(["ip", "-n", node.ns, "addr", "add", f"{node.addr}/24", "dev", node.iface])
            run(["ip", "-n", node.ns, "link", "set", node.iface, "up"])
            self.nodes.append(node)
        for node in self.nodes:  # after every node exists: 'fair' names the other ends
            if node.shaped:
                others = [n.addr for n in self.nodes if n is not node]
                self._shape(node.ns, node.iface, "dst", others)  # egress: e.g. PS -> workers
                self._shape(sw, node.peer, "src", others)  # bridge -> node: workers -> PS
        self._wait_carrier()

    def _shape(self, ns: str, dev: str, match: str = "dst", others: Sequence[str] = ()
               ) -> None:
        """HTB class at ``rate_bps`` on ``dev``'s egress, netem delay under it if asked. With
        ``qdisc`` 'fair', one child class per other end of the link (its address in
        ``others``, matched as the packets' ``match``, ``src`` or ``dst``), each guaranteed an
        equal share and allowed the whole rate, HTB's round robin between them, each with its
        share of the buffer."""
        assert self.rate_bps is not None
        rate = f"{int(self.rate_bps)}bit"
        burst = burst_bytes(self.burst, self.rate_bps)
        if self.burst == "mtu":  # GSO off on this veth: 4 full frames suffice
            run(["ip", "-n", ns, "link", "set", dev, "gso_max_size", str(MTU_FRAME)])
        quantum = 65536 * 3  # > the largest GSO packet: avoids HTB's quantum warnings
        fair = self.qdisc == "fair" and bool(others)
        ack_first = self.qdisc == "ackfirst"
        _tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default",
            "9" if fair else "3" if ack_first else "1")  # the leaf of what no filter matches
        _htb_class(ns, dev, "1:", "1:1", rate, rate, burst, quantum)
        if fair:
            self._fair_classes(ns, dev, match, others, rate, burst, quantum)
        elif ack_first:
            self._ack_first(ns, dev, rate, burst, quantum)
        elif self.queue_bytes is not None and not self.delay_s:  # netem brings its own queue
            _bfifo(ns, dev, "1:1", "10:", int(self.queue_bytes))
        if self.delay_s:
            delay = f"{int(round(self.delay_s * 1e6))}us"
            proc = _tc(ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
                       "netem", "delay", delay, "limit", "100000", check=False)
            if proc.returncode != 0:
                raise LabError(
                    f"cannot add a {self.delay} delay: tc netem failed ({proc.stderr.strip()}); "
                    "this kernel may lack sch_netem, run with no delay"
                )

    def _ack_first(self, ns: str, dev: str, rate: str, burst: int, quantum: int) -> None:
        """``qdisc`` 'ackfirst' under the rate class 1:1 (at ``rate``) of ``dev``: TCP packets
        shorter than ``ACK_BYTES`` (pure ACKs, gRPC's requests and window updates) in a class
        of HTB priority 0, guaranteed a tenth of the rate, served before the data class (the
        rest, HTB's default; priority 1, a ``bfifo`` of ``queue_bytes``); both may borrow the
        whole rate. A flow's ACKs then no longer wait behind the other direction's data, and
        the data still share one first-come FIFO: it tells the two apart (docs/lab.md). This
        kernel has no ``prio`` qdisc, so HTB's class priorities do it."""
        assert self.rate_bps is not None and self.queue_bytes is not None
        tenth = f"{int(self.rate_bps / 10)}bit"
        rest = f"{int(self.rate_bps - self.rate_bps / 10)}bit"
        for classid, guaranteed, prio in (("1:2", tenth, 0), ("1:3", rest, 1)):
            _htb_class(ns, dev, "1:1", classid, guaranteed, rate, burst, quantum, prio)
        _tc(ns, "qdisc", "add", "dev", dev, "parent", "1:2", "handle", "102:", "pfifo",
            "limit", "1000")
        _bfifo(ns, dev, "1:3", "103:", int(self.queue_bytes))
        # IP total length < ACK_BYTES: the top bits of the 16-bit length field are zero
        mask = 0xFFFF & ~(ACK_BYTES - 1)
        _tc(ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
            "u32", "match", "ip", "protocol", "6", "0xff", "match", "u16", "0x0000",
            f"0x{mask:04x}", "at", "2", "flowid", "1:2")

    def _fair_classes(self, ns: str, dev: str, match: str, others: Sequence[str], rate: str,
                      burst: int, quantum: int) -> None:
        """``qdisc`` 'fair' under the rate class 1:1 (at ``rate``) of ``dev``: a class per
        address of ``others`` (rate / n guaranteed, the whole rate as ceiling, a ``bfifo`` of
        queue / n bytes, at least two GSO packets), chosen by a u32 filter on the packets'
        ``match`` address; anything else (ARP) in a class of its own, HTB's default."""
        assert self.rate_bps is not None and self.queue_bytes is not None
        share = f"{int(self.rate_bps / (len(others) + 1))}bit"
        limit = max(2 * 65536, int(self.queue_bytes / len(others)))
        for k, addr in [(9, None), *((10 + j, a) for j, a in enumerate(others))]:
            _htb_class(ns, dev, "1:1", f"1:{k}", share, rate, burst, quantum)
            _bfifo(ns, dev, f"1:{k}", f"{100 + k}:", limit)
            if addr is not None:
                _tc(ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio",
                    "1", "u32", "match", "ip", match, f"{addr}/32", "flowid", f"1:{k}")

    def _wait_carrier(self, timeout_s: float = 5.0) -> None:
        """Wait until every node-side link reports operstate UP (bridge ports forwarding)."""
        deadline = time.monotonic() + timeout_s
        pending = list(self.nodes)
        while pending and time.monotonic() < deadline:
            pending = [
                n
                for n in pending
                if "state UP"
                not in run(["ip", "-n", n.ns, "link", "show", n.iface], check=False).stdout
            ]
            if pending:
                time.sleep(0.05)
        if pending:
            raise LabError(f"links not up after {timeout_s}s: {[n.iface for n in pending]}")

    # -- using -------------------------------------------------------------------------------

    @property
    def ps(self) -> list[Node]:
        """The parameter-server nodes, by index."""
        return [n for n in self.nodes if n.role == "ps"]

    @property
    def workers(self) -> list[Node]:
        """The worker nodes, by index."""
        return [n for n in self.nodes if n.role == "worker"]

    def namespaces(self) -> list[str]:
        """All namespaces this run created and has not deleted yet."""
        return list(self._created)

    def spawn(self, node: Node, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``node``'s namespace (``ip netns exec`` execs, so the PID is the
        command's own); the process is tracked and stopped by PID at teardown."""
        return self.spawn_in(node.ns, argv, **popen)

    def spawn_in(self, ns: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """``spawn`` in namespace ``ns`` (one of this topology's: a node's or the switch's)."""
        # A SIGINT/SIGTERM/SIGHUP arriving during Popen is held until the child is tracked, so
        # it cannot leave an untracked process behind. (Not with pthread_sigmask: a blocked mask
        # is inherited through exec, and the nodes must see SIGTERM.)
        self._deferring = True
        try:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *argv], start_new_session=True, **popen
            )
            self.procs.append(proc)
        finally:
            self._deferring = False
        if self._deferred is not None:
            signum, self._deferred = self._deferred, None
            self._raise_for(signum)
        return proc


def json_result(proc: subprocess.Popen[str], timeout_s: float, what: str) -> Any:
    """The JSON on the last line a spawned process (``what``) printed; one that failed, or
    printed nothing, or ran past ``timeout_s`` seconds is a ``LabError``."""
    import json

    try:
        text, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LabError(f"{what} ran past {timeout_s:.0f} s") from None
    lines = text.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise LabError(f"{what} failed (exit {proc.returncode})")
    return json.loads(lines[-1])


# -- tc validation -------------------------------------------------------------------------------

_SENDER = r"""
import socket, sys, time
host, port, nbytes, limit_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection((host, port), timeout=10)
buf = b"\0" * 65536
sent, t_end = 0, time.monotonic() + limit_s
while sent < nbytes and time.monotonic() < t_end:
    sent += s.send(buf[: min(len(buf), nbytes - sent)])
s.shutdown(socket.SHUT_WR)
s.recv(1)
s.close()
"""

_RECEIVER = r"""
import json, socket, sys, time
addr, port, limit_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port)); srv.listen(1); print("ready", flush=True)
srv.settimeout(15); c, _ = srv.accept(); c.settimeout(limit_s + 5)
got, marks, t_end = 0, [], time.monotonic() + limit_s + 5
while time.monotonic() < t_end:
    d = c.recv(1 << 20)
    if not d:
        break
    got += len(d); marks.append((time.monotonic(), got))
c.close()
print(json.dumps({"bytes": got, "marks": marks[:: max(1, len(marks) // 2000)] + marks[-1:]}))
"""


def measure_throughput_bps(
    topo: Topology, src: Node, dst: Node, nbytes: int = 20_000_000, limit_s: float = 6.0
) -> float:
    """Send up to ``nbytes`` bytes (at most ``limit_s`` seconds) by TCP from ``src`` to ``dst``
    and return the receiver's goodput in bits per second over the steady part of the transfer
    (the first 20% of bytes are skipped to leave out slow start and the HTB burst).
    """
    import json
    import sys

    port = 5201
    recv = topo.spawn(
        dst,
        [sys.executable, "-c", _RECEIVER, dst.addr, str(port), str(limit_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert recv.stdout is not None
    if recv.stdout.readline().strip() != "ready":
        raise LabError("throughput receiver did not start")
    send = topo.spawn(
        src, [sys.executable, "-c", _SENDER, dst.addr, str(port), str(nbytes), str(limit_s)]
    )
    out, _ = recv.communicate(timeout=limit_s + 25)
    send.wait(timeout=10)
    marks = json.loads(out.strip().splitlines()[-1])["marks"]
    total = marks[-1][1]
    start = next(m for m in marks if m[1] >= 0.2 * total)
    dt = marks[-1][0] - start[0]
    if dt <= 0:
        raise LabError("throughput transfer too short to measure")
    return (marks[-1][1] - start[1]) * 8 / dt
