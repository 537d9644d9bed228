"""Property-based tests: random and mutated input never crashes the packet path, and TCP
reassembly gives back the original bytes whatever the order and duplication of segments."""

from __future__ import annotations

from functools import lru_cache

from conftest import REALDATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradwire.collector.grpcwire import decode_recv_tensor_request, grpc_messages
from gradwire.collector.h2capture import H2Capture
from gradwire.collector.pcapfile import PcapReader
from gradwire.collector.tcpstream import TcpDirection

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=1)
def real_packets():
    return list(PcapReader(REALDATA / "vitalybupt_grpc_cpp_chttp2.pcap"))


@FAST
@given(st.data())
def test_mutated_real_traffic_never_crashes(data):
    pkts = real_packets()
    cap = H2Capture([50051])
    for p in pkts:
        payload = p.payload
        if payload and data.draw(st.integers(0, 9)) == 0:
            i = data.draw(st.integers(0, len(payload) - 1))
            payload = payload[:i] + bytes([data.draw(st.integers(0, 255))]) + payload[i + 1:]
        if data.draw(st.integers(0, 19)) == 0:
            continue  # a dropped packet
        cap.packet(type(p)(**{**p.__dict__, "payload": payload}))
    cap.flush()
    cap.streams()
    assert cap.stats()["connections"] <= 2  # fewer when the SYNs were dropped


@FAST
@given(st.binary(min_size=1, max_size=3000), st.data())
def test_reassembly_returns_the_original_bytes(blob, data):
    isn = data.draw(st.integers(0, 2**32 - 1))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(blob)), max_size=12))))
    bounds = [0, *cuts, len(blob)]
    segs = [(a, blob[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    order = data.draw(st.permutations(segs))
    dupes = data.draw(st.lists(st.sampled_from(segs), max_size=4))
    d = TcpDirection()
    d.feed(0, isn, b"", syn=True)
    out = b""
    for a, seg in [*order, *dupes]:
        out += b"".join(c.data for c in d.feed(1, (isn + 1 + a) % 2**32, seg))
    out += b"".join(c.data for c in d.flush(2))
    assert out == blob and d.gaps == 0


@FAST
@given(st.binary(max_size=200))
def test_grpc_and_protobuf_decoding_are_total(blob):
    messages, rest = grpc_messages(blob)
    assert sum(len(m) + 5 for m in messages) + len(rest) == len(blob)
    step, key = decode_recv_tensor_request(blob)
    assert step is None or isinstance(step, int)
