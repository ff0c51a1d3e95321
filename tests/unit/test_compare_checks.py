"""compare checks its inputs: comparable runs, finished runs, truncated content measures."""

from __future__ import annotations

import orjson
import pytest

from specload.cli import main
from specload.compare.model import (
    ALL,
    SLOWER,
    TRUNCATED,
    comparability_warnings,
    compare_runs,
    load_run,
)
from specload.compare.report import comparison_markdown
from specload.errors import UsageError
from tests.fixtures.results import make_run

pytestmark = pytest.mark.unit


def _edit(path, fn):
    summary = orjson.loads((path / "summary.json").read_bytes())
    fn(summary)
    (path / "summary.json").write_bytes(orjson.dumps(summary))


def test_identical_setups_give_no_warning(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, server_time_scale=2.0)
    b = make_run(tmp_path / "b", "ngram", 14.0, seed=2, server_time_scale=2.0)
    assert comparability_warnings([load_run(a), load_run(b)]) == []
    # the same window written two ways is the same window
    c = make_run(
        tmp_path / "c",
        "ngram",
        14.0,
        seed=2,
        server_time_scale=2.0,
        options={"duration": "1m", "warmup": "10"},
    )
    assert comparability_warnings([load_run(a), load_run(c)]) == []


@pytest.mark.parametrize(
    ("options", "top", "want"),
    [
        ({"max_tokens": 512}, {}, "max_tokens differs: baseline 256, ngram 512"),
        ({"temperature": 0.7}, {}, "temperature differs: baseline unset, ngram 0.7"),
        ({"prompt_seed": 3}, {}, "prompt seed differs: baseline 0, ngram 3"),
        (
            {"prompts": "builtin:math"},
            {},
            "prompt set differs: baseline builtin, ngram builtin:math",
        ),
        ({"duration": "30s"}, {}, "window duration (s) differs: baseline 60, ngram 30"),
        ({"warmup": "0"}, {}, "warm-up (s) differs: baseline 10, ngram 0"),
        (
            {"duration": None, "requests": 200},
            {},
            "window requests differs: baseline unset, ngram 200",
        ),
        ({}, {"model": "other"}, "model differs: baseline m, ngram other"),
        ({}, {"server_time_scale": 5.0}, "server time scale differs: baseline 2, ngram 5"),
        (
            {"usage_stats": False},
            {},
            "usage stats (token accounting) differs: baseline unset, ngram False",
        ),
        (
            {"max_concurrency": 64},
            {},
            "max concurrency (open loop) differs: baseline unset, ngram 64",
        ),
    ],
)
def test_each_difference_is_named(tmp_path, options, top, want):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,), server_time_scale=2.0)
    b = make_run(
        tmp_path / "b",
        "ngram",
        13.6 * 1.2,
        levels=(1,),
        seed=2,
        options=options,
        **{"server_time_scale": 2.0, **top},
    )
    warnings = comparability_warnings([load_run(a), load_run(b)])
    assert want in warnings, warnings
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    assert want in comp.warnings
    assert comp.levels[0].cells[(ALL, "tpot")].verdicts[1] == SLOWER  # warned, still compared
    assert f"- {want}\n" in comparison_markdown(comp)


def test_levels_differ_is_named_and_only_common_levels_compared(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4, 16), n=60)
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1, 4), n=60, seed=2)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    assert "levels differ: baseline c1,c4,c16, ngram c1,c4 (compared: c1,c4)" in comp.warnings
    assert [lv.name for lv in comp.levels] == ["c1", "c4"]


