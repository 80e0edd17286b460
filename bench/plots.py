"""PNG plots beside the benchmarks' tables (matplotlib, from the ``bench`` extra).

Each benchmark prints its table, then calls one of these to write ``docs/img/<name>.png``; without
matplotlib they do nothing and return ``None``.
"""

from __future__ import annotations

import os
import textwrap

import ratios as ratio_files

HERE = os.path.dirname(os.path.abspath(__file__))
#: Where the plots go: the documentation's images (docs/tests-and-benchmarks.md shows them).
IMAGES = os.path.join(os.path.dirname(HERE), "docs", "img")


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def report_ratios(name: str, title: str, rows: list[tuple[str, float, float, str]], *,
                  xlabel: str) -> None:
    """Print ``(measure, value, peer value, unit)`` rows with their ratios, then plot the
    ratios (:func:`save_ratios`)."""
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'measure':<{width}} {'value':>12} {'peer':>12} {'ratio':>9}  unit")
    for measure, value, peer, unit in rows:
        print(f"{measure:<{width}} {value:>12.2f} {peer:>12.2f} {value / peer:>9.3g}  {unit}")
    path = save_ratios(name, f"{title} ({os.cpu_count()} cores)",
                       [(m, v / p) for m, v, p, _ in rows], xlabel=xlabel)
    if path:
        print(f"plot: {path}")


def save_ratios(name: str, title: str, rows: list[tuple[str, float]], *,
                xlabel: str = "leveled-ray / peer in the same run") -> str | None:
    """Horizontal bars of ``(measure, ratio)``, each drawn from 1 (the peer) to its ratio; a
    log scale when the ratios span more than 20x. Returns the PNG's path. The ratios also go
    to ``build/bench/<name>.json``, which ``make bench-compare`` reads (see
    :mod:`compare`)."""
    ratio_files.write(name, rows)
    plt = _pyplot()
    rows = [(label, ratio) for label, ratio in rows if ratio and ratio > 0]
    if plt is None or not rows:
        return None
    longest = max(len(label) for label, _ in rows)  # the labels take their room, not the bars'
    fig, ax = plt.subplots(figsize=(max(8.0, 5.0 + 0.075 * longest), 0.42 * len(rows) + 1.4))
    labels = [label for label, _ in rows][::-1]
    ratios = [ratio for _, ratio in rows][::-1]
    ax.barh(labels, [r - 1 for r in ratios], left=1, color="#3a78b0")
    ax.axvline(1.0, color="black", linewidth=1)
    lo, hi = min(ratios + [1.0]), max(ratios + [1.0])
    if hi / lo > 20:
        ax.set_xscale("log")
        ax.set_xlim(lo / 2.2, hi * 2.2)  # room for the values beside the bars' ends
    else:
        pad = (hi - lo) * 0.18 + 0.05
        ax.set_xlim(max(0.0, lo - pad), hi + pad)
    from matplotlib.ticker import ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel(xlabel)
    ax.set_title(textwrap.fill(title, 70), fontsize=10)
    for y, r in enumerate(ratios):
        ax.annotate(f"{r:.2f}", (r, y), xytext=(3 if r >= 1 else -3, 0),
                    textcoords="offset points", va="center", ha="left" if r >= 1 else "right",
                    fontsize=8)
    return _save(fig, plt, name)


def save_groups(name: str, title: str, groups: dict[str, dict[str, float]], *,
                ylabel: str) -> str | None:
    """Grouped bars: for each group (a measure), one bar per series (a store or setting)."""
    plt = _pyplot()
    if plt is None or not groups:
        return None
    series = list(next(iter(groups.values())))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 3.8))
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [values[s] for values in groups.values()], width, label=s)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, plt, name)


def _save(fig, plt, name: str) -> str:
    path = os.path.join(IMAGES, f"{name}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # long labels and titles never clipped
    plt.close(fig)
    return path
