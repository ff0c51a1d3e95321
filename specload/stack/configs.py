"""Configuration files of a stack, derived from the repo's own.

Prometheus gets the repo's ``deploy/prometheus/prometheus.yml`` with three
changes: rule files by absolute path (the repo's rules and alerts), the stack's
Alertmanager, and each job's file-based target list pointed at
``<state>/prometheus/targets/<job>.yml``, which lists the stack's ports.

A running stack's Prometheus can be pointed at another profile of the rules
(:func:`use_rule_profile`, :mod:`specload.stack.rules`: the demo's) and at a load
generator started outside the stack (:func:`write_loadgen_targets`); Prometheus
re-reads target lists by itself and its config on ``POST /-/reload``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml

from specload.errors import UsageError
from specload.stack.plan import HOST, Plan
from specload.stack.rules import Profile

#: Which part kind serves each job of the repo's Prometheus config.
JOB_KINDS = {"vllm": "sim", "specload-exporter": "exporter", "specload-loadgen": "locust-master"}


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _seconds(value: float) -> str:
    """A Prometheus duration (no fractions: ``800ms``, ``5s``)."""
    ms = round(value * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not YAML ({' '.join(str(exc).split())})") from None


def prometheus_config(
    repo_config: Path, *, alertmanager: str, scrape_interval_s: float
) -> dict[str, Any]:
    """The repo's Prometheus config adapted to a stack (see the module docstring)."""
    base = load_yaml(repo_config)
    if not isinstance(base, dict) or not isinstance(base.get("scrape_configs"), list):
        raise UsageError(f"{repo_config}: not a Prometheus config (no scrape_configs)")
    config: dict[str, Any] = copy.deepcopy(base)
    glob = config.setdefault("global", {})
    glob["scrape_interval"] = _seconds(scrape_interval_s)
    glob["evaluation_interval"] = _seconds(scrape_interval_s)
    glob["scrape_timeout"] = _seconds(max(0.5, round(0.8 * scrape_interval_s, 3)))
    config["rule_files"] = [
        pattern if Path(pattern).is_absolute() else str(repo_config.parent / pattern)
        for pattern in config.get("rule_files") or []
    ]
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    for job in config["scrape_configs"]:
        if job.get("file_sd_configs"):
            job["file_sd_configs"] = [{"files": [f"targets/{job['job_name']}.yml"]}]
    return config


def target_groups(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """File-based target lists per job, for the plan's parts."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for job, kind in JOB_KINDS.items():
        entries: list[dict[str, Any]] = []
        for part in plan.of_kind(kind):
            port = part.ports.get("metrics", part.ports.get("port"))
            if port is None:
                continue
            entry: dict[str, Any] = {"targets": [f"{HOST}:{port}"]}
            if kind == "sim":
                entry["labels"] = {"variant": part.name}
            entries.append(entry)
        groups[job] = entries
    return groups


def exporter_config(plan: Plan) -> dict[str, Any]:
    exporter = plan.part("exporter")
    baselines = [str(path) for path in plan.options.baselines]
    return {
        **({"baselines": baselines} if baselines else {}),
        "address": HOST,
        "port": exporter.ports["port"],
        "interval": _seconds(min(plan.options.scrape_interval_s, 5.0)),
        "targets": [
            {
                "variant": sim.name,
                "url": sim.url,
                "log": str(plan.options.state_dir / "logs" / f"{sim.name}.vllm.log"),
                "expected_reload": _seconds(max(plan.options.load_time_s, 1.0) * 2),
            }
            for sim in plan.of_kind("sim")
        ],
    }


def write_configs(plan: Plan) -> None:
    state = plan.options.state_dir
    prometheus_dir = state / "prometheus"
    alertmanager = plan.part("alertmanager")
    config = prometheus_config(
        plan.options.repo / "deploy" / "prometheus" / "prometheus.yml",
        alertmanager=f"{HOST}:{alertmanager.ports['port']}",
        scrape_interval_s=plan.options.scrape_interval_s,
    )
    write_atomic(prometheus_dir / "prometheus.yml", yaml.safe_dump(config, sort_keys=False))
    groups = target_groups(plan)
    for job in config["scrape_configs"]:
        if job.get("file_sd_configs"):
            entries = groups.get(job["job_name"], [])
            write_atomic(
                prometheus_dir / "targets" / f"{job['job_name']}.yml",
                yaml.safe_dump(entries, sort_keys=False),
            )
    write_atomic(state / "exporter.yaml", yaml.safe_dump(exporter_config(plan), sort_keys=False))
    (state / "logs").mkdir(parents=True, exist_ok=True)


def _prometheus_yml(state_dir: Path) -> Path:
    return state_dir / "prometheus" / "prometheus.yml"


def use_rule_profile(state_dir: Path, repo: Path, profile: Profile) -> list[str]:
    """Point the stack's Prometheus config at ``profile``'s rule and alert files in ``repo``
    (the production profile is what ``write_configs`` wrote); Prometheus applies it on
    ``POST /-/reload``. Returns the rule-file patterns now configured."""
    path = _prometheus_yml(state_dir)
    config = load_yaml(path)
    if not isinstance(config, dict):
        raise UsageError(f"{path}: not a Prometheus config")
    base = repo / "deploy" / "prometheus" / profile.folder
    patterns = [str(base / "rules" / "*.rules.yml"), str(base / "alerts" / "*.alerts.yml")]
    config["rule_files"] = patterns
    write_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return patterns


def write_loadgen_targets(
    state_dir: Path, address: str | None, labels: dict[str, str] | None = None
) -> None:
    """The stack's ``specload-loadgen`` target list: one load generator serving its client
    metrics at ``address`` (``HOST:PORT``; None: none). ``labels`` name the series that have
    no such label of their own (the job honours the client's labels: a ``variant`` here names
    only the users gauge)."""
    entries: list[dict[str, Any]] = []
    if address is not None:
        entry: dict[str, Any] = {"targets": [address]}
        if labels:
            entry["labels"] = dict(labels)
        entries.append(entry)
    write_atomic(
        state_dir / "prometheus" / "targets" / "specload-loadgen.yml",
        yaml.safe_dump(entries, sort_keys=False),
    )