def test_strict_makes_differences_one_line_errors(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,))
    b = make_run(
        tmp_path / "b",
        "ngram",
        13.6,
        levels=(1,),
        seed=2,
        options={"max_tokens": 512, "temperature": 0.5, "prompt_seed": 9},
    )
    with pytest.raises(UsageError, match="max_tokens differs"):
        compare_runs([load_run(a), load_run(b)], strict=True)
    capsys.readouterr()
    assert (
        main(["compare", str(a), str(b), "--strict", "--no-plots", "--out", str(tmp_path / "cmp")])
        == 2
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    for part in ("--strict", "max_tokens differs", "temperature differs", "prompt seed differs"):
        assert part in err
    assert not (tmp_path / "cmp" / "comparison.md").exists()
    # without --strict: warnings on stderr, exit 0
    assert main(["compare", str(a), str(b), "--no-plots", "--out", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    assert "specload compare: warning: max_tokens differs: baseline 256, ngram 512" in err


def test_killed_run_status_running_is_refused(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4))
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1, 4), seed=2, status="running")
    with pytest.raises(UsageError, match="status running"):
        compare_runs([load_run(a), load_run(b)])
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--no-plots", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "never finalized" in err and f"specload results repair {b}" in err
    assert "--allow-incomplete" in err
    # allowed: compared, and marked at the top and on the level
    assert (
        main(
            [
                "compare",
                str(a),
                str(b),
                "--no-plots",
                "--out",
                str(out),
                "--json",
                "--allow-incomplete",
                "--bootstrap",
                "200",
            ]
        )
        == 0
    )
    md = (out / "comparison.md").read_text()
    top = md[: md.index("Reference:")]
    assert "compared anyway (--allow-incomplete)" in top and "status running" in top
    assert "## concurrency 1 (ngram: run not finalized)" in md
    data = orjson.loads((out / "comparison.json").read_bytes())
    assert data["statuses"] == ["complete", "running"]
    assert data["levels"][0]["marks"] == [[], ["run not finalized"]]


def test_incomplete_level_is_refused_unless_allowed(tmp_path, capsys):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4))
    b = make_run(
        tmp_path / "b",
        "ngram",
        13.6,
        levels=(1, 4),
        seed=2,
        status="interrupted",
        stop_reason="SIGINT",
    )
    _edit(b, lambda s: s["levels"][1].update(complete=False))
    with pytest.raises(UsageError, match="level c4 incomplete"):
        compare_runs([load_run(a), load_run(b)])
    comp = compare_runs([load_run(a), load_run(b)], allow_incomplete=True, n_boot=200)
    assert comp.levels[1].marks == [[], ["incomplete"]]
    assert comp.levels[0].marks == [[], []]
    assert "ngram: status interrupted (SIGINT)" in comp.warnings
    text = comparison_markdown(comp)
    assert "## concurrency 4 (ngram: incomplete)" in text
    assert "[ngram: incomplete]" in text  # the headline line too


def test_level_flags_and_warnings_are_carried_to_the_top(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,))
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1,), seed=2, status="incomplete")
    _edit(
        b,
        lambda s: s["levels"][0].update(
            flags=["unfinished"],
            unfinished=3,
            warnings=["3 requests were still in flight at the drain deadline"],
        ),
    )
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    assert "ngram c1: 3 requests were still in flight at the drain deadline" in comp.warnings
    assert "ngram: status incomplete" in comp.warnings
    assert comp.levels[0].marks == [[], ["unfinished"]]


def test_truncated_side_marks_content_measures_not_comparable(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,))
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.2, levels=(1,), seed=2, truncated=0.8)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    level = comp.levels[0]
    assert level.truncated[1][ALL] == pytest.approx(0.8)
    for cat in level.categories:
        cell = level.cells[(cat, "ttfct")]
        assert cell.verdicts[1] == TRUNCATED and cell.diffs[1].ci_low is None
        assert level.cells[(cat, "tpot")].verdicts[1] == SLOWER  # decode speed still compared
    warning = next(w for w in comp.warnings if "TTFCT not compared" in w)
    assert "ngram's completed requests" in warning and "ngram 80%" in warning
    text = comparison_markdown(comp)
    assert "Requests ended inside reasoning at max_tokens: ngram: 80%" in text
    # at or below the one limit (TRUNCATED_SHARE_LIMIT, 0.2): compared
    c = make_run(tmp_path / "c", "ngram", 13.6 * 1.2, levels=(1,), seed=2, truncated=0.2)
    comp = compare_runs([load_run(a), load_run(c)], n_boot=200)
    assert comp.levels[0].cells[(ALL, "ttfct")].verdicts[1] != TRUNCATED


