"""Packet capture of the cluster's gRPC ports: dumpcap or tcpdump (kernel BPF, large buffer),
scapy's AsyncSniffer as the fallback when neither is installed.

``Capture`` starts the tool, waits until it is really capturing, and on ``stop()`` ends it
cleanly (SIGINT, so the tool flushes its file and prints its drop counters) and returns a
``CaptureInfo`` with the packets captured and the drops the kernel and the tool report.
"""

from __future__ import annotations

import logging
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from gradwire import atomic, bundle
from gradwire.errors import CaptureError, MissingExtra
from gradwire.records import CaptureInfo

log = logging.getLogger(__name__)
# Whole packets: HTTP/2 frame boundaries need every payload byte. The ring holds about 1 s of
# a 2 Gbit/s PS link. With 64 MiB the kernel dropped 69 and 3,634 packets in 2 of 5 lab runs
# (2 workers at 1 Gbit/s, 2 busy cores); with 256 MiB none in 9 runs, 6 of them with 2 workers
# (scripts/bench_collect.py).
DEFAULT_SNAPLEN = 262_144
DEFAULT_BUFFER_MIB = 256
TOOLS = ("dumpcap", "tcpdump", "scapy")
_DUMPCAP_STATS = re.compile(
    r"received/dropped on interface '[^']*': (\d+)/(\d+) \(pcap:(\d+)/dumpcap:(\d+)/"
    r"flushed:(\d+)/ps_ifdrop:(\d+)\)"
)


def port_filter(ports: list[int]) -> str:
    """BPF expression for TCP traffic to or from any of ``ports``."""
    if not ports:
        raise CaptureError("no ports to capture: give --ports or set TF_CONFIG", usage=True)
    terms, run = [], []  # contiguous ports become one portrange term
    for p in sorted(set(ports)):
        if run and p == run[-1] + 1:
            run.append(p)
            continue
        if run:
            terms.append(_port_term(run))
        run = [p]
    terms.append(_port_term(run))
    return "tcp and (" + " or ".join(terms) + ")"


def _port_term(run: list[int]) -> str:
    return f"port {run[0]}" if len(run) == 1 else f"portrange {run[0]}-{run[-1]}"


def choose_tool(preferred: str = "auto") -> str:
    """The capture tool to use: ``preferred`` if it is available, else the best one present."""
    if preferred not in ("auto", *TOOLS):
        raise CaptureError(f"unknown capture tool {preferred!r} (choose from auto, {TOOLS})")
    candidates = TOOLS if preferred == "auto" else (preferred,)
    for tool in candidates:
        if tool == "scapy" or shutil.which(tool):
            return tool
    raise CaptureError(f"capture tool {preferred!r} is not installed")


def parse_dumpcap_stats(text: str) -> dict[str, int]:
    """Counters from dumpcap's closing report (summed over interfaces)."""
    out = {"captured": 0, "received": 0, "dropped_kernel": 0, "dropped_capturer": 0,
           "dropped_iface": 0}
    m = re.search(r"Packets captured: (\d+)", text)
    if m:
        out["captured"] = int(m.group(1))
    for m in _DUMPCAP_STATS.finditer(text):
        recv, _dropped, pcap, dumpcap, flushed, ifdrop = map(int, m.groups())
        out["received"] += recv
        out["dropped_kernel"] += pcap
        out["dropped_capturer"] += dumpcap + flushed
        out["dropped_iface"] += ifdrop
    return out


def parse_tcpdump_stats(text: str) -> dict[str, int]:
    """Counters from tcpdump's closing report."""

    def grab(pattern: str) -> int:
        m = re.search(r"(\d+) packets? " + pattern, text)
        return int(m.group(1)) if m else 0

    return {
        "captured": grab("captured"),
        "received": grab("received by filter"),
        "dropped_kernel": grab("dropped by kernel"),
        "dropped_capturer": 0,
        "dropped_iface": grab("dropped by interface"),
    }


