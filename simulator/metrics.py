"""The simulator's ``/metrics``: vLLM 0.32's families, rendered as vLLM 0.32 renders them.

vLLM 0.32 serves its metrics through prometheus_client's multiprocess collector:
counter families are typed under their ``_total`` name, every counter and
histogram is followed by a separate ``<name>_created`` gauge family, and label
names are sorted. Names, types, label names and bucket boundaries follow real
vLLM 0.32 (tests/data/vllm-0.32.0/metrics_*.txt; checked against a live server
by tests/vllm/test_sim_vs_vllm_metrics.py). Values are what the simulator did;
times are wall-clock seconds as a client measures them.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence

REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip
PARAMS_N_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20)
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")
PREEMPTION_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 10, 20)
BASE_LABELS: tuple[str, ...] = ("model_name", "engine")
#: ``vllm:prompt_tokens_cached_by_source``'s sources, in vLLM 0.32's order (the simulator's
#: prefix cache is the device's).
CACHE_HIT_SOURCES: tuple[str, ...] = ("device", "host", "p2p", "disk", "external_unspecified")
_CACHED_BY_SOURCE_HELP = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
    "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
    "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
    "vllm:external_prefix_cache_hits."
)
_WAITING_BY_REASON_HELP = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
    "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
    "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting."
)
_SLEEP_STATE_HELP = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
    "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, … up to ``max_value`` (vLLM's token-count buckets)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(value)
        exponent += 1


def format_value(value: float) -> str:
    """prometheus_client's floatToGoString."""
    if value == float("inf"):
        return "+Inf"
    if value == float("-inf"):
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find("e+")
    if dot != -1:
        mantissa, exponent = text.split("e+")
        if mantissa.endswith(".0"):
            mantissa = mantissa[:-2]
        return f"{mantissa}e+{exponent}"
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Histogram:
    """One labelled histogram child: bucket counts, sum, count, created time."""

    __slots__ = ("bounds", "count", "counts", "created", "sum")

    def __init__(self, bounds: Sequence[float], created: float) -> None:
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.created = created

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, value: float, times: int) -> None:
        """``times`` observations of the same value."""
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times


class Counter:
    __slots__ = ("created", "value")

    def __init__(self, created: float) -> None:
        self.value = 0.0
        self.created = created

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


Labels = tuple[tuple[str, str], ...]


def _render_labels(labels: Labels, le: str | None = None) -> str:
    items = list(labels)
    if le is not None:
        items.append(("le", le))
    items.sort()
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def header(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: Labels, value: float, le: str | None = None) -> None:
        self.lines.append(f"{name}{_render_labels(labels, le)} {format_value(value)}")

    def gauge(self, name: str, help_text: str, children: list[tuple[Labels, float]]) -> None:
        self.header(name, "gauge", help_text)
        for labels, value in children:
            self.sample(name, labels, value)

    def counter(self, name: str, help_text: str, children: list[tuple[Labels, Counter]]) -> None:
        self.header(f"{name}_total", "counter", help_text)
        for labels, ctr in children:
            self.sample(f"{name}_total", labels, ctr.value)
        self.gauge(
            f"{name}_created", help_text, [(labels, ctr.created) for labels, ctr in children]
        )

    def histogram(self, name: str, help_text: str, labels: Labels, hist: Histogram) -> None:
        self.header(name, "histogram", help_text)
        cumulative = 0
        for bound, count in zip([*hist.bounds, float("inf")], hist.counts, strict=True):
            cumulative += count
            self.sample(f"{name}_bucket", labels, float(cumulative), le=format_value(float(bound)))
        self.sample(f"{name}_count", labels, float(hist.count))
        self.sample(f"{name}_sum", labels, hist.sum)
        self.gauge(f"{name}_created", help_text, [(labels, hist.created)])


