"""PNG plots of a run: median TPOT and output tok/s against the load, per category."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from specload.results.writer import atomic_write_bytes

PLOTS = (
    ("median_tpot_ms", "median TPOT (ms)", "tpot.png"),
    ("output_throughput", "output tokens/s", "throughput.png"),
)


def _x(level: Mapping[str, Any]) -> float:
    if level.get("concurrency") is not None:
        return float(level["concurrency"])
    return float(level.get("request_rate") or 0.0)


def _save(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _series(
    summaries: Sequence[Mapping[str, Any]], key: str
) -> list[tuple[str, str, list[float], list[float]]]:
    """(variant, category, xs, ys) for the whole level ('all') and each category."""
    out: list[tuple[str, str, list[float], list[float]]] = []
    for summary in summaries:
        levels = sorted(summary.get("levels", []), key=_x)
        variant = str(summary.get("variant"))
        xs, ys = [], []
        for level in levels:
            if level.get(key) is not None:
                xs.append(_x(level))
                ys.append(float(level[key]))
        out.append((variant, "all", xs, ys))
        cats = sorted({c for level in levels for c in level.get("categories", {})})
        for cat in cats:
            xs, ys = [], []
            for level in levels:
                value = level.get("categories", {}).get(cat, {}).get(key)
                if value is not None:
                    xs.append(_x(level))
                    ys.append(float(value))
            out.append((variant, cat, xs, ys))
    return out


def write_plots(
    summaries: Sequence[Mapping[str, Any]], out_dir: Path, prefix: str = ""
) -> list[Path]:
    """One PNG per measure: a panel for all requests and a panel per category."""
    paths: list[Path] = []
    open_loop = any(s.get("mode") == "open" for s in summaries)
    xlabel = "request rate (1/s)" if open_loop else "concurrency"
    for key, ylabel, name in PLOTS:
        series = _series(summaries, key)
        cats = list(dict.fromkeys(cat for _, cat, _, _ in series))
        cols = min(3, len(cats))
        rows = (len(cats) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
        for ax in axes.flat[len(cats) :]:
            ax.set_visible(False)
        for i, cat in enumerate(cats):
            ax = axes.flat[i]
            for variant, c, xs, ys in series:
                if c == cat and xs:
                    ax.plot(xs, ys, marker="o", label=variant)
            ax.set_title(cat)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            if not open_loop and all(x > 0 for _, _, xs, _ in series for x in xs):
                ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
        fig.suptitle(ylabel + " by " + xlabel)
        path = out_dir / f"{prefix}{name}"
        _save(fig, path)
        paths.append(path)
    return paths


def write_prediction_plot(prediction: Mapping[str, Any], path: Path) -> Path:
    """Median TPOT against concurrency: the baseline as measured, the forecast with its
    interval, and the variant as measured where ``prediction["measured"]`` has it."""
    levels = sorted(prediction.get("levels") or [], key=lambda lv: lv["concurrency"])
    xs = [float(lv["concurrency"]) for lv in levels]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(xs, [lv["baseline_median_tpot_ms"] for lv in levels], marker="o", label="baseline")
    k = prediction.get("num_speculative_tokens")
    ax.plot(
        xs,
        [lv["predicted_median_tpot_ms"] for lv in levels],
        marker="s",
        linestyle="--",
        label=f"predicted {prediction.get('method')} k={k}",
    )
    ax.fill_between(
        xs,
        [lv["predicted_low_ms"] for lv in levels],
        [lv["predicted_high_ms"] for lv in levels],
        alpha=0.2,
        label=f"{int(100 * float(prediction.get('confidence') or 0.95))}% interval",
    )
    rows = (prediction.get("measured") or {}).get("levels") or []
    if rows:
        rows = sorted(rows, key=lambda r: r["concurrency"])
        ax.plot(
            [float(r["concurrency"]) for r in rows],
            [r["measured_median_tpot_ms"] for r in rows],
            marker="^",
            label="measured variant",
        )
    if xs and all(x > 0 for x in xs):
        ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("median TPOT (ms)")
    ax.set_title("speculative variant: forecast from the baseline")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)
    return path
