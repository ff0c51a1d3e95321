"""``specload report`` on hand-built runs with known truth: verdicts, figures, escaping,
no external reference, the SVG's geometry, predictions, objectives, bad input."""

from __future__ import annotations

import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from specload.cli import main
from specload.report.svg import nice_ticks, panel_svg
from specload.results.plots import Chart, Point, Series
from tests.fixtures.results import T0, level_entry, make_records, make_run, write_run

pytestmark = pytest.mark.unit

BOOT = ["--bootstrap", "200"]


class _Tables(HTMLParser):
    """Every table row's cell texts (entities decoded), in page order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(path: Path) -> _Tables:
    parser = _Tables()
    parser.feed(path.read_text())
    return parser


def row(tables: _Tables, *first: str) -> list[str]:
    found = [r for r in tables.rows if r[: len(first)] == list(first)]
    assert len(found) == 1, (first, found)
    return found[0]


def summary(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "summary.json").read_text())
    return data


def shown(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def test_verdicts_and_figures_known_truth(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", "baseline", 13.6, seed=1)
    b = make_run(tmp_path / "b", "ngram", 13.6 * 1.15, seed=2, acceptance=0.3)
    c = make_run(tmp_path / "c", "eagle", 13.6 * 0.8, seed=3, acceptance=0.6)
    d = make_run(tmp_path / "d", "baseline-again", 13.6, seed=7)
    out = tmp_path / "r.html"
    assert main(["report", str(a), str(b), str(c), str(d), "--out", str(out), *BOOT]) == 0
    t = parse(out)
    verdicts = {}
    for level in ("concurrency 1", "concurrency 4"):
        found = [r for r in t.rows if r[:1] == [level] and len(r) == 14]
        verdicts[level] = [r[6] for r in found]  # one row per variant, in order
        tok = [r[11] for r in found]
        assert tok == ["no significant difference"] * 3  # same tokens in the same window
    # 15% slower, 20% faster, the same variant again: the verdicts a reader must see
    assert verdicts == {
        lv: ["slower", "faster", "no significant difference"]
        for lv in ("concurrency 1", "concurrency 4")
    }
    text = " ".join("".join(t.text).split())
    assert "ngram: slower than baseline at concurrency 1, concurrency 4 (median TPOT)" in text
    assert "eagle: faster than baseline at concurrency 1, concurrency 4 (median TPOT)" in text
    # The figures are summary.json's, per level and category.
    for path, variant in ((a, "baseline"), (b, "ngram")):
        for level in summary(path)["levels"]:
            for cat, st in [("all", level), *level["categories"].items()]:
                r = row(t, level["name"], variant, cat)
                assert r[3] == str(st["completed"])
                assert r[5] == shown(st["median_ttft_ms"], 2) != "-"
                assert r[7] == shown(st["median_ttfct_ms"], 2) != "-"
                assert r[9] == shown(st["median_tpot_ms"], 2) != "-"
                assert r[10] == shown(st["p90_tpot_ms"], 2) != "-"
                assert r[11] == shown(st["median_itl_ms"], 2)
                assert r[13] == shown(st["output_throughput"], 1) != "-"
    # no leftover temporary file beside the report (written atomically)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c", "d", "r.html"]


def test_strings_from_results_are_escaped(tmp_path: Path) -> None:
    evil_variant = "<script>alert(1)</script>"
    evil_cat = '<img src=x onerror="alert(2)">'
    recs = make_records("c1", n=40, tpot_ms=10, start=T0, categories=(evil_cat, "math"))
    level = level_entry("c1", recs, start=T0, warnings=["</li><b>warned</b>"])
    run = write_run(
        tmp_path / "run", evil_variant, [level], recs, model="<iframe src=//evil>", options={}
    )
    out = tmp_path / "r.html"
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = out.read_text()
    lowered = page.lower()
    for tag in ("<script", "<img", "<iframe", "<b>"):
        assert tag not in lowered, tag
    t = parse(out)
    # the strings are shown as text, exactly
    assert row(t, "c1", evil_variant, evil_cat)[3] == "20"
    text = "".join(t.text)
    assert "<iframe src=//evil>" in text
    assert "</li><b>warned</b>" in text


def test_page_references_nothing_outside(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", "baseline", 10.0, seed=1)
    b = make_run(tmp_path / "b", "ngram", 11.0, seed=2, acceptance=0.3)
    out = tmp_path / "r.html"
    assert main(["report", str(a), str(b), "--out", str(out), *BOOT]) == 0
    page = out.read_text()
    for needle in ("<script", "<link", "<img", "<iframe", "<object", "@import", "url("):
        assert needle not in page.lower(), needle
    refs = re.findall(r'\s(?:src|href|action)="([^"]*)"', page)
    assert refs and all(r.startswith("#") for r in refs), refs  # in-page anchors only
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in page  # and the page says so to the browser


def test_svg_panel_geometry() -> None:
    points = (
        Point(1, 1.0, n=10),
        Point(2, 2.0, n=11, low=1.5, high=2.5),
        Point(4, 3.0, n=12, truncated=3),
        Point(8, 4.0, n=13),
    )
    chart = Chart(
        name="tpot.png",
        ylabel="median TPOT (ms)",
        xlabel="concurrency",
        levels=(1, 2, 4, 8),
        log2=True,
        series=(Series("v<1>", "all", points), Series("w", "math", points)),
        line="median per level",
    )
    svg = panel_svg(chart, "all", {"v<1>": "#123456"})
    assert svg.count("<circle") == 5  # four points, one ring
    assert svg.count('class="truncated"') == 1
    cx = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"[^>]*class="point"', svg)]
    cy = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"[^>]*class="point"', svg)]
    # log2 axis: doubling levels equally spaced, increasing
    gaps = [b - a for a, b in itertools.pairwise(cx)]
    assert min(gaps) > 50 and max(gaps) - min(gaps) < 0.2  # coordinates have one decimal
    # linear y axis from 0, up the page: equal steps of 1 ms are equal steps of pixels
    steps = [a - b for a, b in itertools.pairwise(cy)]
    assert min(steps) > 20 and max(steps) - min(steps) < 0.2
    ticks = re.findall(r'class="xtick" data-level="([^"]+)"', svg)
    assert ticks == ["1", "2", "4", "8"]
    assert re.findall(r'class="n"[^>]*>(\d+)<', svg) == ["10", "11", "12", "13"]
    assert 'data-low="1.5" data-high="2.5"' in svg
    assert "v&lt;1&gt;" in svg and "v<1>" not in svg
    assert "#123456" in svg
    # the other category is not in this panel
    assert svg.count('data-series="w"') == 0


@pytest.mark.parametrize(
    ("high", "ticks"),
    [
        (7.3, [0, 2, 4, 6, 8]),
        (0.37, [0, 0.1, 0.2, 0.3, 0.4]),
        (100, [0, 20, 40, 60, 80, 100]),
        (12, [0, 2.5, 5, 7.5, 10, 12.5]),
        (0, [0, 1]),
    ],
)
def test_nice_ticks(high: float, ticks: list[float]) -> None:
    assert nice_ticks(high) == pytest.approx(ticks)


def test_default_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "results"
    a = make_run(runs / "a", "baseline", 10.0, seed=1, n=40)
    b = make_run(runs / "b", "ngram", 12.0, seed=2, n=40)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(a)]) == 0
    assert (a / "report.html").is_file()
    assert main(["report", str(a), str(b), *BOOT]) == 0
    # beside the first, where `specload compare` writes comparison/
    assert (runs / "comparison" / "report.html").is_file()
    assert not (tmp_path / "report.html").exists()


def _one_line_error(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> None:
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specload: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_run(tmp_path / "a", "baseline", 10.0, seed=1, n=40)
    missing = tmp_path / "nope"
    _one_line_error(capsys, main(["report", str(missing)]), str(missing), "no such")
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_error(capsys, main(["report", str(a), str(empty)]), str(empty), "summary.json")
    _one_line_error(capsys, main(["report", str(a), "--out", str(tmp_path)]), "--out", "file name")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else", "levels": []}')
    _one_line_error(capsys, main(["report", str(a), "--prediction", str(bad)]), str(bad))
    _one_line_error(
        capsys,
        main(["report", str(a), "--prediction", str(tmp_path / "none.json")]),
        "none.json",
        "no such file",
    )
    _one_line_error(capsys, main(["report", str(a), "--confidence", "2"]), "--confidence")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should be")
    _one_line_error(
        capsys, main(["report", str(a), "--out", str(blocked / "r.html")]), "--out", "blocked"
    )
    # two runs, one killed: refused as compare refuses it
    k = make_run(tmp_path / "k", "ngram", 10.0, seed=2, n=40, status="running")
    _one_line_error(capsys, main(["report", str(a), str(k)]), "never finalized")
    assert main(["report", str(a), str(k), "--allow-incomplete", *BOOT]) == 0


def test_one_killed_run_is_reported_with_a_warning(tmp_path: Path) -> None:
    k = make_run(tmp_path / "k", "ngram", 10.0, seed=2, n=40, status="running")
    assert main(["report", str(k)]) == 0
    text = "".join(parse(k / "report.html").text)
    assert "summary.json was never finalized" in text


def _prediction(baseline: Path, levels: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "format": "specload-predict/1",
        "baseline": str(baseline),
        "method": "ngram",
        "num_speculative_tokens": 3,
        "confidence": 0.9,
        "warnings": ["<b>step-cost curve extrapolated</b>"],
        "levels": levels,
        **extra,
    }


def test_prediction_beside_the_measured_run(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", "baseline", 10.0, seed=1, n=60)
    b = make_run(tmp_path / "b", "ngram", 9.0, seed=2, n=60, acceptance=0.4)
    levels = [
        {
            "concurrency": c,
            "baseline_median_tpot_ms": 10.0,
            "predicted_median_tpot_ms": predicted,
            "predicted_low_ms": predicted - 1,
            "predicted_high_ms": predicted + 1,
            "acceptance_rate": 0.35,
            "verdict": "faster",
        }
        for c, predicted in ((1, 8.5), (4, 9.9))
    ]
    # found in the variant's directory: measured there
    (b / "prediction.json").write_text(json.dumps(_prediction(a, levels)))
    # a broken one in the baseline's: left out, said so
    (a / "prediction.json").write_text("{not json")
    out = tmp_path / "r.html"
    assert main(["report", str(a), str(b), "--out", str(out), *BOOT]) == 0
    t = parse(out)
    measured = {lv["concurrency"]: lv for lv in summary(b)["levels"]}
    for lv in levels:
        c = lv["concurrency"]
        r = row(t, str(c))
        m = measured[c]["median_tpot_ms"]
        assert r[2] == f"{lv['predicted_median_tpot_ms']:.2f}"
        assert r[3] == f"{lv['predicted_low_ms']:.2f} .. {lv['predicted_high_ms']:.2f}"
        assert r[4] == f"{m:.2f}"
        assert r[5] == f"{(lv['predicted_median_tpot_ms'] / m - 1) * 100:+.1f}%"
        inside = lv["predicted_low_ms"] <= m <= lv["predicted_high_ms"]
        assert r[6] == ("yes" if inside else "no")
        assert r[7] == "0.350" and r[8] == "0.400"
    text = " ".join("".join(t.text).split())
    assert "whose results directory holds the prediction" in text
    assert "left out of the report" in text and str(a / "prediction.json") in text
    assert "<b>step-cost curve extrapolated</b>" in text  # its warning, escaped
    assert "90% interval" in text


def test_draft_prediction_break_even(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", "baseline", 10.0, seed=1, n=40)
    b = make_run(tmp_path / "b", "eagle", 8.0, seed=2, n=40)
    # the measured mean acceptance length of the eagle run (server counters: the rate and
    # the length of one source, the model's Level.acceptance; k=2 drafts a step)
    for_b = summary(b)
    for lv, length in zip(for_b["levels"], (2.4, 1.1), strict=True):
        lv["server"]["spec_decode_mean_acceptance_length"] = length
        lv["server"]["spec_decode_acceptance_rate"] = (length - 1) / 2
    (b / "summary.json").write_text(json.dumps(for_b))
    levels = [
        {"concurrency": 1, "break_even_mean_acceptance_length": 1.3, "possible": True},
        {"concurrency": 4, "break_even_mean_acceptance_length": 1.6, "possible": True},
    ]
    pred = tmp_path / "p.json"
    pred.write_text(json.dumps(_prediction(a, levels, method="draft")))
    out = tmp_path / "r.html"
    assert main(["report", str(a), str(b), "--prediction", str(pred), "--out", str(out)]) == 0
    t = parse(out)
    assert row(t, "1")[5:] == ["2.40", "0.700", "above: faster"]
    assert row(t, "4")[5:] == ["1.10", "0.050", "below: slower"]
    assert "the one run here besides the baseline" in "".join(t.text)


def test_objectives_and_search(tmp_path: Path) -> None:
    recs = make_records("c1", n=40, tpot_ms=10, start=T0)
    level = level_entry(
        "c1",
        recs,
        start=T0,
        slo={"objectives_s": {"tpot": 0.02, "ttft": 0.5}, "failing_ratio": {"tpot": 0.25}},
        slo_attainment_ratio=0.75,
        request_goodput=0.5,
        output_goodput=50.0,
    )
    search = {
        "kind": "slo",
        "variable": "concurrency",
        "attainment": 0.9,
        "limit": 4,
        "set_by": "c8",
        "complete": True,
        "steps": [
            {"level": "c1", "concurrency": 1, "attainment": 1.0, "held": True},
            {
                "level": "c8",
                "concurrency": 8,
                "attainment": 0.5,
                "held": False,
                "cut_short": "missed",
            },
        ],
    }
    run = write_run(tmp_path / "run", "baseline", [level], recs, search=search)
    assert main(["report", str(run)]) == 0
    t = parse(run / "report.html")
    assert row(t, "c1", "baseline", "tpot ≤ 20 ms, ttft ≤ 500 ms")[3:] == [
        "75.0%",
        "0.50",
        "50.0",
        "tpot 25.0%",
    ]
    text = " ".join("".join(t.text).split())
    assert "highest concurrency holding 90% attainment: 4 users (set by c8)" in text
    assert row(t, "c8", "8") == ["c8", "8", "50.0%", "no", "missed"]