class EngineMetrics:
    """All vLLM families the simulator emulates, for one engine life (reset on reload)."""

    def __init__(
        self,
        *,
        model_name: str,
        max_model_len: int,
        speculative_positions: int,
        cache_info: dict[str, str],
        start_time: float | None = None,
    ) -> None:
        now = time.time() if start_time is None else start_time
        self.start_time = now
        self.model_name = model_name
        self.labels: Labels = (("engine", "0"), ("model_name", model_name))
        self.cache_info = cache_info
        token_buckets = buckets_1_2_5(max_model_len)
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0

        def c() -> Counter:
            return Counter(now)

        self.spec_drafts = c()
        self.spec_draft_tokens = c()
        self.spec_accepted_tokens = c()
        self.spec_accepted_per_pos = [c() for _ in range(speculative_positions)]
        self.prefix_cache_queries = c()
        self.prefix_cache_hits = c()
        self.preemptions = c()
        self.prompt_tokens = c()
        self.prompt_tokens_by_source = {
            s: c() for s in ("local_compute", "local_cache_hit", "external_kv_transfer")
        }
        self.prompt_tokens_cached = c()
        self.prompt_tokens_cached_by_source = {s: c() for s in CACHE_HIT_SOURCES}
        self.generation_tokens = c()
        self.request_success = {reason: c() for reason in FINISH_REASONS}

        def h(bounds: Sequence[float]) -> Histogram:
            return Histogram(bounds, now)

        self.h_prompt_tokens = h(token_buckets)
        self.h_generation_tokens = h(token_buckets)
        self.h_iteration_tokens = h(ITERATION_TOKENS_BUCKETS)
        self.h_max_generation_tokens = h(token_buckets)
        self.h_params_n = h(PARAMS_N_BUCKETS)
        self.h_params_max_tokens = h(token_buckets)
        self.h_ttft = h(TTFT_BUCKETS)
        self.h_itl = h(ITL_BUCKETS)
        self.h_request_tpot = h(ITL_BUCKETS)
        self.h_e2e = h(REQUEST_LATENCY_BUCKETS)
        self.h_queue = h(REQUEST_LATENCY_BUCKETS)
        self.h_inference = h(REQUEST_LATENCY_BUCKETS)
        self.h_prefill = h(REQUEST_LATENCY_BUCKETS)
        self.h_decode = h(REQUEST_LATENCY_BUCKETS)
        self.h_num_preemptions = h(PREEMPTION_BUCKETS)
        self.h_prefill_kv_computed = h(token_buckets)

    def add_prefix_lookup(self, prompt_tokens: int, cached_tokens: int) -> None:
        """A request admitted: its prompt looked up in the prefix cache (vLLM counts the
        lookup at admission, the prompt tokens when its prefill is done)."""
        self.prefix_cache_queries.value += prompt_tokens
        self.prefix_cache_hits.value += cached_tokens
        self.prompt_tokens_cached_by_source["device"].value += cached_tokens

    def add_prompt_tokens(self, n: int, cached: int = 0) -> None:
        """A prefill done: ``n`` prompt tokens, ``cached`` of them from the prefix cache."""
        self.prompt_tokens.value += n
        self.prompt_tokens_by_source["local_compute"].value += n - cached
        self.prompt_tokens_by_source["local_cache_hit"].value += cached
        self.prompt_tokens_cached.value += cached

    def render(self) -> bytes:
        w = _Writer()
        base = self.labels
        if self.spec_accepted_per_pos:
            w.counter(
                "vllm:spec_decode_num_drafts",
                "Number of spec decoding drafts.",
                [(base, self.spec_drafts)],
            )
            w.counter(
                "vllm:spec_decode_num_draft_tokens",
                "Number of draft tokens.",
                [(base, self.spec_draft_tokens)],
            )
            w.counter(
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                [(base, self.spec_accepted_tokens)],
            )
            w.counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [
                    ((*base, ("position", str(i))), ctr)
                    for i, ctr in enumerate(self.spec_accepted_per_pos)
                ],
            )
        w.gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            [(base, self.running)],
        )
        w.gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            [(base, self.waiting)],
        )
        w.gauge(
            "vllm:num_requests_waiting_by_reason",
            _WAITING_BY_REASON_HELP,
            [((*base, ("reason", "capacity")), self.waiting), ((*base, ("reason", "deferred")), 0)],
        )
        w.gauge(
            "vllm:engine_sleep_state",
            _SLEEP_STATE_HELP,
            [
                ((*base, ("sleep_state", "awake")), 1),
                ((*base, ("sleep_state", "weights_offloaded")), 0),
                ((*base, ("sleep_state", "discard_all")), 0),
            ],
        )
        w.gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            [(base, self.kv_cache_usage)],
        )
        w.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(base, self.prefix_cache_queries)],
        )
        w.counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(base, self.prefix_cache_hits)],
        )
        w.counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            [(base, self.preemptions)],
        )
        w.counter(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            [(base, self.prompt_tokens)],
        )
        w.counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [((*base, ("source", s)), ctr) for s, ctr in self.prompt_tokens_by_source.items()],
        )
        w.counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            [(base, self.prompt_tokens_cached)],
        )
        w.counter(
            "vllm:prompt_tokens_cached_by_source",
            _CACHED_BY_SOURCE_HELP,
            [
                ((*base, ("source", s)), ctr)
                for s, ctr in self.prompt_tokens_cached_by_source.items()
            ],
        )
        w.counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            [(base, self.generation_tokens)],
        )
        w.counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [((*base, ("finished_reason", r)), ctr) for r, ctr in self.request_success.items()],
        )
        for name, help_text, hist in (
            (
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                self.h_prompt_tokens,
            ),
            (
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                self.h_generation_tokens,
            ),
            (
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                self.h_iteration_tokens,
            ),
            (
                "vllm:request_max_num_generation_tokens",
                "Histogram of maximum number of requested generation tokens.",
                self.h_max_generation_tokens,
            ),
            ("vllm:request_params_n", "Histogram of the n request parameter.", self.h_params_n),
            (
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                self.h_params_max_tokens,
            ),
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                self.h_ttft,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                self.h_itl,
            ),
            (
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                self.h_request_tpot,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                self.h_e2e,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                self.h_queue,
            ),
            (
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                self.h_inference,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                self.h_prefill,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                self.h_decode,
            ),
            (
                "vllm:request_num_preemptions",
                "Histogram of the number of times a request was preempted.",
                self.h_num_preemptions,
            ),
            (
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                self.h_prefill_kv_computed,
            ),
        ):
            w.histogram(name, help_text, base, hist)
        info: Labels = tuple(sorted((*self.cache_info.items(), ("engine", "0"))))
        w.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [(info, 1.0)])
        return ("\n".join(w.lines) + "\n").encode()


def process_families(start_time: float) -> bytes:
    """The process collector's ``process_start_time_seconds`` (changes on every reload)."""
    return (
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
        "# TYPE process_start_time_seconds gauge\n"
        f"process_start_time_seconds {format_value(round(start_time, 2))}\n"
    ).encode()


def cache_config_labels(
    *, block_size: int, num_gpu_blocks: int, max_concurrency: float, prefix_caching: bool = True
) -> dict[str, str]:
    """vLLM 0.32's ``cache_config_info`` label set, with the simulated KV cache's size."""
    tokens = block_size * num_gpu_blocks
    return {
        "_block_size_resolved": "True",
        "block_size": str(block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(prefix_caching),
        "gpu_memory_utilization": "0.92",
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": format_value(max_concurrency),
        "kv_cache_memory_bytes": str(tokens * 70272),
        "kv_cache_size_tokens": str(tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }
