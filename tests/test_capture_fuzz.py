"""The fuzz audit of the capture parsers kept as tests (issue 19, "Bad input").

A table of crafted bad captures (built by ``badcaptures``, nothing binary shipped), each with its
expected outcome: a CaptureError whose one-line message holds a fragment, or a clean parse with
the expected stats counters, in bounded time (the quadratic cases are sized to take seconds if
quadratic: 40,000 reversed segments took 23 s, 20,000 open holes 16 s, 20,000 interfaces 3 s).
Then hypothesis over the pure parsers on mutated real captures and random input: only
gradwire's own errors escape, state stays within its bounds, time stays bounded. And the memory
of a huge claimed length, checked under an address-space limit in a subprocess.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache, lru_cache
from pathlib import Path

import badcaptures as bc
import pytest
from conftest import REALDATA, SAMPLE, assert_one_line_error, gradwire, need
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradwire.collector import http2 as h2
from gradwire.collector.h2capture import H2Capture, iter_frames
from gradwire.collector.pcapfile import PcapReader
from gradwire.collector.tcpstream import TcpDirection
from gradwire.errors import CaptureError, GradwireError

SECONDS = 5.0  # bound on one crafted case (linear: well under 1 s; quadratic: 3-60 s)


@dataclass(frozen=True)
class Case:
    """One crafted capture: ``make`` returns its bytes (or ``at``, given a folder, makes a path);
    ``error`` the fragment of the expected CaptureError, else ``stats`` are expected counters
    of ``H2Capture.stats()`` (and ``reader``, of ``PcapReader.stats``) after a clean parse,
    within ``seconds``."""

    name: str
    make: Callable[[], bytes] | None = None
    at: Callable[[Path], Path] | None = None
    error: str | None = None
    seconds: float = SECONDS
    stats: dict[str, int] = field(default_factory=dict)
    reader: dict[str, int | bool] = field(default_factory=dict)
    capture: dict[str, int] = field(default_factory=dict)  # H2Capture arguments
    streams: int | None = None  # expected Stream records


def _fifo(folder: Path) -> Path:
    path = folder / "capture.pcap"
    os.mkfifo(path)
    return path


def _directory(folder: Path) -> Path:
    path = folder / "capture.pcap"
    path.mkdir()
    return path


def _proc_mem(folder: Path) -> Path:
    path = Path("/proc/self/mem")
    need(path.exists(), "/proc/self/mem (Linux procfs)")
    return path


def _cut(data: bytes, n: int) -> Callable[[], bytes]:
    return lambda: data[:n]


_ONE = bc.pcap([(1_000_000_000, bc.tcp_frame(1000, b"x"))])
_ONE_NG = bc.shb() + bc.idb() + bc.epb(0, 1, bc.tcp_frame(1000, b"x"))

CASES = [
    # the quadratic ones: linear now, and what they leave out is counted
    Case("reversed one-byte segments", lambda: bc.reversed_segments(40_000),
         stats={"connections": 1, "tcp_gaps": 0, "tcp_pending_overflows": 0,
                "not_http2_connections": 1}),
    Case("reversed segments past the held-segment cap", lambda: bc.reversed_segments(140_000),
         seconds=2 * SECONDS, stats={"connections": 1, "tcp_gaps": 1, "tcp_pending_overflows": 1}),
    Case("holes that never fill", lambda: bc.unfilled_holes(20_000),
         stats={"connections": 1, "tcp_gaps": 20_000, "tcp_gap_bytes": 20_000}),
    Case("20,000 interfaces of an unread link type", lambda: bc.many_interfaces(20_000, 5_000),
         stats={"connections": 1}, reader={"frames": 5_001, "skipped_frames": 5_000}),
    Case("one-frame streams past the stream cap", lambda: bc.many_streams(20_000),
         capture={"max_streams": 1_000}, streams=1_000,
         stats={"frames": 20_001, "untracked_streams": 19_000}),
    Case("connections past the connection cap", lambda: bc.many_connections(2_000),
         capture={"max_connections": 100},
         stats={"connections": 100, "untracked_packets": 3_800}),
    Case("a header block that never ends", lambda: bc.endless_continuation(80),
         stats={"frames": 82, "oversized_header_blocks": 1}, streams=1),
    Case("a request trickled in one-byte DATA frames", lambda: bc.trickled_request(60_000),
         stats={"frames": 60_003}, streams=1),
    # lengths: checked before they are read with
    Case("pcap record claiming 4 GiB", bc.huge_pcap_record,
         error="pcap record at byte 24 claims 4294967280 bytes"),
    Case("pcapng block claiming 4 GiB", bc.huge_pcapng_block,
         error="pcapng block of type 6 at byte 48 claims 4294967280 bytes"),
    Case("pcapng section header claiming 4 GiB", bc.huge_shb,
         error="pcapng section header block at byte 0 claims 4294967280 bytes"),
    Case("pcapng packet whose captured length claims 4 GiB", bc.huge_epb_captured_length,
         error="corrupt pcapng packet block at byte 48: it holds 56 bytes and says it "
               "captured 4294967040"),
    Case("pcapng file ending in zeros (a crash)", lambda: bc.shb() + bc.idb() + bytes(64),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    # a block's length damaged mid-file: corrupt, not a capture cut short
    Case("pcapng block of length 4 mid-file", lambda: bc.damaged_block_length(stated=4),
         error="corrupt pcapng block at byte 48: its length 4 is under 12 or not a multiple "
               "of 4"),
    Case("pcapng block 4 bytes longer than it ends mid-file",
         lambda: bc.damaged_block_length(longer_by=4),
         error="corrupt pcapng block at byte 48: it starts saying"),
    Case("pcap record running past the end", lambda: bc.huge_pcap_record(1000),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    Case("pcapng block running past the end", lambda: bc.huge_pcapng_block(1000),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    Case("pcap record of 60 MiB in a 100-byte file", lambda: bc.huge_pcap_record(60 << 20),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    # truncated headers
    Case("pcap file header cut", _cut(_ONE, 10), error="pcap header is truncated"),
    Case("pcap record header cut", _cut(_ONE, 24 + 9),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    Case("pcap record cut", _cut(_ONE, len(_ONE) - 1),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    Case("pcapng block header cut", _cut(_ONE_NG, 28 + 20 + 5),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    Case("pcapng section header cut", _cut(_ONE_NG, 10),
         stats={"connections": 0}, reader={"frames": 0, "truncated": True}),
    Case("pcapng with a bad byte-order magic",
         lambda: struct.pack("<II", 0x0A0D0D0A, 28) + b"ABCD" + bytes(16),
         error="bad byte-order magic"),
    Case("pcapng packet before any interface", lambda: bc.shb() + bc.epb(0, 1, b"x" * 60),
         error="names interface 0, which is not described"),
    Case("pcapng simple packet before any interface",
         lambda: bc.shb() + bc.block(3, struct.pack("<I", 4) + b"abcd"),
         error="packet block before any interface block"),
    # not capture files
    Case("zero-length file", lambda: b"", error="capture file is empty"),
    Case("garbage", lambda: bytes(range(256)) * 4, error="not a pcap or pcapng file"),
    Case("text", lambda: b"GET / HTTP/1.1\r\n\r\n", error="not a pcap or pcapng file"),
    Case("FIFO", at=_fifo, error="it is a FIFO (named pipe), not a regular file"),
    Case("directory", at=_directory, error="it is a directory, not a regular file"),
    Case("character device", at=lambda _: Path("/dev/null"),
         error="it is a character device, not a regular file"),
    Case("/proc/self/mem (EIO)", at=_proc_mem, error="cannot read capture: Input/output error"),
    Case("missing file", at=lambda folder: folder / "none.pcap",
         error="cannot open capture: No such file or directory"),
]


def _materialize(case: Case, folder: Path) -> Path:
    """The case's capture as a path under ``folder``."""
    if case.at is not None:
        return case.at(folder)
    assert case.make is not None
    path = folder / "capture.pcap"
    path.write_bytes(case.make())
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_crafted_capture(case: Case, tmp_path: Path) -> None:
    path = _materialize(case, tmp_path)
    cap = H2Capture(**case.capture)
    start = time.perf_counter()
    if case.error is not None:
        with pytest.raises(CaptureError) as err:
            for _ in iter_frames(path, capture=cap):
                pass
        message = str(err.value)
        assert case.error in message and str(path) in message and "\n" not in message, message
    else:
        reader = PcapReader(path)
        for pkt in reader:
            cap.packet(pkt)
        cap.flush()
        cap.truncated = reader.stats.truncated
        streams = cap.streams()
        got = cap.stats()
        assert {k: got[k] for k in case.stats} == case.stats, got
        assert {k: getattr(reader.stats, k) for k in case.reader} == case.reader, reader.stats
        if case.streams is not None:
            assert len(streams) == case.streams
    elapsed = time.perf_counter() - start
    assert elapsed < case.seconds, f"{case.name}: {elapsed:.1f} s"


