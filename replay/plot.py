"""Throughput against the number of workers, predicted and measured: a figure for a report
(matplotlib, Agg). It only draws: the rows and measured points come computed (``replay.sweep``).

One panel per model family (the sim; the MVA variants; Cynthia), sharing the y axis. In every
panel a colour is one configuration (M parameter servers, link bandwidth), and measured points
take the colour of their configuration. The sim's 95% confidence interval of the mean is drawn
as error bars and its 5-95% range over start phases (where one run lands) as a shaded band; a
measured point is the median of its runs with their min-max as error bars. W is on a log2 axis
when the sweep spans more than a factor of 4.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gradwire.replay.mechanisms import ASYNC_PS
from gradwire.units import format_rate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# model family -> panel title; a model outside them gets a panel of its own
FAMILIES = {"sim": "gradwire replay (sim)", "mva": "MVA (MASCOTS'18)",
            "cynthia": "Cynthia (analytic)"}
# line style of each model within its panel
_MODEL_STYLE = {"sim": "-", "mva-exact": "-", "mva-approx": "--", "mva-hybrid": ":",
                "cynthia": "-"}
# each configuration's marker (with its colour), so that curves that coincide stay visible
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "h", "<", ">")
LOG2_SPAN = 4  # W on a log2 axis when max W / min W is more than this


def model_family(model: str) -> str:
    """``sim``, ``mva`` (``mva-exact``, ``mva-approx``, ``mva-hybrid``), ``cynthia``, or the
    model itself."""
    return "mva" if model.startswith("mva") else model


def config_label(ps: int, bandwidth_bps: float | None, mechanism: str | None = None) -> str:
    """``M=1, 1Gbit/s``: a configuration's legend entry (bandwidth in bits per second; None:
    an unshaped link), led by its ``mechanism`` where a figure has several
    (``sync-ps, M=1, 1Gbit/s``)."""
    return (f"{mechanism}, " if mechanism else "") + f"M={ps}, " + (
        "unshaped" if bandwidth_bps is None else f"{format_rate(bandwidth_bps)}/s")


def _mechanism(point: dict[str, Any]) -> str:
    """A row's or a measured point's mechanism (one that names none: the asynchronous PS)."""
    return point.get("mechanism") or ASYNC_PS


def _log2_ticks(lo: int, hi: int) -> list[int]:
    """W's ticks on a log2 axis from ``lo`` to ``hi``: the powers of two between, and the ends
    when at least a factor 1.4 from the nearest of those."""
    ticks = [2 ** k for k in range(hi.bit_length() + 1) if lo <= 2 ** k <= hi]
    for end in (lo, hi):
        if not ticks or min(max(end / t, t / end) for t in ticks) >= 1.4:
            ticks.append(end)
    return sorted(set(ticks))


def _settings_line(rows: list[dict[str, Any]]) -> str:
    """The settings the sim rows (else all rows) share: order, flow control, the sim's start."""
    parts = []
    rows = [r for r in rows if r.get("model") == "sim"] or rows
    orders = {r.get("order") for r in rows} - {None}
    if len(orders) == 1:
        parts.append(f"transfer order {orders.pop()}")
    flow = {r.get("flow_control") for r in rows} - {None}
    if len(flow) == 1:
        parts.append("HTTP/2 flow control " + ("on" if flow.pop() else "off"))
    starts = {r.get("start") for r in rows if r.get("model") == "sim"} - {None}
    if len(starts) == 1:
        parts.append(f"sim workers start {starts.pop()}")
    return ", ".join(parts)


def plot_throughput(rows: list[dict[str, Any]], measured: list[dict[str, Any]],
                    path: Path | IO[bytes], *, title: str | None = None) -> None:
    """``throughput_figure`` written to ``path`` as a PNG (a file, or a binary file object)."""
    import matplotlib.pyplot as plt

    fig = throughput_figure(rows, measured, title=title)
    try:
        fig.savefig(path, dpi=150, format="png")
    finally:
        plt.close(fig)


