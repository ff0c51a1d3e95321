"""Alertmanager's webhook receiver, played by the demo."""

from __future__ import annotations

import http.server
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from specload.commands.demo.constants import HOST
from specload.errors import UsageError


@dataclass
class Notification:
    received_at: float  # time.time()
    payload: dict[str, Any]

    def alerts(self) -> list[dict[str, Any]]:
        alerts = self.payload.get("alerts")
        return [a for a in alerts if isinstance(a, dict)] if isinstance(alerts, list) else []


class WebhookReceiver:
    """Alertmanager's webhook receiver of ``deploy/alertmanager/alertmanager.yml``, played by
    the demo: every POST to its path is kept with the time it arrived."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        self.host = parts.hostname or HOST
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self.notifications: list[Notification] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> str | None:
        """Listen; None, or why it cannot (the port is taken)."""
        keep, lock, path = self.notifications, self._lock, self.path

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 1 << 22))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = None
                if self.path.split("?")[0] == path and isinstance(payload, dict):
                    with lock:
                        keep.append(Notification(time.time(), payload))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        try:
            self._server = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
        except OSError as exc:
            return f"{self.host}:{self.port} {exc.strerror or exc}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)


def _webhook_url(repo: Path) -> str:
    """The webhook of the committed Alertmanager config's default receiver."""
    config = yaml.safe_load((repo / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    receiver = config["route"]["receiver"]
    for entry in config.get("receivers") or []:
        if entry.get("name") == receiver and entry.get("webhook_configs"):
            return str(entry["webhook_configs"][0]["url"])
    raise UsageError("deploy/alertmanager/alertmanager.yml: no webhook for the default receiver")
