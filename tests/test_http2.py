"""The packet path against tshark (and pyshark) on real captures, plus broken input."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import badcaptures as bc
import pytest
from conftest import REALDATA, SAMPLE, assert_one_line_error, gradwire, need_tshark

from gradwire.bundle import open_bundle
from gradwire.collector import http2 as h2
from gradwire.collector.h2capture import H2Capture, capture_streams, iter_frames
from gradwire.collector.oracle import (
    PacketFrames,
    gradwire_frames,
    parse_tshark_line,
    tshark_command,
)

OUT_OF_ORDER = "tcp.reassemble_out_of_order:TRUE"  # tshark's default is FALSE; gradwire's TRUE


def tshark_frames(path: Path, ports: list[int]) -> list[PacketFrames]:
    """The oracle's frames, with tshark reassembling out-of-order segments as gradwire does."""
    cmd = tshark_command(path, ports)
    if OUT_OF_ORDER not in cmd:
        cmd[1:1] = ["-o", OUT_OF_ORDER]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return [parse_tshark_line(line) for line in proc.stdout.splitlines() if line.strip()]

# (file, server port, frames per type from SOURCES.md)
REAL = [
    ("packt_grpc_go_unary.pcapng", 50051, {0: 2, 1: 3, 4: 4, 6: 4, 8: 2}),
    ("packt_grpc_go_bidi_streaming.pcapng", 50051, {0: 7, 1: 3, 4: 4, 6: 14, 8: 6}),
    ("packt_grpc_go_client_streaming.pcapng", 50051, {0: 5, 1: 3, 4: 4, 6: 10, 8: 4}),
    ("packt_grpc_go_server_streaming.pcapng", 50051, {0: 11, 1: 3, 4: 4, 6: 4, 8: 2}),
    ("vitalybupt_grpc_cpp_chttp2.pcap", 50051, {0: 9, 1: 14, 4: 4, 6: 16, 8: 18}),
    ("zjczzZZ_grpc_cpp_server_streaming.pcap", 50052, {0: 16, 1: 9, 3: 1, 4: 4, 6: 12, 8: 12}),
    ("rmedvedev_grpcdump_grpc_go_ipv6.pcap", 50051, {0: 10, 1: 15, 4: 20, 6: 20, 8: 10}),
    ("suricata_verify_http2_h2c_nghttp2_wiki.pcap", 3000, {0: 114, 1: 12, 4: 6, 7: 1, 8: 21}),
]


@pytest.mark.parametrize("name, port, counts", REAL, ids=[r[0] for r in REAL])
def test_real_captures_equal_tshark(realdata, name, port, counts):
    need_tshark()
    path = realdata / name
    frames = list(iter_frames(path, [port]))
    got: dict[int, int] = {}
    for f in frames:
        got[f.type] = got.get(f.type, 0) + 1
    assert got == counts
    assert gradwire_frames(frames) == tshark_frames(path, [port])


@pytest.mark.parametrize("node", ["ps0", "worker0"])
def test_lab_captures_equal_tshark(node):
    need_tshark()
    bundle = open_bundle(SAMPLE / node)
    frames = list(iter_frames(bundle.capture_file, bundle.ports))
    assert len(frames) > 1000
    assert gradwire_frames(frames) == tshark_frames(bundle.capture_file, bundle.ports)


def _pcap_records(raw: bytes) -> tuple[bytes, list[bytearray]]:
    """The 24-byte header and the records of a little-endian pcap file."""
    head, recs, at = raw[:24], [], 24
    while at + 16 <= len(raw):
        n = struct.unpack_from("<I", raw, at + 8)[0]
        recs.append(bytearray(raw[at : at + 16 + n]))
        at += 16 + n
    return head, recs


