"""tshark as the reference decoder: the same frame facts, for cross-checks and benchmarks.

``tshark_frames`` runs ``tshark -d tcp.port==P,http2 -T fields`` and returns, per captured
packet, the HTTP/2 frames tshark decoded in it; ``gradwire_frames`` groups gradwire's frames the
same way, so the two can be compared with ``==``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from gradwire.errors import CaptureError
from gradwire.records import Frame

FIELDS = ("frame.time_epoch", "http2.streamid", "http2.type", "http2.flags", "http2.length",
          "http2.window_update.window_size_increment", "http2.settings.id",
          "http2.settings.initial_window_size", "http2.headers.path")
PacketFrames = tuple[int, tuple[tuple[int, int, int, int], ...], tuple[int, ...],
                     tuple[int, ...], tuple[int, ...], tuple[str, ...]]


def tshark_command(path: str | Path, ports: Iterable[int]) -> list[str]:
    """The tshark command line of the oracle."""
    decode = [a for p in sorted(set(ports)) for a in ("-d", f"tcp.port=={p},http2")]
    fields = [a for f in FIELDS for a in ("-e", f)]
    # out-of-order segments reassembled, as gradwire does (tshark's default drops them)
    return ["tshark", "-n", "-o", "tcp.reassemble_out_of_order:TRUE", "-r", str(path), *decode,
            "-Y", "http2.type", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
            *fields]


def epoch_ns(text: str) -> int:
    """tshark's ``frame.time_epoch`` ('1795301573.636069529') as integer nanoseconds."""
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x, 0) for x in text.split(",") if x)


def parse_tshark_line(line: str) -> PacketFrames:
    """One line of the oracle's output as (ts_ns, frames, increments, ids, windows, paths)."""
    cols = (line.rstrip("\n").split("\t") + [""] * len(FIELDS))[: len(FIELDS)]
    ts, sid, typ, flags, length, inc, ids, iws, paths = cols
    frames = tuple(zip(_ints(sid), _ints(typ), _ints(flags), _ints(length), strict=True))
    return (epoch_ns(ts), frames, _ints(inc), _ints(ids), _ints(iws),
            tuple(p for p in paths.split(",") if p))


def tshark_frames(path: str | Path, ports: Iterable[int]) -> list[PacketFrames]:
    """tshark's HTTP/2 frames of a capture, grouped per packet."""
    if shutil.which("tshark") is None:
        raise CaptureError("tshark is not installed (apt-get install tshark)")
    proc = subprocess.run(tshark_command(path, ports), capture_output=True, text=True)
    if proc.returncode != 0:
        raise CaptureError(f"tshark failed: {proc.stderr.strip()[-300:]}", path=path)
    return [parse_tshark_line(line) for line in proc.stdout.splitlines() if line.strip()]


def gradwire_frames(frames: Iterable[Frame]) -> list[PacketFrames]:
    """gradwire's frames grouped per packet (consecutive frames completed by one packet)."""
    out: list[PacketFrames] = []
    group: list[Frame] = []

    def close() -> None:
        if group:
            out.append((
                group[0].ts_ns,
                tuple((f.stream_id, f.type, f.flags, f.length) for f in group),
                tuple(f.window_increment for f in group if f.window_increment is not None),
                tuple(i for f in group for i, _ in f.settings or ()),
                tuple(v for f in group for i, v in f.settings or () if i == 4),
                tuple(f.path for f in group if f.path)))
            group.clear()

    key = None
    for f in frames:
        k = (f.ts_ns, f.conn, f.src)
        if k != key:
            close()
            key = k
        group.append(f)
    close()
    return out
