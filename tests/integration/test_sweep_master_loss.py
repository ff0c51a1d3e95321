"""Workers of ``specload run --workers N`` do not outlive their master: killed (``kill -9``,
its local workers get SIGTERM from the kernel) or silent (stopped, a remote worker's
master gone: the heartbeat watchdog quits them), they stop loading the target within
seconds — and a long level with no message but heartbeats does not trip the watchdog."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from specload.load.plugin import MASTER_SILENCE_TIMEOUT_S
from specload.results import read_requests

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = ["--time-scale", "10"]
LOAD = ["--metrics-address", "off", "--progress", "plain", "--no-plots", "--max-tokens", "64"]
# Every worker gone this long after its master was killed or went silent.
GONE_WITHIN_S = 8.0


def server_requests(url: str) -> float:
    """Requests the simulator has seen end (finished or aborted by the client)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def workers_of(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if "--worker" in p.cmdline()]


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def start_loaded(sweep_sim, specload_popen, out: Path):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    proc = specload_popen(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "4",
            "--warmup",
            "0",
            "--duration",
            "60",
            "--workers",
            "2",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len({r["worker"] for r in read_requests(out) if r["step"] == "c4"}) == 2:
            break
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    else:
        raise AssertionError("both workers never reported")
    workers = workers_of(proc.pid)
    assert len(workers) == 2
    return sim, proc, workers


def assert_gone_and_target_quiet(sim, workers: list[psutil.Process], since: float) -> float:
    """Seconds until every worker was gone; the target then receives nothing more."""
    while alive(workers) and time.monotonic() - since < GONE_WITHIN_S + 5:
        time.sleep(0.1)
    gone_after = time.monotonic() - since
    left = alive(workers)
    for p in left:
        p.kill()
    assert not left and gone_after <= GONE_WITHIN_S, (
        f"{len(left)} worker(s) still running {gone_after:.1f}s after the master was lost"
    )
    time.sleep(0.5)  # the aborts of the requests in flight reach the server's counters
    before = server_requests(sim.url)
    time.sleep(3.0)
    assert server_requests(sim.url) == before, "the target still receives requests"
    return gone_after


def test_kill_9_of_the_master_stops_its_workers(sweep_sim, specload_popen, tmp_path):
    sim, proc, workers = start_loaded(sweep_sim, specload_popen, tmp_path / "run")
    # A level longer than the watchdog's timeout, with no step change: nobody quits.
    time.sleep(MASTER_SILENCE_TIMEOUT_S + 2)
    assert len(alive(workers)) == 2 and proc.poll() is None
    load_before = server_requests(sim.url)
    time.sleep(1.0)
    assert server_requests(sim.url) > load_before  # still loading
    proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    proc.wait(10)
    gone_after = assert_gone_and_target_quiet(sim, workers, killed)
    # the kernel's SIGTERM (PR_SET_PDEATHSIG), not the heartbeat watchdog, ended them
    assert gone_after < MASTER_SILENCE_TIMEOUT_S, gone_after


def test_a_silent_master_is_left_by_its_workers(sweep_sim, specload_popen, tmp_path):
    """A master that sends nothing (stopped, or on another host and gone) while the
    workers' parent is alive: the heartbeat watchdog quits them."""
    sim, proc, workers = start_loaded(sweep_sim, specload_popen, tmp_path / "run")
    os.kill(proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        gone_after = assert_gone_and_target_quiet(sim, workers, stopped)
        # not before the timeout: a master a few seconds late is not left
        assert gone_after >= MASTER_SILENCE_TIMEOUT_S - 1, gone_after
        logs = [(tmp_path / "run" / f"worker-{i}.log").read_text() for i in range(2)]
        assert all("no message from the master" in text for text in logs), logs[0][-2000:]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(10)