class Capture:
    """One running capture into ``path`` (pcapng for dumpcap/scapy, pcap for tcpdump).

    Args:
        folder: bundle folder; the file is ``capture.pcapng`` or ``capture.pcap`` inside it.
        iface: interface name (``any`` captures every interface, Linux cooked link type).
        ports: TCP ports of the cluster (gRPC servers of the PS and worker tasks).
        tool: ``auto``, ``dumpcap``, ``tcpdump`` or ``scapy``.
        snaplen_bytes: bytes kept of each packet; the default keeps whole packets.
        buffer_mib: kernel capture buffer, MiB.
    """

    def __init__(
        self,
        folder: str | Path,
        iface: str,
        ports: list[int],
        tool: str = "auto",
        snaplen_bytes: int = DEFAULT_SNAPLEN,
        buffer_mib: int = DEFAULT_BUFFER_MIB,
    ) -> None:
        self.tool = choose_tool(tool)
        self.iface = iface
        self.filter = port_filter(ports)
        self.snaplen_bytes = snaplen_bytes
        self.buffer_mib = buffer_mib
        name = "capture.pcap" if self.tool == "tcpdump" else "capture.pcapng"
        self.path = Path(folder) / name
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: list[str] = []
        self._ready = threading.Event()
        self._announced: float | None = None  # when dumpcap said "Capturing on" (monotonic s)
        self._sniffer: Any = None
        self._writer: Any = None
        self._scapy_count = 0
        self.started_ns: int | None = None
        self.exited_early = False

    @property
    def pid(self) -> int | None:
        """PID of the capture process (None for the in-process scapy sniffer)."""
        return self._proc.pid if self._proc else None

    def argv(self) -> list[str]:
        """The command line of the external capture tool."""
        if self.tool == "dumpcap":
            return ["dumpcap", "-i", self.iface, "-f", self.filter, "-s", str(self.snaplen_bytes),
                    "-B", str(self.buffer_mib), "-w", str(self.path), "-q"]
        return ["tcpdump", "-i", self.iface, "-s", str(self.snaplen_bytes), "-B",
                str(self.buffer_mib * 1024), "-n", "-Z", "root", "-w", str(self.path),
                self.filter]

    def start(self, timeout_s: float = 15.0) -> None:
        """Start capturing; returns once the tool reports it is listening."""
        if self.iface != "any" and not Path("/sys/class/net", self.iface).exists():
            raise CaptureError(f"{self.tool} did not start on interface {self.iface!r}: no such "
                               "interface in this network namespace")
        if self.tool == "scapy":
            self._start_scapy()
            return
        self._proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
            preexec_fn=_stop_with_parent(),
        )
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self._announced is not None and time.monotonic() - self._announced > 3.0:
                break  # a dumpcap that never names its file: take its announcement
            if self._proc.poll() is not None or time.monotonic() > deadline:
                if self._proc.poll() is None:
                    self._proc.kill()
                self._proc.wait()
                time.sleep(0.05)
                msg = " ".join(line.strip() for line in self._stderr if line.strip())
                raise CaptureError(
                    f"{self.tool} did not start on interface {self.iface!r}: "
                    f"{msg[-300:] or 'no output'}"
                )
        time.sleep(0.2)  # a tool that cannot capture after all fails now, not unseen later
        if self._proc.poll() is not None:
            msg = " ".join(line.strip() for line in self._stderr[1:] if line.strip())
            raise CaptureError(f"{self.tool} stopped right after starting on {self.iface!r}: "
                               f"{msg[-300:] or 'no output'}")
        self.started_ns = time.time_ns()

    def _drain(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line)
            # dumpcap says "Capturing on" before it opens the device and "File:" once device,
            # filter and output are open; tcpdump says "listening on" once it is capturing.
            # (Taking "Capturing on" lost a whole exchange on 'any' under load: 0 packets.)
            if line.startswith("File:") or "listening on" in line:
                self._ready.set()
            elif "Capturing on" in line:
                self._announced = time.monotonic()

    def _start_scapy(self) -> None:
        try:
            from scapy.all import AsyncSniffer, PcapNgWriter, conf
        except ImportError:
            raise MissingExtra("scapy", "capture") from None
        # scapy's own raw socket misses packets on busy links (seen on loopback: a whole
        # direction lost); through libpcap it uses the kernel's ring buffer like tcpdump.
        conf.use_pcap = True

        self._writer = PcapNgWriter(str(self.path))

        def keep(pkt: Any) -> None:
            self._writer.write(pkt)
            self._scapy_count += 1

        iface = None if self.iface == "any" else self.iface
        opened = threading.Event()  # set once the sniffer's socket is open (not before)
        self._sniffer = AsyncSniffer(iface=iface, filter=self.filter, prn=keep, store=False,
                                     started_callback=opened.set)
        self._sniffer.start()
        deadline = time.monotonic() + 15.0
        while not opened.wait(0.05):
            failed = getattr(self._sniffer, "exception", None)
            thread = getattr(self._sniffer, "thread", None)
            if failed is not None or (thread is not None and not thread.is_alive()) \
                    or time.monotonic() > deadline:
                _close_quietly(self._writer)
                why = f": {' '.join(str(failed).split())}" if failed is not None else " within 15 s"
                raise CaptureError(f"scapy could not sniff on {self.iface!r}{why}")
        self.started_ns = time.time_ns()

    def info(self, counts: dict[str, int] | None = None,
             stopped_ns: int | None = None) -> CaptureInfo:
        """What this capture is (and, given the tool's counters, what it got and dropped)."""
        counts = counts or {}
        return CaptureInfo(
            tool=self.tool, file=self.path.name, iface=self.iface, filter=self.filter,
            snaplen_bytes=self.snaplen_bytes, buffer_bytes=self.buffer_mib << 20,
            packets_captured=counts.get("captured"), drops_kernel=counts.get("dropped_kernel"),
            drops_capturer=counts.get("dropped_capturer"), drops_iface=counts.get("dropped_iface"),
            started_ns=self.started_ns, stopped_ns=stopped_ns,
        )

    def stop(self, timeout_s: float = 20.0) -> CaptureInfo:
        """Stop cleanly and return what was captured and dropped.

        ``exited_early`` is set when the tool had already died before being asked to stop.
        """
        stopped = time.time_ns()
        if self.tool == "scapy":
            self._sniffer.stop()
            _close_quietly(self._writer)
            counts = {"captured": self._scapy_count}
            # scapy has no drop counters of its own; say so, so every bundle has its log
            atomic.write_text(self.path.parent / bundle.CAPTURE_LOG,
                              f"scapy (libpcap) on {self.iface}, filter {self.filter!r}: "
                              f"{self._scapy_count} packets captured; drop counters are not "
                              "available from scapy\n")
        else:
            assert self._proc is not None
            self.exited_early = self._proc.poll() is not None
            if not self.exited_early:
                self._proc.send_signal(signal.SIGINT)
                try:
                    self._proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    log.warning("%s ignored SIGINT for %.0f s; killing it", self.tool, timeout_s)
                    self._proc.kill()
                    self._proc.wait()
            time.sleep(0.05)
            text = "".join(self._stderr)
            counts = (parse_dumpcap_stats if self.tool == "dumpcap" else parse_tcpdump_stats)(text)
            atomic.write_text(self.path.parent / bundle.CAPTURE_LOG, text)
        return self.info(counts, stopped)


def _stop_with_parent() -> Any:
    """A preexec function for the capture tool: SIGTERM when collect dies, even by SIGKILL, so
    that no capture keeps writing with nobody to stop it (Linux prctl PR_SET_PDEATHSIG; libc
    is looked up here, in the parent). The kernel drops it when the tool is set-uid or has
    file capabilities, as dumpcap has for non-root users on Debian: it holds as root."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def arm() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return arm


def _close_quietly(writer: Any) -> None:
    """Close a scapy pcapng writer; with no packet written it warns about an unknown link
    type, which says nothing useful to the user."""
    runtime = logging.getLogger("scapy.runtime")
    level = runtime.level
    runtime.setLevel(logging.ERROR)
    try:
        writer.close()
    finally:
        runtime.setLevel(level)
