"""Secrets never reach what `specload run` writes or prints: a URL's password, an API key
(also with the trailing newline `$(cat keyfile)` leaves), and bad input in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from specload.results import read_summary

pytestmark = pytest.mark.integration

SIM = ["--time-scale", "10"]
LOAD = ["--metrics-address", "off", "--progress", "plain", "--max-tokens", "32"]
PASSWORD = "Pw-specload-9f2c"
KEY = "sk-specload-secret-7d1e"


def everything_written(out: Path, *streams: str) -> str:
    texts = list(streams)
    for path in out.rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def test_url_password_and_key_reach_no_file_and_no_output(sweep_sim, specload_run, tmp_path):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    host = sim.url.replace("http://", f"http://admin:{PASSWORD}@")
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            host + "/v1",
            "--api-key",
            KEY,
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--duration",
            "1",
            "--workers",
            "1",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    assert summary["host"] == sim.url.replace("http://", "http://***@")
    assert summary["levels"][0]["completed"] > 0  # the requests still went through
    written = everything_written(out, result.stdout, result.stderr)
    assert PASSWORD not in written and KEY not in written
    assert "***@" in result.stdout


@pytest.mark.parametrize("key", [KEY + "\n", KEY + "\r", "sk specload"])
def test_a_key_that_cannot_go_in_a_header_is_one_line_at_once(specload_run, tmp_path, key):
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            "http://127.0.0.1:9",
            "--api-key",
            key,
            "--out",
            str(out),
            "--progress",
            "off",
        ],
        timeout=30,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specload: error: --api-key: the key contains")
    assert KEY not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--host", f"http://u:{PASSWORD}@[::1:8000"], "--host: 'http://***@[::1:8000' is not"),
        (["--metrics-url", "http://[::1"], "--metrics-url: 'http://[::1' is not a valid URL"),
        (["--max-tokens", "99999999999999999999"], "--max-tokens: 99999999999999999999 is beyond"),
    ],
)
def test_bad_input_is_one_line_without_secrets(specload_run, tmp_path, args, needle):
    result = specload_run(
        ["run", *args, "--out", str(tmp_path / "r"), "--progress", "off", "--ready-timeout", "1"],
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
    assert PASSWORD not in result.stderr and "Traceback" not in result.stderr


def test_client_metrics_carry_no_secret(sweep_sim, specload_popen, tmp_path):
    import time  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from tests.fixtures.load import free_port  # noqa: PLC0415

    sim = sweep_sim(["--variant", "baseline", *SIM])
    host = sim.url.replace("http://", f"http://admin:{PASSWORD}@")
    port = free_port()
    out = tmp_path / "run"
    proc = specload_popen(
        [
            "run",
            "--host",
            host,
            "--api-key",
            KEY,
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--duration",
            "4",
            "--out",
            str(out),
            "--metrics-address",
            f"127.0.0.1:{port}",
            "--progress",
            "plain",
            "--max-tokens",
            "32",
            "--no-plots",
        ]
    )
    page = ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "specload_client_requests_total{" not in page:
        time.sleep(0.2)
        try:
            page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except httpx.HTTPError:
            continue
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "specload_client_requests_total{" in page
    assert PASSWORD not in page and KEY not in page
    assert PASSWORD not in everything_written(out, stdout, stderr)
