"""Throughput against the number of workers, predicted and measured (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradwire.units import format_rate

_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "D", "v", "P", "X", "*", "h")


def plot_throughput(rows: list[dict[str, Any]], measured: list[dict[str, Any]],
                    path: Path) -> None:
    """One line per (model, M, bandwidth): the colour says the model, the line style and marker
    the configuration (M, bandwidth); the sim's 5th-95th percentile over start phases as a
    shaded band; measured points as black markers of their configuration's shape. Two short
    legends (models; configurations) beside the axes, so they never cover the lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    series: dict[tuple, list[tuple[int, float, float | None, float | None]]] = {}
    for r in rows:
        series.setdefault((r["model"], r["ps"], r["bandwidth_bps"]), []).append(
            (r["workers"], r["examples_per_s"], r.get("phase_low"), r.get("phase_high")))
    models = sorted({k[0] for k in series}, key=lambda m: (m != "sim", m))
    configs = sorted({k[1:] for k in series} | {(m["ps"], m["bandwidth_bps"]) for m in measured})
    colour = {m: f"C{i % 10}" for i, m in enumerate(models)}
    style = {c: (_STYLES[i % len(_STYLES)], _MARKERS[i % len(_MARKERS)])
             for i, c in enumerate(configs)}

    fig, ax = plt.subplots(figsize=(8.4, 4.8), layout="constrained")
    banded = False
    for (model, ps, bw), pts in sorted(series.items()):
        pts.sort()
        line, marker = style[(ps, bw)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour[model], linestyle=line,
                marker=marker, markersize=5 if model == "sim" else 3.5,
                linewidth=1.6 if model == "sim" else 1.0)
        band = [p for p in pts if p[2] is not None]
        if len(band) > 1:
            banded = True
            ax.fill_between([p[0] for p in band], [p[2] for p in band], [p[3] for p in band],
                            color=colour[model], alpha=0.12, linewidth=0)
    for ps, bw in configs:
        pts = sorted((m["workers"], m["examples_per_s"]) for m in measured
                     if (m["ps"], m["bandwidth_bps"]) == (ps, bw))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="none", color="k",
                    marker=style[(ps, bw)][1], markersize=8, markerfacecolor="none",
                    markeredgewidth=1.5)
    ax.set_xlabel("workers W")
    ax.set_ylabel("examples / s")
    ax.set_title("gradwire predict: training throughput")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)

    by_model: list[Any] = [Line2D([], [], color=colour[m], linewidth=2, label=m) for m in models]
    if banded:
        by_model.append(Patch(color=colour["sim"], alpha=0.25,
                              label="sim: 5-95% over\nstart phases"))
    if measured:
        shape = style[configs[0]][1] if len(configs) == 1 else "o"  # else: by configuration
        by_model.append(Line2D([], [], color="k", marker=shape, linestyle="none",
                               markerfacecolor="none", markeredgewidth=1.5, label="measured"))
    fig.legend(handles=by_model, title="model", fontsize=7, title_fontsize=8,
               loc="outside right upper")
    by_config = [Line2D([], [], color="0.3", linestyle=style[c][0], marker=style[c][1],
                        label=f"M={c[0]}, {format_rate(c[1])}") for c in configs]
    if len(by_config) > 1:
        fig.legend(handles=by_config, title="configuration", fontsize=7, title_fontsize=8,
                   loc="outside right lower")
    fig.savefig(path, dpi=120)
    plt.close(fig)
