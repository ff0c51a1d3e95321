"""The running exporter: monitors, poller, sources, collector and the HTTP server.

HTTP routes (all on ``--address:--port``):

- ``GET /metrics``: the Prometheus exposition;
- ``GET /-/healthy``: ``ok`` (the exporter itself, whatever its targets do);
- ``GET /-/targets``: JSON, each target's state, last error and the server processes
  answering at its address, with a ``warning`` when several do (for humans);
- ``POST /-/profile/VARIANT``: start a profile capture now, 202.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import orjson
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from exporter.baselines import BaselineSource
from exporter.collector import ExporterCollector
from exporter.config import ExporterConfig
from exporter.logs import close_quietly, open_log
from exporter.poller import Poller
from exporter.sources import FamilySource, close_source, start_source
from exporter.target import MULTIPLE_PROCESSES, TargetMonitor, TargetView
from specload.redact import redact_url

log = logging.getLogger("specload.exporter")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def default_sources(cfg: ExporterConfig) -> list[tuple[str, FamilySource]]:
    """The baseline files and, when a target has ``profile.trace_dir``, the profiler."""
    out: list[tuple[str, FamilySource]] = []
    if cfg.baselines:
        out.append(("baselines", BaselineSource(cfg.baselines)))
    if any(t.profile.enabled for t in cfg.targets):
        # Imported only when used: profiling pulls in the trace analysis.
        from exporter.profiling import ProfilingSource  # noqa: PLC0415

        out.append(("profiling", ProfilingSource.from_config(cfg.targets)))
    return out


class Exporter:
    def __init__(
        self,
        cfg: ExporterConfig,
        *,
        sources: Sequence[tuple[str, FamilySource]] | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.monitors = [
            TargetMonitor(
                t,
                timeout_s=cfg.timeout_for(t),
                max_bytes=cfg.max_response_bytes,
                log=open_log(t.log) if t.log is not None else None,
                clock=clock,
            )
            for t in cfg.targets
        ]
        self.poller = Poller(self.monitors, interval_s=cfg.interval_s, transport=transport)
        named = list(sources) if sources is not None else default_sources(cfg)
        self.sources = [s for _, s in named]
        self.collector = ExporterCollector(
            self.views,
            stats=lambda: self.poller.stats,
            sources=self.sources,
            source_names=[n for n, _ in named],
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._server: ThreadingWSGIServer | None = None
        self._server_thread: threading.Thread | None = None

    def views(self) -> list[TargetView]:
        return [m.view() for m in self.monitors]

    # -- HTTP -------------------------------------------------------------------------

    def wsgi(self) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = str(environ.get("PATH_INFO", "/"))
            method = str(environ.get("REQUEST_METHOD", "GET"))
            if path == "/metrics":
                result: Iterable[bytes] = metrics_app(environ, start_response)
                return result
            if path == "/-/healthy":
                return _reply(start_response, "200 OK", b"ok\n")
            if path == "/-/targets":
                return _reply(start_response, "200 OK", self._targets_json(), "application/json")
            if path.startswith("/-/profile/"):
                if method != "POST":
                    return _reply(start_response, "405 Method Not Allowed", b"use POST\n")
                return self._profile(path[len("/-/profile/") :], start_response)
            if path == "/":
                body = (
                    b"specload exporter: /metrics /-/healthy /-/targets POST /-/profile/VARIANT\n"
                )
                return _reply(start_response, "200 OK", body)
            return _reply(start_response, "404 Not Found", b"not found\n")

        return app

    def _targets_json(self) -> bytes:
        out = []
        for v in self.views():
            out.append(
                {
                    "variant": v.variant,
                    "model": v.model,
                    "url": next(
                        redact_url(m.cfg.url.root)
                        for m in self.monitors
                        if m.cfg.variant == v.variant
                    ),
                    "up": v.up,
                    "state": v.lifecycle.state,
                    "last_error": v.last_error,
                    "last_error_detail": v.last_error_detail,
                    "reloads_total": v.lifecycle.reloads_total,
                    "processes": v.processes,
                    "info": dict(v.info),
                }
            )
            if v.processes is not None and v.processes > 1:
                out[-1]["warning"] = MULTIPLE_PROCESSES
        return orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n"

    def _profile(self, variant: str, start_response: StartResponse) -> Iterable[bytes]:
        for source in self.sources:
            trigger = getattr(source, "trigger", None)
            if callable(trigger) and trigger(variant):
                return _reply(start_response, "202 Accepted", f"capturing {variant}\n".encode())
        return _reply(
            start_response, "404 Not Found", b"no profiling configured for that variant\n"
        )

    # -- running ----------------------------------------------------------------------

    def start(self, *, serve: bool = True) -> None:
        for s in self.sources:
            start_source(s)
        self.poller.start()
        if serve:
            server = make_server(
                self.cfg.address,
                self.cfg.port,
                self.wsgi(),
                server_class=ThreadingWSGIServer,
                handler_class=_QuietHandler,
            )
            self._server = server
            self._server_thread = threading.Thread(
                target=server.serve_forever, name="specload-exporter-http", daemon=True
            )
            self._server_thread.start()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self.cfg.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._server_thread is not None:
            self._server_thread.join(timeout=10)
            self._server_thread = None
        self.poller.stop()
        for s in self.sources:
            try:
                close_source(s)
            except Exception as exc:
                log.warning("closing a source failed: %r", exc)
        for m in self.monitors:
            if m.log is not None:
                close_quietly(m.log)


def _reply(
    start_response: StartResponse,
    status: str,
    body: bytes,
    ctype: str = "text/plain; charset=utf-8",
) -> list[bytes]:
    start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
    return [body]