def test_truncation_counted_from_records_without_the_summary_ratio(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1,), truncated=0.9)
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1,), seed=2)

    def drop(summary):
        level = summary["levels"][0]
        level.pop("reasoning_truncated_ratio", None)
        for cat in level["categories"].values():
            cat.pop("reasoning_truncated_ratio", None)

    _edit(a, drop)
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    assert comp.levels[0].truncated[0][ALL] == pytest.approx(0.9)
    assert comp.levels[0].cells[(ALL, "ttfct")].verdicts[1] == TRUNCATED


def _levels(path, fn):
    _edit(path, lambda s: [fn(level) for level in s["levels"]])


def test_prefix_cache_hit_ratios_apart_are_named_per_level(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4))
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1, 4), seed=2)
    ratios = {"a": {"c1": 0.10, "c4": 0.40}, "b": {"c1": 0.15, "c4": 0.12}}
    for name, path in (("a", a), ("b", b)):
        _levels(
            path,
            lambda level, name=name: level["server"].update(
                prefix_cache_hit_ratio=ratios[name][level["name"]]
            ),
        )
    warnings = comparability_warnings([load_run(a), load_run(b)])
    hits = [w for w in warnings if w.startswith("prefix-cache hit ratio")]
    # c1: 0.05 apart is within the documented gap; c4 is not
    assert hits == [
        "prefix-cache hit ratio differs at c4: baseline 0.400, ngram 0.120 (more than 0.05 "
        "apart: cached prompt tokens skip their prefill)"
    ]
    with pytest.raises(UsageError, match="prefix-cache hit ratio differs at c4"):
        compare_runs([load_run(a), load_run(b)], strict=True)
    # one side without the ratio (a server without the counters): nothing to compare
    _levels(b, lambda level: level["server"].pop("prefix_cache_hit_ratio"))
    assert not [w for w in comparability_warnings([load_run(a), load_run(b)]) if "prefix" in w]


def test_prefix_cache_reset_on_one_side_only_is_named(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4, 16), n=40)
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1, 4, 16), n=40, seed=2)
    _levels(a, lambda level: level.update(prefix_cache_reset=True))
    resets = {"c1": False, "c4": False, "c16": None}  # null: unknown, not compared
    _levels(b, lambda level: level.update(prefix_cache_reset=resets[level["name"]]))
    comp = compare_runs([load_run(a), load_run(b)], n_boot=200)
    want = (
        "prefix-cache reset differs at c1,c4: baseline reset the prefix cache at the level's "
        "start, ngram did not"
    )
    assert [w for w in comp.warnings if "prefix" in w] == [want]
    assert f"- {want}\n" in comparison_markdown(comp)
    # the same on both sides, or absent on one (an older summary): no warning
    _levels(b, lambda level: level.update(prefix_cache_reset=True))
    assert not [w for w in comparability_warnings([load_run(a), load_run(b)]) if "prefix" in w]
    _levels(b, lambda level: level.pop("prefix_cache_reset"))
    assert not [w for w in comparability_warnings([load_run(a), load_run(b)]) if "prefix" in w]


def test_concurrency_levels_that_differ_are_named(tmp_path):
    a = make_run(tmp_path / "a", "baseline", 13.6, levels=(1, 4), n=40)
    b = make_run(tmp_path / "b", "ngram", 13.6, levels=(1, 8), n=40, seed=2)
    warnings = comparability_warnings([load_run(a), load_run(b)])
    assert "levels differ: baseline c1,c4, ngram c1,c8 (compared: c1)" in warnings
