"""One ``specload run``: validate, wait for the target, sweep with Locust, write results.

Imports Locust (and so gevent's monkey-patching) at the top: import this module
only to run a sweep.
"""

from __future__ import annotations

import warnings

from gevent import monkey

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # ssl may already be imported by the command line
    monkey.patch_all()

import logging
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

import gevent
import httpx

from specload import __version__
from specload.errors import UsageError
from specload.records.request import RequestRecord
from specload.redact import ScrubFilter
from specload.results.report import summary_markdown
from specload.results.writer import (
    SUMMARY_FILE,
    SUMMARY_MD_FILE,
    SUMMARY_SPARE_BYTES,
    ResultsWriter,
    write_failure,
)
from specload.slo import parse_slo
from specload.sweep import readiness, server_info
from specload.sweep.backend import LocustBackend
from specload.sweep.driver import OutagePolicy, SweepDriver
from specload.sweep.progress import Progress, final_count
from specload.sweep.server_metrics import (
    CacheReset,
    ServerProbe,
    http_scraper,
    reset_prefix_cache,
    speculates,
)
from specload.sweep.settings import SweepSettings, check_metrics_port
from specload.sweep.stopping import comparable
from specload.urls import redact_url

# Exit status of `specload run` (docs/sweep.md): 0 measured; 2 bad options; 3 stopped by an
# outage; 4 every measured request failed; 5 the results could not be written (a full
# disk); 130/143 interrupted by SIGINT/SIGTERM.
EXIT_INTERRUPTED = {"SIGINT": 130, "SIGTERM": 143}
EXIT_OUTAGE = 3
EXIT_ALL_FAILED = 4
EXIT_WRITE_FAILED = 5
_T = TypeVar("_T")
RESET_TIMEOUT_S = 10.0  # POST /reset_prefix_cache: vLLM answers once the engine reset it
NO_TOKEN_IDS = (
    "--record-token-ids: the server returned no token ids "
    "(it needs a vLLM that supports return_token_ids)"
)


