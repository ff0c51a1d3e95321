"""Server figures that cannot be had or trusted are said, never silently dropped or believed:
a failed or unreadable end-of-level scrape (each kind), a counter that is not a finite number,
pages of several servers behind one address (alternating process starts, counters going
backwards), each a flag and a warning on the level; a real restart still counts from zero."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from specload.results import summary_schema
from specload.sweep.reconcile import Reconciler, reconcile_flags, reconcile_warnings, verdicts
from specload.sweep.server_metrics import (
    Page,
    ServerProbe,
    consistency,
    http_scraper,
    server_block,
    snapshot,
)
from tests.unit.test_sweep_driver import FakeLoad, closed_plan, make_driver

pytestmark = pytest.mark.unit


def vpage(gen: float, start: float | None = 100.0, *, openmetrics: bool = False) -> str:
    """A vLLM page with its generated-tokens counter and its process's start time."""
    if openmetrics:
        lines = [
            "# HELP vllm:generation_tokens Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens counter",
            f'vllm:generation_tokens_total{{model_name="m"}} {gen} # {{trace_id="f00"}} 7 1.5e9',
            'vllm:generation_tokens_created{model_name="m"} 1.5e9',
        ]
    else:
        lines = [
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{model_name="m"}} {gen}',
        ]
    if start is not None:
        lines += ["# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {start}"]
    if openmetrics:
        lines.append("# EOF")
    return "\n".join(lines) + "\n"


def run_level(scrape_for: Callable[[list[dict[str, Any]]], Callable[[], str]]) -> dict[str, Any]:
    """One level (2 users, 20 requests of 50 tokens, no warm-up) with a probe on ``scrape``;
    the summary, checked against the schema."""
    load, records, summaries = FakeLoad(e2e_s=0.5), [], []  # type: ignore[var-annotated]
    scrape = scrape_for(records)
    driver = make_driver(
        load,
        closed_plan("2", requests=20),
        records,
        summaries,
        server=lambda: ServerProbe(scrape, wall=load.clock),
    )
    summary = driver.run()
    jsonschema.validate(orjson.loads(orjson.dumps(summary)), summary_schema())
    return summary


def served(records: list[dict[str, Any]]) -> float:
    """What a truthful server counted: every finished record's output tokens."""
    return float(sum(r["tokens_output"] for r in records))


def test_an_honest_server_reconciles_exactly() -> None:
    summary = run_level(lambda records: lambda: vpage(served(records)))
    level = summary["levels"][0]
    assert level["server"]["generation_tokens"] == 1000
    assert level["tokens_reconciled"] is True and level["flags"] == []


def scripted(good: int, fault: Callable[[], str]) -> Callable[[list[dict[str, Any]]], Any]:
    """The first ``good`` scrapes answer truthfully, the rest are ``fault``."""

    def scrape_for(records: list[dict[str, Any]]) -> Callable[[], str]:
        calls = [0]

        def scrape() -> str:
            calls[0] += 1
            return vpage(served(records)) if calls[0] <= good else fault()

        return scrape

    return scrape_for


def over_http(response: Callable[[], httpx.Response]) -> Callable[[], str]:
    return http_scraper(
        "http://vllm.test/metrics", transport=httpx.MockTransport(lambda _: response())
    )


def refused() -> str:
    raise httpx.ConnectError("[Errno 111] Connection refused")


FAULTS: dict[str, tuple[Callable[[], str], str]] = {
    "html login page": (
        over_http(lambda: httpx.Response(200, html="<html><body>Sign in</body></html>")),
        "an HTML page",
    ),
    "html sent as text/plain": (
        lambda: "<!DOCTYPE html>\n<html><body>Sign in</body></html>\n",
        "not Prometheus or OpenMetrics text",
    ),
    "404": (over_http(lambda: httpx.Response(404, text="Not Found")), "HTTP 404"),
    "500": (over_http(lambda: httpx.Response(500, text="oops")), "HTTP 500"),
    "empty 200": (lambda: "", "an empty page"),
    "another program's metrics": (
        lambda: "# TYPE http_requests_total counter\nhttp_requests_total 3\n",
        "none vllm:*",
    ),
    "refused": (refused, "ConnectError"),
    "not UTF-8": (
        over_http(lambda: httpx.Response(200, content=b"\xff\xfe\x00garbage")),
        "not",
    ),
}


@pytest.mark.parametrize("kind", list(FAULTS))
def test_a_failed_end_scrape_is_a_flag_and_a_warning(kind: str) -> None:
    fault, reason = FAULTS[kind]
    level = run_level(scripted(2, fault))["levels"][0]  # the start scrape and its check
    assert "server_metrics_unavailable" in level["flags"]
    assert level["server"]["error"].startswith("scrape at level end failed")
    assert reason in level["server"]["error"]
    (warning,) = [w for w in level["warnings"] if "/metrics could not be read" in w]
    assert reason in warning
    assert level["tokens_reconciled"] is None and level["spec_decode_reconciled"] is None


def test_a_failed_start_scrape_is_a_flag_too() -> None:
    def scrape_for(records: list[dict[str, Any]]) -> Callable[[], str]:
        calls = [0]

        def scrape() -> str:
            calls[0] += 1
            return "<html>" if calls[0] == 1 else vpage(served(records))

        return scrape

    level = run_level(scrape_for)["levels"][0]
    assert "server_metrics_unavailable" in level["flags"]
    assert "scrape at level start failed" in level["server"]["error"]


def test_one_passing_failure_at_the_end_is_retried() -> None:
    def scrape_for(records: list[dict[str, Any]]) -> Callable[[], str]:
        calls = [0]

        def scrape() -> str:
            calls[0] += 1
            if calls[0] == 3:
                raise httpx.ReadTimeout("timed out")
            return vpage(served(records))

        return scrape

    level = run_level(scrape_for)["levels"][0]
    assert level["flags"] == [] and level["tokens_reconciled"] is True


