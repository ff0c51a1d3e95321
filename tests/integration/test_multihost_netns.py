"""specload across hosts: each part in its own network namespace on one bridge.

The target (the simulator), the master (``specload run --expect-workers 2
--master-bind-host 0.0.0.0``) and two workers (``locust -f .../specload/sweep/locustfile.py
--worker --master-host MASTER``, the commands of docs/sweep.md) each run in a namespace of
their own (tests/fixtures/netns.py): they reach each other only over the bridge, by the
addresses the test gave them, and nothing is added to the namespace the tests run in.

Each worker keeps its own copy of its records on its host (``--worker-records-file``), and
the simulator counts the requests it served: the master's merged counts are checked
against both, per level, in the three arrival modes (closed loop with ``--requests``, an
open-loop rate, a trace).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specload.sweep import locustfile as sweep_locustfile
from tests.fixtures.netns import Host, Network, skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SKIP = skip_reason()
PY = sys.executable
API_PORT = 8000
CONTROL_PORT = 8001
MASTER_PORT = 5557
SIM = [
    *("--timing", "fixed", "--fixed-ttft", "0.02", "--fixed-itl", "0.002"),
    *("--fixed-reasoning-tokens", "5", "--fixed-content-tokens", "5", "--load-time", "0"),
]
WORKER_LOAD = ["--max-tokens", "64"]  # the load options, the same on every host


def _served(target: Host) -> int:
    """The simulator's count of chat requests served (its loopback control port)."""
    read = (
        "import json,urllib.request\n"
        f"print(json.load(urllib.request.urlopen('http://127.0.0.1:{CONTROL_PORT}/state',"
        "timeout=5))['requests_served'])\n"
    )
    done = target.run([PY, "-c", read])
    assert done.returncode == 0, done.stderr[-500:]
    return int(done.stdout.strip())


def _hosts(tmp_path: Path, sim: list[str]) -> Iterator[tuple[Network, dict[str, Host]]]:
    """The target (the simulator with ``sim``), the master and two workers, each a host."""
    if SKIP:
        pytest.skip(SKIP)
    with Network() as net:
        parts = {name: net.host(name) for name in ("target", "master", "w1", "w2")}
        parts["target"].start(
            [PY, "-m", "simulator", "--host", "0.0.0.0", "--port", str(API_PORT),
             "--control-port", str(CONTROL_PORT), *sim],
            tmp_path / "sim.log",
        )  # fmt: skip
        parts["target"].wait_port("127.0.0.1", API_PORT)
        yield net, parts


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[Network, dict[str, Host]]]:
    yield from _hosts(tmp_path, SIM)


