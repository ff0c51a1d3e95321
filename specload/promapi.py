"""The few Prometheus HTTP API calls specload makes (the demo and the tests).

Queries go as form POSTs (long expressions do not hit URL limits); a reply
whose ``status`` is not ``success`` raises :class:`PrometheusError` with
Prometheus' own error text.
"""

from __future__ import annotations

import math
from typing import Any

import httpx


class PrometheusError(Exception):
    """Prometheus answered, but not with data (a bad expression, a timeout)."""


class PrometheusAPI:
    """A Prometheus server's HTTP API (``/api/v1/...``)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _data(self, response: httpx.Response, path: str) -> Any:
        try:
            body = response.json()
        except ValueError:
            response.raise_for_status()
            raise PrometheusError(f"{path}: not JSON (HTTP {response.status_code})") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else body
            raise PrometheusError(f"{path}: {error}")
        return body["data"]

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        return self._data(self._client.get(self.url + path, params=params), path)

    def _post(self, path: str, form: dict[str, str]) -> Any:
        return self._data(self._client.post(self.url + path, data=form), path)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query: Prometheus' ``result`` list (``metric``, ``value``)."""
        form = {"query": expr}
        if at is not None:
            form["time"] = f"{at:.3f}"
        result: list[dict[str, Any]] = self._post("/api/v1/query", form).get("result", [])
        return result

    def samples(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query as ``(labels, value)`` pairs."""
        return [(r["metric"], float(r["value"][1])) for r in self.query(expr, at)]

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The first sample's value (None: no series, or NaN)."""
        found = self.samples(expr, at)
        if not found or math.isnan(found[0][1]):
            return None
        return found[0][1]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"}
        result: list[Any] = self._post("/api/v1/query_range", form).get("result", [])
        return result

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = {"match[]": match} if match else None
        values: list[str] = self._get(f"/api/v1/label/{label}/values", params)
        return values

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing)."""
        found: list[dict[str, Any]] = self._get("/api/v1/alerts")["alerts"]
        return found

    def alert_rules(self) -> list[dict[str, Any]]:
        """Every alerting rule with its state and alerts."""
        data = self._get("/api/v1/rules", {"type": "alert"})
        return [rule for group in data.get("groups", []) for rule in group.get("rules", [])]
