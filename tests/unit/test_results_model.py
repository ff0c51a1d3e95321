"""The one typed reader of a result (:mod:`specload.results.model`): each definition pinned
by a case worked by hand, ``read`` against the schema and the fixtures' results, and the
readers (summary.md, compare, the HTML report, predict) showing one figure per level."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import orjson
import pytest

from specload.results import summary_schema
from specload.results.bootstrap import block_indices, block_length, row_median
from specload.results.model import (
    FASTER,
    SAME,
    SLOWER,
    SOURCE_CLIENT,
    SOURCE_SERVER,
    TOO_FEW,
    TRUNCATED_SHARE_LIMIT,
    Figures,
    Level,
    from_dict,
    median,
    read,
    verdict,
)
from tests.fixtures.html import Tables
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


# -- 1. the truncated share, one threshold ----------------------------------------------------


def test_truncated_share_worked_by_hand() -> None:
    # 7 completed requests, 2 ended inside reasoning at max_tokens: 2/7 = 0.2857 > 0.2
    f = Figures.from_dict({"completed": 7, "reasoning_truncated": 2})
    assert f.truncated_share == pytest.approx(2 / 7)
    assert f.truncated  # above the one limit
    # the written ratio wins over the counts (the sweep's own figure)
    assert (
        Figures.from_dict(
            {"completed": 7, "reasoning_truncated": 2, "reasoning_truncated_ratio": 0.25}
        ).truncated_share
        == 0.25
    )
    # 1 of 5 = 0.2: at the limit, not above it: not flagged
    assert TRUNCATED_SHARE_LIMIT == 0.2
    assert not Figures.from_dict({"completed": 5, "reasoning_truncated": 1}).truncated
    # nothing completed, or no count: unknown
    assert Figures.from_dict({"completed": 0, "reasoning_truncated": 0}).truncated_share is None
    assert Figures.from_dict({"completed": 4}).truncated_share is None


# -- 2. a level's acceptance ------------------------------------------------------------------


def test_acceptance_server_counters_else_the_client_else_none_with_the_reason() -> None:
    # the server accepted 30 of 40 draft tokens in 20 verify steps: rate 30/40 = 0.75,
    # mean acceptance length 1 + 30/20 = 2.5
    server = {
        "spec_decode_num_drafts": 20,
        "spec_decode_num_draft_tokens": 40,
        "spec_decode_num_accepted_tokens": 30,
        "spec_decode_acceptance_rate": 0.75,
        "spec_decode_mean_acceptance_length": 2.5,
    }
    # the requests' own counts: 12 of 24 drafts in 8 steps: 0.5, 1 + 12/8 = 2.5 ... length 2.5
    client = {
        "requests": 6,
        "drafts": 8,
        "draft_tokens": 24,
        "accepted_tokens": 12,
        "acceptance_rate": 0.5,
        "mean_acceptance_length": 2.5,
    }
    both = Level.from_dict(
        {"name": "c1", "concurrency": 1, "server": server, "spec_decode": client}
    ).acceptance
    assert (both.rate, both.mean_length, both.source) == (0.75, 2.5, SOURCE_SERVER)
    alone = Level.from_dict(
        {"name": "c1", "concurrency": 1, "server": {}, "spec_decode": client}
    ).acceptance
    assert (alone.rate, alone.mean_length, alone.source) == (0.5, 2.5, SOURCE_CLIENT)
    none = Level.from_dict({"name": "c1", "concurrency": 1, "server": {"error": "timeout"}})
    assert none.acceptance.rate is None and "timeout" in (none.acceptance.reason or "")


# -- 3. the median ----------------------------------------------------------------------------


def test_lower_median_worked_by_hand() -> None:
    # [4, 1, 3, 2] sorted is [1, 2, 3, 4]; rank floor(0.5 * 3) = 1: the lower median 2
    assert median([4, 1, 3, 2]) == 2.0
    assert median([5, 1, 3]) == 3.0
    assert median([]) is None
    # the bootstrap's per-resample median is the same rule
    assert row_median(np.array([[4.0, 1.0, 3.0, 2.0]]))[0] == 2.0


# -- 4. the median's interval: the moving-block bootstrap -------------------------------------


def test_block_bootstrap_keeps_runs_of_consecutive_requests() -> None:
    # 6 requests in start order, blocks of 3: each resample is 2 runs of 3 consecutive
    # indices, each run starting at 0..3 (n - block): e.g. [2,3,4, 0,1,2]
    rng = np.random.default_rng(0)
    idx = block_indices(6, 3, 500, rng)
    assert idx.shape == (500, 6)
    for row in idx:
        for run in (row[:3], row[3:]):
            assert 0 <= run[0] <= 3 and list(run) == [run[0], run[0] + 1, run[0] + 2]
    starts = {int(row[0]) for row in idx}
    assert starts == {0, 1, 2, 3}  # every start drawn
    # the series 1..6: a resample's lower median lies in [1, 5] and each block's values are
    # consecutive, so the medians of resamples of [1..6] run from 2 (blocks 0,0: [1,2,3,1,2,3])
    # to 5 (blocks 3,3: [4,5,6,4,5,6])
    values = np.arange(1.0, 7.0)
    meds = row_median(values[idx])
    assert meds.min() == 2.0 and meds.max() == 5.0
    # block length: at least the concurrency, about n^(1/3)
    assert block_length(1000, 1) == 10 and block_length(1000, 16) == 16 and block_length(5, 8) == 5


# -- 5. the verdict ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "low", "high", "lower_is_better", "want"),
    [
        (-0.10, -0.15, -0.05, True, FASTER),  # interval below zero, 10% >= 5%
        (+0.10, +0.05, +0.15, True, SLOWER),
        (+0.10, +0.05, +0.15, False, FASTER),  # tok/s: higher is better
        (-0.02, -0.03, -0.01, True, SAME),  # excludes zero but under the 5% floor
        (-0.10, -0.20, +0.01, True, SAME),  # the interval crosses zero
        (-0.10, None, None, True, TOO_FEW),  # no interval
    ],
)
def test_verdict_each_branch(
    rel: float, low: float | None, high: float | None, lower_is_better: bool, want: str
) -> None:
    got = verdict(rel, low, high, min_difference=0.05, lower_is_better=lower_is_better)
    assert got == want


# -- read: the schema and the fixtures' results -----------------------------------------------


def test_read_matches_the_schema_and_the_written_figures(tmp_path: Path) -> None:
    d = make_run(tmp_path / "a", "ngram", 13.6, levels=(1, 4), n=40, truncated=0.25, acceptance=0.6)
    raw = orjson.loads((d / "summary.json").read_bytes())
    jsonschema.validate(raw, summary_schema())
    s = read(d)
    assert s.variant == "ngram" and s.status == "complete" and s.path == d
    assert s.level_names == [lv["name"] for lv in raw["levels"]]
    for level, lv in zip(s.levels, raw["levels"], strict=True):
        assert level.concurrency == lv["concurrency"]
        assert level.figures.completed == lv["completed"]
        assert level.figures.median_tpot_ms == lv["median_tpot_ms"]
        assert level.figures.truncated_share == lv["reasoning_truncated_ratio"]
        assert level.acceptance.rate == 0.6
        assert level.window == (
            pytest.approx(_iso(lv["window_started_at"])),
            pytest.approx(_iso(lv["window_ended_at"])),
        )
        for cat, stats in lv["categories"].items():
            assert level.categories[cat].figure("p90_tpot_ms") == stats["p90_tpot_ms"]
    assert s.planned_window == (10.0, 60.0, None)
    assert from_dict(raw) == s.__class__(**{**s.__dict__, "path": None})


def _iso(text: str) -> float:
    from datetime import datetime  # noqa: PLC0415

    return datetime.fromisoformat(text).timestamp()


# -- every reader shows the same acceptance and truncated share -------------------------------


def _spec_run(tmp_path: Path) -> tuple[Path, Path]:
    """A baseline and a speculative variant: at c1 the variant's server block has the
    counters (30 of 40: 0.75), at c4 only the requests carried counts (0.5); 30% truncated."""
    base = make_run(tmp_path / "base", "baseline", 13.6, levels=(1, 4), n=40)
    var = make_run(tmp_path / "var", "ngram", 11.0, levels=(1, 4), n=40, seed=2, truncated=0.3)
    summary = orjson.loads((var / "summary.json").read_bytes())
    summary["levels"][0]["server"] = {
        "spec_decode_num_drafts": 20,
        "spec_decode_num_draft_tokens": 40,
        "spec_decode_num_accepted_tokens": 30,
        "spec_decode_acceptance_rate": 0.75,
        "spec_decode_mean_acceptance_length": 2.5,
    }
    summary["levels"][1]["spec_decode"] = {
        "requests": 40,
        "drafts": 8,
        "draft_tokens": 24,
        "accepted_tokens": 12,
        "acceptance_rate": 0.5,
        "mean_acceptance_length": 2.5,
        "source": {"server": 40},
    }
    (var / "summary.json").write_bytes(orjson.dumps(summary))
    return base, var


def test_summary_md_and_compare_show_the_models_acceptance_and_share(tmp_path: Path) -> None:
    from specload.compare.model import ALL, compare_runs, load_run  # noqa: PLC0415
    from specload.results.report import summary_markdown  # noqa: PLC0415

    base, var = _spec_run(tmp_path)
    model = read(var)
    want_rate = {lv.name: lv.acceptance.rate for lv in model.levels}
    want_share = {lv.name: lv.figures.truncated_share for lv in model.levels}
    assert want_rate == {"c1": 0.75, "c4": 0.5}
    assert want_share == {"c1": pytest.approx(0.3), "c4": pytest.approx(0.3)}

    comp = compare_runs([load_run(base), load_run(var)], n_boot=50)
    for level in comp.levels:
        assert level.acceptance[1] == want_rate[level.name]
        assert level.truncated[1][ALL] == want_share[level.name]
        assert comp.truncated_share == TRUNCATED_SHARE_LIMIT

    text = summary_markdown(model)
    assert "| 0.750 |" in text and "| 0.500 |" in text
    assert "12 (30%)" in text  # 12 of 40 truncated


def _table(page: str, first_header: str, has: str) -> list[dict[str, str]]:
    """The rows (header -> cell) of the page's tables whose header row starts with
    ``first_header`` and names ``has``."""
    parser = Tables()
    parser.feed(page)
    out = []
    for rows in parser.tables:
        if rows and rows[0] and rows[0][0] == first_header and has in rows[0]:
            out += [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert out, f"no table {first_header!r} .. {has!r} in the page"
    return out


def test_report_compare_and_predict_show_the_same_acceptance_and_share(tmp_path: Path) -> None:
    # One results directory pair (a baseline and an n-gram variant): the HTML report (the
    # library pages `specload report` writes), compare (its Markdown and JSON) and `predict
    # --measured` (its JSON and Markdown) show each level's acceptance and truncated share
    # as the model has them. The variant's c1 has the server's counters (0.75) and an older
    # summary's truncated count without the written ratio; its c4 only the requests' own
    # counts (0.5): a reader that took the server's rate alone, or the written ratio alone,
    # shows another figure there, and this test fails.
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.compare.report import comparison_json, comparison_markdown  # noqa: PLC0415
    from specload.predict import pipeline  # noqa: PLC0415
    from specload.predict.forecast import Options  # noqa: PLC0415
    from specload.predict.synthetic import make_records as token_records  # noqa: PLC0415
    from specload.records.tokens import write_tokens  # noqa: PLC0415
    from specload.report.pages import comparison_html, single_run_html  # noqa: PLC0415

    base, var = _spec_run(tmp_path)
    raw = orjson.loads((var / "summary.json").read_bytes())
    del raw["levels"][0]["reasoning_truncated_ratio"]  # c1: the share from the count
    (var / "summary.json").write_bytes(orjson.dumps(raw))
    write_tokens(base, token_records(24, levels=[1, 4], seed=3, min_tokens=60, max_tokens=120))

    model = read(var)
    rate = {lv.concurrency: lv.acceptance.rate for lv in model.levels}
    share = {lv.concurrency: lv.figures.truncated_share for lv in model.levels}
    cut = {lv.concurrency: lv.figures.reasoning_truncated for lv in model.levels}
    assert rate == {1: 0.75, 4: 0.5}
    assert share == {1: pytest.approx(0.3), 4: pytest.approx(0.3)}
    assert model.levels[0].acceptance.source == SOURCE_SERVER
    assert model.levels[1].acceptance.source == SOURCE_CLIENT

    # predict --measured: the measured side of the forecast
    opts = Options(n_boot=20, schedule_ks=(3,))
    baseline, plan = pipeline.load(base, opts)
    prediction = pipeline.predict(baseline, plan, opts, measured_dir=var)
    assert prediction.measured is not None
    rows = {row["concurrency"]: row for row in prediction.measured["levels"]}
    assert sorted(rows) == [1, 4]
    for c, row in rows.items():
        assert row["measured_acceptance_rate"] == rate[c]
        assert row["measured_truncated_share"] == share[c]
    md_rows = [line for line in prediction.text.splitlines() if line.startswith(("| 1 |", "| 4 |"))]
    for c in (1, 4):
        want = f"/ {rate[c] * 100:.1f}% | {share[c] * 100:.1f}% |"
        assert any(line.startswith(f"| {c} |") and want in line for line in md_rows), c
    out = tmp_path / "predicted"
    out.mkdir()
    pipeline.write(out, prediction, plot=False)

    # compare
    runs = [load_run(base), load_run(var)]
    comp = compare_runs(runs, n_boot=50)
    data = comparison_json(comp)
    for level in data["levels"]:
        c = int(level["load"])
        assert level["acceptance"][1] == rate[c]
        assert level["reasoning_truncated_ratio"][1] == share[c]
    text = comparison_markdown(comp)
    for c in (1, 4):
        assert f"ngram {share[c] * 100:.0f}%" in text
        assert f"acceptance rate {rate[c]:.2f}" in text

    # the HTML report: the comparison's page and the variant's page alone
    page = comparison_html(runs, comp, n_boot=50, predictions=[out / "prediction.json"])
    alone = single_run_html(runs[1])
    for c in (1, 4):
        name, label = f"c{c}", f"concurrency {c}"
        for html_page in (page, alone):
            measured = _table(html_page, "level", "truncated")
            row = next(r for r in measured if r["level"] == name and r["variant"] == "ngram")
            assert row["category"] == "all"
            assert row["truncated"] == f"{cut[c]} of 40 ({share[c] * 100:.0f}%)"
        verdicts = _table(page, "level", "acceptance rate")
        assert next(r for r in verdicts if r["level"] == label)["acceptance rate"] == (
            f"{rate[c]:.3f}"
        )
        summary = _table(alone, "level", "acceptance")
        assert next(r for r in summary if r["level"] == f"{label} ({name})")["acceptance"] == (
            f"{rate[c]:.3f}"
        )
        predicted = _table(page, "concurrency", "measured acceptance")
        assert next(r for r in predicted if r["concurrency"] == str(c))["measured acceptance"] == (
            f"{rate[c]:.3f}"
        )


def test_model_is_light() -> None:
    # the model imports no numpy (every reader, even the exporter's, can take it)
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = "import sys, specload.results.model; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert math.isfinite(TRUNCATED_SHARE_LIMIT)


def test_the_forecasts_interval_is_the_block_bootstrap(tmp_path: Path, monkeypatch) -> None:
    # the forecast resamples its requests in blocks of at least the concurrency (as compare
    # does), never one by one: every level's interval draws block_indices with that block
    import specload.predict.forecast as fc_mod  # noqa: PLC0415
    from specload.predict.baseline import load_baseline  # noqa: PLC0415
    from specload.predict.synthetic import (  # noqa: PLC0415
        LinearCost,
        make_records,
        write_synthetic_baseline,
    )

    seen: list[tuple[int, int]] = []
    real = fc_mod.block_indices

    def spy(n: int, block: int, n_boot: int, rng: np.random.Generator) -> Any:
        seen.append((n, block))
        return real(n, block, n_boot, rng)

    monkeypatch.setattr(fc_mod, "block_indices", spy)
    recs = make_records(20, levels=[1, 4], seed=1, min_tokens=100, max_tokens=300)
    write_synthetic_baseline(tmp_path, recs, levels=[1, 4], cost=LinearCost())
    opts = fc_mod.Options(n_boot=20, schedule_ks=(3,))
    base = load_baseline(
        tmp_path, need_tokens=True, hint=lambda m: fc_mod.default_plan(m, opts).summary()
    )
    fc_mod.forecast(base, opts, plan=fc_mod.default_plan([1, 4], opts))
    assert seen, "the forecast's interval did not draw moving blocks"
    assert all(block in (block_length(n, 1), block_length(n, 4)) for n, block in seen)
    assert any(block >= 4 for _, block in seen)  # c4: blocks of at least 4 requests


# -- how a level stopped (--precision, --against) ----------------------------------------------

STOPPING = {
    "metric": "tpot",
    "precision": 0.02,
    "min_requests": 20,
    "against": "results/baseline",
    "margin": 0.05,
    "confidence": 0.95,
    "method": "repeated confidence intervals, Lan-DeMets error spending (Pocock type)",
}
# the variant's two levels: c1 precise at 64 requests (its verdict then undecided), c4
# decided slower at 48 (its precision then ±4.0%)
STOPS = {
    "c1": {
        "stop_reason": "precise",
        "precision_half_width": 0.018,
        "precision_requests": 64,
        "verdict": "undecided",
        "verdict_requests": 64,
        "verdict_ratio": 1.01,
        "verdict_interval": [0.97, 1.06],
        "verdict_looks": 4,
    },
    "c4": {
        "stop_reason": "decided",
        "precision_half_width": 0.04,
        "precision_requests": 48,
        "verdict": "slower",
        "verdict_requests": 48,
        "verdict_ratio": 1.2,
        "verdict_interval": [1.08, 1.31],
        "verdict_looks": 3,
    },
}
STOPPED = {
    "c1": "precise ±1.8% after 64 requests (undecided after 64 requests)",
    "c4": "decided after 48 requests: slower (±4.0% after 48 requests)",
}


def test_level_and_summary_read_the_stopping_fields() -> None:
    raw = {"name": "c4", "concurrency": 4, **STOPS["c4"]}
    level = Level.from_dict(raw)
    assert (level.stop_reason, level.verdict, level.verdict_requests) == ("decided", "slower", 48)
    assert (level.precision_half_width, level.precision_requests) == (0.04, 48)
    assert (level.verdict_ratio, level.verdict_interval, level.verdict_looks) == (
        1.2,
        (1.08, 1.31),
        3,
    )
    assert level.stopped == STOPPED["c4"]
    assert level.stop_fields() == STOPS["c4"]  # the summary's keys, as written
    # the words, one case each
    cases = [
        ({"stop_reason": "precise", "precision_half_width": 0.018, "precision_requests": 64},
         "precise ±1.8% after 64 requests"),
        ({"stop_reason": "decided", "verdict": "faster", "verdict_requests": 30},
         "decided after 30 requests: faster"),
        ({"stop_reason": "decided", "search_cut_short": "missed"}, "decided by the search: missed"),
        ({"stop_reason": "budget", "verdict": "undecided", "verdict_requests": 200},
         "budget (undecided after 200 requests)"),
        ({"stop_reason": "budget", "precision_half_width": None, "precision_requests": None},
         "budget"),  # precision not measured: too few requests
        ({"stop_reason": "interrupted"}, "interrupted"),
    ]  # fmt: skip
    for fields, want in cases:
        assert Level.from_dict({"name": "c1", **fields}).stopped == want, fields
    # an older summary: no field, every reader as before
    old = Level.from_dict({"name": "c1", "concurrency": 1})
    assert old.stop_reason is None and old.verdict is None and old.verdict_interval is None
    assert old.stopped is None and old.stop_fields() is None
    # figures that are not numbers read as None, like every figure
    odd = Level.from_dict(
        {
            "name": "c1",
            "stop_reason": "budget",
            "precision_half_width": "2%",
            "verdict_requests": True,
            "verdict_interval": [1.0],
        }
    )
    assert odd.precision_half_width is None and odd.verdict_requests is None
    assert odd.verdict_interval is None and odd.stopped == "budget"

    summary = from_dict({"levels": [raw], "stopping": STOPPING})
    assert summary.stopping is not None
    assert (summary.stopping.metric, summary.stopping.precision, summary.stopping.margin) == (
        "tpot",
        0.02,
        0.05,
    )
    assert summary.stopping.against == "results/baseline"
    assert summary.stopping.min_requests == 20 and summary.stopping.confidence == 0.95
    assert summary.stopping.text == (
        "a level ends once the 95% interval of its median TPOT is within ±2% (precise) or "
        "once its median TPOT is known faster, slower or within ±5% against results/baseline "
        "(decided), never before 20 requests, else at its budget"
    )
    assert from_dict({"levels": [raw], "stopping": None}).stopping is None
    assert from_dict({"levels": [raw]}).stopping is None


def _with_stops(path: Path, stops: dict[str, dict[str, Any]] | None, stopping: Any) -> None:
    """Rewrite ``path``'s summary: ``stops`` per level (None: the keys removed, an older
    summary) and the top-level ``stopping`` (``...``: removed)."""
    raw = orjson.loads((path / "summary.json").read_bytes())
    for lv in raw["levels"]:
        for key in STOPS["c1"]:
            lv.pop(key, None)
        if stops is not None:
            lv.update(stops.get(lv["name"], {"stop_reason": "budget"}))
    raw.pop("stopping", None)
    if stopping is not ...:
        raw["stopping"] = stopping
    jsonschema.validate(raw, summary_schema())
    (path / "summary.json").write_bytes(orjson.dumps(raw))


def _readers(base: Path, var: Path) -> dict[str, str]:
    """What every reader writes of the pair (the page with a fixed date)."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.compare.report import comparison_json, comparison_markdown  # noqa: PLC0415
    from specload.report.html import report_html  # noqa: PLC0415
    from specload.results.report import summary_markdown  # noqa: PLC0415

    runs = [load_run(base), load_run(var)]
    comp = compare_runs(runs, n_boot=50)
    when = datetime(2026, 12, 4, tzinfo=UTC)
    return {
        "summary.md": summary_markdown(read(var)),
        "comparison.md": comparison_markdown(comp),
        "comparison.json": orjson.dumps(comparison_json(comp)).decode(),
        "comparison.html": report_html(runs, comp, generated=when),
        "run.html": report_html([runs[1]], None, generated=when),
    }


