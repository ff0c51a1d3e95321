"""specload's options, added to Locust's parser (each with an environment variable)."""

from __future__ import annotations

import argparse
import os
import secrets
from typing import Any

from specload.errors import UsageError
from specload.prompts import MAX_TOKENS_LIMIT as _PROMPT_MAX_TOKENS
from specload.prompts import load_prompt_set
from specload.slo import parse_slo

DEFAULT_METRICS_ADDRESS = "127.0.0.1:9647"  # loopback; containers set 0.0.0.0 explicitly
DEFAULT_STEP = "run"
# Ends a warm-up step's name (specload.sweep.plan.Level.warmup_name).
WARMUP_SUFFIX = "-warmup"
_CACHE_BUST_OFF = frozenset({"", "off", "false", "0", "no"})
_CACHE_BUST_ON = frozenset({"on", "true", "1", "yes"})


def _bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true/false)")


def add_options(parser: Any) -> None:
    """Add specload's options to a Locust (configargparse) parser."""
    add = parser.add_argument
    add(
        "--prompts",
        default="builtin",
        env_var="SPECLOAD_PROMPTS",
        help="prompt set: builtin, builtin:CAT[,CAT], a .jsonl file or a ShareGPT .json file",
    )
    add(
        "--prompt-seed",
        type=int,
        default=0,
        env_var="SPECLOAD_PROMPT_SEED",
        help="seed of the prompt order (reproducible)",
    )
    add(
        "--max-tokens",
        type=int,
        default=None,
        env_var="SPECLOAD_MAX_TOKENS",
        help="max_tokens of every request (default: each prompt's category budget)",
    )
    add(
        "--temperature",
        type=float,
        default=None,
        env_var="SPECLOAD_TEMPERATURE",
        help="sampling temperature (default: the server's)",
    )
    add(
        "--model",
        default="",
        env_var="SPECLOAD_MODEL",
        help="model name (default: the first id from /v1/models)",
    )
    add(
        "--variant",
        default="default",
        env_var="SPECLOAD_VARIANT",
        help="service variant name labelling every result (baseline, ngram, eagle3…)",
    )
    add(
        "--api-key",
        default="",
        env_var="SPECLOAD_API_KEY",
        is_secret=True,
        help="API key sent as a Bearer token (never logged)",
    )
    add(
        "--stream",
        type=_bool,
        default=True,
        env_var="SPECLOAD_STREAM",
        help="stream responses (true/false, default true)",
    )
    add(
        "--usage-stats",
        type=_bool,
        default=True,
        env_var="SPECLOAD_USAGE_STATS",
        help="ask for include_usage + continuous_usage_stats (true/false, default true)",
    )
    add(
        "--record-token-ids",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        env_var="SPECLOAD_RECORD_TOKEN_IDS",
        help="ask for return_token_ids and keep each request's prompt and output token ids "
        "(specload run writes them to tokens.jsonl, for `specload predict`)",
    )
    add(
        "--cache-bust",
        default="off",
        env_var="SPECLOAD_CACHE_BUST",
        help="prefix every prompt with a nonce of the run and level, so no level reuses "
        "the prefix cache of another (or of an earlier run): for servers whose cache "
        "cannot be reset (off, on, or the nonce itself; specload run shares one nonce "
        "with its workers)",
    )
    add(
        "--spec-estimate",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        env_var="SPECLOAD_SPEC_ESTIMATE",
        help="when the server sends no per-request speculative-decoding counts, estimate "
        "acceptance from tokens per chunk (exact counts, no chunks read together; marked "
        "estimated). specload run turns it on when the server's /metrics show speculation",
    )
    add(
        "--burstiness",
        type=float,
        default=1.0,
        env_var="SPECLOAD_BURSTINESS",
        help="open loop (specload run --request-rate): arrivals gamma-distributed with this "
        "shape, as vllm bench serve's --burstiness (1 Poisson, below 1 burstier)",
    )
    add(
        "--trace",
        default="",
        env_var="SPECLOAD_TRACE",
        help="specload run: replay this JSONL trace at its timestamps (Mooncake: timestamp, "
        "input_length, output_length, hash_ids; or timestamp with prompt or messages); "
        "every load process needs the file at this path",
    )
    add(
        "--trace-speedup",
        type=float,
        default=1.0,
        env_var="SPECLOAD_TRACE_SPEEDUP",
        help="divide the trace's times by this (2: twice as fast)",
    )
    add(
        "--slo",
        default="",
        env_var="SPECLOAD_SLO",
        help="service-level objectives, e.g. ttft=2s,tpot=20ms (measures: ttft, ttfct, tpot, "
        "e2el, itl_p99): every request is judged against all of them; levels report "
        "request_goodput, output_goodput and slo_attainment_ratio",
    )
    add(
        "--request-timeout",
        type=float,
        default=600.0,
        env_var="SPECLOAD_REQUEST_TIMEOUT",
        help="seconds before a request counts as a timeout",
    )
    add(
        "--tokenizer",
        default="",
        env_var="SPECLOAD_TOKENIZER",
        help="tokenizer.json or model folder, to count tokens of servers that send no usage",
    )
    add(
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        env_var="SPECLOAD_METRICS_ADDRESS",
        include_in_web_ui=False,
        help="HOST:PORT for the client's Prometheus /metrics (master or single process), or "
        f"off (default {DEFAULT_METRICS_ADDRESS})",
    )
    add(
        "--records-file",
        default="",
        env_var="SPECLOAD_RECORDS_FILE",
        include_in_web_ui=False,
        help="append every request's record to this JSONL file (master or single process)",
    )
    add(
        "--worker-records-file",
        default="",
        env_var="SPECLOAD_WORKER_RECORDS_FILE",
        include_in_web_ui=False,
        help="workers: also append each request's record to this JSONL file on the worker's "
        "own host ({worker} in the name becomes the worker's id), so a link to the master "
        "that fails costs no measurement",
    )
    add(
        "--step",
        default=DEFAULT_STEP,
        env_var="SPECLOAD_STEP",
        include_in_web_ui=False,
        help="initial step label of the samples (sweeps change it)",
    )


