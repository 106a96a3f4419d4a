"""Plots for a run and for a comparison of runs (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def pass_k_curves(curves: dict[str, dict[str, list[float]]], ks: list[int], path: Path, title: str) -> Path:
    """curves: label -> {"Pass_at_k": [...], "Pass_hat_k": [...]} over ks (paper Figure 3a)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (label, series) in enumerate(curves.items()):
        for name, shown, style in (("Pass_at_k", "Pass@k", "--"), ("Pass_hat_k", "Pass^k", "-")):
            if name in series:
                ax.plot(ks, series[name], style, color=f"C{i % 10}", marker="o", label=f"{label} {shown}")
    ax.set_xlabel("k")
    ax.set_ylabel("percent of tasks")
    ax.set_xticks(ks)
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def category_bars(values: dict[str, float], path: Path, title: str, ylabel: str = "SR (percent)") -> Path:
    names = sorted(values)
    fig, ax = plt.subplots(figsize=(7, max(3, 0.35 * len(names))))
    ax.barh(names, [values[n] for n in names], color="#4c72b0")
    ax.set_xlim(0, 105)
    ax.set_xlabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _save_grouped(fig, ax, groups: list[str], path: Path, title: str, ylabel: str) -> Path:
    """The frame of a plot with one slot per group on the x axis (0-100 scale), written to `path`."""
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 105)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def grouped_bars(values: dict[str, dict[str, float]], path: Path, title: str, ylabel: str = "score") -> Path:
    """values: group (x axis, in order) -> series -> value; one bar per series in each group (0-100 scale)."""
    groups = list(values)
    series = list(dict.fromkeys(s for g in groups for s in values[g]))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(groups)), 4))
    for i, name in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
        bars = ax.bar(xs, [values[g].get(name, 0.0) for g in groups], width, label=name, color=f"C{i % 10}")
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    return _save_grouped(fig, ax, groups, path, title, ylabel)


def threshold_curve(xs: list[float], ys: list[float], path: Path, title: str, xlabel: str, ylabel: str) -> Path:
    """One curve of a share against a threshold (PhysAssistBench: Pass@Session against tau)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, ys, marker="o", color="C0")
    for tau in (0.60, 0.75):
        ax.axvline(tau, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def interval_points(values: dict[str, dict[str, tuple[float, float, float]]], path: Path, title: str,
                    ylabel: str = "headline metric (x100)") -> Path:
    """values: group (x axis, in order) -> series -> (estimate, low, high); a point with its interval per series in
    each group (a leaderboard: benchmarks on the axis, one colour per model)."""
    groups = list(values)
    series = list(dict.fromkeys(s for g in groups for s in values[g]))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(groups)), 4))
    for i, name in enumerate(series):
        xs, ys, err = [], [], [[], []]
        for j, g in enumerate(groups):
            if name in values[g]:
                est, low, high = values[g][name]
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(est)
                err[0].append(est - low)
                err[1].append(high - est)
        ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=4, color=f"C{i % 10}", label=name)
    return _save_grouped(fig, ax, groups, path, title, ylabel)