def throughput_figure(rows: list[dict[str, Any]], measured: list[dict[str, Any]], *,
                      title: str | None = None) -> Figure:
    """The figure of examples/s against W (close it with ``pyplot.close``).

    ``rows``: predicted rows (``model``, ``workers``, ``ps``, ``bandwidth_bps`` in bits/s,
    ``examples_per_s``, ``ci_low``/``ci_high`` (95% interval of the mean; equal to the value
    for the analytic baselines, then not drawn), ``phase_low``/``phase_high`` (sim: 5th-95th
    percentile over start phases, else None), ``order``, ``flow_control``, ``start``).
    ``measured``: points with ``workers``, ``ps``, ``bandwidth_bps``, ``examples_per_s`` (the
    median of ``runs``, each run's examples/s). ``title``: the profile's name, shown in the
    figure's title. Draws only what it is given; one panel per model family present, in
    the order sim, MVA, Cynthia, others.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

    families: list[str] = []
    for r in sorted(rows, key=lambda r: (r["model"] != "sim", r["model"])):
        if model_family(r["model"]) not in families:
            families.append(model_family(r["model"]))
    order = list(FAMILIES)
    families.sort(key=lambda f: order.index(f) if f in order else len(order))
    if not families:  # nothing predicted: measured points alone
        families = ["sim"]
    # a configuration: (mechanism, M, rate); each mechanism its own lines, in order of rows
    mechs = list(dict.fromkeys(_mechanism(p) for p in [*rows, *measured]))
    configs = sorted({(_mechanism(r), r["ps"], r["bandwidth_bps"]) for r in rows}
                     | {(_mechanism(m), m["ps"], m["bandwidth_bps"]) for m in measured},
                     key=lambda c: (mechs.index(c[0]), c[1], -1.0 if c[2] is None else c[2]))
    colour = {c: f"C{i % 10}" for i, c in enumerate(configs)}
    marker = {c: _MARKERS[i % len(_MARKERS)] for i, c in enumerate(configs)}
    ws = [r["workers"] for r in rows] + [m["workers"] for m in measured]
    w_lo, w_hi = (min(ws), max(ws)) if ws else (1, 1)
    log2 = w_hi > LOG2_SPAN * w_lo

    n = len(families)
    fig, axes = plt.subplots(1, n, sharey=True, squeeze=False, layout="constrained",
                             figsize=(7.2 if n == 1 else 1.2 + 4.0 * n, 5.4))
    drew = {"ci": False, "band": False}
    for ax, fam in zip(axes[0], families, strict=True):
        models = sorted({r["model"] for r in rows if model_family(r["model"]) == fam},
                        key=lambda m: list(_MODEL_STYLE).index(m) if m in _MODEL_STYLE else 99)
        for model in models:
            line = _MODEL_STYLE.get(model, "-")
            for cfg in configs:
                pts = sorted((r for r in rows if r["model"] == model
                              and (_mechanism(r), r["ps"], r["bandwidth_bps"]) == cfg),
                             key=lambda r: r["workers"])
                if not pts:
                    continue
                x = [r["workers"] for r in pts]
                y = [r["examples_per_s"] for r in pts]
                ax.plot(x, y, color=colour[cfg], linestyle=line, marker=marker[cfg],
                        markersize=5, markerfacecolor="white", markeredgewidth=1.2,
                        linewidth=1.5, zorder=3)
                band = [r for r in pts if r.get("phase_low") is not None]
                if len(band) > 1:
                    drew["band"] = True
                    ax.fill_between([r["workers"] for r in band],
                                    [r["phase_low"] for r in band],
                                    [r["phase_high"] for r in band],
                                    color=colour[cfg], alpha=0.13, linewidth=0, zorder=1)
                ci = [r for r in pts if r.get("ci_low") is not None
                      and r.get("ci_high") is not None and r["ci_high"] > r["ci_low"]]
                if ci:
                    drew["ci"] = True
                    ax.errorbar([r["workers"] for r in ci],
                                [r["examples_per_s"] for r in ci],
                                yerr=[[r["examples_per_s"] - r["ci_low"] for r in ci],
                                      [r["ci_high"] - r["examples_per_s"] for r in ci]],
                                fmt="none", ecolor=colour[cfg], elinewidth=1.0, capsize=2.5,
                                zorder=4)
        for cfg in configs:
            pts = sorted((m for m in measured
                          if (_mechanism(m), m["ps"], m["bandwidth_bps"]) == cfg),
                         key=lambda m: m["workers"])
            if not pts:
                continue
            runs = [m.get("runs") or [m["examples_per_s"]] for m in pts]
            y = [m["examples_per_s"] for m in pts]
            ax.errorbar([m["workers"] for m in pts], y,
                        yerr=[[v - min(rs) for v, rs in zip(y, runs, strict=True)],
                              [max(rs) - v for v, rs in zip(y, runs, strict=True)]],
                        fmt=marker[cfg], color=colour[cfg], markeredgecolor="black",
                        markeredgewidth=1.0, markersize=8, ecolor=colour[cfg],
                        elinewidth=1.4, capsize=4, linestyle="none", zorder=5)
        name = FAMILIES.get(fam, fam)
        if fam == "mva" and len(models) > 1:
            name += ": " + ", ".join(m.removeprefix("mva-") for m in models)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("workers W")
        ax.grid(alpha=0.3, which="major")
        if log2:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(FixedLocator(_log2_ticks(w_lo, w_hi)))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.0f}"))
            ax.set_xlim(w_lo / 1.15, w_hi * 1.15)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            pad = max(0.3, 0.04 * (w_hi - w_lo))
            ax.set_xlim(w_lo - pad, w_hi + pad)
    axes[0][0].set_ylabel("throughput (examples / s)")
    axes[0][0].set_ylim(bottom=0)
    axes[0][0].yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    head = "Training throughput against workers"
    if title:
        head += ": " + title
    sub = _settings_line(rows)
    width = fig.get_figwidth()
    fig.suptitle("\n".join(textwrap.wrap(head, int(10 * width))
                           + textwrap.wrap(sub, int(11 * width))), fontsize=10.5)

    by_config = [Line2D([], [], color=colour[c], marker=marker[c], markerfacecolor="white",
                        markeredgewidth=1.2, linewidth=1.5,
                        label=config_label(c[1], c[2], c[0] if len(mechs) > 1 else None))
                 for c in configs]
    how: list[Any] = []
    if any(r["model"] == "sim" for r in rows):
        how.append(Line2D([], [], color="0.3", linewidth=1.5,
                          label="sim: mean of replications"))
    for model in ("mva-exact", "mva-approx", "mva-hybrid"):
        if any(r["model"] == model for r in rows):
            how.append(Line2D([], [], color="0.3", linestyle=_MODEL_STYLE[model],
                              linewidth=1.5, label=model))
    if drew["ci"]:
        how.append(Line2D([], [], color="0.3", marker="|", markersize=9, linestyle="none",
                          label="error bars: 95% CI of the mean"))
    if drew["band"]:
        how.append(Patch(color="0.3", alpha=0.25,
                         label="band: 5-95% of single runs\nover the workers' start phases"))
    if measured:
        how.append(Line2D([], [], color="0.6", marker="o", markeredgecolor="black",
                          markersize=8, linestyle="none",
                          label="measured (filled): median of runs,\nerror bars min-max"))
    fig.legend(handles=by_config, title="configuration (colour, marker)", fontsize=8,
               title_fontsize=9, loc="outside lower left",
               ncol=max(1, min(len(by_config), 2 * n) // 2) if len(by_config) > 3 else 1)
    if how:
        fig.legend(handles=how, title="what is drawn", fontsize=8, title_fontsize=9,
                   loc="outside lower right", ncol=1 if n == 1 else 2)
    return fig
