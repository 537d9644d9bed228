"""Terminal rendering of reports with rich (kept apart from computation)."""

from __future__ import annotations

import math
import os
from typing import Any

from rich.console import Console
from rich.table import Table


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.3f}"


def print_inspection(report: dict[str, Any], console: Console | None = None) -> None:
    """Print a ``gradwire inspect`` report as a few tables."""
    con = console or wide_console()
    host = report["host"]
    con.print(f"[bold]bundle[/] {report['bundle']}  status [bold]{report['status']}[/]  "
              f"mode {report['mode']}  schema v{report['schema_version']}")
    con.print(f"host {host.get('hostname')} ({', '.join(host.get('addresses') or [])})  "
              f"TF {report['tf_version'] or '?'}  ports {report['ports']}")
    con.print(f"nodes: {', '.join(report['nodes']) or '-'}")
    var = report.get("variables")
    if var:
        per = ", ".join(f"{t} {v['count']} ({_mb(v['bytes'])} MB)"
                        for t, v in var["per_task"].items())
        big = var["biggest"]
        con.print(f"variables: {per}; biggest {big['name']} on {big['task']} "
                  f"({_mb(big['bytes'])} MB)")
    if report.get("synchronous") is not None:
        con.print("training: " + ("synchronous (SyncReplicasOptimizer: the gradients go into "
                                  "accumulators on the PS)" if report["synchronous"]
                                  else "asynchronous PS (the PS applies each push)"))
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
        tool = f", {cap['tool']}" if cap.get("tool") else ""
        con.print(f"capture {cap['file']} ({cap['format']}{tool}): "
                  f"{cap['tcp_packets']} TCP packets over {cap['duration_s']} s; drops "
                  + ", ".join(f"{name} {'unknown' if cap[k] is None else cap[k]}" for name, k in
                              (("kernel", "drops_kernel"), ("capturer", "drops_capturer"),
                               ("interface", "drops_iface"))))
        for d, n in cap["payload_bytes"].items():
            con.print(f"  {d}: {_mb(n)} MB")
        if cap.get("retransmitted_bytes"):
            con.print(f"  seen twice (TCP resent it): {_mb(cap['retransmitted_bytes'])} MB, "
                      "counted once above; a segment lost before the capture is not in it")
    else:
        con.print("capture: none")
    if cpu := report.get("host_cpu"):
        con.print(f"machine over the capture: {cpu['busy_cores']:.2f} cores busy, "
                  f"{cpu['stolen_cores']:.2f} stolen by its hypervisor ({cpu['seconds']:.1f} s)")
    if report["problems"]:
        con.print("[bold yellow]problems:[/]")
        for p in report["problems"]:
            con.print(f"  - {p}")
    else:
        con.print("problems: none")
    for note in report.get("notes", []):
        con.print(f"note: {note}")


def print_win(report: dict[str, Any], console: Console | None = None) -> None:
    """Print a ``gradwire win`` report: advertised windows, fit, Table 1 style errors."""
    con = console or wide_console()
    fit = report["fit"]
    con.print(f"[bold]capture[/] {report['capture']}")
    for receiver, timeline in report["advertised_initial_window"].items():
        values = " -> ".join(f"{v:,}" for _, v in timeline)
        con.print(f"  {receiver} advertised INITIAL_WINDOW_SIZE {values}")
    for receiver, total in report["connection_window_updates"].items():
        con.print(f"  {receiver} connection WINDOW_UPDATE total {total:,} B")
    con.print(f"direction {fit['direction']}: {fit['links']} link(s), {fit['steps']} step(s); "
              f"link rate {fit['rate_bytes_per_s'] * 8 / 1e6:,.1f} Mbit/s, request-to-data "
              f"latency {fit['latency_s'] * 1e3:.3f} ms")
    table = Table(title="end-time error of streams (relative to the step's phase on the link)")
    for col in ("WIN", "bytes", "average", "median", "95th pct", "maximum", "streams"):
        table.add_column(col, justify="right")
    for name, win in (("fitted", fit["fitted_win_bytes"]),
                      ("advertised", fit["advertised_win_bytes"])):
        e = fit[name]
        table.add_row(name, f"{win:,}", f"{e['average']:.2%}", f"{e['median']:.2%}",
                      f"{e['p95']:.2%}", f"{e['maximum']:.2%}", str(e["streams"]))
    con.print(table)


