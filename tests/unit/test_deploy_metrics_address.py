"""The load generator's client metrics listen on loopback unless told otherwise: every
deployment where Prometheus scrapes the Locust master from another container or pod sets
the address explicitly (compose, the Kubernetes base and what ``deploy k8s`` renders), and
the local stack and the sweep keep loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specload.deploy.k8s import render
from specload.load.options import DEFAULT_METRICS_ADDRESS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EVERYWHERE = "0.0.0.0:9647"


def k8s_master_env(folder: Path) -> dict[str, str]:
    docs = list(yaml.safe_load_all((folder / "locust-master.yaml").read_text()))
    deployment: dict[str, Any] = next(d for d in docs if d and d.get("kind") == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_default_is_loopback() -> None:
    assert DEFAULT_METRICS_ADDRESS.startswith("127.0.0.1:")


def test_compose_master_listens_for_prometheus_explicitly() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text())
    env = compose["services"]["locust-master"]["environment"]
    assert env["SPECLOAD_METRICS_ADDRESS"] == EVERYWHERE
    targets = (ROOT / "deploy" / "compose" / "prometheus" / "targets" / "loadgen.yml").read_text()
    assert "locust-master:9647" in targets


def test_kubernetes_master_listens_for_prometheus_explicitly(tmp_path: Path) -> None:
    assert k8s_master_env(ROOT / "deploy" / "k8s" / "base")["SPECLOAD_METRICS_ADDRESS"] == (
        EVERYWHERE
    )
    render(ROOT, tmp_path / "out")
    assert k8s_master_env(tmp_path / "out")["SPECLOAD_METRICS_ADDRESS"] == EVERYWHERE
