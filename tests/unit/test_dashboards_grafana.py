"""Grafana boards: generated JSON matches the generator, structure Grafana
needs, fixed UIDs, variables, units, links, and every query parses (promtool)
and reads only metrics that something exports or records."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.fixtures.observability import (
    GRAFANA_DIR,
    RAW_NAME,
    REPO,
    dashboard_files,
    dashboards,
    exported_sources,
    is_exported,
    panels,
    promtool,
    recorded_names,
    substitute,
)

pytestmark = pytest.mark.unit

UIDS = {"specload-overview", "specload-variants", "specload-reload", "specload-loadtest"}
TEST_VARIABLES = {
    "variant": "baseline|ngram",
    "model": ".+",
    "reference": "baseline",
    "category": ".+",
    "datasource": "specload-prometheus",
}
KNOWN_UNITS = {"s", "none", "short", "reqps", "percentunit"}


def _generator() -> ModuleType:
    """grafana/generate.py, loaded as ``python grafana/generate.py`` runs it: with
    its folder on sys.path, where the board package beside it is imported from."""
    if str(GRAFANA_DIR) not in sys.path:
        sys.path.insert(0, str(GRAFANA_DIR))
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA_DIR / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _all_queries() -> list[tuple[str, str, str]]:
    """(board uid, panel title, expr) of every panel target and annotation."""
    out = []
    for uid, board in dashboards().items():
        for panel in panels(board):
            for target in panel["targets"]:
                out.append((uid, panel["title"], target["expr"]))
        for ann in board["annotations"]["list"]:
            if "expr" in ann:
                out.append((uid, f"annotation {ann['name']}", ann["expr"]))
    return out


def test_committed_json_is_what_the_generator_writes() -> None:
    gen = _generator()
    files = gen.rendered()
    assert set(files) == set(dashboard_files()), "boards added or removed without regenerating"
    for path, text in files.items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO)} drifted: run python grafana/generate.py"
        )
    assert gen.main(["--check"]) == 0


def test_generator_runs_as_a_script_from_any_folder(tmp_path: Path) -> None:
    """The documented entry point, outside the repository's folder."""
    result = subprocess.run(
        [sys.executable, str(GRAFANA_DIR / "generate.py"), "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_generator_check_reports_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = _generator()
    for path, text in gen.rendered().items():
        target = tmp_path / path.relative_to(gen.DASHBOARDS)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    monkeypatch.setattr(gen, "DASHBOARDS", tmp_path)
    monkeypatch.setattr(gen, "HERE", tmp_path)
    assert gen.main(["--check"]) == 0
    victim = sorted(tmp_path.glob("*/*.json"))[0]
    victim.write_text(victim.read_text().replace('"refresh": "10s"', '"refresh": "1m"'))
    assert gen.main(["--check"]) == 1
    assert victim.name in capsys.readouterr().err


def test_boards_have_fixed_uids_titles_and_folders() -> None:
    boards = dashboards()
    assert set(boards) == UIDS
    folders = {p.parent.name for p in dashboard_files()}
    assert folders == {"live", "benchmarks"}
    for path in dashboard_files():
        board = boards[path.stem]
        assert board["title"].startswith("Specload / ")
        assert "specload" in board["tags"]
        assert board["schemaVersion"] >= 36
        assert board["time"]["from"].startswith("now-")


def test_provisioning_matches_boards_and_datasource() -> None:
    ds = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/specload.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    providers = yaml.safe_load((GRAFANA_DIR / "provisioning/dashboards/specload.yml").read_text())
    paths = {p["options"]["path"].rsplit("/", 1)[1] for p in providers["providers"]}
    assert paths == {p.parent.name for p in dashboard_files()}
    assert all(p["folderUid"] for p in providers["providers"])
    for board in dashboards().values():
        (var,) = [v for v in board["templating"]["list"] if v["name"] == "datasource"]
        assert var["type"] == "datasource" and var["query"] == "prometheus"
        assert var["current"]["value"] == source["uid"]


def test_variables_datasource_model_variant_multi_select() -> None:
    for uid, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert {"datasource", "model", "variant"} <= set(variables), uid
        for name in ("model", "variant"):
            var = variables[name]
            assert var["multi"] and var["includeAll"] and var["allValue"] == ".+", (uid, name)
            assert var["datasource"]["uid"] == "${datasource}"
        assert "$model" in variables["variant"]["definition"], "variant follows the model"


def test_every_panel_has_queries_units_thresholds_and_a_datasource() -> None:
    for uid, board in dashboards().items():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), uid
        for panel in panels(board):
            where = f"{uid}: {panel['title']}"
            assert panel["targets"], where
            assert panel["datasource"]["uid"] == "${datasource}", where
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), where
            for target in panel["targets"]:
                assert target["expr"].strip(), where
                assert target["datasource"]["uid"] == "${datasource}", where
            defaults = panel["fieldConfig"]["defaults"]
            unit = defaults["unit"]
            assert unit in KNOWN_UNITS or unit.startswith("suffix:"), where
            steps = defaults["thresholds"]["steps"]
            assert steps and steps[0]["value"] is None, where
            values = [s["value"] for s in steps[1:]]
            assert values == sorted(values), where


