"""``specload results repair DIR``: a killed run's summary rebuilt from requests.jsonl.

The killed directories are built by hand as the sweep leaves them after ``kill -9``:
``requests.jsonl`` with every completed request (and a torn last line), and the last
``summary.json`` written — at the previous level's end, ``status: running``, the level
the run died in with stale numbers (or no level at all when it died in the first).
"""

from __future__ import annotations

import jsonschema
import orjson
import pytest

from specload.cli import main
from specload.compare.model import compare_runs, load_run
from specload.errors import UsageError
from specload.records.request import RequestRecord
from specload.results import read_requests, summary_schema
from specload.results.aggregate import summarize_level
from specload.results.repair import BACKUP_FILE, repair
from tests.fixtures.results import T0, iso, level_entry, make_records, make_run, write_run

pytestmark = pytest.mark.unit

C4_START = T0 + 100.0
KILL = C4_START + 30.0


def _failed(step: str, start: float, kind: str = "timeout") -> RequestRecord:
    return RequestRecord(
        category="math",
        step=step,
        variant="ngram",
        model="m",
        start_s=start,
        end_s=start + 2.0,
        ok=False,
        error_kind=kind,
    )


def killed_in_second_level(path):
    """c1 done (its window T0..T0+60), c4 killed 30 s into its window."""
    warm1 = make_records("c1-warmup", n=20, tpot_ms=14, start=T0 - 10, window_s=10, seed=1)
    c1 = make_records("c1", n=120, tpot_ms=14, start=T0, window_s=60, seed=2)
    c1.append(_failed("c1", T0 + 30))
    warm4 = make_records("c4-warmup", n=40, tpot_ms=15, start=C4_START - 10, window_s=10, seed=3)
    c4 = make_records("c4", n=90, tpot_ms=15, start=C4_START, window_s=30, seed=4)
    c4 += [_failed("c4", C4_START + 5, "http_503"), _failed("c4", C4_START + 6, "http_503")]
    records = warm1 + c1 + warm4 + c4
    # the last summary written: right after c1's window, with the stragglers still to come
    stale_c1 = level_entry("c1", c1[:100], start=T0, window_s=60)
    stale_c4 = level_entry("c4", [], start=C4_START, window_s=60, complete=False)
    stale_c4.update(window_started_at=None, window_ended_at=None, ended_at=None, duration=0.0)
    write_run(
        path,
        "ngram",
        [stale_c1, stale_c4],
        records,
        status="running",
        torn_tail=True,
        options={"concurrency": "1,4,16"},
    )
    return records


def test_repair_of_a_killed_run_counts_every_record(tmp_path, capsys):
    d = tmp_path / "killed"
    records = killed_in_second_level(d)
    stale = (d / "summary.json").read_bytes()
    assert main(["results", "repair", str(d)]) == 0
    out = capsys.readouterr().out
    assert "c4: 90 ok, 2 failed" in out and "incomplete" in out
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary["status"] == "repaired"
    assert summary["repair"]["from_status"] == "running"
    assert summary["repair"]["records"] == len(records)  # the torn line skipped
    assert (d / BACKUP_FILE).read_bytes() == stale
    c1, c4 = summary["levels"]
    assert [c1["name"], c4["name"]] == ["c1", "c4"]
    # counts equal to the records
    assert (c1["completed"], c1["failed"]) == (120, 1)
    assert (c4["completed"], c4["failed"]) == (90, 2)
    assert c4["errors"] == {"http_503": 2}
    assert c1["complete"] is True and c1["duration"] == 60.0
    assert c4["complete"] is False
    last_end = max(r.end_s for r in records)
    assert c4["window_started_at"] == iso(C4_START)
    assert c4["duration"] == pytest.approx(last_end - C4_START)
    assert c4["concurrency"] == 4
    assert any("killed inside this level's window" in w for w in c4["warnings"])
    assert c4["server"] == {"error": "not scraped: the run was killed inside this level"}
    # the numbers are the sweep's own definition over the same records
    want = summarize_level(
        records,
        step="c4",
        window_start_s=C4_START,
        window_end_s=last_end,
        duration_s=last_end - C4_START,
    )
    for key in ("median_tpot_ms", "p90_tpot_ms", "median_ttft_ms", "output_throughput"):
        assert c4[key] == want[key]
    assert summary["ended_at"] == iso(last_end)
    assert "**repaired**" in (d / "summary.md").read_text()
    jsonschema.validate(summary, summary_schema())


