"""The pcap/pcapng reader against tshark on real third-party captures, and on broken files."""

from __future__ import annotations

import subprocess

import pytest
from conftest import REALDATA, need_tshark

from gradwire.collector.pcapfile import PcapReader, decode_frame
from gradwire.errors import CaptureError

CAPTURES = sorted(p.name for p in REALDATA.glob("*.pcap*")) if REALDATA.is_dir() else []


@pytest.mark.parametrize("name", CAPTURES)
def test_tcp_segments_match_tshark(realdata, name):
    need_tshark()
    path = realdata / name
    out = subprocess.run(
        ["tshark", "-o", "tcp.reassemble_out_of_order:TRUE", "-r", str(path), "-Y", "tcp",
         "-T", "fields", "-e", "frame.time_epoch",
         "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.len"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    expected = [(round(float(t) * 1e6), int(s), int(d), int(q), int(n))
                for t, s, d, q, n in (line.split("\t") for line in out)]
    got = [(round(p.ts_ns / 1e3), p.sport, p.dport, p.seq, p.payload_bytes)
           for p in PcapReader(path)]
    assert got == expected


def test_counts_skipped_non_tcp(realdata):
    reader = PcapReader(realdata / "packt_grpc_go_unary.pcapng")
    packets = list(reader)
    assert reader.format == "pcapng"
    assert reader.stats.frames == 4318 and len(packets) == 4306
    assert reader.stats.skipped_frames == 12  # the mDNS/NBNS datagrams


def test_truncated_file_yields_complete_packets(realdata, tmp_path):
    src = (realdata / "suricata_verify_http2_h2c_nghttp2_wiki.pcap").read_bytes()
    whole = list(PcapReader(realdata / "suricata_verify_http2_h2c_nghttp2_wiki.pcap"))
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src[: len(src) // 2])
    reader = PcapReader(cut)
    partial = list(reader)
    assert reader.stats.truncated
    assert 0 < len(partial) < len(whole)
    assert partial == whole[: len(partial)]


@pytest.mark.parametrize("content, fragment", [
    (b"", "empty"),
    (b"GET / HTTP/1.1\r\n", "not a pcap or pcapng file"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "header is truncated"),
])
def test_garbage_is_a_clear_error(tmp_path, content, fragment):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(content)
    with pytest.raises(CaptureError, match=fragment) as err:
        list(PcapReader(bad))
    assert str(bad) in str(err.value)


def test_an_unsupported_link_type_is_named(realdata, tmp_path):
    """A real capture relabelled as 802.11 (link type 105) used to pass as "no HTTP/2"."""
    import struct

    src = (realdata / "suricata_verify_http2_h2c_nghttp2_wiki.pcap").read_bytes()
    bad = tmp_path / "wifi.pcap"
    bad.write_bytes(src[:20] + struct.pack("<I", 105) + src[24:])
    with pytest.raises(CaptureError, match="link type 105 is not supported") as err:
        list(PcapReader(bad))
    assert str(bad) in str(err.value)


@pytest.mark.parametrize("block_type, length", [(1, 12), (6, 16), (3, 12)])
def test_a_pcapng_block_too_short_for_its_type_is_named(tmp_path, block_type, length):
    import struct

    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    idb = struct.pack("<IIHHI", 1, 20, 1, 0, 65535) + struct.pack("<I", 20)
    short = struct.pack("<II", block_type, length) + bytes(length - 12) + struct.pack("<I", length)
    bad = tmp_path / "short.pcapng"
    bad.write_bytes(shb + (idb if block_type != 1 else b"") + short)
    at = len(shb) + (len(idb) if block_type != 1 else 0)
    with pytest.raises(CaptureError,
                       match=f"corrupt pcapng block at byte {at}: type {block_type} is only"):
        list(PcapReader(bad))


def test_decode_frame_ignores_non_ip():
    arp = bytes(12) + b"\x08\x06" + bytes(28)
    assert decode_frame(1, 0, arp, len(arp)) is None
    assert decode_frame(1, 0, b"", 0) is None


def test_an_extra_interface_of_another_link_type_is_skipped(tmp_path):
    """dumpcap -i eth0 -i nflog writes two interfaces: the Ethernet one is read, the NFLOG
    one's frames are skipped (the file was refused outright)."""
    import struct

    def block(kind, body):
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", kind, n) + body + struct.pack("<I", n)

    def idb(linktype):
        return block(1, struct.pack("<HHI", linktype, 0, 65535))

    def epb(iface, frame, ts):
        return block(6, struct.pack("<IIIII", iface, 0, ts, len(frame), len(frame)) + frame)

    eth = b"\0" * 12 + b"\x08\x00"
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    tcp = struct.pack(">HHIIBBHHH", 40000, 2222, 1, 0, 0x50, 0x10, 1000, 0, 0)
    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    path = tmp_path / "two.pcapng"
    path.write_bytes(shb + idb(1) + idb(239) + epb(0, eth + ip + tcp, 1)
                     + epb(1, b"\x02\0\0\0" + b"x" * 20, 2) + epb(0, eth + ip + tcp, 3))
    reader = PcapReader(path)
    assert len(list(reader)) == 2 and reader.stats.skipped_frames == 1
    only = tmp_path / "nflog.pcapng"  # no interface gradwire reads: said
    only.write_bytes(shb + idb(239) + epb(0, b"\x02\0\0\0" + b"x" * 20, 2))
    with pytest.raises(CaptureError, match="link type 239 is not supported"):
        list(PcapReader(only))