# Bounds that keep a typo from becoming a run that cannot be written or never ends.
# The meter's own cap on a request's tokens: the same for --max-tokens and a prompt
# file's max_tokens (specload.prompts), and for the demo's --max-tokens.
MAX_TOKENS_LIMIT = _PROMPT_MAX_TOKENS
MAX_TEXT_CHARS = 1000  # --model, --variant, --step
MAX_REQUEST_TIMEOUT_S = 86_400.0
MAX_TEMPERATURE = 100.0


def check_api_key(key: str, *, name: str = "--api-key") -> None:
    """A key goes in an HTTP header: printable ASCII only. The error never shows the key
    (a trailing newline from ``$(cat keyfile)`` is the usual cause)."""
    bad = [ch for ch in key if not 0x20 < ord(ch) < 0x7F]
    if bad:
        what = (
            "a line break"
            if any(ch in "\r\n" for ch in bad)
            else ("a space" if " " in bad else "a character that cannot go in an HTTP header")
        )
        raise UsageError(f"{name}: the key contains {what} (the key is not shown)")


def check_text_option(name: str, value: Any) -> None:
    """A text option sent in a request body or written as a label (``--model``,
    ``--variant``, ``--step``): UTF-8 text (a byte that is not UTF-8 on the command line
    reaches Python as a lone surrogate), printable, at most :data:`MAX_TEXT_CHARS`."""
    text = str(value or "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{name}: {text[:40]!r} is not UTF-8 text (character {exc.start + 1} is "
            f"{text[exc.start]!a})"
        ) from None
    if len(text) > MAX_TEXT_CHARS:
        raise UsageError(f"{name}: {len(text):,} characters (at most {MAX_TEXT_CHARS:,})")
    if not text.isprintable():
        i, ch = next((i, ch) for i, ch in enumerate(text) if not ch.isprintable())
        raise UsageError(f"{name}: {text[:40]!r}: character {i + 1} ({ch!a}) is not printable")


def check_prompts(options: Any) -> None:
    """``--prompts`` loads, every prompt proven sendable (the load generator then uses
    the same loaded set: :func:`~specload.prompts.load_prompt_set` reads a file once)."""
    spec = getattr(options, "prompts", None)
    if spec is not None:
        load_prompt_set(str(spec))


def validate(options: Any) -> None:
    """Raise :class:`UsageError` naming the option for bad values (the prompt set too)."""
    max_tokens = options.max_tokens
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise UsageError(f"--max-tokens: {max_tokens!r} is not a whole number")
    if options.max_tokens is not None and options.max_tokens < 1:
        raise UsageError(f"--max-tokens: {options.max_tokens} must be at least 1")
    if options.max_tokens is not None and options.max_tokens > MAX_TOKENS_LIMIT:
        raise UsageError(
            f"--max-tokens: {options.max_tokens} is beyond the limit of {MAX_TOKENS_LIMIT:,}"
        )
    if not 0 < options.request_timeout <= MAX_REQUEST_TIMEOUT_S:
        raise UsageError(
            f"--request-timeout: {options.request_timeout} must be positive and at most "
            f"{MAX_REQUEST_TIMEOUT_S:g} seconds"
        )
    if options.temperature is not None and not 0 <= options.temperature <= MAX_TEMPERATURE:
        raise UsageError(
            f"--temperature: {options.temperature} must be between 0 and {MAX_TEMPERATURE:g}"
        )
    check_api_key(getattr(options, "api_key", "") or "")
    for name in ("model", "variant", "step"):
        check_text_option(f"--{name}", getattr(options, name, ""))
    check_cache_bust(getattr(options, "cache_bust", ""))
    parse_slo(getattr(options, "slo", ""))
    speedup = getattr(options, "trace_speedup", 1.0)
    if speedup is not None and not 1e-3 <= speedup <= 1e6:
        raise UsageError(f"--trace-speedup: {speedup} must be between 0.001 and 1e6")
    burstiness = getattr(options, "burstiness", 1.0)
    if burstiness is not None and not 0.01 <= burstiness <= 100:
        raise UsageError(f"--burstiness: {burstiness} must be between 0.01 and 100")
    if options.tokenizer and not os.path.exists(options.tokenizer):
        raise UsageError(f"--tokenizer: {options.tokenizer!r} does not exist")
    check_prompts(options)


def cache_bust_nonce(value: Any) -> str | None:
    """``--cache-bust`` as the nonce to use: None (off), a fresh one (on: this process's
    own), or the value itself (what ``specload run`` hands its workers)."""
    text = str(value or "").strip()
    if text.lower() in _CACHE_BUST_OFF:
        return None
    if text.lower() in _CACHE_BUST_ON:
        return secrets.token_hex(4)
    return text


def check_cache_bust(value: Any) -> None:
    text = str(value or "").strip()
    if text.lower() in _CACHE_BUST_OFF | _CACHE_BUST_ON:
        return
    if not (1 <= len(text) <= 32) or not all(ch.isalnum() or ch in "-_" for ch in text):
        raise UsageError(
            f"--cache-bust: {text[:40]!r} must be off, on, or a nonce of up to 32 letters, "
            "digits, - or _"
        )
