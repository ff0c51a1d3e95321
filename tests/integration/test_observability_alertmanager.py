"""The committed Alertmanager config, live: alerts posted to a real Alertmanager
reach the webhook grouped by variant, and a variant that is down inhibits its
performance alerts."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.observability import Process, WebhookReceiver, start_alertmanager

pytestmark = pytest.mark.integration


@pytest.fixture
def alertmanager(tmp_path: Path, webhook_receiver: WebhookReceiver) -> Iterator[Process]:
    am = start_alertmanager(tmp_path, webhook_receiver.url, group_wait="1s")
    try:
        yield am
    finally:
        am.stop()


def _post(am: Process, alerts: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC)
    body = [
        {
            "labels": a,
            "annotations": {"summary": f"{a['alertname']} test"},
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(minutes=5)).isoformat(),
        }
        for a in alerts
    ]
    req = urllib.request.Request(
        am.url + "/api/v2/alerts",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def _wait(receiver: WebhookReceiver, n_payloads: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(receiver.payloads) < n_payloads:
        time.sleep(0.2)


def test_grouped_by_variant_and_down_inhibits_performance_alerts(
    alertmanager: Process, webhook_receiver: WebhookReceiver
) -> None:
    _post(
        alertmanager,
        [
            {"alertname": "SpecloadTargetDown", "variant": "ngram", "severity": "critical"},
            {"alertname": "SpecloadTPOTRegression", "variant": "ngram", "severity": "warning"},
            {"alertname": "SpecloadTPOTRegression", "variant": "eagle3", "severity": "warning"},
            {"alertname": "SpecloadErrorRatioHigh", "variant": "eagle3", "severity": "warning"},
        ],
    )
    _wait(webhook_receiver, 2)
    time.sleep(2)  # anything else would arrive within a group interval
    by_group = {p["groupLabels"]["variant"]: p for p in webhook_receiver.payloads}
    assert set(by_group) == {"ngram", "eagle3"}
    assert len(webhook_receiver.payloads) == 2, "one notification per variant"
    ngram = {a["labels"]["alertname"] for a in by_group["ngram"]["alerts"]}
    assert ngram == {"SpecloadTargetDown"}, "a down variant's TPOT alert is inhibited"
    eagle3 = {a["labels"]["alertname"] for a in by_group["eagle3"]["alerts"]}
    assert eagle3 == {"SpecloadTPOTRegression", "SpecloadErrorRatioHigh"}
    assert by_group["eagle3"]["receiver"] == "specload-webhook"
