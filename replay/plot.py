"""Throughput against the number of workers, predicted and measured (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradwire.units import format_rate


def plot_throughput(rows: list[dict[str, Any]], measured: list[dict[str, Any]],
                    path: Path) -> None:
    """One line per (model, M, bandwidth), the sim's 5th-95th percentile over start phases as a
    shaded band; measured points as black markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[tuple, list[tuple[int, float, float | None, float | None]]] = {}
    for r in rows:
        series.setdefault((r["model"], r["ps"], r["bandwidth_bps"]), []).append(
            (r["workers"], r["examples_per_s"], r.get("phase_low"), r.get("phase_high")))
    for (model, ps, bw), pts in sorted(series.items()):
        pts.sort()
        name = f"{model}, M={ps}, {format_rate(bw)}"
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts],
                          marker="o" if model == "sim" else ".",
                          linestyle="-" if model == "sim" else "--", label=name)
        band = [p for p in pts if p[2] is not None]
        if len(band) > 1:
            ax.fill_between([p[0] for p in band], [p[2] for p in band], [p[3] for p in band],
                            color=line.get_color(), alpha=0.15, linewidth=0,
                            label=f"{name}: 5-95% over start phases")
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for m in measured:
        groups.setdefault((m["ps"], m["bandwidth_bps"]), []).append(
            (m["workers"], m["examples_per_s"]))
    for (ps, bw), pts in sorted(groups.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k^", markersize=8,
                label=f"measured, M={ps}, {format_rate(bw)}")
    ax.set_xlabel("workers W")
    ax.set_ylabel("examples / s")
    ax.set_title("gradwire predict: training throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