def test_panels_fit_the_grid_without_overlap() -> None:
    for uid, board in dashboards().items():
        taken: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            g = panel["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, (uid, panel["title"])
            cells = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
            assert not cells & taken, (uid, panel["title"])
            taken |= cells


def test_boards_link_to_each_other_and_mark_reloads() -> None:
    boards = dashboards()
    for uid, board in boards.items():
        assert any(
            link["type"] == "dashboards"
            and "specload" in link["tags"]
            and link["keepTime"]
            and link["includeVars"]
            for link in board["links"]
        ), uid
        names = [a["name"] for a in board["annotations"]["list"]]
        assert "Reloads" in names, uid
        for panel in panels(board):
            for link in panel.get("links", []):
                target = re.match(r"/d/([a-z0-9-]+)/", link["url"])
                assert target and target.group(1) in boards, link


def _check_parses(exprs: list[tuple[str, str]], tmp_path: Path) -> None:
    """promtool parses each (where, expr) as the expression of a recording rule."""
    rules = [
        {"record": f"test:query_{i}:parse", "expr": expr, "labels": {"where": where}}
        for i, (where, expr) in enumerate(exprs)
    ]
    path = tmp_path / "queries.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout


def test_every_query_parses(tmp_path: Path) -> None:
    """Each panel and annotation query, its Grafana variables filled in."""
    exprs = [
        (f"{uid}: {title}", substitute(expr, TEST_VARIABLES)) for uid, title, expr in _all_queries()
    ]
    _check_parses(exprs, tmp_path)


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        _check_parses([("broken", "sum by (variant (rate(x[5m]))")], tmp_path)


def test_variable_queries_are_label_values_of_parsable_selectors(tmp_path: Path) -> None:
    exprs = []
    for uid, board in dashboards().items():
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((?:(.+), )?(\w+)\)", var["definition"])
            assert m, (uid, var["definition"])
            assert var["query"] == var["definition"]
            if m.group(1):
                exprs.append((f"{uid}: ${var['name']}", substitute(m.group(1), TEST_VARIABLES)))
    _check_parses(exprs, tmp_path)


def test_queries_read_only_metrics_something_records_or_exports() -> None:
    sources = exported_sources()
    recorded = set(recorded_names())
    missing = set()
    for uid, title, expr in _all_queries():
        for name in re.findall(r"(?<![\w])([a-z_]+:[a-z0-9_]+:[a-z0-9_]+)", expr):
            if name not in recorded:
                missing.add((uid, title, name))
        for name in RAW_NAME.findall(expr):
            if not is_exported(name, sources):
                missing.add((uid, title, name))
    assert not missing, sorted(missing)


def test_substitute_fills_variables_and_refuses_unknown_ones() -> None:
    assert substitute('x{variant=~"$variant"}[$__rate_interval]', {"variant": "a|b"}) == (
        'x{variant=~"a|b"}[20s]'
    )
    assert substitute("${variant:regex}", {"variant": "a"}) == "a"
    with pytest.raises(KeyError):
        substitute("$nope", {})


def _types(board: dict[str, Any]) -> set[str]:
    return {p["type"] for p in panels(board)}


def test_boards_cover_what_the_issue_asks_for() -> None:
    boards = dashboards()
    text = {uid: " ".join(e for u, _, e in _all_queries() if u == uid) for uid in boards}
    overview = text["specload-overview"]
    for needle in (
        "tpot",
        "ttft",
        "inter_token_latency",
        "generation_tokens",
        "num_requests_waiting",
        "kv_cache",
        "errors",
        "ALERTS",
    ):
        assert needle in overview, needle
    variants = text["specload-variants"]
    for needle in (
        "tpot_seconds:p50",
        "tpot_seconds:p90",
        "output_tokens",
        "ttft",
        "ttfct",
        "acceptance:ratio",
        "acceptance_length",
        "position_acceptance",
        "allreduce_ratio",
        "reasoning_truncated",
        "category",
        "$reference",
        "baseline_ratio",
        "variant_model_channel:specload_client_spec_decode_acceptance:ratio_5m",
        "variant_model_channel:specload_client_spec_decode_acceptance_length:mean_5m",
        "variant_model_step:specload_client_tpot_seconds:p50_5m",
        "sum by (variant, model, step, le)",
    ):
        assert needle in variants, needle
    reload_ = text["specload-reload"]
    for needle in (
        "specload_target_state",
        "reload_elapsed",
        "expected_reload",
        "load_progress",
        "last_reload_duration",
        "specload_target_up",
    ):
        assert needle in reload_, needle
    assert "state-timeline" in _types(boards["specload-reload"])
    loadtest = text["specload-loadtest"]
    for needle in ("step", "category", "errors_total", "chunks_total", "tpot"):
        assert needle in loadtest, needle
