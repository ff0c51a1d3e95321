"""Plain `locust -f locustfiles/chat.py` with specload's options, as a user runs it."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.fixtures.load import free_port, locust_command, wait_http

pytestmark = pytest.mark.integration

FIXED = [
    "--timing",
    "fixed",
    "--fixed-ttft",
    "0.02",
    "--fixed-itl",
    "0.005",
    "--fixed-tokens-per-chunk",
    "2",
    "--fixed-reasoning-tokens",
    "6",
    "--fixed-content-tokens",
    "4",
]


def test_every_base_url_form_reaches_v1_once(load_sim, run_locust) -> None:
    sim = load_sim(FIXED)
    secret = "sk-specload-test-secret-123"
    model = httpx.get(sim.url + "/v1/models").json()["data"][0]["id"]
    for suffix in ("", "/", "/v1", "/v1/"):
        run = run_locust(
            sim.url + suffix,
            users=2,
            seconds=1,
            args=["--api-key", secret, "--variant", "baseline", "--prompts", "builtin:math"],
        )
        assert run.returncode == 0, run.stderr[-2000:]
        # (the simulator answers 404 to /v1/v1/...: such a request would be a failed record)
        assert run.records and all(r["ok"] for r in run.records), suffix
        r = run.records[0]
        assert (r["variant"], r["category"], r["tokens_output"], r["model"]) == (
            "baseline",
            "math",
            10,
            model,
        )
        # The API key is never logged or written anywhere.
        written = [run.stdout, run.stderr, json.dumps(run.records)]
        written += [p.read_text() for p in run.csv_prefix.parent.glob(run.csv_prefix.name + "*")]
        assert not any(secret in text for text in written)


def test_non_streamed_requests_and_stats_csv(load_sim, run_locust) -> None:
    sim = load_sim(FIXED)
    run = run_locust(sim.url, users=2, seconds=1, args=["--stream", "false"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.records and all(r["ok"] and not r["stream"] for r in run.records)
    r = run.records[0]
    # Final usage gives the total; without a tokenizer the split is an estimate, marked.
    assert r["tokens_output"] == 10
    assert (r["token_count_source"], r["channel_split_source"]) == ("usage", "text-estimate")
    assert r["ttft_s"] is None and r["e2e_s"] > 0
    stats = Path(str(run.csv_prefix) + "_stats.csv").read_text()
    assert "CHAT" in stats


def test_locust_stats_count_each_request_once(load_sim, run_locust) -> None:
    """Locust's stats (its web UI, RPS, CSV): one CHAT entry per category, each request
    once, its end-to-end time; no TTFT/TPOT rows; sizes 0 (bytes are not counted).

    The counts are checked on Locust's final stats (``--json-file``, written at shutdown).
    Its ``_stats.csv`` is rewritten once a second while the run goes and not at the end
    (``StatsCSVFileWriter``): requests that ended after its last write are missing there,
    so the CSV's counts are at most the records'."""
    sim = load_sim(FIXED)
    run = run_locust(sim.url, users=2, seconds=2, args=["--json-file", "final"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(run.records) > 10 and all(r["ok"] for r in run.records)
    by_category = Counter(r["category"] for r in run.records)
    stats = json.loads((run.csv_prefix.parent / "final.json").read_text())
    assert {e["method"] for e in stats} == {"CHAT"}
    assert {e["name"]: e["num_requests"] for e in stats} == dict(by_category)
    assert {e["total_content_length"] for e in stats} == {0}
    with Path(str(run.csv_prefix) + "_stats.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    (total,) = [r for r in rows if r["Name"] == "Aggregated"]
    entries = [r for r in rows if r["Name"] != "Aggregated"]
    assert {r["Type"] for r in entries} == {"CHAT"}
    for r in entries:
        assert 0 < int(r["Request Count"]) <= by_category[r["Name"]]
    assert {float(r["Average Content Size"]) for r in rows} == {0.0}
    # The response time is the request's end-to-end time (40 ms on this server).
    e2e_ms = statistics.median(r["e2e_s"] * 1000 for r in run.records)
    assert abs(float(total["Median Response Time"]) - e2e_ms) <= 2.0, (total, e2e_ms)


def test_step_option_labels_samples_and_metrics_served(load_sim, tmp_path: Path) -> None:
    sim = load_sim(FIXED)
    port = free_port()
    proc = subprocess.Popen(
        locust_command(
            sim.url, 2, 4, ["--step", "warmup", "--metrics-address", f"127.0.0.1:{port}"]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", proc=proc)
        text = ""
        for _ in range(40):
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            if "specload_client_requests_total{" in text:
                break
            time.sleep(0.1)
        assert 'step="warmup"' in text
        assert "specload_client_tpot_seconds_bucket" in text
        assert "specload_client_users 2.0" in text
    finally:
        proc.wait(30)


def test_bad_prompt_file_gives_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"category": 3, "prompt": "x"}\n')
    proc = subprocess.run(
        locust_command(
            "http://127.0.0.1:9", 1, 1, ["--prompts", str(bad), "--metrics-address", "off"]
        ),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "bad.jsonl:2: field 'category'" in line]
    assert len(lines) == 1 and lines[0].startswith("specload: error:"), proc.stderr[-2000:]
