"""Bad input to the command line: one line naming the input, exit 2, never a traceback —
and nothing started before it is refused (the demo checks every option before the stack)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specload.cli import main
from specload.commands import demo
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


# -- prompt files, traces and load options that could never be sent ----------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port that would take a connection (the kernel completes the handshake into the
    backlog): after the run, ``accept`` says whether anything reached it."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.setblocking(False)
        yield sock


def contacted(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


BAD_FILES: list[tuple[str, str, str, str]] = [
    # (option, file name, content, the error after "specload: error: <path>")
    ("--prompts", "p.jsonl", '{"prompt": "ok"}\n{"prompt": "caf\\ud800"}\n',
     ":2: field 'prompt': lone surrogate \\ud800 (character 4) cannot be encoded as UTF-8"),
    ("--prompts", "p.jsonl", '{"prompt": "x", "max_tokens": 1e30}\n',
     ":1: field 'max_tokens' must be a whole number from 1 to 10,000,000, not 1e+30"),
    ("--prompts", "p.jsonl", '{"prompt": "x", "max_tokens": 1180591620717411303424}\n',
     ":1: field 'max_tokens' must be a whole number from 1 to 10,000,000, "
     "not 1180591620717411303424"),
    ("--prompts", "p.jsonl", '{"prompt": "x", "max_tokens": true}\n',
     ":1: field 'max_tokens' must be a whole number from 1 to 10,000,000, not True"),
    ("--prompts", "p.jsonl", json.dumps({"prompt": "x", "category": "math\r\nX-Injected: 1"}),
     ":1: field 'category': '\\r' (character 5) is not printable "
     "(a category is a label: printable text only)"),
    ("--prompts", "sg.json",
     json.dumps([{"conversations": [{"from": "human", "value": "\udfff"}]}]),
     ": entry 0: field 'conversations[0].value': lone surrogate \\udfff (character 1) "
     "cannot be encoded as UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize(("option", "name", "content", "error"), BAD_FILES)
def test_a_prompt_file_that_cannot_be_sent_is_refused_before_the_server_is_asked(
    option: str,
    name: str,
    content: str,
    error: str,
    listener: socket.socket,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # Before: it passed the checks; the run then hung (--requests) or ended "complete",
    # 0 ok, 0 failed, exit 0, with thousands of tracebacks in run.log (--duration).
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    out = tmp_path / "r"
    argv = ["run", "--host", host, "--ready-timeout", "1s", "--out", str(out), option, str(path)]
    assert main(argv) == 2
    assert one_line(capsys) == f"specload: error: {path}{error}"
    assert not contacted(listener) and not out.exists()


def test_a_trace_that_cannot_be_sent_is_refused_before_the_server_is_asked(
    listener: socket.socket, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "prompt": "\ud800"}) + "\n")
    host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    argv = ["run", "--host", host, "--ready-timeout", "1s", "--out", str(tmp_path / "r")]
    assert main([*argv, "--trace", str(path)]) == 2
    assert one_line(capsys) == (
        f"specload: error: --trace {str(path)!r} line 1: field 'prompt': lone surrogate "
        "\\ud800 (character 1) cannot be encoded as UTF-8"
    )
    assert not contacted(listener)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--max-tokens", "0"], "--max-tokens: 0 must be at least 1"),
        (["--max-tokens", "-1"], "--max-tokens: -1 must be at least 1"),
        (["--max-tokens", str(2**70)], "--max-tokens: 1180591620717411303424 is beyond the limit"),
        (["--max-tokens", "1e30"], "argument --max-tokens: invalid int value: '1e30'"),
        (["--max-tokens", "1.5"], "argument --max-tokens: invalid int value: '1.5'"),
        (["--temperature", "nan"], "--temperature: nan must be between 0 and 100"),
        (["--temperature", "1e400"], "--temperature: inf must be between 0 and 100"),
        (["--request-timeout", "inf"], "--request-timeout: inf must be positive"),
        (["--model", "m\udcff"], "--model: 'm\\udcff' is not UTF-8 text"),
        (["--variant", "v\r\nX: 1"], "--variant: 'v\\r\\nX: 1': character 2 ('\\r') is not"),
    ],
)
def test_load_option_numbers_and_names_are_checked_before_the_server_is_asked(
    argv: list[str], needle: str, listener: socket.socket, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:  # fmt: skip
    host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    out = tmp_path / "r"
    try:
        code = main(["run", "--host", host, "--ready-timeout", "1s", "--out", str(out), *argv])
    except SystemExit as exc:  # argparse's own type errors
        code = exc.code
    assert code == 2
    assert needle in one_line(capsys)
    assert not contacted(listener) and not out.exists()


def test_the_command_itself_exits_2_with_one_line_and_no_traceback(
    listener: socket.socket, tmp_path: Path
) -> None:
    # The whole command in its own process, as a user runs it: nothing else on stderr.
    path = tmp_path / "sharegpt.jsonl"
    path.write_text('{"prompt": "ok"}\n' * 16 + '{"prompt": "\\ud83d cut emoji"}\n')
    host = f"http://127.0.0.1:{listener.getsockname()[1]}"
    argv = ["run", "--host", host, "--requests", "5", "--concurrency", "1", "--prompts", str(path)]
    proc = subprocess.run(
        [sys.executable, "-m", "specload", *argv, "--out", str(tmp_path / "r")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"specload: error: {path}:17: field 'prompt': lone surrogate \\ud83d (character 1) "
        "cannot be encoded as UTF-8"
    ]
    assert proc.stdout == ""
    assert not contacted(listener)
