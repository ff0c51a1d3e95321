"""Comparison of result directories: per level and category, each variant against the first.

Before any number, the runs are checked (:func:`check_runs`):

- *finished*: a run whose ``summary.json`` was never finalized (``status: running``,
  a killed run) or a compared level that is incomplete (``complete: false``) is
  refused unless ``allow_incomplete`` (then marked in the report);
- *comparable*: prompt set and seed, max_tokens, temperature, streaming, token
  accounting (``usage_stats``), model, mode, the levels (concurrency or rates, and the
  open loop's max concurrency), window lengths (warm-up, duration or request count) and
  the simulator's time scale must match, and so must the prefix cache's state per level
  (hit ratios within :data:`PREFIX_CACHE_HIT_GAP`, the same ``prefix_cache_reset``); each
  difference is a warning naming it (``strict``: an error).

Rows: every row carries the sample size per side; below :data:`~.stats.MIN_N` on a
side there is no interval and no verdict ("n too small"). Content measures (TTFCT)
are not compared where more than :data:`~specload.results.model.TRUNCATED_SHARE_LIMIT` of
either side's completed requests ended inside reasoning at max_tokens (their "first content
token" is then the few requests that got that far, or none).

Every figure of a summary comes from :mod:`specload.results.model` (the one reader of a
result): the truncated share, the acceptance, the window, the verdict.

Speculation (:mod:`.efficiency`, :mod:`.crossover`): per level of a speculative variant,
the measured speedup against the ideal one and their ratio; per variant, the concurrency
at which it stops being faster, with a bootstrap interval.

Stopping (``specload run --precision``/``--against``): per level and run, how its window
ended (:attr:`LevelComparison.stopped`, the model's words) and the fields behind it; per run
its rules (:attr:`Comparison.stopping`). The reports show them when a run had rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specload.compare.crossover import OPEN_LOOP, Crossover, LevelSamples, find_crossover
from specload.compare.efficiency import Efficiency, level_efficiency
from specload.compare.overhead import MEASURES as OVERHEAD_MEASURES
from specload.compare.overhead import overhead_warning
from specload.compare.profiles import Profile, profile_beside
from specload.compare.search import SearchComparison, compare_searches
from specload.compare.stats import (
    MIN_N,
    Difference,
    block_length,
    bootstrap_difference,
    estimate,
    row_mean,
    row_median,
)
from specload.errors import UsageError
from specload.records.request import RequestRecord
from specload.results.model import (
    FASTER,
    SAME,
    SLOWER,
    TOO_FEW,
    TRUNCATED_SHARE_LIMIT,
    Level,
    Stopping,
    Summary,
    as_summary,
    read,
    verdict,
)
from specload.results.repair import record_of
from specload.results.writer import read_requests

ALL = "all"
__all__ = ["FASTER", "SAME", "SLOWER", "TOO_FEW"]  # the verdicts, defined in the model
TRUNCATED = "not comparable (truncated)"

THROUGHPUT_BINS = 10

# Two levels whose prefix-cache hit ratios (server.prefix_cache_hit_ratio) are further apart
# than this measured different workloads: cached prompt tokens skip their prefill.
PREFIX_CACHE_HIT_GAP = 0.05


@dataclass(frozen=True)
class Measure:
    key: str
    title: str
    unit: str
    lower_is_better: bool
    content: bool = False  # measured on the content channel: meaningless when truncated
    summary_key: str | None = None  # the summary.json figure the point estimate must equal


MEASURES = (
    Measure("tpot", "median TPOT", "ms", True, summary_key="median_tpot_ms"),
    Measure("ttft", "median TTFT", "ms", True, summary_key="median_ttft_ms"),
    Measure("ttfct", "median TTFCT", "ms", True, content=True, summary_key="median_ttfct_ms"),
    Measure("output_throughput", "output tok/s", "tok/s", False),
)
# With objectives (--slo) on every run: the share of completed requests meeting them all
# (resampled per request) and the requests per second doing so (window bins, like tok/s).
SLO_MEASURES = (
    Measure("slo_attainment", "SLO attainment", "ratio", False, summary_key="slo_attainment_ratio"),
    Measure("request_goodput", "goodput", "req/s", False),
)
ALL_MEASURES = MEASURES + SLO_MEASURES
_SECONDS = {"tpot": "tpot_s", "ttft": "ttft_s", "ttfct": "ttfct_s"}


@dataclass
class Run:
    path: Path
    result: Summary  # the run's summary.json, typed (specload.results.model)
    records: list[RequestRecord]
    label: str = ""  # how warnings name the run (the variant; the directory too if ambiguous)
    profile: Profile | None = None  # a `specload profile --json` report (profile.json)

    def __post_init__(self) -> None:
        self.result = as_summary(self.result)

    @property
    def variant(self) -> str:
        return self.result.variant or self.path.name

    @property
    def status(self) -> str:
        return self.result.status

    def level(self, name: str) -> Level | None:
        """The level named ``name`` (None: the run has none)."""
        return self.result.level(name)

    def level_names(self) -> list[str]:
        return self.result.level_names


def load_run(path: str | Path) -> Run:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such results directory")
    summary = read(p)
    records = [record_of(raw) for raw in read_requests(p)]
    return Run(p, summary, records, summary.variant or p.name, profile_beside(p))


@dataclass
class Cell:
    """One measure at one level and category: each variant's value, and differences to the first."""

    values: list[float | None]
    diffs: list[Difference | None]  # index 0 is None (the reference)
    verdicts: list[str | None]
    n: list[int] = field(default_factory=list)  # samples per variant


