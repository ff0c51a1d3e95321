"""``specload profile analyze TRACE...`` and ``specload profile capture --target URL``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.profile.analysis import ProfileReport, analyze
from specload.profile.capture import DEFAULT_SETTLE_S, DEFAULT_STOP_TIMEOUT_S, capture
from specload.profile.render import render_text
from specload.profile.tracefile import is_trace_file
from specload.urls import ServerURL, parse_server_url, redact_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="profile_command", metavar="ACTION")
    sub.required = True
    a = sub.add_parser(
        "analyze",
        help="all-reduce share of decode time from torch-profiler traces",
        description="Analyse one capture: one trace per rank (.json or .json.gz), or a "
        "directory holding them.",
    )
    a.add_argument("traces", nargs="+", metavar="TRACE", help="trace file or directory")
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.set_defaults(_profile_run=_run_analyze)

    c = sub.add_parser(
        "capture",
        help="profile a vLLM server (POST /start_profile, /stop_profile) and analyse",
        description="Start vLLM's profiler, wait, stop it, analyse the new trace files.",
    )
    c.add_argument("--target", required=True, metavar="URL", help="vLLM base URL")
    c.add_argument(
        "--seconds", default="10", metavar="S", help="how long to profile (30, 30s, 2m; default 10)"
    )
    c.add_argument(
        "--trace-dir",
        required=True,
        type=Path,
        metavar="DIR",
        help="the server's torch_profiler_dir (must be readable here)",
    )
    c.add_argument(
        "--stop-timeout",
        default=str(DEFAULT_STOP_TIMEOUT_S),
        metavar="S",
        help="how long /stop_profile may take (default 600 s)",
    )
    c.add_argument(
        "--settle",
        default=str(DEFAULT_SETTLE_S),
        metavar="S",
        help="how long to wait for trace files after /stop_profile (default 30 s)",
    )
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(_profile_run=_run_capture)


def _trace_paths(args: list[str]) -> list[Path]:
    paths: list[Path] = []
    for text in args:
        p = Path(text)
        if p.is_dir():
            files = sorted(q for q in p.iterdir() if q.is_file())
            found = [q for q in files if is_trace_file(q)] or [
                q for q in files if is_trace_file(q, torch_names_only=False)
            ]
            if not found:
                raise UsageError(f"{p}: no trace files (*.pt.trace.json[.gz]) in this directory")
            paths.extend(found)
        elif p.is_file():
            paths.append(p)
        else:
            raise UsageError(f"{p}: no such trace file or directory")
    return paths


def _print(report: ProfileReport, as_json: bool, extra: dict[str, object] | None = None) -> None:
    if as_json:
        body = report.to_json()
        if extra:
            body.update(extra)
        json.dump(body, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_text(report))


def _run_analyze(args: argparse.Namespace) -> int:
    report = analyze(_trace_paths(args.traces))
    _print(report, args.json)
    return 0


def _target(text: str) -> ServerURL:
    """``--target`` as a base URL the HTTP client also accepts (``http://[::1]x:80`` and
    other malformed IPv6 hosts are one line, not the client's traceback)."""
    target = parse_server_url(text, name="--target")
    try:
        httpx.URL(target.join("/start_profile"))
    except (httpx.InvalidURL, ValueError):
        raise UsageError(f"--target: {redact_url(text)!r} is not a valid URL") from None
    return target


def _run_capture(args: argparse.Namespace) -> int:
    target = _target(args.target)
    seconds = parse_duration(args.seconds, name="--seconds", allow_zero=False)
    stop_timeout = parse_duration(args.stop_timeout, name="--stop-timeout", allow_zero=False)
    settle = parse_duration(args.settle, name="--settle")
    result = capture(target, args.trace_dir, seconds, stop_timeout_s=stop_timeout, settle_s=settle)
    if not args.json:
        print(f"captured {len(result.files)} trace file(s) over {result.seconds:.1f} s:")
        for f in result.files:
            print(f"  {f}")
    _print(
        result.report,
        args.json,
        {"files": [str(f) for f in result.files], "capture_seconds": result.seconds},
    )
    return 0


def run(args: argparse.Namespace) -> int:
    code: int = args._profile_run(args)
    return code