def print_overhead(fits: list[Any], console: Console | None = None) -> None:
    """Print ``gradwire overhead`` fits, one row per node."""
    table = Table(title="parsing overhead of received tensors: overhead = alpha*size + beta")
    for col in ("node", "n", "alpha us/MB", "beta us", "R^2", "|res| med us", "|res| p95 us",
                "unmatched", "neg"):
        table.add_column(col, justify="left" if col == "node" else "right")
    for f in fits:
        table.add_row(f.node, str(f.points), f"{f.alpha_us_per_byte * 1e6:,.1f}",
                      f"{f.beta_us:,.1f}", f"{f.r2:.3f}", f"{f.residual_median_abs_us:,.1f}",
                      f"{f.residual_p95_abs_us:,.1f}", str(f.unmatched_ops), str(f.negative))
    (console or wide_console()).print(table)


def print_phases(summary: dict[str, dict[str, float]], console: Console | None = None) -> None:
    """Print ``gradwire phases``: per worker, each phase's mean, std and median (ms)."""
    con = console or wide_console()
    for worker, st in summary.items():
        title = f"worker {worker}: {int(st['steps'])} steps (after warm-up)"
        table = Table(title=title, min_width=len(title))  # a title on one line
        for col in ("phase", "mean", "std", "median"):
            table.add_column(col, justify="left" if col == "phase" else "right")
        for name in ("downlink", "worker", "uplink", "server"):
            if f"{name}_mean" in st:
                table.add_row(f"{name} (ms)", *(f"{st[f'{name}_{k}'] * 1e3:,.2f}"
                                               for k in ("mean", "std", "median")))
        for name in ("down_bytes", "up_bytes"):
            if f"{name}_mean" in st:
                table.add_row(f"{name.replace('_', ' ')} (MB)", *(
                    f"{st[f'{name}_{k}'] / 1e6:,.3f}" for k in ("mean", "std", "median")))
        con.print(table)


class _Console(Console):
    """rich's Console, whose closed pipe (``| head``) ends gradwire as any other write does:
    quietly, exit 0 (rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def wide_console() -> Console:
    """A console that does not squeeze wide tables when writing to a pipe or file."""
    con = _Console()
    if con.is_terminal:
        return con
    cols = os.environ.get("COLUMNS", "")
    return _Console(width=max(160, int(cols) if cols.isdigit() else 0))


def _fmt_us(v: float | None) -> str:
    if v is None:
        return "unbounded"
    text = f"{v:,.1f}"
    return "0.0" if text == "-0.0" else text


def print_alignment(summary: dict[str, Any], console: Console | None = None) -> None:
    """Print ``gradwire align``'s offsets (one row per host) and transfer counts."""
    con = console or wide_console()
    table = Table(title=f"clock offsets relative to {summary['reference']} "
                  f"(objective {summary['objective']}), microseconds")
    for col in ("host (clock domain)", "bundles", "tasks", "offset", "feasible from", "to",
                "capture vs TF"):
        table.add_column(col, justify="right" if col in ("offset", "feasible from", "to")
                         else "left")
    for h in summary["hosts"]:
        skew = h["capture_skew"]
        check = "-" if skew is None else ("same clock" if skew["consistent"] else
                                          f"corrected {_fmt_us(skew['applied_us'])}")
        lo, hi = h["interval_us"]
        table.add_row(h["domain"], h["bundles"] or "-", ", ".join(h["tasks"]) or "-",
                      _fmt_us(h["offset_us"]), _fmt_us(lo), _fmt_us(hi), check)
    con.print(table)
    t = summary["transfers"]
    con.print(f"transfers: {t['total']} ({t['pull']} pull, {t['push']} push), "
              f"{t['seen_by_both_captures']} seen by both captures, {t['traced']} traced; "
              f"{summary['constraints']['precedences']} constraints over "
              f"{_count(summary['constraints']['domain_pairs'], 'host pair')}, solved in "
              f"{summary['solve_s']:.3f} s")
    dfg = summary.get("dfg")
    if dfg:
        c = dfg["counts"]
        con.print(f"global DFG: {c['nodes']} nodes, {c['edges']} edges; "
                  + ("no problems" if not dfg["problems"] else "; ".join(dfg["problems"])))