def test_repaired_run_then_compares_only_with_allow_incomplete(tmp_path, capsys):
    d = tmp_path / "killed"
    killed_in_second_level(d)
    base = make_run(
        tmp_path / "base", "baseline", 14, levels=(1, 4), n=120, options={"concurrency": "1,4,16"}
    )
    assert main(["compare", str(base), str(d), "--no-plots"]) == 2
    assert "status running" in capsys.readouterr().err
    assert repair(d)["status"] == "repaired"
    with pytest.raises(UsageError, match="level c4 incomplete"):
        compare_runs([load_run(base), load_run(d)])
    comp = compare_runs([load_run(base), load_run(d)], allow_incomplete=True, n_boot=200)
    assert any("summary rebuilt from requests.jsonl" in w for w in comp.warnings)
    assert comp.levels[1].marks[1] == ["incomplete"]
    assert not any("disagree" in w for w in comp.warnings)  # one figure each


def test_killed_in_the_first_level_rebuilds_the_level_from_the_records(tmp_path):
    d = tmp_path / "killed"
    warm = make_records("c2-warmup", n=10, tpot_ms=14, start=T0 - 10, window_s=10, seed=1)
    c2 = make_records("c2", n=50, tpot_ms=14, start=T0, window_s=20, seed=2)
    write_run(d, "ngram", [], warm + c2, status="running", options={"concurrency": "2,8"})
    summary = repair(d)
    (level,) = summary["levels"]
    assert level["name"] == "c2" and level["concurrency"] == 2 and level["complete"] is False
    assert level["completed"] == 50
    assert level["warmup_s"] == 10.0 and level["planned_duration_s"] == 60.0
    assert level["started_at"] == iso(T0 - 10)
    assert level["window_started_at"] == iso(T0)
    assert level["duration"] == pytest.approx(max(r.end_s for r in c2) - T0)


def test_a_level_whose_next_level_began_is_complete(tmp_path):
    """Killed between a window's end and the summary write: the next level's records say
    the window had ended."""
    d = tmp_path / "killed"
    c1 = make_records("c1", n=40, tpot_ms=14, start=T0, window_s=60, seed=2)
    warm4 = make_records("c4-warmup", n=8, tpot_ms=15, start=T0 + 60, window_s=5, seed=3)
    stale = level_entry("c1", [], start=T0)
    stale.update(window_ended_at=None, complete=False, duration=0.0)
    write_run(d, "ngram", [stale], c1 + warm4, status="running")
    c1_level, c4_level = repair(d)["levels"]
    assert c1_level["complete"] is True and c1_level["completed"] == 40
    assert c1_level["duration"] == pytest.approx(60.0)
    assert c4_level["complete"] is False and c4_level["completed"] == 0
    assert c4_level["window_started_at"] is None
    assert any("warm-up" in w for w in c4_level["warnings"])


def test_finalized_run_is_left_alone_unless_forced(tmp_path, capsys):
    d = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,), n=30)
    before = (d / "summary.json").read_bytes()
    assert main(["results", "repair", str(d)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "status complete" in err and "--force" in err
    assert (d / "summary.json").read_bytes() == before
    assert main(["results", "repair", str(d), "--force"]) == 0
    summary = orjson.loads((d / "summary.json").read_bytes())
    assert summary["status"] == "repaired" and summary["repair"]["from_status"] == "complete"
    assert summary["levels"][0]["completed"] == 30
    # a second repair keeps the first backup and the first status
    assert main(["results", "repair", str(d)]) == 0
    assert (d / BACKUP_FILE).read_bytes() == before
    assert orjson.loads((d / "summary.json").read_bytes())["repair"]["from_status"] == "complete"


def test_bad_directories_are_one_line_errors(tmp_path, capsys):
    assert main(["results", "repair", str(tmp_path / "nope")]) == 2
    assert "no such results directory" in capsys.readouterr().err
    d = tmp_path / "empty"
    write_run(d, "x", [], [], status="running")
    assert read_requests(d) == []
    assert main(["results", "repair", str(d)]) == 2
    assert "no record" in capsys.readouterr().err


def test_repairing_twice_gives_the_same_summary(tmp_path):
    d = tmp_path / "killed"
    killed_in_second_level(d)
    first = repair(d)
    second = repair(d)
    assert second["repair"]["from_status"] == "running"
    assert second["levels"] == first["levels"]
    assert second["stop_reason"] == first["stop_reason"]