def test_an_openmetrics_page_with_exemplars_is_read_like_the_text_format() -> None:
    def scrape_for(records: list[dict[str, Any]]) -> Callable[[], str]:
        return lambda: vpage(served(records), openmetrics=bool(records))

    level = run_level(scrape_for)["levels"][0]
    assert level["flags"] == []
    assert level["server"]["generation_tokens"] == 1000
    assert level["tokens_reconciled"] is True


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf"])
def test_a_non_finite_counter_is_not_reconciled(bad: str) -> None:
    def scrape_for(records: list[dict[str, Any]]) -> Callable[[], str]:
        return lambda: vpage(served(records)) if not records else vpage(bad)  # type: ignore[arg-type]

    level = run_level(scrape_for)["levels"][0]
    assert "generation_tokens" not in level["server"]
    assert level["server"]["non_finite"] == ["generation_tokens"]
    check = level["reconciliation"]["generated_tokens"]
    assert check["reconciled"] is None and check["server"] is None
    assert "not a finite number" in check["reason"]
    assert level["tokens_reconciled"] is None
    assert any("generated tokens counter is not a finite number" in w for w in level["warnings"])


def replicas(records: list[dict[str, Any]]) -> Callable[[], str]:
    """Two replicas behind one address, answering in turn: each served half of the requests
    on top of what it had served before the run."""
    calls = [0]

    def scrape() -> str:
        calls[0] += 1
        half = served(records) / 2
        if calls[0] % 2:
            return vpage(5000 + half, start=100.0)
        return vpage(800 + half, start=200.0)

    return scrape


def test_replicas_behind_one_address_make_the_server_block_unreliable() -> None:
    level = run_level(replicas)["levels"][0]
    server = level["server"]
    assert server["reliable"] is False and "several replicas" in server["reason"]
    assert "generation_tokens" not in server and "generation_tokens" in server["withheld"]
    assert "server_counters_inconsistent" in level["flags"]
    assert "other_traffic" not in level["flags"] and "window_mismatch" not in level["flags"]
    assert level["tokens_reconciled"] is None
    assert level["reconciliation"]["server_unreliable"] == server["reason"]
    (warning,) = [w for w in level["warnings"] if "not one server's" in w]
    assert "several replicas behind one address" in warning


def pages(*specs: tuple[float, float, float | None]) -> list[Page]:
    """Pages answered at ``t`` with ``gen`` tokens and process start ``p``."""
    return [Page(t, snapshot(vpage(gen, p))) for t, gen, p in specs]


@pytest.mark.parametrize(
    ("seq", "needle"),
    [
        # A, B, A, B: the pages alternate between two processes.
        (((10, 100, 1.0), (11, 900, 10.5), (20, 160, 1.0), (21, 960, 10.5)), "alternate"),
        # A, A, B, B with B older than A: "138 for 92" without a drop of any counter.
        (((10, 100, 5.0), (11, 100, 5.0), (20, 238, 4.0), (21, 238, 4.0)), "an older server"),
        # B newer than A, but already running when A answered at 11: not a restart either.
        (((10, 100, 1.0), (11, 100, 1.0), (20, 238, 3.0), (21, 238, 3.0)), "running beside"),
        # One process start, and its counter goes down.
        (((10, 500, 1.0), (11, 500, 1.0), (20, 450, 1.0), (21, 460, 1.0)), "went backwards"),
        # No process start on the page: down, up, down again is not one restart.
        (((10, 500, None), (11, 100, None), (20, 560, None), (21, 150, None)), "2 times"),
    ],
)
def test_pages_of_several_servers_are_inconsistent(
    seq: tuple[tuple[float, float, float | None], ...], needle: str
) -> None:
    verdict = consistency(pages(*seq), level_end=2)
    assert verdict.problem is not None and needle in verdict.problem
    assert "several replicas behind one address" in verdict.problem


def test_a_real_restart_counts_from_zero_even_when_the_new_counter_is_higher() -> None:
    # The old process (start 1) last answered at 11; the new one started at 15.
    seq = pages((10, 100, 1.0), (11, 100, 1.0), (20, 400, 15.0), (21, 420, 15.0))
    verdict = consistency(seq, level_end=2)
    assert verdict.problem is None and verdict.restarted
    start, end = seq[0].snap, seq[2].snap
    assert start is not None and end is not None
    block = server_block(start, end, restarted=verdict.restarted)
    assert block["counter_reset"] is True and block["generation_tokens"] == 400
    # A page without a process start that drops once: a restart, as before.
    once = pages((10, 500, None), (11, 500, None), (20, 40, None), (21, 60, None))
    assert consistency(once, level_end=2) == consistency(once, level_end=2)
    assert consistency(once, level_end=2).restarted
    # A restart after the level's end scrape is not the level's.
    late = pages((10, 100, 1.0), (11, 100, 1.0), (20, 160, 1.0), (21, 5, 30.0))
    assert consistency(late, level_end=2).restarted is False


def test_reconcile_says_why_nothing_was_compared() -> None:
    rec = Reconciler(10.0, 10.1)
    rec.close(20.0, 20.1)
    unreliable = rec.result({"reliable": False, "reason": "pages alternate: replicas?"})
    assert verdicts(unreliable) == (None, None)
    assert reconcile_flags(unreliable) == ["server_counters_inconsistent"]
    assert "replicas?" in reconcile_warnings(unreliable)[0]
    # Before the fix a NaN counter compared as "reconciled": NaN is neither above nor below.
    nan = rec.result({"generation_tokens": float("nan")})
    assert verdicts(nan) == (None, None)
    assert reconcile_warnings(nan)