def _count(n: int, noun: str) -> str:
    """``1 host pair``, ``2 host pairs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _decimals(x: float) -> int:
    """Decimals that show at least 3 significant digits of ``x`` (one at least, 4 at most):
    1.103 ex/s prints as 1.10, 3,100 as 3,100.0."""
    if not x or not math.isfinite(x):
        return 1
    return min(4, max(1, 2 - math.floor(math.log10(abs(x)))))


def print_predictions(rows: list[dict[str, Any]], measured: list[dict[str, Any]],
                      console: Console | None = None) -> None:
    """Print ``gradwire predict``'s table (measured throughput and error where given; the
    replications' 5th-95th percentile examples/s when the rows have them)."""
    from gradwire.units import format_rate

    con = console or wide_console()
    meas = {(m["workers"], m["ps"], m["bandwidth_bps"], m.get("mechanism", "async-ps")):
            m["examples_per_s"] for m in measured}
    table = Table(title="predicted training throughput")
    phases = any(r.get("phase_low") is not None for r in rows)
    mechs = len({r.get("mechanism") for r in rows}) > 1 or any(
        r.get("mechanism", "async-ps") != "async-ps" for r in rows)
    cols = ["model", *(["mechanism"] if mechs else []), "W", "M", "bandwidth", "examples/s",
            "95% CI",
            *(["phase 5-95%"] if phases else []),
            f"vs W={min(r['workers'] for r in rows)}",  # the speedup's base (rows_of)
            "bottleneck", "util"]
    if meas:
        cols += ["measured", "error"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("model", "mechanism", "bottleneck")
                         else "right")
    for r in sorted(rows, key=lambda r: (r["model"] != "sim", r["model"],
                                         r.get("mechanism", ""), r["ps"], r["bandwidth_bps"],
                                         r["workers"])):
        d = _decimals(r["examples_per_s"])
        ci = ("-" if r["model"] not in ("sim", "emulate")  # emulate's: its runs' range
              else f"{r['ci_low']:,.{d}f}-{r['ci_high']:,.{d}f}")
        row = [r["model"], *([r.get("mechanism", "-")] if mechs else []), str(r["workers"]),
               str(r["ps"]), format_rate(r["bandwidth_bps"]),
               f"{r['examples_per_s']:,.{d}f}", ci]
        if phases:
            row.append("-" if r.get("phase_low") is None
                       else f"{r['phase_low']:,.{d}f}-{r['phase_high']:,.{d}f}")
        row += [f"{r['speedup']:.2f}x", r["bottleneck"], f"{r['utilisation']:.0%}"]
        if meas:
            m = meas.get((r["workers"], r["ps"], r["bandwidth_bps"],
                          r.get("mechanism", "async-ps")))
            row += ["-", "-"] if m is None else [
                f"{m:,.{d}f}", f"{(r['examples_per_s'] - m) / m:+.1%}"]
        table.add_row(*row)
    con.print(table)


def print_critical_path(doc: dict[str, Any], console: Console | None = None) -> None:
    """Print ``gradwire predict --explain``'s critical path (``replay.critical.explain``'s
    document): per step on average, the path's time by kind and the ops that take most."""
    from gradwire.units import format_rate

    con = console or wide_console()
    mechanism = f"{doc['mechanism']} " if doc.get("mechanism") else ""
    title = (f"critical path of {mechanism}at W={doc['workers']}, M={doc['ps']}, "
             f"{format_rate(doc['bandwidth_bps'])}: {doc['mean_step_us'] / 1e3:,.2f} ms per "
             f"step (mean of {doc['steps']} steps of one replication)")
    table = Table(title=title)
    for c in ("on the path", "ms per step", "share"):
        table.add_column(c, justify="left" if c == "on the path" else "right")
    for kind, us in doc["by_kind_us"].items():
        table.add_row(kind, f"{us / 1e3:,.2f}", f"{doc['share'][kind]:.0%}")
    table.add_section()
    for t in doc["top"]:
        table.add_row(t["name"], f"{t['us_per_step'] / 1e3:,.2f}", f"{t['share']:.0%}")
    con.print(table)
    if "delay" in doc["by_kind_us"]:
        con.print("delay: time on no link and no core (requests' latency, the parsing of "
                  "received tensors)")