@dataclass
class LevelComparison:
    name: str
    label: str
    load: float
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)  # (category, measure)
    acceptance: list[float | None] = field(default_factory=list)
    mean_acceptance_length: list[float | None] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    # per variant: why this level is not a clean measurement ("incomplete", flags…)
    marks: list[list[str]] = field(default_factory=list)
    # per variant and category: share of completed requests truncated inside reasoning
    truncated: list[dict[str, float | None]] = field(default_factory=list)
    # per variant (index 0, the reference: None): speculation efficiency, None without data
    efficiency: list[Efficiency | None] = field(default_factory=list)
    # per variant: how its window ended (Level.stopped: "decided after 48 requests: slower")
    # and the summary's fields behind it (Level.stop_fields); None: its summary does not say
    stopped: list[str | None] = field(default_factory=list)
    stops: list[dict[str, Any] | None] = field(default_factory=list)


@dataclass
class Comparison:
    variants: list[str]
    paths: list[Path]
    levels: list[LevelComparison]
    confidence: float
    n_boot: int
    min_difference: float
    warnings: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    min_n: int = MIN_N
    truncated_share: float = TRUNCATED_SHARE_LIMIT
    crossovers: list[Crossover] = field(default_factory=list)  # per variant after the first
    profiles: list[Profile | None] = field(default_factory=list)  # per variant
    search: SearchComparison | None = None  # every run searched (--search slo): the limits
    stopping: list[Stopping | None] = field(default_factory=list)  # per run: --precision…

    @property
    def has_stopping(self) -> bool:
        """A run had ``--precision`` or ``--against``: the reports say how levels ended."""
        return any(s is not None for s in self.stopping)

    def regressions(self, pct: float) -> list[str]:
        """Where a variant's median TPOT is worse than the first's by more than ``pct``%.

        "With confidence": the interval's lower bound is above ``pct`` (rows without an
        interval — too few samples — never count).
        """
        found: list[str] = []
        for level in self.levels:
            cell = level.cells.get((ALL, "tpot"))
            if cell is None:
                continue
            for i, diff in enumerate(cell.diffs):
                if diff is None or diff.ci_low is None or diff.ci_high is None:
                    continue
                if diff.ci_low * 100.0 > pct:
                    found.append(
                        f"{self.variants[i]} at {level.label}: median TPOT {diff.rel * 100:+.1f}% "
                        f"(CI {diff.ci_low * 100:+.1f}%..{diff.ci_high * 100:+.1f}%) "
                        f"vs {self.variants[0]}"
                    )
        return found