def test_readers_of_runs_without_stopping_are_unchanged(tmp_path: Path) -> None:
    # An older summary (no stop_reason, no stopping) and a plain new one (every level
    # "budget", stopping null) read the same in every reader, byte for byte.
    base = make_run(tmp_path / "base", "baseline", 13.6, levels=(1, 4), n=40)
    var = make_run(tmp_path / "var", "ngram", 15.0, levels=(1, 4), n=40, seed=2)
    _with_stops(base, None, ...)
    _with_stops(var, None, ...)
    old = _readers(base, var)
    _with_stops(base, {}, None)
    _with_stops(var, {}, None)
    assert _readers(base, var) == old
    for text in old.values():
        assert "stopped" not in text.lower() and "Stopping" not in text


def test_every_reader_shows_how_each_level_stopped(tmp_path: Path) -> None:
    # The variant ran with --precision 2% --against the baseline: summary.md, compare (its
    # Markdown and JSON) and the HTML report (the comparison's page and the run's alone) show
    # each level's way out in the model's words; a reader that drops a field fails here.
    from specload.compare.model import compare_runs, load_run  # noqa: PLC0415
    from specload.compare.report import comparison_json  # noqa: PLC0415

    base = make_run(tmp_path / "base", "baseline", 13.6, levels=(1, 4), n=40)
    var = make_run(tmp_path / "var", "ngram", 15.0, levels=(1, 4), n=40, seed=2)
    _with_stops(base, {}, None)  # a plain new run: every level "budget"
    _with_stops(var, STOPS, STOPPING)
    model = read(var)
    assert {lv.name: lv.stopped for lv in model.levels} == STOPPED
    out = _readers(base, var)

    # summary.md: the rules, then a "stopped" column
    md = out["summary.md"]
    assert f"- stopping: {model.stopping.text}" in md  # type: ignore[union-attr]
    assert md.splitlines()[md.splitlines().index("## Levels") + 4].endswith("| flags | stopped |")
    for c, name in ((1, "c1"), (4, "c4")):
        row = next(line for line in md.splitlines() if line.startswith(f"| {c} |"))
        assert row.endswith(f"| {STOPPED[name]} |")

    # compare: a line per level (both runs), the rules, and the JSON's fields
    cmd = out["comparison.md"]
    assert "Stopping rules" in cmd and f"- ngram: {model.stopping.text}" in cmd  # type: ignore[union-attr]
    for name in ("c1", "c4"):
        assert f"Stopped (--precision/--against): baseline: budget; ngram: {STOPPED[name]}" in cmd
    data = comparison_json(compare_runs([load_run(base), load_run(var)], n_boot=50))
    assert data["stopping"][0] is None and data["stopping"][1] == STOPPING
    for level in data["levels"]:
        ref, mine = level["stopping"]
        assert ref["stop_reason"] == "budget" and ref["stopped"] == "budget"
        assert mine == {**STOPS[level["name"]], "stopped": STOPPED[level["name"]]}

    # the HTML report: the verdicts' table, the run's summary and every level's figures
    page, alone = out["comparison.html"], out["run.html"]
    for name, c in (("c1", 1), ("c4", 4)):
        verdicts = _table(page, "level", "ngram stopped")
        row = next(r for r in verdicts if r["level"] == f"concurrency {c}")
        assert row["ngram stopped"] == STOPPED[name] and row["baseline stopped"] == "budget"
        summary = _table(alone, "level", "stopped")
        assert (
            next(r for r in summary if r["level"] == f"concurrency {c} ({name})")["stopped"]
            == (STOPPED[name])
        )
        for html_page in (page, alone):
            measured = _table(html_page, "level", "truncated")
            row = next(
                r
                for r in measured
                if r["level"] == name and r["variant"] == "ngram" and r["category"] == "all"
            )
            assert row["stopped"] == STOPPED[name]
    assert "Stopping: a level ends once" in alone