CLI_CASES = [c for c in CASES if c.error and c.name in (
    "FIFO", "/proc/self/mem (EIO)", "pcap record claiming 4 GiB", "garbage",
    "pcapng block claiming 4 GiB")]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.name for c in CLI_CASES])
def test_crafted_capture_on_the_command_line(case: Case, tmp_path: Path) -> None:
    """`gradwire streams` says what is wrong in one line, exits non-zero, never hangs."""
    path = _materialize(case, tmp_path)
    proc = gradwire("streams", str(path), "--format", "jsonl", timeout=60)
    assert case.error is not None
    assert_one_line_error(proc, case.error, str(path))


def test_counters_of_what_is_left_out_reach_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "holes.pcap"
    path.write_bytes(bc.reversed_segments(140_000))
    proc = gradwire("streams", str(path), "--format", "jsonl", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "tcp pending overflows 1" in proc.stderr, proc.stderr


# -- memory ----------------------------------------------------------------------------------

_UNDER_LIMIT = r"""
import resource, sys
from gradwire.collector.pcapfile import PcapReader
from gradwire.errors import CaptureError
def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
limit = vm_bytes() + (int(sys.argv[2]) << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
reader = PcapReader(sys.argv[1])
try:
    n = sum(1 for _ in reader)
    print("parsed", n, reader.stats.truncated)
except CaptureError as exc:
    print("CaptureError", exc)
"""


@pytest.mark.parametrize("make, expect", [
    (bc.huge_pcap_record, "CaptureError"),
    (bc.huge_pcapng_block, "CaptureError"),
    (bc.huge_shb, "CaptureError"),
    (lambda: bc.huge_pcap_record(60 << 20), "parsed 0 True"),
    (lambda: bc.huge_pcapng_block(60 << 20), "parsed 0 True"),
], ids=["pcap 4 GiB", "pcapng 4 GiB", "section 4 GiB", "pcap 60 MiB", "pcapng 60 MiB"])
def test_a_huge_claimed_length_reads_nothing(tmp_path: Path, make, expect: str) -> None:
    """Under an address-space limit of 16 MiB above what the interpreter already maps, a
    100-byte file claiming 4 GiB (or 60 MiB) is refused or ends as truncated: no MemoryError."""
    path = tmp_path / "huge.pcap"
    path.write_bytes(make())
    need(Path("/proc/self/status").exists(), "/proc/self/status (Linux procfs)")
    proc = subprocess.run([sys.executable, "-c", _UNDER_LIMIT, str(path), "16"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and expect in proc.stdout, proc.stdout + proc.stderr


def test_stream_state_is_small(tmp_path: Path) -> None:
    """20,000 one-frame streams cost under 1 KB each of Python memory, Stream records aside."""
    import tracemalloc

    path = tmp_path / "streams.pcap"
    path.write_bytes(bc.many_streams(20_000))
    tracemalloc.start()
    try:
        cap = H2Capture()
        for _ in iter_frames(path, capture=cap):
            pass
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cap.stats()["frames"] == 20_001
    assert current / 20_000 < 1000, current


# -- hypothesis over the pure parsers ----------------------------------------------------------

FUZZ = settings(max_examples=60, derandomize=True, deadline=timedelta(seconds=5),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REAL_CAPTURES = ([*sorted(REALDATA.glob("*.pcap*"))] if REALDATA.is_dir() else []) + [
    SAMPLE / "worker0" / "capture.pcapng"]


@cache
def _real(path: Path) -> bytes:
    return path.read_bytes()


def _mutate(data: bytes, draw) -> bytes:
    """``data`` with a few bytes replaced, a 4-byte field set to an extreme, maybe cut."""
    buf = bytearray(data)
    lo = 0 if draw(st.integers(0, 9)) == 0 else 4  # mostly past the magic number
    for _ in range(draw(st.integers(0, 6))):
        # mostly near the start, where the file and block headers are
        hi = min(len(buf) - 1, draw(st.sampled_from([64, 512, 4096, len(buf) - 1])))
        buf[draw(st.integers(lo, hi))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        at = draw(st.integers(lo, max(lo, min(len(buf) - 4, 8192))))
        buf[at : at + 4] = struct.pack("<I", draw(st.sampled_from(
            [0, 1, 11, 12, 13, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFF0, 1 << 26])))
    if draw(st.booleans()):
        buf = buf[: draw(st.integers(0, len(buf)))]
    return bytes(buf)


@FUZZ
@given(st.sampled_from(REAL_CAPTURES), st.data())
def test_mutated_real_captures_raise_only_gradwire_errors(tmp_path_factory, source, data):
    """The reader and the whole packet path on mutated real captures: a clean parse or a
    GradwireError, in bounded time; tracked state within its bounds."""
    path = tmp_path_factory.mktemp("mut") / source.name
    path.write_bytes(_mutate(_real(source), data.draw))
    cap = H2Capture(max_streams=500, max_connections=20)
    start = time.perf_counter()
    try:
        for _ in iter_frames(path, capture=cap):
            pass
        cap.streams()
    except GradwireError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    assert time.perf_counter() - start < SECONDS
    assert len(cap.order) <= 20 and cap.tracked_streams <= 500
    assert sum(len(c.streams) for c in cap.order) == cap.tracked_streams


segments = st.lists(st.tuples(st.integers(0, 3000), st.binary(max_size=64), st.integers(0, 3),
                              st.integers(0, 2_000_000_000)), max_size=60)


@FUZZ
@given(segments, st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(16, 400))
def test_reassembler_stays_within_its_bounds(segs, isn, max_segments, max_bytes):
    """Any segments in any order: the held data stays within its caps, the heap and the held
    segments agree, and every byte up to the end is delivered once or counted in a gap."""
    d = TcpDirection(max_pending_segments=max_segments, max_pending_bytes=max_bytes)
    d.feed(0, isn, b"", syn=True)
    delivered = 0
    for off, payload, missing, ts in segs:
        for c in d.feed(ts, (isn + 1 + off) % 2**32, payload, missing=missing):
            delivered += len(c.data)
        assert sorted(d.heap) == sorted(d.pending)
        assert d.pending_bytes == sum(map(len, d.pending.values()))
        assert len(d.pending) <= max_segments and d.pending_bytes <= max_bytes
    delivered += sum(len(c.data) for c in d.flush(2_000_000_001))
    assert not d.pending and not d.heap
    assert delivered + d.gap_bytes == d.next_off


@FUZZ
@given(st.sampled_from([None, "client", "server"]),
       st.lists(st.tuples(st.binary(max_size=2000), st.booleans()), max_size=30))
def test_framer_buffers_at_most_a_frame(start, chunks):
    """The HTTP/2 framer never crashes on random bytes, gives whole frames only, and keeps at
    most one incomplete frame (and the last chunk) buffered."""
    d = h2.H2Direction(start)
    for ts, (data, gap) in enumerate(chunks):
        for f in d.feed(ts, data, gap):
            assert f.length == len(f.payload) <= h2.MAX_LENGTH and 0 <= f.stream_id < 2**31
        assert len(d.buf) <= 9 + h2.MAX_LENGTH + len(data)
        assert d.header_block is None or len(d.header_block) <= h2.MAX_HEADER_BLOCK


# DATA frames (some padded) between PINGs and WINDOW_UPDATEs, as a response stream has them
frames_st = st.lists(st.one_of(
    st.tuples(st.just(h2.DATA), st.booleans(), st.integers(1, 9), st.integers(0, 3000),
              st.integers(0, 255)),
    st.tuples(st.sampled_from([h2.PING, h2.WINDOW_UPDATE]), st.just(False), st.just(0),
              st.just(0), st.just(0))), min_size=1, max_size=25)


@FUZZ
@given(frames_st, st.integers(1, 300), st.lists(st.tuples(st.integers(1, 700), st.booleans()),
                                                min_size=1, max_size=40))
def test_cut_data_payloads_change_only_the_payloads(frames, prefix, cuts):
    """A framer that keeps only ``data_prefix`` bytes of each DATA payload gives the same frames
    (times, streams, flags, lengths, content sizes) and counts as one that keeps them whole, the
    bytes cut into random chunks with gaps between some; its payloads are the whole ones'
    first bytes, its content prefixes the stripped content's."""
    stream = b""
    for ftype, padded, sid, size, pad in frames:
        if ftype == h2.DATA:
            body = bytes(range(256)) * (size // 256 + 1)
            payload = (bytes([pad]) + body[:size] + bytes(pad)) if padded else body[:size]
            stream += bc.h2_frame(h2.DATA, h2.FLAG_PADDED if padded else 0, sid, payload)
        else:
            stream += bc.h2_frame(ftype, 0, 0, bytes(8) if ftype == h2.PING else b"\0\0\1\0")
    whole, cut = h2.H2Direction("server"), h2.H2Direction("server", data_prefix=prefix)
    got_whole, got_cut, at = [], [], 0
    for ts, (size, gap) in enumerate(cuts + [(len(stream), False)]):
        chunk, at = stream[at : at + size], at + size
        lost = gap and ts % 3 == 0
        if lost:  # the chunk is lost: the next one comes after a gap
            chunk, at = stream[at : at + size], at + size
        got_whole += whole.feed(ts, chunk, lost)
        got_cut += cut.feed(ts, chunk, lost)
        if at >= len(stream):
            break
    assert len(got_whole) == len(got_cut)
    for a, b in zip(got_whole, got_cut, strict=True):
        assert (a.start_ns, a.ts_ns, a.stream_id, a.type, a.flags, a.length) == (
            b.start_ns, b.ts_ns, b.stream_id, b.type, b.flags, b.length)
        if a.type == h2.DATA:
            assert b.payload == (a.payload[:prefix] if a.length > prefix else a.payload)
            content = h2.strip_padding(a.type, a.flags, a.payload)
            assert h2.data_content_length(b.flags, b.length, b.payload) == len(content)
            assert content.startswith(h2.data_content_prefix(b.flags, b.length, b.payload))
        else:
            assert a.payload == b.payload
    assert (whole.frames, whole.resyncs, whole.skipped_bytes) == (
        cut.frames, cut.resyncs, cut.skipped_bytes)
    assert not cut.buf or cut.skip_left == 0  # a cut frame's rest is never buffered


@lru_cache(maxsize=1)
def _real_packets():
    return list(PcapReader(REALDATA / "rmedvedev_grpcdump_grpc_go_ipv6.pcap"))


@FUZZ
@given(st.data())
def test_h2capture_on_shuffled_mutated_packets(data):
    """h2capture on real packets with seq numbers, flags, ports and payloads mutated, some
    reordered: no exception, bounded state."""
    import dataclasses

    pkts = list(_real_packets())
    cap = H2Capture(max_streams=8, max_connections=3)
    for k in range(len(pkts)):
        p = pkts[k]
        choice = data.draw(st.integers(0, 11))
        if choice == 0:
            p = dataclasses.replace(p, seq=data.draw(st.integers(0, 2**32 - 1)))
        elif choice == 1:
            p = dataclasses.replace(p, flags=data.draw(st.integers(0, 255)))
        elif choice == 2:
            p = dataclasses.replace(p, sport=data.draw(st.integers(0, 65535)))
        elif choice == 3:
            p = dataclasses.replace(p, payload=data.draw(st.binary(max_size=200)))
        elif choice == 4:
            p = dataclasses.replace(p, payload_bytes=data.draw(st.integers(0, 1 << 20)))
        elif choice == 5 and k + 1 < len(pkts):
            pkts[k + 1], p = p, pkts[k + 1]  # swap with the next one
        cap.packet(p)
    cap.flush()
    cap.streams()
    stats = cap.stats()
    assert stats["connections"] <= 3 and cap.tracked_streams <= 8
