"""The throughput figure (replay/plot.py), checked through matplotlib's objects, not pixels:
panels per model family, W's axis, legend texts, the intervals drawn and measured points in
their curve's colour."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

from gradwire.replay.plot import plot_throughput, throughput_figure  # noqa: E402

CONFIGS = ((1, 1e9), (2, 1e10))


def rows(models=("sim",), workers=range(1, 9)) -> list[dict]:
    """Rows shaped like predict's: the sim with a CI and a phase range, baselines without."""
    out = []
    for model in models:
        for ps, bw in CONFIGS:
            for w in workers:
                x = 1000.0 * w * ps * (2 if model == "cynthia" else 1)
                sim = model == "sim"
                out.append({"model": model, "workers": w, "ps": ps, "bandwidth_bps": bw,
                            "order": "observed", "flow_control": True, "examples_per_s": x,
                            "ci_low": 0.98 * x if sim else x, "ci_high": 1.02 * x if sim else x,
                            "phase_low": 0.9 * x if sim else None,
                            "phase_high": 1.1 * x if sim else None,
                            "start": "random" if sim else None})
    return out


MEASURED = [{"workers": 2, "ps": 1, "bandwidth_bps": 1e9, "examples_per_s": 1900.0,
             "runs": [1800.0, 1900.0, 2100.0]},
            {"workers": 4, "ps": 2, "bandwidth_bps": 1e10, "examples_per_s": 7000.0,
             "runs": [7000.0, 6500.0]}]


@pytest.fixture
def figure():
    made = []

    def make(*args, **kw):
        made.append(throughput_figure(*args, **kw))
        return made[-1]

    yield make
    for fig in made:
        plt.close(fig)


def legend_texts(fig) -> list[str]:
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def test_one_model_one_panel_log2_axis_and_legend_names_every_curve(figure):
    fig = figure(rows(), [], title="bundles/resnet50")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2  # W spans 8x
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    assert "bundles/resnet50" in fig.get_suptitle()
    assert "flow control on" in fig.get_suptitle() and "order observed" in fig.get_suptitle()
    texts = legend_texts(fig)
    assert {"M=1, 1Gbit/s", "M=2, 10Gbit/s"} <= set(texts)
    assert any("95% CI" in t and "error bars" in t for t in texts)  # says how the CI is drawn
    assert any("band" in t and "5-95%" in t for t in texts)
    assert not any("measured" in t for t in texts)
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == len(CONFIGS)  # the CI of each configuration's curve
    assert len(ax.collections) >= len(CONFIGS)  # and its phase band


def test_a_narrow_sweep_keeps_a_linear_axis_with_integer_ticks(figure):
    fig = figure(rows(workers=range(2, 9)), [])  # a factor of 4: linear
    (ax,) = fig.axes
    assert ax.get_xscale() == "linear"
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert fig.get_suptitle().startswith("Training throughput")


@pytest.mark.parametrize(("workers", "labels"), [
    ((3, 6, 12, 20), ["4", "8", "16"]),  # 3 and 20 close to 4 and 16: only powers of two
    ((5, 10, 20, 40), ["5", "8", "16", "32"]),  # 5 is 1.6x from 8: labelled too
])
def test_log2_ticks_are_powers_of_two_and_far_ends(figure, workers, labels):
    fig = figure(rows(workers=workers), [])
    assert fig.axes[0].get_xscale() == "log"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels


def test_every_model_gets_a_panel_per_family_sharing_y(figure):
    models = ("sim", "mva-exact", "mva-approx", "mva-hybrid", "cynthia")
    fig = figure(rows(models), MEASURED, title="sample")
    axes = fig.axes
    assert len(axes) == 3
    titles = [ax.get_title() for ax in axes]
    assert "sim" in titles[0] and titles[1].startswith("MVA") and "Cynthia" in titles[2]
    assert "exact" in titles[1] and "hybrid" in titles[1]
    assert axes[0].get_shared_y_axes().joined(axes[0], axes[2])
    texts = legend_texts(fig)
    assert {"mva-exact", "mva-approx", "mva-hybrid"} <= set(texts)
    # the MVA variants differ by line style, their curves by configuration's colour
    styles = {ln.get_linestyle() for ln in axes[1].get_lines() if len(ln.get_xdata()) > 2}
    assert len(styles) == 3
    assert len([ln for ln in axes[1].get_lines() if len(ln.get_xdata()) > 2]) == 3 * 2
    # no interval is drawn for the analytic baselines (their ci is the value itself)
    for ax in axes[1:]:
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == len(CONFIGS)  # the measured points only
        assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no band
    assert [c for c in axes[0].collections if isinstance(c, PolyCollection)]  # the sim's


def test_measured_points_take_their_curves_colour_with_min_max_bars(figure):
    fig = figure(rows(), MEASURED)
    (ax,) = fig.axes
    curve = {}  # colour of each configuration's sim curve, by its points
    for ln in ax.get_lines():
        xs = list(ln.get_xdata())
        if len(xs) == 8:
            curve[ln.get_ydata()[0]] = to_rgba(ln.get_color())
    measured = [c for c in ax.containers if isinstance(c, ErrorbarContainer)
                and c.lines[0] is not None and c.lines[0].get_linestyle() == "None"
                and c.lines[0].get_markeredgecolor() == "black"]
    assert len(measured) == 2
    for c, m, first in zip(measured, MEASURED, (1000.0, 2000.0), strict=True):
        point = c.lines[0]
        assert list(point.get_xdata()) == [m["workers"]]
        assert list(point.get_ydata()) == [m["examples_per_s"]]
        assert to_rgba(point.get_markerfacecolor()) == curve[first]
        (segs,) = [col.get_segments() for col in c.lines[2]]  # the vertical bar: min..max
        (lo, hi) = sorted(y for _, y in segs[0])
        assert (lo, hi) == (min(m["runs"]), max(m["runs"]))
    assert any("measured" in t and "min-max" in t for t in legend_texts(fig))


def test_plot_throughput_writes_a_png_to_a_file_or_a_buffer(tmp_path):
    buf = io.BytesIO()
    plot_throughput(rows(), MEASURED, buf, title="sample")
    assert buf.getvalue()[:4] == b"\x89PNG"
    plot_throughput(rows(), [], tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert plt.get_fignums() == []  # closed


def test_each_mechanism_has_lines_of_its_own_named_in_the_legend(figure):
    """Two mechanisms at one M and rate are two curves (the same configuration drawn as one
    line zig-zagged between them), the legend naming each; one mechanism's legend as ever."""
    sync = [{**r, "mechanism": "sync-ps", **{k: r[k] / 2 for k in (
        "examples_per_s", "ci_low", "ci_high", "phase_low", "phase_high")}} for r in rows()]
    fig = figure([*rows(), *sync], [])
    labels = legend_texts(fig)
    assert "async-ps, M=1, 1Gbit/s" in labels and "sync-ps, M=1, 1Gbit/s" in labels
    lines = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "-"]
    assert len(lines) == 4  # two mechanisms x two configurations, each W = 1..8 once
    assert "M=1, 1Gbit/s" in legend_texts(figure(rows(), []))
