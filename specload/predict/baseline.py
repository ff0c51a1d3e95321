"""The baseline a forecast reads: a results directory's closed-loop levels (its summary, read
by :func:`specload.results.model.read`) and its recorded token ids, with what keeps it from a
forecast."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specload.records.tokens import TOKENS_FILE, TokenRecord, read_tokens, tokens_path
from specload.results.model import Level, Summary, read


@dataclass(frozen=True)
class LevelInfo:
    """One closed-loop level of the baseline's summary (what the forecast needs of a
    :class:`specload.results.model.Level`)."""

    name: str
    concurrency: int
    completed: int
    median_tpot_ms: float | None
    output_throughput: float | None
    planned_requests: int | None
    categories: dict[str, tuple[int, float | None]]  # completed, median TPOT (ms)
    flags: tuple[str, ...] = ()
    prefix_cache_hit_ratio: float | None = None  # the server's, over the level

    @classmethod
    def of(cls, level: Level, concurrency: int) -> LevelInfo:
        fig = level.figures
        return cls(
            name=level.name or f"c{concurrency}",
            concurrency=concurrency,
            completed=fig.completed,
            median_tpot_ms=fig.median_tpot_ms,
            output_throughput=fig.output_throughput,
            planned_requests=level.planned_requests,
            categories={
                cat: (stats.completed, stats.median_tpot_ms)
                for cat, stats in level.categories.items()
            },
            flags=level.flags,
            prefix_cache_hit_ratio=level.prefix_cache_hit_ratio,
        )


# A baseline level whose prompts hit the prefix cache above this ratio is named: the forecast
# counts every prompt token as computed at prefill (docs/predict.md).
PREFIX_HIT_WARN_RATIO = 0.1


@dataclass
class Baseline:
    path: Path
    summary: Summary
    levels: list[LevelInfo]
    tokens: list[TokenRecord] | None
    problems: list[str] = field(default_factory=list)  # why a forecast cannot run

    def level(self, concurrency: int) -> LevelInfo | None:
        for lv in self.levels:
            if lv.concurrency == concurrency:
                return lv
        return None

    def records(self, level: str) -> list[TokenRecord]:
        return [r for r in self.tokens or [] if r.step == level]

    @property
    def measured_records(self) -> list[TokenRecord]:
        names = {lv.name for lv in self.levels}
        return [r for r in self.tokens or [] if r.step in names]


def load_baseline(
    path: str | Path, *, need_tokens: bool, hint: Callable[[Sequence[int]], str]
) -> Baseline:
    """Read a baseline results directory; ``problems`` lists, one line each, what keeps it
    from a forecast (``hint(measured concurrencies)`` says what ``--plan`` would add)."""
    p = Path(path)
    summary = read(p)
    levels: list[LevelInfo] = []
    problems: list[str] = []
    open_loop: list[str] = []
    empty: list[str] = []
    for level in summary.levels:
        conc = level.concurrency
        if conc is None or conc < 1:
            open_loop.append(level.name or "?")
            continue
        info = LevelInfo.of(level, conc)
        if info.completed == 0 or info.median_tpot_ms is None:
            empty.append(info.name)
        levels.append(info)
    measured = [lv.concurrency for lv in levels if lv.name not in empty]
    if open_loop and not levels:
        problems.append(
            f"{p}: open-loop levels only ({', '.join(open_loop)}): the step-cost curve needs "
            f"closed-loop levels; {hint([])}"
        )
    for name in empty:
        problems.append(
            f"{p}: level {name} has no completed requests (no median TPOT to fit); {hint(measured)}"
        )
    if len(measured) < 2 and not (open_loop and not levels):
        only = ", ".join(lv.name for lv in levels if lv.name not in empty) or "none"
        problems.append(
            f"{p}: one level only ({only}): the step-cost fit needs at least two "
            f"closed-loop levels; {hint(measured)}"
        )
    levels = [lv for lv in levels if lv.name not in empty]
    tokens: list[TokenRecord] | None = None
    if tokens_path(p).exists():
        tokens = read_tokens(p)
    if need_tokens:
        if tokens is None:
            problems.append(
                f"{p}: no {TOKENS_FILE} (the token ids the replay needs): rerun the baseline "
                f"with `specload run --record-token-ids`; {hint(measured)}"
            )
        else:
            for lv in levels:
                if not any(r.step == lv.name for r in tokens):
                    problems.append(
                        f"{p}: {TOKENS_FILE} has no requests of level {lv.name} "
                        f"(was it recorded with --record-token-ids?); {hint(measured)}"
                    )
    return Baseline(p, summary, levels, tokens, problems)