def test_a_reordered_capture_equals_tshark_reassembling_out_of_order(realdata, tmp_path):
    """Move every 3rd full-size segment of a real capture three packets later (as a
    lossy link's retransmission or reordering would): gradwire still decodes every frame, and
    agrees with tshark frame for frame once tshark reassembles out-of-order segments too
    (``tcp.reassemble_out_of_order:TRUE``, which the oracle sets; tshark's default drops them)."""
    need_tshark()
    src = realdata / "suricata_verify_http2_h2c_nghttp2_wiki.pcap"
    head, recs = _pcap_records(src.read_bytes())
    assert struct.unpack_from("<I", head, 20)[0] == 1  # Ethernet
    big = [i for i, r in enumerate(recs) if len(r) > 1000 and i + 4 < len(recs)][::3]
    assert len(big) >= 5
    for i in reversed(big):
        rec = recs.pop(i)
        rec[:8] = recs[i + 2][:8]  # captured when it arrives: at the later packet's time
        recs.insert(i + 3, rec)
    path = tmp_path / "reordered.pcap"
    path.write_bytes(head + b"".join(recs))
    frames = list(iter_frames(path, [3000]))
    assert len(frames) == 154  # every frame, reassembled
    assert gradwire_frames(frames) == tshark_frames(path, [3000])


def release_event_loop(loop) -> None:
    """Undo what pyshark leaves behind: its SIGCHLD child watcher and event loop.

    Left in place, the watcher's signal wakeup socket is never read again, fills up as later
    tests start subprocesses, and every further SIGCHLD ends in an ignored BlockingIOError.
    """
    import asyncio

    asyncio.get_child_watcher().close()
    asyncio.set_child_watcher(None)
    loop.close()
    asyncio.set_event_loop_policy(None)  # a fresh policy: the next user gets a new loop


SMALL = [r for r in REAL if r[0].startswith(("packt_grpc_go_b", "vitalybupt", "zjc"))]


@pytest.mark.parametrize("name, port", [r[:2] for r in SMALL], ids=[r[0] for r in SMALL])
def test_small_captures_equal_pyshark(realdata, name, port):
    need_tshark()
    import pyshark

    cap = pyshark.FileCapture(str(realdata / name), decode_as={f"tcp.port=={port}": "http2"},
                              display_filter="http2.type")
    try:
        expected = [
            (int(layer.get_field("streamid")), int(layer.get_field("type")),
             int(layer.get_field("flags"), 16), int(layer.get_field("length")))
            for pkt in cap for layer in pkt.get_multiple_layers("http2")
            if layer.get_field("type") is not None
        ]
    finally:
        cap.close()
        release_event_loop(cap.eventloop)
    got = [(f.stream_id, f.type, f.flags, f.length) for f in iter_frames(realdata / name, [port])]
    assert got == expected


def test_streams_of_the_lab_capture_name_the_traced_tensors():
    bundle = open_bundle(SAMPLE / "worker0")
    streams = [s for s in capture_streams(bundle.capture_file, bundle.ports)
               if s.path == "/tensorflow.WorkerService/RecvTensor"]
    keys = {s.tensor.split(";")[3] for s in streams if s.tensor}
    assert len(keys) >= 10 and all(s.step_id is not None for s in streams)
    traced = {op.tensor for t in bundle.load_steps() for op in t.ops if op.is_transfer}
    assert traced <= keys  # every traced transfer is a decoded RecvTensor stream
    for s in streams:
        assert s.request_ns <= s.first_data_ns <= s.last_data_ns <= s.end_ns
        assert s.intervals_ns[0][0] == s.first_data_ns and s.intervals_ns[-1][1] == s.last_data_ns


