"""``specload run`` as a real process against the simulator: levels, schema, categories,
server-side block, outages, signals, workers, open loop, bad options."""

from __future__ import annotations

import signal
import time
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest

from specload.cli import main
from specload.results import read_requests, read_summary, summary_schema
from specload.results.aggregate import aggregate_records, summarize_level
from specload.sweep.ports import free_port

pytestmark = pytest.mark.integration

# A fast simulator: the cost model 10x faster, short answers.
SIM = ["--time-scale", "10"]
LOAD = [
    "--max-tokens",
    "48",
    "--metrics-address",
    "off",
    "--progress",
    "plain",
    "--no-plots",
]


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def check_schema(summary: dict) -> None:
    jsonschema.validate(summary, summary_schema())


def wait_for_records(out: Path, step: str, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for r in read_requests(out) if r["step"] == step) >= n:
            return
        time.sleep(0.1)
    raise TimeoutError(f"fewer than {n} records of {step} after {timeout}s")


@pytest.mark.serial  # a 3 s window to 0.05 s, tokens reconciled with the server's
def test_sweep_levels_categories_and_server_block(sweep_sim, specload_run, tmp_path):
    sim = sweep_sim(["--variant", "ngram", *SIM])
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            sim.url + "/v1",
            "--variant",
            "ngram",
            "--concurrency",
            "1,4",
            "--warmup",
            "1",
            "--duration",
            "3s",
            "--out",
            str(out),
            *LOAD[:-1],
        ]
    )
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    check_schema(summary)
    assert summary["status"] == "complete" and summary["variant"] == "ngram"
    assert summary["model"] == "moonshotai/Kimi-K2.5" and summary["server_version"]
    assert summary["server_time_scale"] == 10.0  # the simulator says so on /version
    records = read_requests(out)
    steps = {r["step"] for r in records}
    assert steps <= {"c1-warmup", "c1", "c4-warmup", "c4", "drain"}
    for level in summary["levels"]:
        mine = [r for r in records if r["step"] == level["name"]]
        # every sample in exactly one level, started inside the level's window
        assert level["completed"] + level["failed"] == len(mine) > 0
        lo, hi = ts(level["window_started_at"]), ts(level["window_ended_at"])
        assert all(lo - 0.05 <= r["start_s"] <= hi + 0.05 for r in mine)
        assert level["duration"] == pytest.approx(3.0, abs=0.05)
        # throughput: the tokens that arrived in the window, recomputed from requests.jsonl
        again = summarize_level(
            records,
            step=level["name"],
            window_start_s=lo,
            window_end_s=hi,
            duration_s=level["duration"],
        )
        assert level["output_throughput"] == pytest.approx(again["output_throughput"], rel=0.01)
        # short requests against the window: close to the tokens of the requests it started
        assert level["output_throughput"] == pytest.approx(
            sum(r["tokens_output"] for r in mine if r["ok"]) / level["duration"], rel=0.15
        )
        # max_tokens 48 ends most requests inside reasoning: the guard says so
        truncated = level["reasoning_truncated_ratio"] > 0.2
        # client_saturated: this machine's other work may take the client's core meanwhile
        # (its lag; docs/load.md), a flag and a warning of its own
        client = [w for w in level["warnings"] if "client may be the bottleneck" in w]
        assert bool(client) == ("client_saturated" in level["flags"])
        flags = [f for f in level["flags"] if f != "client_saturated"]
        assert flags == (["reasoning_truncated"] if truncated else [])
        assert len(level["warnings"]) - len(client) == int(truncated)
        # per category: the summary equals a recomputation from requests.jsonl
        assert set(level["categories"]) == {r["category"] for r in mine}
        for cat, stats in level["categories"].items():
            again = aggregate_records(
                [r for r in mine if r["category"] == cat], level["name"], level["duration"]
            )
            for key in (
                "completed",
                "failed",
                "total_output_tokens",
                "total_reasoning_tokens",
                "median_tpot_ms",
                "p90_ttft_ms",
                "median_ttfct_ms",
                "reasoning_truncated",
            ):
                assert stats[key] == again[key], (cat, key)
        server = level["server"]
        assert server["source"] == "v1_counters"
        assert server["generation_tokens"] > 0
        assert 0 < server["spec_decode_acceptance_rate"] < 1
        assert server["spec_decode_acceptance_rate"] == pytest.approx(
            server["spec_decode_num_accepted_tokens"] / server["spec_decode_num_draft_tokens"]
        )
        assert server["spec_decode_mean_acceptance_length"] == pytest.approx(
            1 + server["spec_decode_num_accepted_tokens"] / server["spec_decode_num_drafts"]
        )
        assert server["mean_tpot_ms"] > 0
    # the drain let the last level's in-flight requests finish: none was cut
    assert summary["overhead_s"] < 3.0
    assert (out / "summary.md").read_text().startswith("# specload run: ngram")
    assert (out / "tpot.png").stat().st_size > 1000
    assert (out / "throughput.png").stat().st_size > 1000


