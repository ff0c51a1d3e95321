"""Prometheus config, recording rules and alerts: promtool checks and unit tests,
naming, annotations, coverage of every rule by a promtool test, and the
Alertmanager config."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.observability import (
    ALERT_FILES,
    AM_CONFIG,
    PROM_DIR,
    RAW_NAME,
    REPO,
    RULE_FILES,
    alert_rules,
    dashboards,
    exported_sources,
    is_exported,
    load_yaml,
    panels,
    promtool,
    recorded_names,
    rules_in,
    scale_durations,
    scaled_rules,
)

pytestmark = pytest.mark.unit

TEST_FILES = sorted((PROM_DIR / "tests").glob("*.yml"))


def test_promtool_check_config() -> None:
    result = promtool("check", "config", str(PROM_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    # every rule and alert file is picked up by the config's globs
    for path in [*RULE_FILES, *ALERT_FILES]:
        assert f"Checking {path}" in result.stdout + result.stderr, path


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", *map(str, [*RULE_FILES, *ALERT_FILES]))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file: Path) -> None:
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_recording_rule_has_a_promtool_case() -> None:
    tested = []
    for path in TEST_FILES:
        for case in load_yaml(path)["tests"]:
            tested += [t["expr"] for t in case.get("promql_expr_test", [])]
    text = "\n".join(tested)
    missing = [name for name in recorded_names() if not re.search(re.escape(name) + r"\b", text)]
    assert not missing, f"recording rules without a promql_expr_test: {missing}"


def test_every_alert_has_firing_and_silent_cases() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for path in TEST_FILES:
        for case in load_yaml(path)["tests"]:
            for t in case.get("alert_rule_test", []):
                (firing if t.get("exp_alerts") else silent).add(t["alertname"])
    names = {a["alert"] for a in alert_rules()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


def test_recording_rule_names_follow_level_metric_operations() -> None:
    names = recorded_names()
    assert len(names) == len(set(names)), "a recording rule is defined twice"
    for name in names:
        parts = name.split(":")
        assert len(parts) == 3 and all(parts), name
        level, metric, ops = parts
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", level), name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", metric), name
        assert re.fullmatch(r"[a-z0-9_]+", ops), name
        assert "vllm:" not in name[len(level) + 1 :], name


def test_rules_only_read_metrics_something_exports() -> None:
    """Names drift between areas; every raw series a rule or alert reads must be
    exported by the load generator, the exporter or (as vLLM names it) the simulator."""
    sources = exported_sources()
    missing = set()
    for rule in rules_in([*RULE_FILES, *ALERT_FILES]):
        text = rule["expr"] + " ".join((rule.get("annotations") or {}).values())
        for name in RAW_NAME.findall(text):
            if not is_exported(name, sources):
                missing.add(name)
    assert not missing, f"read by rules but exported by nothing: {sorted(missing)}"


@pytest.mark.parametrize("alert", alert_rules(), ids=lambda a: a["alert"])
def test_alert_has_severity_summary_description_and_board(alert: dict) -> None:
    assert alert["alert"].startswith("Specload")
    assert re.fullmatch(r"[A-Z][A-Za-z]+", alert["alert"])
    assert alert["labels"]["severity"] in {"critical", "warning", "info"}
    ann = alert["annotations"]
    assert ann["summary"].strip().endswith(".")
    assert "{{" in ann["description"], "description must carry values"
    match = re.match(r"http://localhost:3000/d/([a-z0-9-]+)/([a-z0-9-]+)", ann["dashboard_url"])
    assert match, ann["dashboard_url"]
    assert match.group(1) in dashboards(), f"no board with uid {match.group(1)}"
    assert alert.get("for"), "every alert waits before firing"


def test_alertmanager_config_groups_by_variant_and_posts_to_a_webhook() -> None:
    config = load_yaml(AM_CONFIG)
    assert "variant" in config["route"]["group_by"]
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers[config["route"]["receiver"]]["webhook_configs"][0]["url"].startswith("http")
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (prometheus-alertmanager package)")
    result = subprocess.run(
        [amtool, "check-config", str(AM_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alertmanager_inhibitions_name_existing_alerts() -> None:
    names = {a["alert"] for a in alert_rules()}
    for rule in load_yaml(AM_CONFIG).get("inhibit_rules", []):
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            key, op, value = re.match(r"(\w+)\s*(=~|=)\s*\"?([^\"]+)\"?", matcher).groups()
            assert key == "alertname"
            hits = [n for n in names if (re.fullmatch(value, n) if op == "=~" else n == value)]
            assert hits, matcher


def test_scaled_rules_for_live_tests_stay_valid(tmp_path: Path) -> None:
    """Live tests run the committed rules on a faster clock; the scaled copy must
    still be valid and scaled as asked."""
    assert scale_durations("rate(x[5m]) / rate(y[1h])", 60) == "rate(x[5s]) / rate(y[60s])"
    assert scale_durations("rate(x[30s])", 60, floor_s=4) == "rate(x[4s])"
    files = scaled_rules(
        tmp_path, 30, for_floor_s=6, constants={"specload:tpot_regression_margin:ratio": 0.5}
    )
    result = promtool("check", "rules", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr
    scaled = {r.get("alert") or r["record"]: r for r in rules_in(files)}
    assert scaled["SpecloadTPOTRegression"]["for"] == "20s"
    assert scaled["SpecloadTargetDown"]["for"] == "6s"
    assert "[10s]" in scaled["variant_model:vllm_generation_tokens:rate5m"]["expr"]
    assert scaled["specload:tpot_regression_margin:ratio"]["expr"] == "vector(0.5)"
    with pytest.raises(KeyError):
        scaled_rules(tmp_path, 30, constants={"specload:nope:ratio": 1})


def test_vllm_series_read_exist_in_real_vllm_pages() -> None:
    """Every vLLM series a rule, alert or board reads is on a real vLLM 0.32 page
    (captured from the CPU build with and without n-gram speculation), with the
    labels the rules aggregate by."""
    pages = sorted((REPO / "tests" / "data" / "vllm-0.32.0").glob("metrics_*.txt"))
    if not pages:
        pytest.skip("no captured vLLM pages in tests/data/vllm-0.32.0")
    real: dict[str, set[str]] = {}
    for page in pages:
        for line in page.read_text().splitlines():
            m = re.match(r"(vllm:[a-z0-9_]+)(?:\{(.*)\})? ", line)
            if m:
                labels = {kv.split("=", 1)[0] for kv in (m.group(2) or "").split(",") if kv}
                real.setdefault(m.group(1), set()).update(labels)
    texts = [r["expr"] for r in rules_in([*RULE_FILES, *ALERT_FILES])]
    texts += [t["expr"] for b in dashboards().values() for p in panels(b) for t in p["targets"]]
    read = set(re.findall(r"vllm:[a-z0-9_]+", " ".join(texts)))
    assert read, "no vLLM series read at all"
    assert read <= set(real), sorted(read - set(real))
    assert "model_name" in real["vllm:generation_tokens_total"]  # relabelled to `model`
    assert "finished_reason" in real["vllm:request_success_total"]
    assert "position" in real["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
