"""The simulated server's life: load, serve, reload (control port or SIGHUP), stop.

While loading, the API port is closed — connections are refused, as with real
vLLM. A reload closes the port, drops every connection, starts a fresh engine
(counters reset, ``process_start_time_seconds`` changes) and loads again. The
control port (loopback) stays up throughout:

* ``GET /state`` — variant, state (``loading``/``ready``), loading progress,
  scheduling lag, requests and tokens served;
* ``POST /reload`` — optional JSON ``{"variant": "ngram", "load_time": 5}``;
* ``POST /degrade`` — JSON ``{"factor": 2.0, "after": 0}``: step time x factor from
  ``after`` seconds from now (factor 1 restores);
* ``GET /truth/spec_decode`` — with ``--per-request-spec-decode-metrics``, the last finished
  requests' verify steps split by channel, by response id (:mod:`simulator.spec_metrics`).

Each engine has its own prefix cache (:mod:`simulator.prefix_cache`), emptied by the API
port's ``POST /reset_prefix_cache`` unless ``--dev-mode off``.

It answers loopback clients only, and not a web page they happen to be viewing: the
``Host`` header must be ``127.0.0.1:PORT``, ``localhost:PORT`` or ``[::1]:PORT`` (a
DNS-rebinding page sends its own name), an ``Origin`` header must be a loopback
one, else 403; a POST must be ``Content-Type: application/json`` (which a browser
never sends cross-site without a CORS preflight this server does not answer),
else 415. Numbers in the bodies are bounded (:mod:`simulator.limits`), else 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from simulator.api import VLLM_VERSION, ApiConfig, SimApi
from simulator.costmodel import CostModel
from simulator.driver import Degradation, FixedDriver, LagStats, SteppingDriver
from simulator.engine import EngineCore, SchedulerLimits
from simulator.faults import FaultConfig
from simulator.http import HttpConnection, Request, serve
from simulator.limits import DEGRADE_AFTER, DEGRADE_FACTOR, RELOAD_LOAD_TIME
from simulator.metrics import EngineMetrics, cache_config_labels, process_families
from simulator.prefix_cache import BLOCK_TOKENS, PrefixCache
from simulator.profiler import Profiler
from simulator.spec_metrics import SpecTruth
from simulator.speculation import speculator_for
from simulator.variants import Variant, variant_named
from specload.errors import UsageError

log = logging.getLogger("simulator")
CHECKPOINT_SHARDS = 62
BLOCK_SIZE = 64
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _loopback_host(host: str, port: int | None) -> bool:
    """``Host`` names this server on loopback: ``127.0.0.1``, ``localhost`` or ``[::1]``,
    with its port."""
    name, sep, port_text = host.strip().lower().rpartition(":")
    if not sep or name not in LOOPBACK_HOSTS:
        return False
    return port is not None and port_text == str(port)


def _loopback_origin(origin: str) -> bool:
    parts = urlsplit(origin.strip().lower())
    return parts.scheme in ("http", "https") and parts.hostname in ("127.0.0.1", "localhost", "::1")


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{key}: must be a number")
    return float(value)


@dataclass(frozen=True)
class FixedTiming:
    ttft_s: float
    itl_s: float
    tokens_per_chunk: int
    reasoning_tokens: int
    content_tokens: int
    #: each request's ITL is ``itl_s`` x a factor uniform in [1 - J, 1 + J], drawn once
    itl_jitter: float = 0.0


@dataclass
class SimConfig:
    variant: Variant
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "moonshotai/Kimi-K2.5"
    time_scale: float = 1.0
    seed: int = 0
    load_time_s: float = 0.0
    control_port: int | None = None
    log_file: Path | None = None
    profiler_dir: Path | None = None
    profiler_max_steps: int = 300
    reasoning_field: str = "reasoning"
    cost: CostModel = field(default_factory=CostModel)
    limits: SchedulerLimits = field(default_factory=SchedulerLimits)
    max_model_len: int = 262144
    faults: FaultConfig = field(default_factory=lambda: FaultConfig({}))
    fixed: FixedTiming | None = None
    degrade_after_s: float | None = None
    degrade_factor: float = 1.0
    allreduce_family: str = "nccl"
    variant_overrides: dict[str, str] = field(default_factory=dict)
    spec_decode_metrics: str = "none"  # --per-request-spec-decode-metrics
    per_request_metrics: bool = False  # --enable-per-request-metrics (the request's timing)
    dev_mode: bool = True  # POST /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1)
    prefix_caching: bool = True  # vLLM's --enable-prefix-caching (its default)


class SimServer:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.variant = config.variant
        self.state = "starting"
        self.progress = 0.0
        self.load_time_s = config.load_time_s
        self.generation = 0
        self.started_at = time.time()
        self.lag = LagStats()
        self.degradation = Degradation()
        self.connections: set[HttpConnection] = set()
        self.api_server: asyncio.Server | None = None
        self.control_server: asyncio.Server | None = None
        self.api: SimApi | None = None
        self.metrics: EngineMetrics | None = None
        self.driver: SteppingDriver | FixedDriver | None = None
        self.profiler: Profiler | None = None
        self.prefix_cache: PrefixCache | None = None
        self.spec_truth = SpecTruth()  # kept across reloads: response ids stay unique
        self.port = config.port
        self.control_port = config.control_port
        self._boot_task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.control_port is not None:
            self.control_server = await serve(self._control, "127.0.0.1", self.config.control_port)
            self.control_port = self.control_server.sockets[0].getsockname()[1]
        for sig, action in (
            (signal.SIGHUP, self._sighup),
            (signal.SIGTERM, self._stop),
            (signal.SIGINT, self._stop),
        ):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, action)
        self._boot_task = loop.create_task(self._boot(self.config.load_time_s))
        stopped = loop.create_task(self._stopped.wait())
        await asyncio.wait({self._boot_task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if self._boot_task.done() and self._boot_task.exception() is not None:
            stopped.cancel()
            await self._shutdown_engine()
            if self.control_server is not None:
                self.control_server.close()
            raise self._boot_task.exception()  # type: ignore[misc]
        await stopped
        await self._shutdown_engine()
        if self.control_server is not None:
            self.control_server.close()

    def _stop(self) -> None:
        log.info("Shutting down FastAPI HTTP server.")
        self._stopped.set()

    def _sighup(self) -> None:
        log.info("Received SIGHUP: restarting the engine as %s", self.variant.name)
        self.request_reload(None, None)

    def request_reload(self, variant: str | None, load_time_s: float | None) -> None:
        if variant is not None:
            self.variant = variant_named(variant).with_overrides(self.config.variant_overrides)
        load = self.config.load_time_s if load_time_s is None else load_time_s
        if self._boot_task is not None and not self._boot_task.done():
            self._boot_task.cancel()
        self._boot_task = asyncio.get_running_loop().create_task(self._reload(load))

    async def _reload(self, load_time_s: float) -> None:
        await self._shutdown_engine()
        try:
            await self._boot(load_time_s)
        except OSError as exc:
            self.state = "failed"
            log.error(
                "Could not listen on %s:%d after reload: %s", self.config.host, self.port, exc
            )

    async def _shutdown_engine(self) -> None:
        if self.api_server is not None:
            self.api_server.close()
            self.api_server = None
        for conn in list(self.connections):
            conn.on_close = None
            conn.reset()
        self.connections.clear()
        if self.profiler is not None and self.profiler.active:
            await self.profiler.stop()
        if self.driver is not None:
            await self.driver.stop()
            self.driver = None
        self.state = "stopped"

    async def _boot(self, load_time_s: float) -> None:
        config = self.config
        self.generation += 1
        self.state = "loading"
        self.progress = 0.0
        self.load_time_s = load_time_s
        self.started_at = time.time()
        variant = self.variant
        log.info("vLLM API server version %s", VLLM_VERSION)
        log.info(
            "Initializing a V1 LLM engine (v%s) with config: model='%s', speculative_config=%s, "
            "tokenizer='%s', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            "trust_remote_code=True, dtype=torch.bfloat16, max_seq_len=%d, download_dir=None, "
            "load_format=auto, tensor_parallel_size=%d, pipeline_parallel_size=1, "
            "data_parallel_size=1, disable_custom_all_reduce=False, "
            "quantization=compressed-tensors, "
            "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
            "served_model_name=%s, enable_prefix_caching=True, enable_chunked_prefill=True",
            VLLM_VERSION,
            config.model,
            variant.speculative_config(),
            config.model,
            config.max_model_len,
            config.cost.tp,
            config.model,
        )
        if load_time_s > 0:
            await self._load_progress(load_time_s)
        self._new_engine()
        self.api_server = await serve(self._api_handle, config.host, self.port, self.connections)
        self.port = self.api_server.sockets[0].getsockname()[1]
        self.state = "ready"
        self.progress = 1.0
        log.info("Starting vLLM API server 0 on http://%s:%d", config.host, self.port)
        log.info("Started server process [%d]", os.getpid())
        log.info("Waiting for application startup.")
        log.info("Application startup complete.")
        log.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", config.host, self.port)

    async def _load_progress(self, load_time_s: float) -> None:
        """Checkpoint shards over the first 80% of the window, then graph capture."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        shards_until = 0.8 * load_time_s
        for shard in range(1, CHECKPOINT_SHARDS + 1):
            due = t0 + shards_until * shard / CHECKPOINT_SHARDS
            await asyncio.sleep(max(0.0, due - loop.time()))
            elapsed = loop.time() - t0
            rate = shard / elapsed if elapsed > 0 else 0.0
            remaining = (CHECKPOINT_SHARDS - shard) / rate if rate > 0 else 0.0
            self.progress = 0.8 * shard / CHECKPOINT_SHARDS
            log.info(
                "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %5.2fit/s]",
                round(100 * shard / CHECKPOINT_SHARDS),
                shard,
                CHECKPOINT_SHARDS,
                _clock(elapsed),
                _clock(remaining),
                rate,
            )
        log.info("Loading weights took %.2f seconds", loop.time() - t0)
        log.info("Model loading took 71.4521 GiB memory and %.6f seconds", loop.time() - t0)
        graphs = 67
        for i in range(1, graphs + 1):
            due = t0 + shards_until + (load_time_s - shards_until) * i / graphs
            await asyncio.sleep(max(0.0, due - loop.time()))
            self.progress = 0.8 + 0.2 * i / graphs
            if i in (1, graphs // 2, graphs):
                log.info(
                    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): %3d%% | %d/%d",
                    round(100 * i / graphs),
                    i,
                    graphs,
                )
        log.info("Graph capturing finished in %.0f secs", (load_time_s - shards_until))

    def _new_engine(self) -> None:
        config = self.config
        variant = self.variant
        limits = config.limits
        rng = random.Random(config.seed * 1000003 + self.generation)
        positions = variant.num_speculative_tokens if variant.speculative else 0
        blocks = max(1, limits.kv_cache_tokens // BLOCK_SIZE)
        metrics = EngineMetrics(
            model_name=config.model,
            max_model_len=config.max_model_len,
            speculative_positions=positions,
            cache_info=cache_config_labels(
                block_size=BLOCK_SIZE,
                num_gpu_blocks=blocks,
                max_concurrency=round(blocks * BLOCK_SIZE / config.max_model_len, 2),
                prefix_caching=config.prefix_caching,
            ),
        )
        self.metrics = metrics
        # A fresh engine has an empty prefix cache; it holds as many blocks as the KV cache.
        prefix_cache = (
            PrefixCache(limits.kv_cache_tokens // BLOCK_TOKENS) if config.prefix_caching else None
        )
        self.prefix_cache = prefix_cache
        self.degradation = Degradation()
        if config.degrade_after_s is not None:
            self.degradation = Degradation(
                config.degrade_factor, time.monotonic() + config.degrade_after_s
            )
        self.lag = LagStats()
        self.profiler = None
        if config.profiler_dir is not None:
            self.profiler = Profiler(
                config.profiler_dir,
                cost=config.cost,
                variant=variant.name,
                allreduce_family=config.allreduce_family,
                time_scale=config.time_scale,
                max_steps=config.profiler_max_steps,
            )
        driver: SteppingDriver | FixedDriver
        if config.fixed is not None:
            fixed = config.fixed
            driver = FixedDriver(
                metrics,
                ttft_s=fixed.ttft_s,
                itl_s=fixed.itl_s,
                tokens_per_chunk=fixed.tokens_per_chunk,
                degradation=self.degradation,
                lag=self.lag,
                kv_cache_tokens=limits.kv_cache_tokens,
                prefix_cache=prefix_cache,
                itl_jitter=fixed.itl_jitter,
                # its own stream of the seed, so the jitter moves no other draw
                rng=random.Random(f"fixed-itl-jitter:{config.seed}:{self.generation}"),
            )
        else:
            core_rng = random.Random(rng.random())
            core = EngineCore(
                config.cost,
                variant,
                metrics,
                core_rng,
                limits,
                speculator=speculator_for(variant, core_rng, max_model_len=config.max_model_len),
                prefix_cache=prefix_cache,
            )
            driver = SteppingDriver(
                core,
                time_scale=config.time_scale,
                degradation=self.degradation,
                lag=self.lag,
                on_step=self.profiler.on_step if self.profiler is not None else None,
            )
        driver.start()
        self.driver = driver
        fixed_workload = None
        if config.fixed is not None:
            fixed_workload = (config.fixed.reasoning_tokens, config.fixed.content_tokens)
        # Per-request spec-decode metrics only while the engine speculates (vLLM refuses the
        # option without speculation; a reload may switch to a variant that does not).
        spec_metrics = config.spec_decode_metrics
        if spec_metrics != "none" and (not variant.speculative or config.fixed is not None):
            log.info("per-request spec-decode metrics off: %s does not speculate", variant.name)
            spec_metrics = "none"
        self.api = SimApi(
            ApiConfig(
                model=config.model,
                max_model_len=config.max_model_len,
                reasoning_field=config.reasoning_field,
                fixed_workload=fixed_workload,
                time_scale=config.time_scale,
                text_seed=config.seed,
                spec_decode_metrics=spec_metrics,
                per_request_metrics=config.per_request_metrics,
                num_spec_tokens=variant.num_speculative_tokens if variant.speculative else 0,
            ),
            driver=driver,
            metrics_text=self._metrics_text,
            faults=config.faults,
            rng=rng,
            profiler=self.profiler,
            spec_truth=self.spec_truth,
            reset_prefix_cache=self._reset_prefix_cache if config.dev_mode else None,
        )

    def _reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """vLLM's ``POST /reset_prefix_cache``: refused (false) while requests hold KV blocks,
        unless ``reset_running_requests`` (vLLM then preempts them; here they carry on)."""
        log.info("Resetting prefix cache...")
        driver = self.driver
        in_use = 0
        if isinstance(driver, SteppingDriver):
            in_use = driver.core.kv_tokens
        elif isinstance(driver, FixedDriver):
            in_use = driver.kv_tokens
        if in_use > 0 and not reset_running_requests:
            log.warning(
                "Failed to reset prefix cache because some blocks (%d) are not freed yet",
                -(-in_use // BLOCK_TOKENS),
            )
            return False
        if self.prefix_cache is not None:
            self.prefix_cache.reset()
        return True

    def _metrics_text(self) -> bytes:
        assert self.metrics is not None
        return process_families(self.metrics.start_time) + self.metrics.render()

    def _api_handle(self, req: Request, conn: HttpConnection) -> None:
        if self.api is None or self.state != "ready":
            conn.reset()
            return
        self.api.handle(req, conn)

    # -- control port ------------------------------------------------------------------------
    def state_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant.name,
            "state": self.state,
            "loading_progress": round(self.progress, 4),
            "load_time_s": self.load_time_s,
            "generation": self.generation,
            "pid": os.getpid(),
            "port": self.port,
            "model": self.config.model,
            "time_scale": self.config.time_scale,
            "timing": "fixed" if self.config.fixed is not None else "model",
            "speculative_config": self.variant.cli_json() or None,
            "process_start_time_seconds": self.metrics.start_time if self.metrics else None,
            "requests_served": self.api.requests_served if self.api else 0,
            "tokens_sent": self.api.tokens_sent if self.api else 0,
            "scheduling_lag_p50_s": self.lag.quantile(0.5),
            "scheduling_lag_p99_s": self.lag.quantile(0.99),
            "scheduling_lag_samples": len(self.lag.samples),
            "degrade": {
                "factor": self.degradation.factor,
                "active": self.degradation.current(time.monotonic()) != 1.0,
            },
        }

    def _control_refusal(self, req: Request) -> tuple[int, bytes] | None:
        """Why a request is not from a loopback client's own tool (status, body), or None."""
        if not _loopback_host(req.headers.get("host", ""), self.control_port):
            return 403, (
                b'{"error":"Host must be 127.0.0.1:PORT, localhost:PORT or [::1]:PORT: '
                b'the control port answers loopback clients only"}'
            )
        origin = req.headers.get("origin")
        if origin is not None and not _loopback_origin(origin):
            return 403, b'{"error":"cross-site requests are refused (Origin is not loopback)"}'
        if req.method == "POST":
            ctype = req.headers.get("content-type", "").partition(";")[0].strip().lower()
            if ctype != "application/json":
                return 415, b'{"error":"POST bodies must be Content-Type: application/json"}'
        return None

    def _control(self, req: Request, conn: HttpConnection) -> None:
        refusal = self._control_refusal(req)
        if refusal is not None:
            status, message = refusal
            conn.respond(status, message)
            return
        try:
            body: Any = orjson.loads(req.body) if req.body.strip() else {}
        except orjson.JSONDecodeError:
            conn.respond(400, b'{"error":"body is not JSON"}')
            return
        if not isinstance(body, dict):
            conn.respond(400, b'{"error":"body must be a JSON object"}')
            return
        if req.path == "/state" and req.method == "GET":
            conn.respond(200, orjson.dumps(self.state_json()))
        elif req.path == "/health" and req.method == "GET":
            conn.respond(200, b"{}")
        elif req.path == "/truth/spec_decode" and req.method == "GET":
            conn.respond(200, orjson.dumps(self.spec_truth.as_json()))
        elif req.path == "/reload" and req.method == "POST":
            variant = body.get("variant")
            try:
                if variant is not None:
                    if not isinstance(variant, str):
                        raise UsageError("variant: must be a string")
                    variant_named(variant)
                load_time = None
                if body.get("load_time") is not None:
                    load_time = _number(body, "load_time", 0.0)
                    RELOAD_LOAD_TIME.check(load_time, f"load_time {load_time:g}")
            except UsageError as exc:
                conn.respond(400, orjson.dumps({"error": str(exc)}))
                return
            self.request_reload(variant, load_time)
            conn.respond(
                202, orjson.dumps({"state": "loading", "variant": variant or self.variant.name})
            )
        elif req.path == "/degrade" and req.method == "POST":
            try:
                factor = _number(body, "factor", 1.0)
                after = _number(body, "after", 0.0)
                DEGRADE_FACTOR.check(factor, f"factor {factor:g}")
                DEGRADE_AFTER.check(after, f"after {after:g}")
            except UsageError as exc:
                conn.respond(400, orjson.dumps({"error": str(exc)}))
                return
            now = time.monotonic()
            self.degradation.factor = factor
            self.degradation.active_from = now + after
            conn.respond(
                200,
                orjson.dumps({"factor": body.get("factor", 1.0), "after": body.get("after", 0.0)}),
            )
        else:
            conn.respond(404, b'{"error":"not found"}')


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def with_variant(config: SimConfig, variant: Variant) -> SimConfig:
    return replace(config, variant=variant)