@dataclass
class Run:
    """What one run across the hosts left: its exit code, the master's log, the summary,
    the master's records, the records set aside (``late.jsonl``), each worker's own."""

    code: int
    log: str
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    late: list[dict[str, Any]]
    workers: dict[str, list[dict[str, Any]]]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _launch(
    tmp_path: Path,
    net: Network,
    parts: dict[str, Host],
    mode: list[str],
    worker_load: tuple[str, ...] = (),
    cut: tuple[tuple[str, ...], float] | None = None,
) -> Run:
    """One ``specload run`` with its master and two workers on their hosts (the documented
    commands); ``cut``: these hosts' links fail for so many seconds mid-level."""
    master, target = parts["master"], parts["target"]
    out = tmp_path / "run"
    run = master.start(
        [PY, "-m", "specload", "run", "--host", f"http://{target.address}:{API_PORT}",
         "--out", str(out), "--expect-workers", "2", "--master-bind-host", "0.0.0.0",
         "--master-bind-port", str(MASTER_PORT), *WORKER_LOAD, *mode,
         "--metrics-address", "off", "--progress", "off", "--no-plots"],
        tmp_path / "master.log",
    )  # fmt: skip
    parts["w1"].wait_port(master.address, MASTER_PORT)
    own = {name: tmp_path / f"{name}.records.jsonl" for name in ("w1", "w2")}
    for name in ("w1", "w2"):
        parts[name].start(
            [PY, "-m", "locust", "-f", sweep_locustfile.__file__, "--worker",
             "--master-host", master.address, "--master-port", str(MASTER_PORT),
             *WORKER_LOAD, *worker_load, "--worker-records-file", str(own[name])],
            tmp_path / f"{name}.log",
        )  # fmt: skip
    cutter = _cut_later(net, cut[0], own["w1"], cut[1]) if cut else None
    try:
        code = run.wait(timeout=180)  # bounded: a run that hangs fails here
    except Exception:
        run.kill()
        raise
    if cutter is not None:
        cutter.join(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(
        p.poll() is None for name in ("w1", "w2") for p in parts[name].procs
    ):
        time.sleep(0.2)  # the workers quit with their master
    return Run(
        code,
        (tmp_path / "master.log").read_text(errors="replace"),
        json.loads((out / "summary.json").read_text()),
        _jsonl(out / "requests.jsonl"),
        _jsonl(out / "late.jsonl"),
        {name: _jsonl(path) for name, path in own.items()},
    )


def _run(
    tmp_path: Path,
    net: Network,
    parts: dict[str, Host],
    mode: list[str],
    worker_load: tuple[str, ...] = (),
) -> tuple[dict, list[dict], dict[str, list[dict]], int]:
    """A run without faults: the summary, the master's records, each worker's own, the
    requests the server served."""
    run = _launch(tmp_path, net, parts, mode, worker_load)
    assert run.code == 0, run.log[-3000:]
    for name in ("w1", "w2"):
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "Unknown message type" not in text, text[-2000:]
    return run.summary, run.records, run.workers, _served(parts["target"])


def _check_counts(
    summary: dict, records: list[dict], workers: dict[str, list[dict]], served: int
) -> None:
    # every request the server served is one record at the master, and one in the file of
    # the worker that sent it; both workers sent
    assert all(workers.values()), {k: len(v) for k, v in workers.items()}
    mine = Counter(r["step"] for w in workers.values() for r in w)
    assert Counter(r["step"] for r in records) == mine
    assert len(records) == served
    ids = {r["worker"] for r in records}
    assert len(ids) == 2, ids
    for level in summary["levels"]:
        step = [r for r in records if r["step"] == level["name"]]
        assert level["completed"] + level["failed"] == len(step), level
        assert level["unfinished"] == 0 and level["lost"] == 0, level


def test_closed_loop_levels_count_exactly_across_hosts(hosts, tmp_path: Path) -> None:
    net, parts = hosts
    summary, records, workers, served = _run(
        tmp_path, net, parts, ["--concurrency", "4,8", "--requests", "40", "--warmup", "1s"]
    )
    assert [lv["completed"] for lv in summary["levels"]] == [40, 40]
    _check_counts(summary, records, workers, served)


def test_open_loop_levels_count_exactly_across_hosts(hosts, tmp_path: Path) -> None:
    net, parts = hosts
    summary, records, workers, served = _run(
        tmp_path, net, parts, ["--request-rate", "20", "--requests", "60", "--warmup", "0"]
    )
    assert [lv["completed"] for lv in summary["levels"]] == [60]
    _check_counts(summary, records, workers, served)


def test_a_trace_is_shared_by_hosts_exactly(hosts, tmp_path: Path) -> None:
    net, parts = hosts
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 40 * i, "prompt": f"entry {i}", "max_tokens": 3}) + "\n"
            for i in range(50)
        )
    )
    # the trace is a load option: every worker is started with it, as the master is
    summary, records, workers, served = _run(
        tmp_path, net, parts, ["--trace", str(trace)], ("--trace", str(trace))
    )
    (level,) = summary["levels"]
    assert level["completed"] == 50
    _check_counts(summary, records, workers, served)
    assert sorted(len(w) for w in workers.values()) == [25, 25]  # every entry sent once


# -- links that fail -----------------------------------------------------------------------
#
# Locust's master marks a worker missing after 3 heartbeats it did not get (one a second);
# specload's worker quits after 5 s without a word from its master (MASTER_SILENCE_TIMEOUT_S).
# A cut of 1.5 s stays under both; one of 8 s is past both.
SLOW_SIM = [
    *("--timing", "fixed", "--fixed-ttft", "0.05", "--fixed-itl", "0.02"),
    *("--fixed-reasoning-tokens", "5", "--fixed-content-tokens", "5", "--load-time", "0"),
]
LEVEL = ["--concurrency", "8", "--requests", "400", "--warmup", "0"]