def test_cli_frames_jsonl_keys_and_streams():
    proc = gradwire("frames", str(REALDATA / "suricata_verify_http2_h2c_nghttp2_wiki.pcap"),
                    "--port", "3000", "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 154
    base = {"ts", "src", "dst", "stream_id", "type", "flags", "length"}
    for r in rows:
        extra = set(r) - base
        assert base <= set(r) and extra <= {"window_increment", "settings", "path"}
        assert ("window_increment" in r) == (r["type"] == 8)
    assert sum(r["window_increment"] for r in rows if r["type"] == 8 and r["stream_id"] == 0) \
        == 382_744  # SOURCES.md: stream 0 x11, sum 382,744
    proc = gradwire("streams", str(SAMPLE / "worker0"), "--format", "csv")
    assert proc.returncode == 0 and "/tensorflow.WorkerService/RecvTensor" in proc.stdout


def test_truncated_capture_is_counted_not_fatal(realdata, tmp_path):
    raw = (realdata / "suricata_verify_http2_h2c_nghttp2_wiki.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    frames = list(iter_frames(cut, [3000]))
    whole = list(iter_frames(realdata / "suricata_verify_http2_h2c_nghttp2_wiki.pcap", [3000]))
    assert 0 < len(frames) < len(whole)
    assert frames == whole[: len(frames)]
    proc = gradwire("frames", str(cut), "--port", "3000", "--format", "jsonl")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == len(frames)
    assert f"{cut} ends mid-packet" in proc.stderr  # said, not silent
    for command in ("frames", "streams"):  # the "wrote" line closes, after the notes
        out = tmp_path / f"{command}.csv"
        proc = gradwire(command, str(cut), "--ports", "3000", "-o", str(out))
        lines = proc.stderr.splitlines()
        assert proc.returncode == 0 and out.is_file(), proc.stderr
        assert any("ends mid-packet" in ln for ln in lines[:-1]), proc.stderr
        assert lines[-1] == f"gradwire {command}: wrote {out}", proc.stderr
    proc = gradwire("streams", str(cut), "--port", "9999")
    assert proc.returncode == 0 and "no HTTP/2 connection on port(s) 9999" in proc.stderr


def test_a_connection_without_one_whole_frame_is_said(tmp_path):
    """The preface, then a frame header claiming 16 MB whose payload never comes: no frame to
    show, and a note saying why the table is empty."""
    huge = struct.pack(">I", (1 << 24) - 1)[1:] + bytes([0, 0]) + struct.pack(">I", 1)
    cap = tmp_path / "h2huge.pcap"
    cap.write_bytes(bc.pcap([*bc._handshake(), (1_000_000_000, bc.tcp_frame(1000, bc.PREFACE
                                                                          + huge))]))
    proc = gradwire("frames", str(cap), "--port", str(bc.SERVER[1]))
    assert proc.returncode == 0, proc.stderr
    assert f"{cap}: no whole HTTP/2 frame on its 1 connection(s)" in proc.stderr


def test_tls_on_the_port_is_named(tmp_path):
    cap = H2Capture([443])
    d = h2.H2Direction("client")
    assert d.feed(1, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40)) == []
    assert d.not_h2 == "TLS, not cleartext HTTP/2"
    assert cap.stats()["connections"] == 0


def test_garbage_file_is_one_line(tmp_path):
    bad = tmp_path / "x.pcap"
    bad.write_bytes(b"garbage" * 10)
    assert_one_line_error(gradwire("frames", str(bad)), "not a pcap or pcapng file", "x.pcap")
    assert_one_line_error(gradwire("streams", str(tmp_path / "none.pcap")), "cannot open")
    assert_one_line_error(gradwire("frames", str(bad), "--port", "99999"),
                          "not a TCP port (1-65535): 99999")
    assert_one_line_error(gradwire("frames", str(SAMPLE)), "a folder of node bundles: give "
                          f"one node's, e.g. {SAMPLE / 'ps0'}")


def test_resync_after_a_gap_finds_the_next_frames():
    frames = b"".join(bc.h2_frame(h2.PING, 0, 0, bytes(8)) for _ in range(4))
    d = h2.H2Direction("server")
    assert len(d.feed(1, frames[:20])) == 1  # one whole frame, the next one cut
    got = d.feed(2, frames[30:] + bc.h2_frame(h2.WINDOW_UPDATE, 0, 0, b"\x00\x00\x01\x00"),
                 gap_before=True)
    # bytes 30.. hold the tail of frame 2, then frames 3 and 4 whole, then the WINDOW_UPDATE
    assert [f.type for f in got] == [h2.PING, h2.PING, h2.WINDOW_UPDATE] and d.resyncs == 1


def test_capture_that_starts_mid_connection_resynchronises(tmp_path):
    """Drop the first packets of a real lab capture: frames after the resync point are the
    same as in the full decoding (HPACK state is lost, so paths may be missing)."""
    from gradwire.collector.pcapfile import PcapReader

    bundle = open_bundle(SAMPLE / "worker0")
    packets = list(PcapReader(bundle.capture_file))
    full = list(iter_frames(bundle.capture_file, bundle.ports))
    cap = H2Capture(bundle.ports)
    tail = [f for p in packets[40:] for f in cap.packet(p)] + cap.flush()
    assert cap.stats()["resyncs"] >= 1 and len(tail) > 0.8 * len(full)

    def key(f):
        return (f.ts_ns, f.src, f.stream_id, f.type, f.flags, f.length)

    full_keys = [key(f) for f in full]
    start = full_keys.index(key(tail[0]))
    assert [key(f) for f in tail] == full_keys[start:start + len(tail)]
