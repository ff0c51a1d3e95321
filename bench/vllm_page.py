"""A synthetic vLLM 0.32-shaped /metrics page (spec decode on), for benchmarks.

Used only when the captured page ``tests/data/vllm-0.32.0/metrics_ngram.txt``
is not present. Shape follows vLLM V1's metric list: ~20 histograms with
their buckets, counters with ``_created``, per-position spec-decode counters,
process and Python GC metrics.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm-0.32.0"

_LAT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
_TOK = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]
_HIST = {
    "vllm:time_to_first_token_seconds": _LAT,
    "vllm:inter_token_latency_seconds": _LAT,
    "vllm:request_time_per_output_token_seconds": _LAT,
    "vllm:e2e_request_latency_seconds": _LAT,
    "vllm:request_queue_time_seconds": _LAT,
    "vllm:request_inference_time_seconds": _LAT,
    "vllm:request_prefill_time_seconds": _LAT,
    "vllm:request_decode_time_seconds": _LAT,
    "vllm:request_prompt_tokens": _TOK,
    "vllm:request_generation_tokens": _TOK,
    "vllm:iteration_tokens_total": _TOK,
    "vllm:request_max_num_generation_tokens": _TOK,
    "vllm:request_params_n": [1, 2, 5, 10, 20],
    "vllm:request_params_max_tokens": _TOK,
    "vllm:kv_block_lifetime_seconds": _LAT,
    "vllm:kv_block_idle_before_evict_seconds": _LAT,
    "vllm:kv_block_reuse_gap_seconds": _LAT,
    "vllm:request_prefill_kv_computed_tokens": _TOK,
}
_COUNTERS = [
    "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits", "vllm:mm_cache_queries", "vllm:mm_cache_hits",
    "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens", "vllm:corrupted_requests",
]


def synthetic_page(model: str = "/models/Kimi-K2.5-INT4", k: int = 5, seed: int = 1) -> str:
    lab = f'engine="0",model_name="{model}"'
    out: list[str] = []
    for i, name in enumerate(("python_gc_objects_collected", "python_gc_objects_uncollectable",
                              "python_gc_collections")):
        out.append(f"# HELP {name}_total Objects collected during gc")
        out.append(f"# TYPE {name}_total counter")
        for gen in range(3):
            out.append(f'{name}_total{{generation="{gen}"}} {1000.0 * (i + 1) + gen}')
    out.append('python_info{implementation="CPython",major="3",minor="12",patchlevel="3",version="3.12.3"} 1.0')
    for name, val in (("process_virtual_memory_bytes", 3.2e10), ("process_resident_memory_bytes", 4.1e9),
                      ("process_start_time_seconds", 1.7644e9), ("process_cpu_seconds_total", 1234.5),
                      ("process_open_fds", 120.0), ("process_max_fds", 1048576.0)):
        out.append(f"# HELP {name} process metric")
        out.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
        out.append(f"{name} {val}")
    for g, v in (("num_requests_running", 4.0), ("num_requests_waiting", 0.0),
                 ("kv_cache_usage_perc", 0.12), ("engine_sleep_state", 0.0)):
        out.append(f"# HELP vllm:{g} gauge")
        out.append(f"# TYPE vllm:{g} gauge")
        out.append(f"vllm:{g}{{{lab}}} {v}")
    out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    out.append("# TYPE vllm:cache_config_info gauge")
    out.append('vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",'
               'cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",'
               'num_cpu_blocks="None",num_gpu_blocks="65536",prefix_caching_hash_algo="sha256",'
               'swap_space="4",swap_space_bytes="4294967296"} 1.0')
    for j, c in enumerate(_COUNTERS):
        out.append(f"# HELP {c}_total counter {c}")
        out.append(f"# TYPE {c}_total counter")
        out.append(f"{c}_total{{{lab}}} {float(1000 * (j + seed))}")
        out.append(f"{c}_created{{{lab}}} 1.7644e+09")
    out.append("# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total per position")
    out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for p in range(k):
        out.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{p}"}} {900.0 - 100 * p}')
        out.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_created{{{lab},position="{p}"}} 1.7644e+09')
    out.append("# HELP vllm:request_success_total finished requests")
    out.append("# TYPE vllm:request_success_total counter")
    for reason in ("stop", "length", "abort", "error"):
        out.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} 10.0')
        out.append(f'vllm:request_success_created{{{lab},finished_reason="{reason}"}} 1.7644e+09')
    for name, bounds in _HIST.items():
        out.append(f"# HELP {name} histogram {name}")
        out.append(f"# TYPE {name} histogram")
        acc = 0.0
        for b in bounds:
            acc += 3.0
            out.append(f'{name}_bucket{{{lab},le="{float(b)}"}} {acc}')
        out.append(f'{name}_bucket{{{lab},le="+Inf"}} {acc}')
        out.append(f"{name}_count{{{lab}}} {acc}")
        out.append(f"{name}_sum{{{lab}}} {acc * 0.0136}")
        out.append(f"{name}_created{{{lab}}} 1.7644e+09")
    return "\n".join(out) + "\n"


def ngram_page() -> str:
    """The captured real page when present, else the synthetic one."""
    real = DATA / "metrics_ngram.txt"
    if real.exists():
        return real.read_text()
    return synthetic_page()