class _LogFile(logging.FileHandler):
    """run.log; a line that cannot be written (a full disk) is dropped, not a traceback on
    stderr per line: the run says once why it stopped."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def _setup_logging(out_dir: Path, secrets: tuple[str, ...] = ()) -> logging.Handler:
    handler = _LogFile(out_dir / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # run.log never holds a URL's password or the API key, whoever logged it
    handler.addFilter(ScrubFilter(secrets))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def run_sweep(settings: SweepSettings) -> int:
    """Run the sweep ``settings`` describe; the exit status of ``specload run``."""
    plan = settings.plan
    url = settings.url
    metrics_url = settings.metrics_url
    check_metrics_port(settings.load.get("metrics_address"))
    server_log = settings.given.get("server_log") or None
    if server_log is not None:
        server_info.read_log(server_log)  # a bad file: one line, before anything starts
    writer = ResultsWriter(settings.out_dir, spare_bytes=SUMMARY_SPARE_BYTES)
    log_handler = _setup_logging(writer.dir, (settings.api_key or "",))
    progress = Progress(settings.progress)
    backend: LocustBackend | None = None
    # SIGINT/SIGTERM end every wait from here on: the gate's, an outage's, the drain.
    signals = _Signals()
    for signum in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(signum, signals.received, signal.Signals(signum).name)
    try:
        progress.message(
            f"specload run: variant {settings.variant}, target {url.display}, "
            f"{plan.mode} loop {', '.join(plan.step_names)}, results in {writer.dir}"
        )
        if not settings.host_given:
            progress.message(
                f"no --host given: trying vLLM's default address {url.display} for "
                f"{settings.ready_timeout_s:g}s (--host URL or env SPECLOAD_HOST names the "
                "server; `specload demo` runs against a simulated one)"
            )
        try:
            ready = _interruptible(
                lambda: readiness.wait_ready(
                    url,
                    timeout_s=settings.ready_timeout_s,
                    api_key=settings.api_key or None,
                    on_wait=lambda left, problem: progress.countdown(left, problem, url.display),
                    what="--host" if settings.host_given else "no --host given: vLLM's default",
                    model=settings.model or None,
                    stop=signals.reason,
                ),
                signals.reason,
            )
        except readiness.Interrupted as stop:
            progress.close()
            print(
                f"specload: interrupted ({stop.reason}) while waiting for {url.display}: "
                "nothing was measured",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_INTERRUPTED.get(stop.reason, 130)
        # From here on the settings name the model the target serves: workers, records
        # and summary.json all see it.
        settings = settings.with_model(settings.model or ready.models[0])
        model = settings.model
        # A speculating server: where it sends no per-request counts, estimate from chunks.
        speculating = bool(metrics_url) and speculates(http_scraper(str(metrics_url)))
        if speculating and not settings.load.get("spec_estimate"):
            settings = replace(settings, load={**settings.load, "spec_estimate": True})
        progress.message(
            f"target ready after {ready.waited_s:.1f}s: model {model}, "
            f"server {ready.server_version or 'version unknown'}"
        )
        # What the server tells about itself (predict's engine path reads it).
        info = server_info.gather(
            url,
            version=ready.server_version,
            simulator=ready.time_scale is not None,
            model=model,
            api_key=settings.api_key or None,
            metrics_url=metrics_url,
            server_log=server_log,
        )
        argv, env = settings.worker_argv()
        backend = LocustBackend(
            host=url.root,
            load_options=settings.load_values(),
            worker_argv=argv,
            worker_env=env,
            workers=settings.workers,
            expect_workers=settings.expect_workers,
            master_bind_host=settings.master_bind_host,
            master_bind_port=settings.master_bind_port,
            log_dir=writer.dir,
        )
        backend.start_workers()
        if backend.metrics_port:
            progress.message(f"client metrics on port {backend.metrics_port} (/metrics)")

        def server_probe() -> ServerProbe:
            assert metrics_url is not None
            return ServerProbe(http_scraper(metrics_url), model=model)

        def post(path: str) -> httpx.Response:
            headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
            return httpx.post(url.root + path, headers=headers, timeout=RESET_TIMEOUT_S)

        cache_bust = settings.load.get("cache_bust") not in (None, "", "off")

        def reset_cache() -> CacheReset:
            return reset_prefix_cache(post, cache_bust=cache_bust)

        def wait_again(timeout_s: float, stop: Callable[[], str | None]) -> None:
            _interruptible(
                lambda: readiness.wait_ready(
                    url,
                    timeout_s=timeout_s,
                    api_key=settings.api_key or None,
                    on_wait=lambda left, problem: progress.countdown(left, problem, url.display),
                    stop=stop,
                ),
                stop,
            )

        record_ids = bool(settings.load.get("record_token_ids"))
        no_ids: list[str] = []  # why the run stopped: the server sent no token ids

        steps: Counter[str] = Counter()  # records written per step, for the final line

        def write_record(record: RequestRecord) -> None:
            writer.append(record.to_dict(include_histograms=True))
            steps[record.step] += 1
            if record_ids and record.ok and not no_ids:
                if record.prompt_ids is None or record.output_ids is None:
                    no_ids.append(NO_TOKEN_IDS)
                    driver.request_stop(NO_TOKEN_IDS)
                else:
                    writer.append_tokens(_token_dict(record))
            if writer.error is not None:  # a full disk: stop, nothing more can be kept
                driver.request_stop(writer.error)

        stop_metric = settings.stopping.metric.key if settings.stopping else "tpot"
        driver = SweepDriver(
            plan,
            backend,
            clock=time.monotonic,
            wall=time.time,
            sleep=gevent.sleep,
            # fsync in a thread: blocking file I/O would stall every user's stream
            on_summary=lambda s: gevent.get_hub().threadpool.apply(writer.write_summary, (s,)),
            on_record_written=write_record,
            server=server_probe if metrics_url else None,
            reset_cache=reset_cache if settings.prefix_cache_reset else None,
            objectives=parse_slo(settings.load.get("slo")).as_dict(),
            search=settings.search,
            stopping=settings.stopping,
            on_precision=lambda step, half_width: (
                backend.show_precision(settings.variant, step, stop_metric, half_width)
                if backend is not None
                else None
            ),
            outage=OutagePolicy(
                mode=settings.on_outage,
                timeout_s=settings.outage_timeout_s,
                is_refusing=lambda: readiness.is_refusing(url),
                wait_ready=wait_again,
            ),
            metadata={
                "schema_version": 1,
                "specload_version": __version__,
                "variant": settings.variant,
                "host": url.display,
                "metrics_url": redact_url(metrics_url) if metrics_url else None,
                "model": model,
                "server_version": ready.server_version,
                "server_time_scale": ready.time_scale,
                "workers": (
                    settings.expect_workers
                    if settings.expect_workers is not None
                    else settings.workers
                ),
                "options": settings.public_options(),
                "stopping": settings.stopping.describe() if settings.stopping else None,
                "ready_wait_s": ready.waited_s,
                "server_info": info,
            },
            drain_timeout_s=settings.drain_timeout_s,
            on_tick=progress.tick,
        )

        if settings.stopping is not None and settings.stopping.against is not None:
            # compare's checks on the summary this run writes: a refusal measures nothing
            comparable(settings.stopping.against, driver.summary(), settings.plan)
        backend.subscribe(driver.on_record)
        # records of a worker declared lost that came back: kept apart (late.jsonl)
        backend.subscribe_late(writer.append_late)
        signals.forward(driver.request_stop)  # one that came meanwhile stops the run at once
        summary = writer.mark(driver.run())
        backend.close()  # the workers quit now, not after the plots
        backend = None
        writer.close()
        plots: list[Path] = []
        if writer.error is None and writer.summary_error is None:
            try:
                writer.write_text(SUMMARY_MD_FILE, summary_markdown(summary))
                if settings.plots and summary["status"] == "interrupted":
                    # The operator wants out now: matplotlib alone takes seconds.
                    progress.message(
                        f"plots skipped (interrupted): `specload report {writer.dir}` "
                        "draws the charts"
                    )
                elif settings.plots:
                    from specload.results.plots import write_plots  # noqa: PLC0415 (slow)

                    plots = write_plots([summary], writer.dir)
            except OSError as exc:
                writer.summary_error = write_failure(exc, f"{SUMMARY_MD_FILE} or the plots")
        progress.close()
        if no_ids:
            raise UsageError(no_ids[0])
        levels = summary["levels"]
        all_failed = bool(levels) and all(
            level["completed"] == 0 and level["failed"] for level in levels
        )
        _report(progress, summary, writer, plots, steps, all_failed=all_failed)
        if writer.error is not None or writer.summary_error is not None:
            progress.message(f"specload run: stopped: {_write_problem(writer)}")
            return EXIT_WRITE_FAILED
        if summary["status"] == "interrupted":
            return EXIT_INTERRUPTED.get(str(summary.get("stop_reason")), 130)
        if summary["status"] == "failed":
            progress.message(f"specload run: stopped: {summary.get('stop_reason')}")
            return EXIT_OUTAGE
        if all_failed:
            progress.message(
                "specload run: every measured request failed ("
                + ", ".join(f"{k} {v}" for k, v in _errors(levels).most_common(3))
                + "): nothing was measured"
            )
            return EXIT_ALL_FAILED
        return 0
    finally:
        progress.close()
        writer.close()
        if backend is not None:
            backend.close()
        logging.getLogger().removeHandler(log_handler)
        log_handler.close()


class _Signals:
    """SIGINT/SIGTERM as they arrive: kept until the driver exists, then forwarded to it."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._forward: Callable[[str], None] | None = None

    def received(self, name: str) -> None:
        if self.name is None:
            self.name = name
        if self._forward is not None:
            self._forward(name)

    def reason(self) -> str | None:
        return self.name

    def forward(self, to: Callable[[str], None]) -> None:
        self._forward = to
        if self.name is not None:
            to(self.name)


def _interruptible(wait: Callable[[], _T], stop: Callable[[], str | None]) -> _T:
    """Run a readiness wait in its own greenlet: a signal ends it at once, even while a
    probe waits for an answer (:class:`readiness.Interrupted` with the signal's name)."""

    def guarded() -> tuple[_T | None, BaseException | None]:
        try:
            return wait(), None
        except Exception as exc:  # raised again in the caller, never printed by gevent
            return None, exc

    task = gevent.spawn(guarded)
    while not task.ready():
        reason = stop()
        if reason is not None:
            task.kill(block=True, timeout=1.0)
            raise readiness.Interrupted(reason)
        task.join(timeout=readiness.STOP_CHECK_S)
    result, error = task.get()
    if error is not None:
        raise error
    return cast(_T, result)


def _token_dict(record: RequestRecord) -> dict[str, Any]:
    """The record's line of tokens.jsonl (:mod:`specload.records.tokens`)."""
    return {
        "step": record.step,
        "category": record.category,
        "prompt_ids": record.prompt_ids,
        "output_ids": record.output_ids,
        "content_start": record.content_start,
        "max_tokens": record.max_tokens,
        "finish_reason": record.finish_reason,
    }


def _write_problem(writer: ResultsWriter) -> str:
    """One line: what could not be written, and what summary.json holds."""
    parts = [p for p in (writer.error, writer.summary_error) if p]
    if writer.summary_error is not None and SUMMARY_FILE in writer.summary_error:
        parts.append(f"{writer.summary_path} keeps the last summary written")
    return "; ".join(parts)


def _errors(levels: list[dict[str, Any]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for level in levels:
        out.update(level.get("errors") or {})
    return out


def _report(
    progress: Progress,
    summary: dict[str, Any],
    writer: ResultsWriter,
    plots: list[Path],
    steps: Counter[str] | None = None,
    *,
    all_failed: bool = False,
) -> None:
    for level in summary["levels"]:
        tpot = level.get("median_tpot_ms")
        tok = level.get("output_throughput")
        acc = (level.get("server") or {}).get("spec_decode_acceptance_rate")
        unfinished = level.get("unfinished") or 0
        progress.message(
            f"  {level['name']}: {level['completed']} ok, {level['failed']} failed, "
            + (f"{unfinished} unfinished, " if unfinished else "")
            + f"median TPOT {'-' if tpot is None else f'{tpot:.2f} ms'}, "
            f"{'-' if tok is None else f'{tok:.1f}'} output tok/s"
            + ("" if acc is None else f", acceptance {acc:.2f}")
            + ("" if level.get("complete") else " (partial)")
        )
        for warning in level.get("warnings", []):
            progress.message(f"    warning: {warning}")
        for outage in level.get("outages", []):
            seconds = outage.get("duration_s")
            progress.message(
                f"    outage {outage.get('start')} -> {outage.get('end') or 'unfinished'}"
                + ("" if seconds is None else f" ({seconds:.1f}s, excluded from the window)")
            )
    progress.message(
        f"{final_count(summary, writer.records_written, steps, all_failed=all_failed)} in "
        f"{writer.requests_path}; summary {writer.summary_path}"
        + (f", {md}" if (md := writer.dir / SUMMARY_MD_FILE).exists() else "")
        + ("; plots " + ", ".join(p.name for p in plots) if plots else "")
    )