def _lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def _cut_later(
    net: Network, names: tuple[str, ...], after: Path, seconds: float
) -> threading.Thread:
    """Once ``after`` (a worker's own records) has 40 lines, cut ``names``' links for
    ``seconds``, then restore them."""

    def cut() -> None:
        deadline = time.monotonic() + 60
        while _lines(after) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        net.cut(*names)
        time.sleep(seconds)
        net.restore(*names)

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def slow_hosts(tmp_path: Path) -> Iterator[tuple[Network, dict[str, Host]]]:
    yield from _hosts(tmp_path, SLOW_SIM)


def _run_with_cut(
    tmp_path: Path, net: Network, parts: dict[str, Host], cut: tuple[str, ...], seconds: float
) -> tuple[int, str, dict, list[dict], list[dict], dict[str, list[dict]]]:
    """``LEVEL`` with two workers, ``cut``'s links failing for ``seconds`` mid-level."""
    run = _launch(tmp_path, net, parts, [*LEVEL, "--drain-timeout", "20s"], cut=(cut, seconds))
    return run.code, run.log, run.summary, run.records, run.late, run.workers


def _key(record: dict) -> tuple[str, float]:
    return (record["worker"], round(float(record["start_s"]), 6))


def test_a_link_cut_shorter_than_the_heartbeat_costs_nothing(slow_hosts, tmp_path: Path) -> None:
    net, parts = slow_hosts
    code, log, summary, records, late, workers = _run_with_cut(tmp_path, net, parts, ("w1",), 1.5)
    assert code == 0, log[-3000:]
    (level,) = summary["levels"]
    # TCP held what was sent while the link was down: every request recorded once
    assert level["completed"] + level["failed"] + level["unfinished"] == 400, level
    assert level["lost"] == 0 and not late, (level, len(late))
    assert sorted(map(_key, records)) == sorted(_key(r) for w in workers.values() for r in w)


def test_a_worker_cut_off_past_the_heartbeat_costs_only_its_requests(
    slow_hosts, tmp_path: Path
) -> None:
    net, parts = slow_hosts
    code, log, summary, records, late, workers = _run_with_cut(tmp_path, net, parts, ("w1",), 8.0)
    assert code == 0, log[-3000:]
    (level,) = summary["levels"]
    print(json.dumps({k: level[k] for k in ("completed", "failed", "unfinished", "lost")}),
          len(late), {k: len(v) for k, v in workers.items()})  # fmt: skip
    # exactly the budget: what the lost worker had in flight is lost, not replaced, and
    # what it sent after it came back is set aside, not counted
    assert level["completed"] + level["failed"] + level["unfinished"] + level["lost"] == 400
    assert "lost" in level["flags"] and level["lost"] >= 1
    assert "went missing" in log
    # every record at the master is once there and in a worker's own file; what the lost
    # worker sent once its link came back is set aside (late.jsonl), never counted. Its
    # records the master did not count (set aside, or never delivered: kept in its own
    # file) are the requests booked lost, and those it started after its last report (the
    # master re-granted that budget as never started): at most one more per user of it (4)
    at_master = [_key(r) for r in records]
    assert len(set(at_master)) == len(at_master)
    theirs = {_key(r) for w in workers.values() for r in w}
    set_aside = {_key(r) for r in late}
    assert set(at_master) <= theirs and set_aside <= theirs
    assert not set(at_master) & set_aside
    w1 = {_key(r) for r in workers["w1"]}
    uncounted = w1 - set(at_master)
    assert set_aside <= uncounted and theirs - set(at_master) == uncounted
    assert level["lost"] <= len(uncounted) <= level["lost"] + 4, (level["lost"], len(uncounted))
    # the remaining worker carried the load after the cut
    w2 = {r["worker"] for r in workers["w2"]}
    assert sum(r["worker"] in w2 for r in records) > 250


def test_a_master_cut_off_from_every_worker_ends_the_run(slow_hosts, tmp_path: Path) -> None:
    net, parts = slow_hosts
    code, log, summary, records, late, workers = _run_with_cut(
        tmp_path, net, parts, ("master",), 8.0
    )
    assert code != 0, log[-3000:]
    assert summary["status"] == "failed" and "every worker was lost" in summary["stop_reason"]
    (level,) = summary["levels"]
    assert level["stop_reason"] == "interrupted"
    assert level["completed"] + level["failed"] + level["unfinished"] + level["lost"] <= 400
    at_master = {_key(r) for r in records}
    assert at_master | {_key(r) for r in late} <= {_key(r) for w in workers.values() for r in w}
