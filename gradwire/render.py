"""Terminal rendering of reports with rich (kept apart from computation)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.3f}"


def print_inspection(report: dict[str, Any], console: Console | None = None) -> None:
    """Print a ``gradwire inspect`` report as a few tables."""
    con = console or Console()
    host = report["host"]
    con.print(f"[bold]bundle[/] {report['bundle']}  status [bold]{report['status']}[/]  "
              f"mode {report['mode']}  schema v{report['schema_version']}")
    con.print(f"host {host.get('hostname')} ({', '.join(host.get('addresses') or [])})  "
              f"TF {report['tf_version'] or '?'}  ports {report['ports']}")
    con.print(f"nodes: {', '.join(report['nodes']) or '-'}")
    steps = report["steps"]
    if steps:
        table = Table(title="recorded steps: bytes per direction, trace tensors vs capture TCP")
        for col in ("step", "ms", "ops", "transfers", "direction", "trace MB", "capture MB"):
            table.add_column(col, justify="left" if col == "direction" else "right")
        for s in steps:
            directions = sorted({*s["trace_bytes"], *s["capture_bytes"]}) or ["-"]
            for k, d in enumerate(directions):
                head = [str(s["step"]), f"{s['duration_ms']:.1f}", str(s["ops"]),
                        str(s["transfers"])] if k == 0 else ["", "", "", ""]
                table.add_row(*head, d, _mb(s["trace_bytes"].get(d)),
                              _mb(s["capture_bytes"].get(d)))
        con.print(table)
    cap = report["capture"]
    if cap:
        con.print(f"capture {cap['file']} ({cap['format']}, {cap['tool']}): "
                  f"{cap['tcp_packets']} TCP packets over {cap['duration_s']} s; drops "
                  f"kernel {cap['drops_kernel']}, capturer {cap['drops_capturer']}, "
                  f"interface {cap['drops_iface']}")
        for d, n in cap["payload_bytes"].items():
            con.print(f"  {d}: {_mb(n)} MB")
    else:
        con.print("capture: none")
    if report["problems"]:
        con.print("[bold yellow]problems:[/]")
        for p in report["problems"]:
            con.print(f"  - {p}")
    else:
        con.print("problems: none")
    for note in report.get("notes", []):
        con.print(f"note: {note}")
