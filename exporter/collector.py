"""The prometheus-client Collector: fresh ``specload_*`` families on every scrape.

It reads the targets' latest immutable views (no network work happens here,
so a scrape never waits on a vLLM) and then each extra family source.
``describe()`` returns nothing, so registering it triggers no collection.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporter.lifecycle import STATES
from exporter.poller import PollStats
from exporter.sources import FamilySource
from exporter.target import TargetView
from specload import __version__

log = logging.getLogger("specload.exporter")

BASE = ["variant", "model"]
INFO_LABELS = [
    "method",
    "num_speculative_tokens",
    "draft_model",
    "tensor_parallel_size",
    "vllm_version",
]


class ExporterCollector(Collector):
    def __init__(
        self,
        views: Callable[[], Sequence[TargetView]],
        *,
        stats: Callable[[], PollStats] | None = None,
        sources: Sequence[FamilySource] = (),
        source_names: Sequence[str] | None = None,
    ) -> None:
        self._views = views
        self._stats = stats
        self.sources = list(sources)
        self._source_names = list(source_names or [type(s).__name__ for s in self.sources])
        self._source_errors: dict[str, int] = dict.fromkeys(self._source_names, 0)

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        t0 = time.perf_counter()
        yield from self._target_families(self._views())
        yield from self._own_families()
        for name, source in zip(self._source_names, self.sources, strict=True):
            try:
                metrics = list(source.collect())
            except Exception as exc:  # a failed source drops only its own families
                self._source_errors[name] += 1
                log.warning("family source %s failed: %r", name, exc)
                continue
            yield from metrics
        errs = CounterMetricFamily(
            "specload_exporter_source_errors",
            "Failures of extra family sources (profiling, baselines) while scraping.",
            labels=["source"],
        )
        for name, n in self._source_errors.items():
            errs.add_metric([name], n)
        yield errs
        yield GaugeMetricFamily(
            "specload_exporter_collect_duration_seconds",
            "Time this scrape spent building the exporter's families.",
            value=time.perf_counter() - t0,
        )

    def _own_families(self) -> Iterator[Metric]:
        build = GaugeMetricFamily(
            "specload_exporter_build_info",
            "specload exporter build; always 1.",
            labels=["version", "python_version"],
        )
        build.add_metric([__version__, platform.python_version()], 1.0)
        yield build
        if self._stats is None:
            return
        stats = self._stats()
        yield CounterMetricFamily(
            "specload_exporter_polls", "Polls of targets' /metrics.", value=stats.polls_total
        )
        yield CounterMetricFamily(
            "specload_exporter_poll_cpu_seconds",
            "CPU time spent polling targets (fetch, parse, derive).",
            value=stats.cpu_total_s,
        )
        if stats.round_duration_s is not None:
            yield GaugeMetricFamily(
                "specload_exporter_poll_duration_seconds",
                "Wall time of the last poll round (the slowest target's last poll).",
                value=stats.round_duration_s,
            )
        if stats.round_cpu_s is not None:
            yield GaugeMetricFamily(
                "specload_exporter_poll_round_cpu_seconds",
                "CPU time of the last poll round: every target's last poll, summed.",
                value=stats.round_cpu_s,
            )
        if stats.last_end_s is not None:
            yield GaugeMetricFamily(
                "specload_exporter_last_poll_timestamp_seconds",
                "When the last poll ended (Unix time).",
                value=stats.last_end_s,
            )

    def _target_families(self, views: Sequence[TargetView]) -> Iterator[Metric]:
        def gauge(name: str, doc: str, extra: Sequence[str] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*BASE, *extra])

        up = gauge("specload_target_up", "1 if the last poll of the target's /metrics succeeded.")
        dur = gauge(
            "specload_target_scrape_duration_seconds", "Time the last poll of the target took."
        )
        errors = CounterMetricFamily(
            "specload_target_scrape_errors",
            "Failed polls of the target, by reason.",
            labels=[*BASE, "reason"],
        )
        state = gauge(
            "specload_target_state", "The target's state; the current one is 1.", ["state"]
        )
        in_progress = gauge(
            "specload_target_reload_in_progress", "1 while the target is reloading."
        )
        elapsed = gauge(
            "specload_target_reload_elapsed_seconds", "Time since the current reload began."
        )
        expected = gauge(
            "specload_target_expected_reload_seconds", "Configured expected reload time."
        )
        last_reload = gauge(
            "specload_target_last_reload_duration_seconds", "Duration of the last finished reload."
        )
        reloads = CounterMetricFamily(
            "specload_target_reloads",
            "Reloads (restarts) seen since the exporter started.",
            labels=BASE,
        )
        start = gauge(
            "specload_target_start_time_seconds",
            "The server process's start time (its process_start_time_seconds).",
        )
        processes = gauge(
            "specload_target_processes",
            "Server processes seen answering at the target's address over its last 30 good "
            "polls (distinct process_start_time_seconds); more than 1: replicas behind one "
            "address, whose rates and passed-on counters are withheld.",
        )
        progress = gauge(
            "specload_target_load_progress_ratio",
            "Checkpoint loading progress from the server's log while a reload runs (0-1).",
        )
        info = gauge(
            "specload_variant_info",
            "The variant's configuration (from config, log and /metrics); always 1.",
            INFO_LABELS,
        )
        acc = gauge(
            "specload_spec_decode_acceptance_ratio",
            "Accepted / drafted speculative tokens (window: lifetime or interval).",
            ["window"],
        )
        length = gauge(
            "specload_spec_decode_mean_acceptance_length",
            "1 + accepted tokens / drafts: tokens per verification step.",
            ["window"],
        )
        pos = gauge(
            "specload_spec_decode_position_acceptance_ratio",
            "Accepted tokens at draft position / drafts.",
            ["window", "position"],
        )
        drafted = gauge(
            "specload_spec_decode_drafted_tokens_per_second",
            "Speculative tokens drafted per second over the last poll interval.",
        )
        accepted = gauge(
            "specload_spec_decode_accepted_tokens_per_second",
            "Speculative tokens accepted per second over the last poll interval.",
        )
        tpot = gauge(
            "specload_server_tpot_mean_seconds",
            "Mean time per output token from vLLM's per-request histogram (sum/count).",
            ["window"],
        )
        itl = gauge(
            "specload_server_itl_mean_seconds",
            "Mean inter-token latency from vLLM's histogram (sum/count).",
            ["window"],
        )
        gen = gauge(
            "specload_server_generation_tokens_per_second",
            "Generated tokens per second over the last poll interval.",
        )
        running = gauge("specload_server_requests_running", "Requests in the running batch.")
        waiting = gauge("specload_server_requests_waiting", "Requests waiting in the queue.")
        kv = gauge("specload_server_kv_cache_usage_ratio", "KV-cache usage (0-1).")

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=BASE)

        hit = gauge(
            "specload_server_prefix_cache_hit_ratio",
            "Prefix-cache hit tokens / queried tokens (window: lifetime or interval).",
            ["window"],
        )
        queries = counter(
            "specload_server_prefix_cache_queries_tokens",
            "Prompt tokens looked up in the prefix cache (vllm:prefix_cache_queries).",
        )
        hits = counter(
            "specload_server_prefix_cache_hits_tokens",
            "Prompt tokens found in the prefix cache (vllm:prefix_cache_hits).",
        )
        preemptions = counter(
            "specload_server_preemptions",
            "Requests preempted by the scheduler (vllm:num_preemptions).",
        )
        sleep = gauge(
            "specload_server_sleep_state",
            "Share of the server's engines in each sleep state (awake, weights_offloaded, "
            "discard_all); one engine: the current state is 1.",
            ["state"],
        )

        for v in views:
            base = [v.variant, v.model]
            up.add_metric(base, 1.0 if v.up else 0.0)
            if v.scrape_duration_s is not None:
                dur.add_metric(base, v.scrape_duration_s)
            for reason, n in v.errors_total.items():
                errors.add_metric([*base, reason], n)
            lc = v.lifecycle
            for s in STATES:
                state.add_metric([*base, s], 1.0 if lc.state == s else 0.0)
            in_progress.add_metric(base, 1.0 if lc.reload_in_progress else 0.0)
            if lc.reload_elapsed_s is not None:
                elapsed.add_metric(base, lc.reload_elapsed_s)
            if v.expected_reload_s is not None:
                expected.add_metric(base, v.expected_reload_s)
            if lc.last_reload_duration_s is not None:
                last_reload.add_metric(base, lc.last_reload_duration_s)
            reloads.add_metric(base, lc.reloads_total)
            if lc.start_time_s is not None:
                start.add_metric(base, lc.start_time_s)
            if v.load_progress_ratio is not None:
                progress.add_metric(base, v.load_progress_ratio)
            if v.processes is not None:
                processes.add_metric(base, v.processes)
            info.add_metric([*base, *(v.info.get(k, "") for k in INFO_LABELS)], 1.0)
            d = v.derived
            if d is None:
                continue
            for window, value in d.acceptance_ratio.items():
                acc.add_metric([*base, window], value)
            for window, value in d.mean_acceptance_length.items():
                length.add_metric([*base, window], value)
            for (window, p), value in sorted(d.position_acceptance_ratio.items()):
                pos.add_metric([*base, window, str(p)], value)
            if d.drafted_tokens_per_s is not None:
                drafted.add_metric(base, d.drafted_tokens_per_s)
            if d.accepted_tokens_per_s is not None:
                accepted.add_metric(base, d.accepted_tokens_per_s)
            for window, value in d.tpot_mean_s.items():
                tpot.add_metric([*base, window], value)
            for window, value in d.itl_mean_s.items():
                itl.add_metric([*base, window], value)
            if d.generation_tokens_per_s is not None:
                gen.add_metric(base, d.generation_tokens_per_s)
            if d.running is not None:
                running.add_metric(base, d.running)
            if d.waiting is not None:
                waiting.add_metric(base, d.waiting)
            if d.kv_usage_ratio is not None:
                kv.add_metric(base, d.kv_usage_ratio)
            for window, value in d.prefix_cache_hit_ratio.items():
                hit.add_metric([*base, window], value)
            if d.prefix_cache_queries is not None:
                queries.add_metric(base, d.prefix_cache_queries)
            if d.prefix_cache_hits is not None:
                hits.add_metric(base, d.prefix_cache_hits)
            if d.preemptions is not None:
                preemptions.add_metric(base, d.preemptions)
            for sleep_state, value in d.sleep_state.items():
                sleep.add_metric([*base, sleep_state], value)
        families: list[Metric] = [
            up, dur, errors, state, in_progress, elapsed, expected, last_reload, reloads,
            start, processes, progress, info, acc, length, pos, drafted, accepted, tpot, itl, gen,
            running, waiting, kv, hit, queries, hits, preemptions, sleep,
        ]  # fmt: skip
        # A family with no samples is absent from the page (not zero).
        yield from (f for f in families if f.samples)
