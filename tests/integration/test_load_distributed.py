"""A real master with two worker processes: exact merging, and a worker killed mid-run."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from specload.promtext import parse
from tests.fixtures.load import LOCUSTFILE, free_port, read_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = [
    "--timing",
    "fixed",
    "--fixed-ttft",
    "0.1",
    "--fixed-itl",
    "0.01",
    "--fixed-tokens-per-chunk",
    "1",
    "--fixed-reasoning-tokens",
    "15",
    "--fixed-content-tokens",
    "15",
]
TRUTH_TPOT = 29 * 0.01 / 29


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "INFO", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
        )


def run_distributed(
    tmp_path: Path, host: str, *, seconds: int, kill_after: float | None = None, users: int = 16
) -> dict:
    master_port = free_port()
    metrics_port = free_port()
    records = tmp_path / "master-records.jsonl"
    master = start(
        [
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
            "--headless",
            "--expect-workers",
            "2",
            "--host",
            host,
            "-u",
            str(users),
            "-r",
            str(users),
            "-t",
            f"{seconds}s",
            "--records-file",
            str(records),
            "--csv",
            str(tmp_path / "m"),
            "--metrics-address",
            f"127.0.0.1:{metrics_port}",
            "--stop-timeout",
            "5",
            "--prompts",
            "builtin:math,coding",
            "--variant",
            "ngram",
        ],
        tmp_path / "master.log",
    )
    workers = [
        start(
            ["--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)],
            tmp_path / f"worker{i}.log",
        )
        for i in range(2)
    ]
    scraped = ""
    try:
        if kill_after is not None:
            # Kill once both workers have reported records, plus kill_after seconds.
            deadline = time.time() + 60
            while time.time() < deadline:
                if len({r["worker"] for r in read_records(records)}) == 2:
                    break
                time.sleep(0.2)
            time.sleep(kill_after)
            workers[0].send_signal(signal.SIGKILL)
            deadline = time.time() + 15
            while time.time() < deadline:
                time.sleep(0.5)
                try:
                    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
                except httpx.HTTPError:
                    continue
                fam = parse(scraped).get_family("specload_client_requests_lost")
                if fam is not None and (fam.total() or 0) > 0:
                    break
            assert master.poll() is None, "the master died with its worker"
        master.wait(seconds + 60)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
                p.wait()
    return {
        "records": read_records(records),
        "master_log": (tmp_path / "master.log").read_text(),
        "stats_csv": (tmp_path / "m_stats.csv").read_text(),
        "scraped": scraped,
        "returncode": master.returncode,
    }


@pytest.mark.serial  # TPOT within 1% of the truth: alone under -n
def test_master_merges_two_workers_exactly(load_sim, run_locust, tmp_path: Path) -> None:
    sim = load_sim(SIM)
    result = run_distributed(tmp_path, sim.url, seconds=5)
    assert result["returncode"] == 0, result["master_log"][-3000:]
    records = result["records"]
    by_worker = Counter(r["worker"] for r in records)
    assert len(by_worker) == 2 and all(n > 10 for n in by_worker.values()), by_worker
    assert sum(by_worker.values()) == len(records)
    assert all(r["tokens_output"] == 30 and r["ok"] for r in records)
    # Options given to the master only reach the workers' users.
    assert {r["category"] for r in records} == {"math", "coding"}
    assert {r["variant"] for r in records} == {"ngram"}
    # The server's own counts: every request it finished (users finish their request at
    # the end: --stop-timeout) reached the master, and so did every token.
    server = parse(httpx.get(sim.url + "/metrics").text)
    served = server.get_family("vllm:request_success").total({"finished_reason": "stop"})
    assert served == len(records)
    assert server.get_family("vllm:generation_tokens").total() == sum(
        r["tokens_output"] for r in records
    )
    # Percentiles match a single-process run (and the truth) within the histogram's error.
    single = run_locust(sim.url, users=16, seconds=4)
    dist_tpot = statistics.median(r["tpot_s"] for r in records)
    single_tpot = statistics.median(r["tpot_s"] for r in single.ok())
    assert dist_tpot == pytest.approx(single_tpot, rel=0.01)
    assert dist_tpot == pytest.approx(TRUTH_TPOT, rel=0.01)


def test_worker_killed_mid_run_leaves_master_running_and_loss_visible(
    load_sim, tmp_path: Path
) -> None:
    sim = load_sim(SIM)
    result = run_distributed(tmp_path, sim.url, seconds=14, kill_after=1.0)
    assert result["returncode"] in (0, 1), result["master_log"][-3000:]
    fam = parse(result["scraped"]).get_family("specload_client_requests_lost")
    assert fam is not None and (fam.total() or 0) > 0, result["scraped"][-2000:]
    assert "went missing" in result["master_log"]
    records = result["records"]
    by_worker = Counter(r["worker"] for r in records)
    assert len(by_worker) == 2  # both reported before the kill; the survivor after
    survivor_last = max(r["end_s"] for r in records)
    assert survivor_last > min(r["start_s"] for r in records) + 8
