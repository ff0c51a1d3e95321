"""Bad input to the command line: one line naming the input, exit 2, never a traceback —
and nothing started before it is refused (the demo checks every option before the stack)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from specload import demo
from specload.cli import main
from specload.errors import UsageError
from specload.sweep.plan import MAX_CONCURRENCY, MAX_REQUEST_RATE, build_plan
from specload.sweep.settings import MAX_LOCAL_WORKERS, check_metrics_port, check_workers

pytestmark = pytest.mark.unit


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--concurrency", "100000000000000000000000"],
         "--concurrency: 100000000000000000000000 is beyond the limit of 100,000"),
        (["--concurrency", "1,100001"], "--concurrency: 100001 is beyond the limit of 100,000"),
        (["--concurrency", "1e23"], "--concurrency: '1e23' is not a whole number"),
        (["--request-rate", "1e23"],
         "--request-rate: 1e23 is beyond the limit of 10,000 per second"),
        (["--request-rate", "1", "--max-concurrency", "1000000"],
         "--max-concurrency: 1000000 is beyond the limit of 100,000"),
        (["--requests", "100000000000000000000"], "--requests: 100000000000000000000 is beyond"),
        (["--workers", "100000"], "--workers: 100000 is beyond the limit of 256 local worker"),
        (["--workers", "-1"], "--workers: -1 must be 0 or more"),
        (["--expect-workers", "1000000"], "--expect-workers: 1000000 is beyond the limit of 1024"),
        (["--workers", "2", "--expect-workers", "1"], "--expect-workers: 1 is fewer than"),
        (["--master-bind-port", "70000"], "--master-bind-port: 70000 is not a port"),
        (["--metrics-address", "127.0.0.1:x"], "--metrics-address: '127.0.0.1:x' is not HOST:PORT"),
    ],
)  # fmt: skip
def test_run_bounds_are_one_line_errors(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # (--ready-timeout: a check that let it through would not wait 10 minutes here)
    assert main(["run", "--ready-timeout", "1s", "--out", str(tmp_path / "r"), *argv]) == 2
    assert needle in one_line(capsys)


def test_the_bounds_themselves_are_accepted() -> None:
    plan = build_plan(
        concurrency=f"1,{MAX_CONCURRENCY}",
        request_rate=None,
        max_concurrency=None,
        warmup="0",
        duration="1",
        requests=None,
    )
    assert plan.levels[-1].users == MAX_CONCURRENCY
    build_plan(
        concurrency=None,
        request_rate=f"{MAX_REQUEST_RATE:g}",
        max_concurrency=MAX_CONCURRENCY,
        warmup="0",
        duration="1",
        requests=None,
    )
    check_workers(MAX_LOCAL_WORKERS, None, 5557)


def test_a_taken_metrics_port_is_named_with_the_way_out() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(UsageError) as err:
            check_metrics_port(f"127.0.0.1:{port}")
    assert str(err.value) == (
        f"--metrics-address 127.0.0.1:{port}: port {port} is in use (another run?); choose "
        "another with --metrics-address HOST:PORT (env SPECLOAD_METRICS_ADDRESS; 127.0.0.1:0 "
        "for any free port) or off"
    )
    check_metrics_port("off")
    check_metrics_port("127.0.0.1:0")


@pytest.mark.parametrize(
    "argv",
    [
        ["stack", "up", "--state-dir", "/proc/nope"],
        ["stack", "down", "--state-dir", "/proc/nope"],
    ],
)
def test_stack_state_dir_that_cannot_be_created(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert one_line(capsys) == (
        "specload: error: --state-dir /proc/nope: cannot create directory "
        "(No such file or directory)"
    )


def test_stack_workers_bound_before_anything_is_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    assert main(["stack", "up", "--workers", "100000", "--state-dir", str(state)]) == 2
    assert "--workers: 100000 is beyond the limit of 256" in one_line(capsys)
    assert not state.exists()


def test_deploy_k8s_out_that_cannot_be_created(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "k8s", "--out", "/proc/nope"]) == 2
    assert one_line(capsys) == (
        "specload: error: --out '/proc/nope': cannot create directory (No such file or directory)"
    )


@pytest.mark.parametrize(
    "target",
    [
        "http://[::1]x:80/",
        "http://[::1]]:8000",
        "http://[v1.x]:80",
        "http://[::1:8000",
        "http://u:secret@[::1]]:80",
    ],
)
def test_profile_capture_invalid_ipv6_target(
    target: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["profile", "capture", "--target", target, "--trace-dir", str(tmp_path)]) == 2
    line = one_line(capsys)
    assert line.startswith("specload: error: --target: ") and "secret" not in line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--duration", "abc"], "--duration"),
        (["--concurrency", "-1"], "--concurrency: '-1' must be at least 1"),
        (["--concurrency", "1,x"], "--concurrency: 'x' is not a whole number"),
        (["--warmup=-1s"], "--warmup"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--time-scale", "inf"], "--time-scale"),
    ],
)
def test_demo_checks_every_option_before_starting_anything(
    argv: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    monkeypatch.setattr(demo, "STAGES", [lambda ctx: started.append("stage")])
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out), *argv]) == 2
    assert needle in one_line(capsys)
    assert started == [] and not out.exists()
