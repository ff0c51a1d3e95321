"""Records → level numbers, the results files, and the summary schema."""

from __future__ import annotations

import os
import stat

import jsonschema
import orjson
import pytest

from specload.errors import UsageError
from specload.histogram import Histogram
from specload.records.request import RequestRecord
from specload.results import ResultsWriter, read_requests, read_summary, summary_schema
from specload.results.aggregate import (
    LevelAggregate,
    aggregate_records,
    as_record,
    truncation_warnings,
)
from specload.results.report import summary_markdown

pytestmark = pytest.mark.unit


def record(
    step="c1",
    category="math",
    ok=True,
    tpot=0.01,
    ttft=0.1,
    reasoning=80,
    content=20,
    chunks=None,
    error=None,
    truncated=False,
):
    n = reasoning + content
    itl = Histogram()
    itl.extend([tpot] * (n - 1))
    rec = RequestRecord(
        category=category,
        step=step,
        variant="v",
        model="m",
        start_s=0.0,
        end_s=1.0,
        ok=ok,
        error_kind=error,
        ttft_s=ttft if ok else None,
        ttfct_s=(ttft + reasoning * tpot) if ok else None,
        e2e_s=(ttft + (n - 1) * tpot) if ok else None,
        tpot_s=tpot if ok else None,
        tokens_reasoning=reasoning if ok else 0,
        tokens_content=content if ok else 0,
        tokens_output=n if ok else 0,
        chunks=chunks if chunks is not None else n,
        reasoning_truncated=truncated,
        itl_token_hist=itl if ok else None,
    )
    return rec.to_dict(include_histograms=True)


def test_level_numbers_and_categories():
    agg = LevelAggregate()
    for i in range(10):
        agg.add(as_record(record(category="math", tpot=0.010 + i * 0.001)))
    for _ in range(5):
        agg.add(
            as_record(
                record(
                    category="coding",
                    tpot=0.020,
                    reasoning=100,
                    content=0,
                    truncated=True,
                    chunks=34,
                )
            )
        )
    agg.add(as_record(record(ok=False, error="http_503", category="coding")))
    agg.add(as_record(record(ok=False, error="refused", category="math")))
    out = agg.result(duration_s=10.0, windowed=False)
    assert out["completed"] == 15 and out["failed"] == 2
    assert out["errors"] == {"http_503": 1, "refused": 1}
    assert out["duration"] == 10.0
    assert out["request_throughput"] == pytest.approx(1.5)
    assert out["total_output_tokens"] == 1500
    assert out["output_throughput"] == pytest.approx(150.0)
    assert out["mean_reasoning_tokens"] == pytest.approx((800 + 500) / 15)
    assert out["reasoning_truncated"] == 5
    math = out["categories"]["math"]
    assert math["completed"] == 10 and math["failed"] == 1
    # exact: lower median of 10..19 ms is 14 ms, p90 is rank floor(0.9 * 9) = 8
    assert math["median_tpot_ms"] == pytest.approx(14.0, rel=1e-12)
    assert math["p90_tpot_ms"] == pytest.approx(18.0, rel=1e-12)
    assert math["mean_tpot_ms"] == pytest.approx(14.5, rel=1e-9)
    assert math["median_ttfct_ms"] == pytest.approx(100 + 80 * 14.0, rel=1e-12)
    coding = out["categories"]["coding"]
    assert coding["median_tpot_ms"] == pytest.approx(20.0, rel=1e-12)
    assert coding["reasoning_truncated_ratio"] == 1.0
    assert out["reasoning_truncated_ratio"] == pytest.approx(5 / 15)
    assert coding["mean_tokens_per_chunk"] == pytest.approx(100 / 34)
    assert coding["mean_content_tokens"] == 0
    assert coding["errors"] == {"http_503": 1}
    # per-token ITL merged from every request's histogram
    assert out["median_itl_ms"] == pytest.approx(out["median_tpot_ms"], rel=0.01)
    assert math["output_throughput"] + coding["output_throughput"] == pytest.approx(150.0)


