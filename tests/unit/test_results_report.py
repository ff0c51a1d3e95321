"""``summary.md``: n, the truncated share and the level warnings, status notes."""

from __future__ import annotations

import jsonschema
import orjson
import pytest

from specload.results import summary_schema
from specload.results.report import summary_markdown
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


def test_summary_md_shows_n_truncated_share_and_warnings(tmp_path):
    d = make_run(
        tmp_path / "a", "ngram", 13.6, levels=(1, 4), n=40, truncated=0.25, status="incomplete"
    )
    summary = orjson.loads((d / "summary.json").read_bytes())
    jsonschema.validate(summary, summary_schema())
    level = summary["levels"][1]
    level["flags"] = ["unfinished", "reasoning_truncated"]
    level["unfinished"] = 2
    level["warnings"] = ["2 requests were still in flight at the drain deadline"]
    text = summary_markdown(summary)
    assert "status **incomplete** — finished, but a level" in text
    warnings = text[text.index("## Warnings") : text.index("## Levels")]
    assert "- concurrency 4: 2 requests were still in flight at the drain deadline" in warnings
    assert "| concurrency | n | failed | unfinished |" in text
    row1 = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    row4 = next(line for line in text.splitlines() if line.startswith("| 4 |"))
    assert row1.startswith("| 1 | 40 | 0 | 0 |")
    assert "| 10 (25%) |" in row1 and row1.endswith("| - |")
    assert "| 4 | 40 | 0 | 2 |" in row4 and row4.endswith("| unfinished, reasoning_truncated |")
    assert f"| {summary['levels'][0]['median_tpot_ms']:.2f} |" in row1
    cats = text[text.index("## Per category") :]
    assert "| 1 | 20 / " in cats and " / 50% | 20 / " in cats  # every 4th is a coding one


def test_summary_md_of_old_or_partial_summaries(tmp_path):
    d = make_run(tmp_path / "a", "x", 13.6, levels=(1,), n=12, status="running")
    summary = orjson.loads((d / "summary.json").read_bytes())
    level = summary["levels"][0]
    for key in ("reasoning_truncated_ratio", "unfinished", "flags", "warnings"):
        level.pop(key)
    level["reasoning_truncated"] = 3
    text = summary_markdown(summary)
    assert "status **running** — " in text and "specload results repair" in text
    assert "## Warnings" not in text
    assert "| 3 (25%) |" in text


def test_summary_md_shows_speculative_decoding_when_requests_carried_it() -> None:
    level = {
        "name": "c4",
        "concurrency": 4,
        "categories": {},
        "spec_decode_reconciled": False,
        "spec_decode": {
            "requests": 24,
            "acceptance_rate": 0.0712,
            "acceptance_rate_request_mean": 0.065,
            "mean_acceptance_length": 1.354,
            "ideal_speedup": 1.28,
            "reasoning": {"acceptance_rate": 0.069},
            "content": {"acceptance_rate": None},
        },
    }
    text = summary_markdown({"variant": "ngram", "levels": [level]})
    assert "| 4 | 24 | 7.1% | 6.5% | 1.35 | 6.9% | - | 1.28 | **no** |" in text
    plain = summary_markdown({"variant": "baseline", "levels": [{**level, "spec_decode": None}]})
    assert "Speculative decoding" not in plain
