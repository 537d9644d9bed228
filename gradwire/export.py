"""Records as plain rows for jsonl, csv and text tables (kept apart from computation)."""

from __future__ import annotations

import csv
import itertools
import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from gradwire.records import Frame, Stream

FRAME_TYPES = {0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS",
               5: "PUSH_PROMISE", 6: "PING", 7: "GOAWAY", 8: "WINDOW_UPDATE", 9: "CONTINUATION"}


def frame_row(f: Frame) -> dict[str, Any]:
    """The jsonl object of a frame: ts (s), src, dst, stream_id, type, flags, length, and where
    they apply window_increment, settings ({id: value}) and path."""
    row: dict[str, Any] = {"ts": f.ts_ns / 1e9, "src": f.src, "dst": f.dst,
                           "stream_id": f.stream_id, "type": f.type, "flags": f.flags,
                           "length": f.length}
    if f.window_increment is not None:
        row["window_increment"] = f.window_increment
    if f.settings is not None:
        row["settings"] = {str(k): v for k, v in f.settings}
    if f.path is not None:
        row["path"] = f.path
    return row


def stream_row(s: Stream) -> dict[str, Any]:
    """The jsonl object of a stream; times in seconds since the epoch (capture clock)."""
    def sec(ns: int | None) -> float | None:
        return None if ns is None else ns / 1e9

    return {"conn": s.conn, "client": s.client, "server": s.server, "stream_id": s.stream_id,
            "path": s.path, "status": s.status, "tensor": s.tensor, "step_id": s.step_id,
            "request_ts": sec(s.request_ns), "first_data_ts": sec(s.first_data_ns),
            "last_data_ts": sec(s.last_data_ns), "end_ts": sec(s.end_ns),
            "request_bytes": s.request_bytes, "response_bytes": s.response_bytes,
            "intervals": [[a / 1e9, b / 1e9] for a, b in s.intervals_ns]}


TABLE_SIZED_ON = 256  # rows an aligned table's column widths are taken from


def write_rows(rows: Iterable[dict[str, Any]], fmt: str, columns: list[str],
               out: TextIO = sys.stdout) -> int:
    """Write rows as jsonl, csv (its header even with no rows) or an aligned text table,
    streaming; returns the row count."""
    if fmt == "table":
        return _write_table(rows, columns, out)
    n = 0
    writer = None
    for row in rows:
        if fmt == "jsonl":
            out.write(json.dumps(row) + "\n")
        else:
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
                writer.writeheader()
            writer.writerow({k: _cell(row.get(k)) for k in columns})
        n += 1
    if fmt == "csv" and writer is None:  # no rows: the header alone, so a reader finds columns
        csv.DictWriter(out, fieldnames=columns).writeheader()
    return n


def _write_table(rows: Iterable[dict[str, Any]], columns: list[str], out: TextIO) -> int:
    """Rows as text columns two spaces apart, each as wide as its widest cell among the
    first ``TABLE_SIZED_ON`` rows (a wider one later pushes its line along), an empty cell
    as ``-`` (so that a line splits on white space into its columns), no trailing spaces;
    streaming after those first rows. Returns the row count."""
    it = iter(rows)
    first = [_table_cells(r, columns) for r in itertools.islice(it, TABLE_SIZED_ON)]
    widths = [max([len(c), *(len(r[k]) for r in first)]) for k, c in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"

    out.write(line(columns))
    n = 0
    for cells in itertools.chain(first, (_table_cells(r, columns) for r in it)):
        out.write(line(cells))
        n += 1
    return n


def _table_cells(row: dict[str, Any], columns: list[str]) -> list[str]:
    return [str(_cell(row.get(k))) or "-" for k in columns]


def _cell(v: Any) -> Any:
    """A value as a csv or table cell: a whole float as a whole number (a rate in bit/s
    reads the same whatever its size), a large one (a timestamp, s) to the microsecond."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e18:
        return str(int(v))
    if isinstance(v, float) and v > 1e8:
        return f"{v:.6f}"
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(",", ":"))
    return "" if v is None else v


FRAME_COLUMNS = ["ts", "src", "dst", "stream_id", "type", "flags", "length", "window_increment",
                 "settings", "path"]
STREAM_COLUMNS = ["conn", "client", "server", "stream_id", "path", "status", "step_id",
                  "request_ts", "first_data_ts", "last_data_ts", "end_ts", "request_bytes",
                  "response_bytes", "intervals", "tensor"]