def test_tool_call_tokens_are_a_channel_of_their_own():
    agg = LevelAggregate()
    for _ in range(4):
        rec = as_record(record(reasoning=30, content=0))
        rec.tokens_tool = 20  # reasoning, then a call of 20 tokens
        rec.tokens_output = 50
        agg.add(rec)
    agg.add(as_record(record(reasoning=30, content=10)))
    out = agg.result(duration_s=10.0, windowed=False)
    assert (out["total_reasoning_tokens"], out["total_content_tokens"]) == (150, 10)
    assert out["total_tool_tokens"] == 80 and out["mean_tool_tokens"] == 16.0
    assert out["total_output_tokens"] == 240 and out["output_throughput"] == 24.0
    assert out["categories"]["math"]["total_tool_tokens"] == 80
    level = {"name": "c1", "concurrency": 1, "complete": True, **out}
    text = summary_markdown({"status": "complete", "mode": "closed", "levels": [level]})
    head = next(line for line in text.splitlines() if "content tok" in line)
    assert "| content tok | tool tok | truncated |" in head
    row = text.splitlines()[text.splitlines().index(head) + 2]
    assert row.count("|") == head.count("|") and "| 2.0 | 16.0 | 0 (0%) |" in row


def truncation_level(*records: RequestRecord) -> list[str]:
    agg = LevelAggregate()
    for r in records:
        agg.add(r)
    out = agg.result(duration_s=10.0, windowed=False)
    return [w for w in truncation_warnings(agg.all, out) if "inside reasoning" in w]


def budgeted(category, budget, reasoning, content, *, truncated=False, split="exact"):
    r = as_record(record(category=category, reasoning=reasoning, content=content))
    r.max_tokens = budget
    r.reasoning_truncated = truncated
    r.channel_split_source = split
    return r


def test_truncation_warning_says_what_is_known_not_a_budget_that_would_fit():
    # 3 of 4 cut at their 4096 budget; the one that answered finished its reasoning in 3890
    # tokens. How long the cut ones would have reasoned no request showed: no guess.
    (warning,) = truncation_level(
        *[budgeted("long_reasoning", 4096, 4096, 0, truncated=True) for _ in range(3)],
        budgeted("long_reasoning", 4096, 3890, 120),
    )
    assert warning.startswith(
        "3 of 4 completed requests ended inside reasoning at max_tokens 4096 (long_reasoning): "
        "no answer token measured for them (TTFCT, content tokens); "
    )
    assert "their reasoning needs at least 4096 tokens" in warning
    assert "no truncated request showed its full reasoning" in warning
    assert "(the longest finished reasoning was 3890 tokens)" in warning
    assert "would fit" not in warning and "--max-tokens 6144" not in warning


def test_truncation_warning_uses_each_categorys_own_budget():
    # explanation cut at its 2048; coding at 4096 (one request showed 4100 with the slack);
    # math, with a budget of 8192, was never cut: the level's largest budget says nothing.
    (warning,) = truncation_level(
        budgeted("explanation", 2048, 2048, 0, truncated=True),
        budgeted("explanation", 2048, 2048, 0, truncated=True),
        budgeted("coding", 4096, 4096, 0, truncated=True),
        budgeted("coding", 4096, 4100, 0, truncated=True),
        budgeted("coding", 4096, 1500, 300),
        budgeted("coding", 4096, 3000, 300, split="chunks-estimate"),  # not a fact
        budgeted("math", 8192, 5000, 100),
    )
    assert "at max_tokens 2048 (explanation), 4096 (coding):" in warning
    assert "8192" not in warning and "5000" not in warning and "3000" not in warning
    assert "needs at least 2048 tokens (explanation), 4100 (coding);" in warning
    assert "(the longest finished reasoning: coding 1500 tokens)" in warning