def _label(level: Level) -> tuple[str, float]:
    return level.label, level.load or 0.0


# -- checks ---------------------------------------------------------------------------------


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# (what the warning calls it, how to read it from a summary)
def _option(key: str) -> Any:
    return lambda s: s.options.get(key)


_CHECKS: tuple[tuple[str, Any], ...] = (
    ("prompt set", _option("prompts")),
    ("prompt seed", _option("prompt_seed")),
    ("max_tokens", _option("max_tokens")),
    ("temperature", _option("temperature")),
    ("stream", _option("stream")),
    ("usage stats (token accounting)", _option("usage_stats")),
    ("model", lambda s: s.model or s.options.get("model") or None),
    ("mode", lambda s: s.mode),
    ("max concurrency (open loop)", _option("max_concurrency")),
    ("warm-up (s)", lambda s: s.planned_window[0]),
    ("window duration (s)", lambda s: s.planned_window[1]),
    ("window requests", lambda s: s.planned_window[2]),
    ("server time scale", lambda s: s.server_time_scale),
)


def comparability_warnings(runs: Sequence[Run]) -> list[str]:
    """One sentence per difference between the reference run and another (none: comparable)."""
    ref = runs[0]
    out: list[str] = []
    for what, figure in _CHECKS:
        want = figure(ref.result)
        for run in runs[1:]:
            got = figure(run.result)
            if got != want:
                out.append(f"{what} differs: {ref.label} {_show(want)}, {run.label} {_show(got)}")
    ref_levels = ref.level_names()
    for run in runs[1:]:
        levels = run.level_names()
        if levels != ref_levels:
            common = [n for n in ref_levels if n in levels]
            out.append(
                f"levels differ: {ref.label} {','.join(ref_levels) or 'none'}, "
                f"{run.label} {','.join(levels) or 'none'} "
                f"(compared: {','.join(common) or 'none'})"
            )
    return out + prefix_cache_warnings(runs)


def prefix_cache_warnings(runs: Sequence[Run]) -> list[str]:
    """The prefix cache's state per level in common: hit ratios (``server.
    prefix_cache_hit_ratio``) more than :data:`PREFIX_CACHE_HIT_GAP` apart, and a level
    whose prefix cache one run reset at its start and the other did not
    (``prefix_cache_reset``; null or absent: unknown, not compared)."""
    ref = runs[0]
    out: list[str] = []
    for run in runs[1:]:
        names = [n for n in ref.level_names() if run.result.level(n) is not None]
        resets: dict[tuple[bool, bool], list[str]] = {}
        for name in names:
            mine, theirs = ref.result.level(name), run.result.level(name)
            assert mine is not None and theirs is not None
            a, b = mine.prefix_cache_hit_ratio, theirs.prefix_cache_hit_ratio
            if a is not None and b is not None and abs(a - b) > PREFIX_CACHE_HIT_GAP:
                out.append(
                    f"prefix-cache hit ratio differs at {name}: {ref.label} {a:.3f}, "
                    f"{run.label} {b:.3f} (more than {PREFIX_CACHE_HIT_GAP:g} apart: cached "
                    "prompt tokens skip their prefill)"
                )
            ra, rb = mine.prefix_cache_reset, theirs.prefix_cache_reset
            if ra is not None and rb is not None and ra != rb:
                resets.setdefault((ra, rb), []).append(name)
        for (ra, rb), where in resets.items():
            out.append(
                f"prefix-cache reset differs at {','.join(where)}: {ref.label} "
                f"{'reset' if ra else 'did not reset'} the prefix cache at the level's start, "
                f"{run.label} {'did' if rb else 'did not'}"
            )
    return out


