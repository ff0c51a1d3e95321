"""``specload run``'s settings: one frozen object built from the command line, all the run
reads; the load options as worker flags; summary.json's options unchanged."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import types
from pathlib import Path
from typing import Any

import pytest

from specload.cli import build_parser, main
from specload.errors import UsageError
from specload.sweep import options as sweep_options
from specload.sweep.settings import SweepSettings, settings_from_args

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

# summary.json's "options": every option of `specload run` but the API key (compare reads
# prompts, prompt_seed, max_tokens, temperature, stream, warmup, duration, requests; results
# repair reads warmup, duration, requests, max_concurrency).
PUBLIC_KEYS = [
    "against", "attainment", "burstiness", "cache_bust", "concurrency", "drain_timeout", "duration",
    "expect_workers", "host", "margin", "master_bind_host", "master_bind_port",
    "max_concurrency", "max_tokens", "metrics_address", "metrics_url", "min_requests", "model",
    "no_plots", "on_outage", "out", "outage_timeout", "precision", "precision_metric",
    "prefix_cache_reset", "progress", "prompt_seed", "prompts", "ramp_up",
    "ready_timeout", "record_token_ids", "records_file", "request_rate", "request_timeout",
    "requests", "search", "search_precision", "search_range", "search_variable",
    "server_log", "slo", "spec_estimate", "stream", "temperature", "tokenizer", "trace",
    "trace_speedup", "usage_stats", "variant", "warmup", "worker_records_file", "workers",
]  # fmt: skip


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", "--out", str(tmp_path / "out"), *argv])


def settings(tmp_path: Path, *argv: str) -> SweepSettings:
    return settings_from_args(parse(tmp_path, *argv))


def test_the_command_line_becomes_complete_settings(tmp_path: Path) -> None:
    s = settings(
        tmp_path, "--host", "http://gpu1:8000/v1/", "--request-rate", "0.5,2",
        "--max-concurrency", "8", "--warmup", "0", "--requests", "20", "--ready-timeout", "2m",
        "--on-outage", "fail", "--outage-timeout", "1h", "--drain-timeout", "5s", "--no-plots",
        "--progress", "plain", "--workers", "2", "--expect-workers", "3",
        "--master-bind-host", "0.0.0.0", "--master-bind-port", "5557", "--variant", "ngram",
        "--model", "tiny", "--metrics-url", "http://gpu1:9000",
    )  # fmt: skip
    assert s.url.root == "http://gpu1:8000"
    assert s.metrics_url == "http://gpu1:9000/metrics"
    assert (s.plan.mode, s.plan.step_names) == ("open", ("r0.5", "r2"))
    assert {(lv.max_concurrency, lv.warmup_s, lv.requests) for lv in s.plan.levels} == {(8, 0, 20)}
    assert s.out_dir == tmp_path / "out" and s.out_dir.is_dir()
    assert (s.ready_timeout_s, s.outage_timeout_s, s.drain_timeout_s) == (120, 3600, 5)
    assert (s.on_outage, s.progress, s.plots) == ("fail", "plain", False)
    assert (s.workers, s.expect_workers, s.master_bind_host, s.master_bind_port) == (
        2, 3, "0.0.0.0", 5557)  # fmt: skip
    assert (s.variant, s.model, s.api_key) == ("ngram", "tiny", "")


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = settings_from_args(build_parser().parse_args(["run", "--variant", "base line"]))
    assert s.out_dir.parent == Path("results") and s.out_dir.name.startswith("base-line-")
    assert s.url.root == "http://127.0.0.1:8000"
    assert s.metrics_url == "http://127.0.0.1:8000/metrics"
    assert s.plan.step_names == ("c1", "c4", "c16", "c64")
    # no --host: vLLM's default address, waited for a minute (not a reload's 10)
    assert (s.ready_timeout_s, s.outage_timeout_s, s.drain_timeout_s) == (60, 2700, 60)
    assert (s.on_outage, s.progress, s.plots, s.workers, s.expect_workers) == (
        "wait", "auto", True, 0, None)  # fmt: skip
    assert s.model == ""
    off = settings(tmp_path, "--metrics-url", "off")
    assert off.metrics_url is None


def test_settings_are_frozen_and_keep_the_key_out_of_sight(tmp_path: Path) -> None:
    s = settings(tmp_path, "--api-key", "sk-secret-123")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.workers = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.load["model"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        s.secrets["api_key"] = "x"  # type: ignore[index]
    assert s.api_key == "sk-secret-123"
    assert "sk-secret-123" not in repr(s) and "sk-secret-123" not in str(s)
    assert "sk-secret-123" not in repr(s.public_options())
    argv, env = s.worker_argv()
    assert "sk-secret-123" not in " ".join(argv)
    assert env == {"SPECLOAD_API_KEY": "sk-secret-123"}
    assert s.load_values()["api_key"] == "sk-secret-123"  # the local runner sends it


def test_the_detected_model_reaches_workers_and_results_without_mutation(tmp_path: Path) -> None:
    args = parse(tmp_path, "--stream", "false", "--temperature", "0.5", "--max-tokens", "64")
    s = settings_from_args(args)
    ready = s.with_model("qwen-tiny")
    assert (s.model, ready.model) == ("", "qwen-tiny")
    assert args.model == "" and s.load["model"] == ""  # nothing shared was changed
    argv, env = ready.worker_argv()
    assert argv == [
        "--prompts", "builtin", "--prompt-seed", "0", "--max-tokens", "64",
        "--temperature", "0.5", "--model", "qwen-tiny", "--variant", "default",
        "--stream", "false", "--usage-stats", "true", "--record-token-ids", "false",
        "--cache-bust", "off", "--spec-estimate", "false", "--burstiness", "1.0",
        "--trace-speedup", "1.0",
        "--request-timeout", "600.0",
        "--metrics-address", "off",
    ]  # fmt: skip
    assert env == {}
    assert "--model" not in s.worker_argv()[0]
    assert ready.public_options()["model"] == "qwen-tiny"
    assert ready.load_values()["model"] == "qwen-tiny"
    assert s.with_model("x") == s.with_model("x")  # a value: equal settings compare equal


def test_public_options_keep_their_keys_and_values(tmp_path: Path) -> None:
    s = settings(tmp_path, "--duration", "2m", "--warmup", "30s", "--prompts", "builtin:coding",
                 "--prompt-seed", "7", "--api-key", "k").with_model("m")  # fmt: skip
    public = s.public_options()
    assert list(public) == PUBLIC_KEYS
    assert {k: public[k] for k in ("prompts", "prompt_seed", "max_tokens", "temperature",
                                   "stream", "warmup", "duration", "requests")} == {
        "prompts": "builtin:coding", "prompt_seed": 7, "max_tokens": None, "temperature": None,
        "stream": True, "warmup": "30s", "duration": "2m", "requests": None,
    }  # fmt: skip
    assert public["out"] == str(tmp_path / "out")  # as given, not resolved
    assert (public["no_plots"], public["ready_timeout"], public["workers"]) == (False, "1m", 0)


def test_environment_variables_are_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECLOAD_MAX_TOKENS", "77")
    monkeypatch.setenv("SPECLOAD_API_KEY", "from-env")
    monkeypatch.setenv("SPECLOAD_HOST", "http://envhost:9")
    s = settings(tmp_path)
    assert (s.load["max_tokens"], s.api_key, s.url.root) == (77, "from-env", "http://envhost:9")
    assert settings(tmp_path, "--max-tokens", "5").load["max_tokens"] == 5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-tokens", "0", "--workers", "-1"], "--max-tokens: 0 must be at least 1"),
        (["--request-timeout", "0"], "--request-timeout: 0.0 must be positive"),
        (["--concurrency", "1", "--request-rate", "2"], "--concurrency and --request-rate"),
        (["--host", "ftp://x"], "ftp://x"),
        (["--workers", "-1"], "--workers: -1 must be 0 or more"),
        (["--workers", "2", "--expect-workers", "1"],
         "--expect-workers: 1 is fewer than --workers 2"),
        (["--ready-timeout", "soon"], "--ready-timeout"),
        (["--drain-timeout=-1s"], "--drain-timeout"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_errors(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as exc:
        settings(tmp_path, *argv)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_load_options_follow_the_load_generator(tmp_path: Path) -> None:
    by_dest = {o.dest: o for o in sweep_options.LOAD_OPTIONS}
    assert [d for d, o in by_dest.items() if o.secret] == ["api_key"]
    assert by_dest["api_key"].env_var == "SPECLOAD_API_KEY"
    assert "step" not in by_dest  # the sweep sets the step itself
    with pytest.raises(SystemExit):
        parse(tmp_path, "--step", "x")
    assert sweep_options.LOAD_OPTIONS == sweep_options._declared()  # nothing filled on parse


def test_run_hands_run_sweep_the_settings_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def run_sweep(*args: Any, **kwargs: Any) -> int:
        seen.append((args, kwargs))
        return 7

    # the real session monkey-patches this process with gevent: a stand-in module
    fake = types.ModuleType("specload.sweep.session")
    fake.run_sweep = run_sweep  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "specload.sweep.session", fake)
    assert main(["run", "--out", str(tmp_path / "o"), "--variant", "v"]) == 7
    [(args, kwargs)] = seen
    assert kwargs == {} and len(args) == 1 and isinstance(args[0], SweepSettings)
    assert args[0].variant == "v"


def test_run_sweep_reads_nothing_but_the_settings() -> None:
    tree = ast.parse((ROOT / "specload/sweep/session.py").read_text())
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_sweep"]
    assert [a.arg for a in fn.args.args] == ["settings"]
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"args", "argparse"}


def test_without_a_host_vllms_default_is_tried_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPECLOAD_HOST", raising=False)
    implicit = settings(tmp_path)
    assert (implicit.host_given, implicit.url.root) == (False, "http://127.0.0.1:8000")
    assert implicit.ready_timeout_s == 60.0 and implicit.given["host"] == implicit.url.root
    named = settings(tmp_path, "--host", "http://gpu-7:8000/v1")
    assert (named.host_given, named.ready_timeout_s) == (True, 600.0)
    assert settings(tmp_path, "--ready-timeout", "5s").ready_timeout_s == 5.0
    monkeypatch.setenv("SPECLOAD_HOST", "http://envhost:9")
    assert settings(tmp_path).host_given and settings(tmp_path).ready_timeout_s == 600.0


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("default vLLM's own http://127.0.0.1:8000", "default 10m", "(default: 60s)",
                  "(default 1,4,16,64 when neither this nor --request-rate is given)"):  # fmt: skip
        assert shown in text, shown