def test_outage_mid_level_is_recorded_and_level_completes(sweep_sim, specload_popen, tmp_path):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    proc = specload_popen(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--duration",
            "4",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    wait_for_records(out, "c2", 5)
    sim.reload(load_time=2.0)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    summary = read_summary(out)
    check_schema(summary)
    level = summary["levels"][0]
    assert level["complete"] is True
    assert len(level["outages"]) == 1
    outage = level["outages"][0]
    assert 1.5 <= outage["duration_s"] <= 5.0
    assert level["duration"] == pytest.approx(4.0, abs=0.05)
    assert summary["outage_s"] == pytest.approx(outage["duration_s"])
    records = [r for r in read_requests(out) if r["step"] == "c2"]
    end = ts(outage["end"])
    assert any(r["ok"] and r["start_s"] >= end for r in records)  # resumed afterwards
    assert level["completed"] + level["failed"] == len(records)
    assert "outage" in stdout + stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_keeps_valid_summary_and_every_request(
    sweep_sim, specload_popen, tmp_path, sig, code
):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    proc = specload_popen(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "2,4",
            "--warmup",
            "0",
            "--duration",
            "60",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    wait_for_records(out, "c2", 10)
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode == code
    summary = read_summary(out)
    check_schema(summary)
    assert summary["status"] == "interrupted"
    assert summary["stop_reason"] == signal.Signals(sig).name
    (level,) = summary["levels"]
    assert level["complete"] is False and level["duration"] < 60
    records = [r for r in read_requests(out) if r["step"] == "c2"]
    assert len(records) >= 10
    # the requests in flight at the signal are recorded too, as unfinished
    unfinished = [r for r in records if r["error_kind"] == "unfinished"]
    assert level["unfinished"] == len(unfinished) <= 2
    assert level["completed"] + level["failed"] + level["unfinished"] == len(records)


def test_workers_master_merges_every_record(sweep_sim, specload_run, tmp_path):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            sim.url,
            "--concurrency",
            "4",
            "--warmup",
            "1",
            "--duration",
            "3",
            "--workers",
            "2",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    check_schema(summary)
    assert summary["workers"] == 2
    level = summary["levels"][0]
    records = [r for r in read_requests(out) if r["step"] == "c4"]
    assert level["completed"] + level["failed"] == len(records) > 0
    assert len({r["worker"] for r in records}) == 2
    assert sorted(p.name for p in out.glob("worker-*.log")) == ["worker-0.log", "worker-1.log"]


def test_open_loop_rate(sweep_sim, specload_run, tmp_path):
    sim = sweep_sim(["--variant", "baseline", *SIM])
    out = tmp_path / "run"
    result = specload_run(
        [
            "run",
            "--host",
            sim.url,
            "--request-rate",
            "10",
            "--max-concurrency",
            "16",
            "--warmup",
            "0",
            "--duration",
            "5",
            "--out",
            str(out),
            *LOAD,
        ]
    )
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    check_schema(summary)
    level = summary["levels"][0]
    assert level["name"] == "r10" and level["request_rate"] == 10
    # Poisson arrivals: 50 expected in the window, within about 3 standard deviations
    assert 29 <= level["completed"] + level["failed"] <= 71


def test_unreachable_host_one_line_after_timeout(specload_run, tmp_path):
    port = free_port()
    result = specload_run(
        [
            "run",
            "--host",
            f"http://127.0.0.1:{port}",
            "--ready-timeout",
            "1",
            "--out",
            str(tmp_path / "r"),
            "--progress",
            "off",
        ],
        timeout=30,
    )
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"specload: error: --host http://127.0.0.1:{port}: not ready after 1s "
        "(/health and /v1/models: connection refused)"
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--concurrency", ""], "--concurrency: empty list"),
        (["--duration=-5s"], "--duration"),
        (["--warmup=-1"], "--warmup"),
        (["--requests", "0", "--duration", "1"], "exclusive"),
    ],
)
def test_bad_options_one_line(args, needle, capsys, tmp_path):
    assert main(["run", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_unwritable_out_dir_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", "--out", str(blocker / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"specload: error: --out {str(blocker / 'results')!r}: cannot create "
        "directory (Not a directory)"
    ]