def completeness_problems(runs: Sequence[Run], level_names: Sequence[str]) -> list[str]:
    """Why the runs are not finished measurements: killed runs, incomplete compared levels."""
    out: list[str] = []
    for run in runs:
        if run.status == "running":
            out.append(
                f"{run.path}: summary.json was never finalized (status running: the run was "
                f"killed or is still going); `specload results repair {run.path}` rebuilds it "
                "from requests.jsonl"
            )
            continue
        partial = [n for n in level_names if not getattr(run.result.level(n), "complete", True)]
        if partial:
            out.append(
                f"{run.path}: level {', '.join(partial)} incomplete "
                f"(status {run.status}: the run stopped inside it)"
            )
    return out


def _level_marks(run: Run, level: Level) -> list[str]:
    marks: list[str] = []
    if run.status == "running":
        marks.append("run not finalized")
    if not level.complete:
        marks.append("incomplete")
    marks += [f for f in level.flags if f != "reasoning_truncated"]
    return marks


def _run_warnings(runs: Sequence[Run], level_names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for run in runs:
        if run.status == "repaired":
            was = run.result.repaired_from
            out.append(
                f"{run.label}: summary rebuilt from requests.jsonl by `specload results "
                f"repair` (status repaired{f', was {was}' if was else ''}): requests in "
                "flight when the run died are missing"
            )
        elif run.status not in ("complete", "running"):
            reason = run.result.stop_reason
            out.append(f"{run.label}: status {run.status}" + (f" ({reason})" if reason else ""))
        for name in level_names:
            level = run.result.level(name)
            if level is not None:
                out += level_warning_lines(run.label, name, level)
    return out


def level_warning_lines(label: str, name: str, level: Level | Mapping[str, Any]) -> list[str]:
    """A level's own warnings, or its flags where it has none, each naming run and level."""
    lv = level if isinstance(level, Level) else Level.from_dict(level)
    out = [f"{label} {name}: {sentence}" for sentence in lv.warnings]
    if lv.flags and not lv.warnings:
        out.append(f"{label} {name}: flagged {', '.join(lv.flags)}")
    return out


# -- samples --------------------------------------------------------------------------------


def _samples(records: Sequence[RequestRecord], measure: str) -> list[float]:
    attr = _SECONDS[measure]
    out = []
    for r in records:
        if r.ok:
            value = getattr(r, attr)
            if value is not None and math.isfinite(value):
                out.append(float(value) * 1000.0)
    return out


def window_bounds(level: Level, records: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """The measured window (wall clock): ``window_start_s``..``window_end_s`` when the
    summary has them (the sweep's own floats), else ``window_started_at``..``window_ended_at``
    (ISO, milliseconds).

    Without an end (a killed run): start + ``duration``; without a start: the first
    request of the level's step.
    """
    duration = level.figures.duration or 0.0
    start, end = level.window
    if start is None:
        starts = [r.start_s for r in records if r.step == level.name]
        if not starts:
            return None
        start = min(starts)
    if end is None:
        end = start + duration
    return (start, end) if end > start else None


def throughput_bins(
    records: Sequence[RequestRecord], bounds: tuple[float, float] | None, duration_s: float
) -> dict[str, list[float]]:
    """Output tok/s in :data:`THROUGHPUT_BINS` equal time bins of the window, for
    :data:`ALL` and per category (a category without tokens in the window: zeros).

    Tokens are counted when they *arrived* (:meth:`RequestRecord.tokens_between`), from
    every request whatever its step or outcome (a request started in the warm-up delivers
    tokens inside the window; a failed one delivered its tokens too) — the definition of
    ``summary.json``'s ``output_throughput``. Each bin's tokens are scaled by
    ``THROUGHPUT_BINS / duration_s`` (the window's length, outages excluded), so the bins'
    mean is the window's tokens / duration — the level's throughput — and their spread
    (a slow stretch, a lucky one) its uncertainty. Empty without a window.
    """
    if bounds is None or duration_s <= 0:
        return {}
    lo, hi = bounds
    width = (hi - lo) / THROUGHPUT_BINS
    edges = [lo + k * width for k in range(THROUGHPUT_BINS)] + [hi]
    scale = THROUGHPUT_BINS / duration_s
    out: dict[str, list[float]] = {ALL: [0.0] * THROUGHPUT_BINS}
    for r in records:
        last = max(r.end_s, r.start_s + (r.e2e_s or 0.0))  # no token arrives after it
        if last < lo or r.start_s > hi:
            continue
        total = out[ALL]
        mine = out.setdefault(r.category, [0.0] * THROUGHPUT_BINS)
        for k in range(THROUGHPUT_BINS):
            if edges[k + 1] < r.start_s:
                continue
            if edges[k] > last:
                break
            tokens = r.tokens_between(edges[k], edges[k + 1]) * scale
            total[k] += tokens
            mine[k] += tokens
    return out


def goodput_bins(
    records: Sequence[RequestRecord], bounds: tuple[float, float] | None, duration_s: float
) -> list[float]:
    """Requests/s meeting every objective in :data:`THROUGHPUT_BINS` equal time bins of the
    window: each such request of the level counts in the bin of its end (clipped to the
    window: a request of the level that ended after it counts in the last bin), scaled so
    that the bins' mean is ``summary.json``'s ``request_goodput`` (met / duration)."""
    if bounds is None or duration_s <= 0:
        return []
    lo, hi = bounds
    width = (hi - lo) / THROUGHPUT_BINS
    scale = THROUGHPUT_BINS / duration_s
    out = [0.0] * THROUGHPUT_BINS
    for r in records:
        if not (r.ok and r.slo_met):
            continue
        k = int((min(max(r.end_s, lo), hi) - lo) / width) if width > 0 else 0
        out[min(k, THROUGHPUT_BINS - 1)] += scale
    return out


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _verdict(diff: Difference | None, lower_is_better: bool, min_difference: float) -> str | None:
    if diff is None:
        return None
    return verdict(
        diff.rel,
        diff.ci_low,
        diff.ci_high,
        min_difference=min_difference,
        lower_is_better=lower_is_better,
    )


def _labels(runs: Sequence[Run]) -> None:
    names = [run.variant for run in runs]
    for run in runs:
        run.label = run.variant if names.count(run.variant) == 1 else f"{run.variant} ({run.path})"


def check_runs(
    runs: Sequence[Run], *, strict: bool = False, allow_incomplete: bool = False
) -> list[str]:
    """The warnings of a comparison before any number; raise when it must not be made."""
    if len(runs) < 2:
        raise UsageError("compare: give at least two results directories")
    _labels(runs)
    names = runs[0].level_names()
    common = [n for n in names if all(run.result.level(n) is not None for run in runs[1:])]
    if not common and not all(run.result.search for run in runs):
        raise UsageError(
            f"compare: no level in common between {', '.join(str(r.path) for r in runs)}"
        )
    problems = completeness_problems(runs, common)
    if problems and not allow_incomplete:
        raise UsageError(
            "compare: " + "; ".join(problems) + " — refusing (--allow-incomplete compares "
            "them anyway, marked in the report)"
        )
    differences = comparability_warnings(runs)
    if differences and strict:
        raise UsageError("compare --strict: runs not comparable: " + "; ".join(differences))
    warnings = list(differences)
    warnings += [f"compared anyway (--allow-incomplete): {p}" for p in problems]
    warnings += _run_warnings(runs, common)
    return warnings


def compare_runs(
    runs: Sequence[Run],
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    min_difference: float = 0.05,
    seed: int = 0,
    min_n: int = MIN_N,
    strict: bool = False,
    allow_incomplete: bool = False,
    truncated_limit: float = TRUNCATED_SHARE_LIMIT,
) -> Comparison:
    warnings = check_runs(runs, strict=strict, allow_incomplete=allow_incomplete)
    names = runs[0].level_names()
    common = [n for n in names if all(run.result.level(n) is not None for run in runs[1:])]
    # in start order: the bootstrap resamples blocks of requests that ran together
    ordered = [sorted(run.records, key=lambda r: r.start_s) for run in runs]
    by_run: list[dict[str, list[RequestRecord]]] = []
    for records in ordered:
        steps: dict[str, list[RequestRecord]] = {}
        for r in records:
            steps.setdefault(r.step, []).append(r)
        by_run.append(steps)

    levels: list[LevelComparison] = []
    for name in common:
        first = runs[0].result.level(name)
        assert first is not None
        label, load = _label(first)
        lc = LevelComparison(name, label, load)
        cats: set[str] = set()
        for steps in by_run:
            cats.update(r.category for r in steps.get(name, []))
        lc.categories = [ALL, *sorted(cats)]
        infos = [_level(run, name) for run in runs]
        for run, info in zip(runs, infos, strict=True):
            accepted = info.acceptance  # the model's rule: the server's, else the client's
            lc.acceptance.append(accepted.rate)
            lc.mean_acceptance_length.append(accepted.mean_length)
            lc.marks.append(_level_marks(run, info))
            lc.stopped.append(info.stopped)
            lc.stops.append(info.stop_fields())
        bounds = [
            window_bounds(info, steps.get(name, []))
            for info, steps in zip(infos, by_run, strict=True)
        ]
        throughput = [
            throughput_bins(records, bound, info.figures.duration or 0.0)
            for records, bound, info in zip(ordered, bounds, infos, strict=True)
        ]
        data = _LevelData(runs, by_run, infos, name, throughput, bounds)
        judged = all(any(r.slo_met is not None for r in steps.get(name, [])) for steps in by_run)
        measures = ALL_MEASURES if judged else MEASURES
        for info in infos:
            # the model's truncated share (a category the summary lacks: unknown)
            lc.truncated.append(
                {
                    cat: (None if (f := info.category(cat)) is None else f.truncated_share)
                    for cat in lc.categories
                }
            )
        truncated_cats: list[str] = []
        truncated_sides: set[int] = set()
        for cat in lc.categories:
            truncated_by = [
                i for i in range(len(runs)) if (lc.truncated[i][cat] or 0.0) > truncated_limit
            ]
            for measure in measures:
                lc.cells[(cat, measure.key)] = _cell(
                    data,
                    cat,
                    measure,
                    not_comparable=measure.content and bool(truncated_by),
                    n_boot=n_boot,
                    confidence=confidence,
                    seed=seed,
                    min_n=min_n,
                    min_difference=min_difference,
                )
            if truncated_by:
                truncated_cats.append(cat)
                truncated_sides.update(truncated_by)
        if truncated_cats:
            who = " and ".join(runs[i].label for i in sorted(truncated_sides))
            cat0 = truncated_cats[0]
            shares_text = ", ".join(
                f"{runs[i].label} {_share(lc.truncated[i][cat0])}" for i in range(len(runs))
            )
            warnings.append(
                f"{label}: TTFCT not compared ({', '.join(truncated_cats)}): more than "
                f"{truncated_limit * 100:g}% of {who}'s completed requests ended inside "
                f"reasoning at max_tokens ({cat0}: {shares_text}); raise --max-tokens"
            )
        warnings += _consistency(runs, infos, lc)
        warnings += _overheads(runs, infos, lc, min_difference)
        tpot = lc.cells[(ALL, "tpot")]
        lc.efficiency = [None]
        lc.efficiency += [
            level_efficiency(infos[0], infos[i], tpot.diffs[i], _shares(runs, i, infos))
            for i in range(1, len(runs))
        ]
        levels.append(lc)
    crossovers = _crossovers(
        runs, common, by_run, n_boot=n_boot, confidence=confidence, seed=seed, min_n=min_n
    )
    search, search_warnings = compare_searches([(run.label, run.result) for run in runs])
    warnings += search_warnings
    return Comparison(
        [run.variant for run in runs],
        [run.path for run in runs],
        levels,
        confidence,
        n_boot,
        min_difference,
        warnings,
        [run.status for run in runs],
        min_n,
        truncated_limit,
        crossovers,
        [run.profile for run in runs],
        search,
        [run.result.stopping for run in runs],
    )


def _level(run: Run, name: str) -> Level:
    level = run.result.level(name)
    assert level is not None  # a level in common
    return level


def _shares(
    runs: Sequence[Run], i: int, infos: Sequence[Level]
) -> tuple[float | None, float | None]:
    """The all-reduce share of the reference and variant ``i`` at this level (profiles)."""

    def share(k: int) -> float | None:
        profile = runs[k].profile
        return None if profile is None else profile.share_at(infos[k].concurrency)

    return share(0), share(i)


def _crossovers(
    runs: Sequence[Run],
    common: Sequence[str],
    by_run: Sequence[Mapping[str, list[RequestRecord]]],
    *,
    n_boot: int,
    confidence: float,
    seed: int,
    min_n: int,
) -> list[Crossover]:
    """Per variant after the first, where its TPOT ratio to the first crosses 1."""
    closed = [n for n in common if _level(runs[0], n).concurrency is not None]
    if not closed:
        return [Crossover(run.variant, [], reason=OPEN_LOOP) for run in runs[1:]]
    samples = [{n: _samples(steps.get(n, []), "tpot") for n in closed} for steps in by_run]
    shared: dict[float, Any] = {}  # the reference's replicates, drawn once for all variants
    out = []
    for i in range(1, len(runs)):
        levels = []
        for name in closed:
            users = int(_level(runs[0], name).concurrency or 1)
            ref, var = samples[0][name], samples[i][name]
            levels.append(
                LevelSamples(
                    float(users),
                    ref,
                    var,
                    block_length(len(ref), users),
                    block_length(len(var), users),
                )
            )
        out.append(
            find_crossover(
                runs[i].variant,
                levels,
                n_boot=n_boot,
                confidence=confidence,
                seed=seed + 7919 * i,
                min_n=min_n,
                reference_boot=shared,
            )
        )
    return out


@dataclass(frozen=True)
class _LevelData:
    """One level's inputs, per run: its records by step, its summary, its throughput bins."""

    runs: Sequence[Run]
    by_run: Sequence[Mapping[str, list[RequestRecord]]]
    infos: Sequence[Level]
    name: str
    throughput: Sequence[Mapping[str, list[float]]]  # per run: bins by category
    bounds: Sequence[tuple[float, float] | None] = ()  # per run: the window (wall clock)


def _cell(
    data: _LevelData,
    cat: str,
    measure: Measure,
    *,
    not_comparable: bool,
    n_boot: int,
    confidence: float,
    seed: int,
    min_n: int,
    min_difference: float,
) -> Cell:
    per_run: list[list[float]] = []
    blocks: list[int] = []
    points: list[float | None] = []
    counts: list[int] = []
    runs, by_run, infos, name = data.runs, data.by_run, data.infos, data.name
    throughput = measure.key in ("output_throughput", "request_goodput")
    stat = row_mean if throughput or measure.key == "slo_attainment" else row_median
    for i in range(len(runs)):
        recs = by_run[i].get(name, [])
        if cat != ALL:
            recs = [r for r in recs if r.category == cat]
        info = infos[i]
        if measure.key == "request_goodput":
            samples = goodput_bins(recs, data.bounds[i], info.figures.duration or 0.0)
            blocks.append(1)
            counts.append(sum(1 for r in recs if r.ok))
        elif measure.key == "slo_attainment":
            samples = [1.0 if r.slo_met else 0.0 for r in recs if r.ok and r.slo_met is not None]
            users = info.users
            blocks.append(block_length(len(samples), users))
            counts.append(len(samples))
        elif throughput:
            bins = data.throughput[i]
            samples = list(bins.get(cat, [0.0] * THROUGHPUT_BINS)) if bins else []
            blocks.append(1)
            counts.append(sum(1 for r in recs if r.ok))
        else:
            samples = _samples(recs, measure.key)
            users = info.users
            blocks.append(block_length(len(samples), users))
            counts.append(len(samples))
        per_run.append(samples)
        points.append(estimate(samples, stat))
    diffs: list[Difference | None] = [None]
    verdicts: list[str | None] = [None]
    for i in range(1, len(runs)):
        too_few = counts[0] < min_n or counts[i] < min_n
        if points[0] is None or points[i] is None or points[0] == 0:
            diffs.append(None)
            verdicts.append(TRUNCATED if not_comparable else TOO_FEW if too_few else None)
            continue
        if not_comparable or too_few:
            pa, pb = float(points[0]), float(points[i])  # type: ignore[arg-type]
            diffs.append(Difference(pa, pb, pb / pa - 1.0, None, None, counts[0], counts[i]))
            verdicts.append(TRUNCATED if not_comparable else TOO_FEW)
            continue
        diff = bootstrap_difference(
            per_run[0],
            per_run[i],
            stat=stat,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed + i,
            block_a=blocks[0],
            block_b=blocks[i],
            min_n=1 if throughput else min_n,  # the bins are always THROUGHPUT_BINS
        )
        if diff is not None:
            diff = Difference(
                diff.a,
                diff.b,
                diff.rel,
                diff.ci_low,
                diff.ci_high,
                counts[0],
                counts[i],
                diff.widened,
            )
        diffs.append(diff)
        verdicts.append(_verdict(diff, measure.lower_is_better, min_difference))
    return Cell(points, diffs, verdicts, counts)


def _overheads(
    runs: Sequence[Run], infos: Sequence[Level], lc: LevelComparison, min_difference: float
) -> list[str]:
    """Where two runs' client overheads (client minus server) differ enough to matter
    (:mod:`specload.compare.overhead`)."""
    out: list[str] = []
    labels = [run.label for run in runs]
    for measure, overhead, title, overhead_title in OVERHEAD_MEASURES:
        cell = lc.cells.get((ALL, measure))
        if cell is None:
            continue
        out += overhead_warning(
            lc.label,
            measure_title=title,
            overhead_title=overhead_title,
            labels=labels,
            medians=cell.values,
            overheads=[info.figures.minus_server("median", overhead) for info in infos],
            min_difference=min_difference,
        )
    return out


# How far the throughput recomputed from the records may be from summary.json's: the
# window's bounds are read back from ISO times rounded to the millisecond.
_THROUGHPUT_TOLERANCE = 1e-3


def _consistency(runs: Sequence[Run], infos: Sequence[Level], lc: LevelComparison) -> list[str]:
    """The figures recomputed from requests.jsonl must be summary.json's (one figure each)."""
    out: list[str] = []
    for i, run in enumerate(runs):
        off = []
        for measure in ALL_MEASURES:
            cell = lc.cells.get((ALL, measure.key))
            key = measure.summary_key or measure.key
            if cell is None:
                continue
            mine, theirs = cell.values[i], infos[i].figures.figure(key)
            if mine is None or theirs is None:
                continue
            tolerance = 1e-9 if measure.summary_key else _THROUGHPUT_TOLERANCE
            if not math.isclose(mine, theirs, rel_tol=tolerance, abs_tol=1e-9):
                digits = 2 if measure.unit == "ms" else 1
                off.append(
                    f"{measure.title} {theirs:.{digits}f} vs {mine:.{digits}f} {measure.unit}"
                )
        if off:
            out.append(
                f"{run.label} {lc.name}: summary.json and requests.jsonl disagree "
                f"({'; '.join(off)}); the report uses requests.jsonl — "
                f"`specload results repair {run.path} --force` rebuilds the summary"
            )
    return out