def test_truncation_warning_without_a_budget_or_a_finished_reasoning():
    (warning,) = truncation_level(
        *[budgeted("math", None, 700 + i, 0, truncated=True) for i in range(3)]
    )
    assert "at the server's own limit (math):" in warning
    assert "needs at least 702 tokens; no truncated request showed its full reasoning, so" in (
        warning
    )


def test_truncation_facts_merge_like_the_records():
    recs = [
        budgeted("coding", 4096, 4096, 0, truncated=True),
        budgeted("coding", 4096, 2500, 10),
        budgeted("math", 2048, 2050, 0, truncated=True),
        budgeted("math", 2048, 1200, 5),
    ]
    whole = LevelAggregate()
    halves = [LevelAggregate(), LevelAggregate()]
    for i, r in enumerate(recs):
        whole.add(r)
        halves[i % 2].add(r)
    merged = halves[0].all
    merged.merge(halves[1].all)
    assert (
        merged.reasoning_needed()
        == whole.all.reasoning_needed()
        == {
            "coding": 4096,
            "math": 2050,
        }
    )
    assert merged.finished_reasoning == {"coding": 2500, "math": 1200}
    assert merged.truncated_budgets == {("coding", 4096), ("math", 2048)}


def test_aggregate_records_only_takes_its_step():
    recs = [record(step="c1"), record(step="c1-warmup"), record(step="c4")]
    assert aggregate_records(recs, "c1", 1.0)["completed"] == 1


def test_empty_level_has_nulls():
    out = LevelAggregate().result(duration_s=0.0)
    assert out["completed"] == 0 and out["median_tpot_ms"] is None
    assert out["output_throughput"] is None


def test_writer_appends_and_survives_torn_line(tmp_path):
    w = ResultsWriter(tmp_path / "out")
    w.append(record())
    w.append(record(step="c4"))
    # readable before close: every append is flushed
    assert len(read_requests(tmp_path / "out")) == 2
    with open(w.requests_path, "ab") as fh:
        fh.write(b'{"step": "c4", "ok"')  # a run killed mid-line
    assert [r["step"] for r in read_requests(tmp_path / "out")] == ["c1", "c4"]
    w.close()


def test_summary_is_replaced_atomically(tmp_path):
    w = ResultsWriter(tmp_path)
    w.write_summary({"levels": [], "n": 1})
    w.write_summary({"levels": [], "n": 2})
    assert read_summary(tmp_path)["n"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl", "summary.json"]
    w.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_dir_is_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(UsageError, match=r"--out .*not writable"):
            ResultsWriter(ro)
        with pytest.raises(UsageError, match=r"--out .*cannot create"):
            ResultsWriter(ro / "sub")
    finally:
        ro.chmod(stat.S_IRWXU)


def test_out_dir_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="--out"):
        ResultsWriter(f)


def test_read_summary_errors(tmp_path):
    with pytest.raises(UsageError, match=r"no summary\.json"):
        read_summary(tmp_path)
    (tmp_path / "summary.json").write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        read_summary(tmp_path)


def test_schema_accepts_a_level_and_rejects_missing_keys():
    schema = summary_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    agg = LevelAggregate()
    agg.add(as_record(record()))
    level = {
        "name": "c1",
        "concurrency": 1,
        "request_rate": None,
        "complete": True,
        "warmup_s": 0.0,
        "started_at": "2026-11-29T10:00:00+00:00",
        "ended_at": "2026-11-29T10:00:10+00:00",
        "outages": [],
        "server": {},
        "lost": 0,
        "flags": [],
        "warnings": [],
        **agg.result(10.0),
    }
    summary = {
        "schema_version": 1,
        "specload_version": "0",
        "status": "complete",
        "variant": "v",
        "host": "http://h",
        "model": "m",
        "started_at": "2026-11-29T10:00:00+00:00",
        "mode": "closed",
        "options": {},
        "levels": [level],
    }
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), schema)
    del level["median_tpot_ms"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(summary, schema)


def test_out_dir_under_a_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match=r"--out .*cannot create directory") as err:
        ResultsWriter(f / "results")
    assert "\n" not in str(err.value)
