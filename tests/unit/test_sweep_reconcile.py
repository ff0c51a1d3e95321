"""A level's client counts against the server's: the interval, the verdicts, the causes; the
prefix-cache reset's answers; a server of two models read for the run's one."""

from __future__ import annotations

from typing import Any

import httpx

from specload.records.request import RequestRecord
from specload.sweep.reconcile import Reconciler, reconcile_flags, reconcile_warnings, verdicts
from specload.sweep.server_metrics import reset_prefix_cache, snapshot


def record(
    start: float, end: float, tokens: int, spec: tuple[int, int, int] | None
) -> RequestRecord:
    r = RequestRecord("coding", "c1", "v", "m", start, end, ok=True, tokens_output=tokens)
    if spec is not None:
        drafts, draft_tokens, accepted = spec
        r.spec_decode = {
            "source": "server",
            "drafts": drafts,
            "draft_tokens": draft_tokens,
            "accepted_tokens": accepted,
        }
    return r


def server(tokens: float, drafts: float, draft_tokens: float, accepted: float) -> dict[str, Any]:
    return {
        "generation_tokens": tokens,
        "spec_decode_num_drafts": drafts,
        "spec_decode_num_draft_tokens": draft_tokens,
        "spec_decode_num_accepted_tokens": accepted,
    }


def reconciler(*records: RequestRecord) -> Reconciler:
    rec = Reconciler(10.0, 10.1)  # first scrape sent at 10.0, answered at 10.1
    for r in records:
        rec.add(r)
    rec.close(20.0, 20.1)
    return rec


def test_requests_inside_the_scrapes_reconcile_exactly() -> None:
    rec = reconciler(record(11, 12, 100, (30, 90, 40)), record(12, 19, 50, (10, 30, 20)))
    block = rec.result(server(150, 40, 120, 60))
    assert block is not None
    assert (block["requests_inside"], block["requests_overlapping"]) == (2, 0)
    assert block["generated_tokens"] == {
        "client_min": 150,
        "client_max": 150,
        "server": 150,
        "reconciled": True,
    }
    assert verdicts(block) == (True, True)
    # One accepted token more on the server than the client saw: beyond the tolerance of 1?
    # No: the slack is max(1, 0.5% of 60) = 1 token.
    assert verdicts(rec.result(server(150, 40, 120, 61))) == (True, True)
    off = rec.result(server(150, 40, 120, 62))
    assert verdicts(off) == (False, True)
    assert reconcile_flags(off) == ["other_traffic"]
    (warning,) = reconcile_warnings(off)
    assert "62 accepted tokens" in warning and "client 60" in warning


def test_a_request_across_a_scrape_widens_the_interval() -> None:
    # Sent before the first scrape answered, and one after the end: partly counted.
    rec = reconciler(record(9.5, 12, 100, (30, 90, 40)), record(19.5, 25, 80, (20, 60, 30)))
    block = rec.result(server(120, 35, 100, 50))
    assert block is not None
    assert (block["requests_inside"], block["requests_overlapping"]) == (0, 2)
    assert block["generated_tokens"]["client_min"] == 0
    assert block["generated_tokens"]["client_max"] == 180
    assert verdicts(block) == (True, True)
    # A request that ended before the first scrape and one sent after the last: not counted.
    rec = reconciler(record(1, 9, 500, (1, 3, 1)), record(21, 30, 500, (1, 3, 1)))
    block = rec.result(server(0, 0, 0, 0))
    assert block is not None and block["requests_inside"] + block["requests_overlapping"] == 0
    # The server counted less than the requests wholly inside: the window did not line up.
    block = reconciler(record(11, 12, 100, None)).result({"generation_tokens": 40})
    assert block is not None
    assert block["generated_tokens"]["cause"] == "window_mismatch"
    assert block["spec_decode"] is None  # the server does not speculate


def test_requests_without_per_request_counts_leave_the_spec_check_open() -> None:
    rec = reconciler(record(11, 12, 100, (30, 90, 40)), record(12, 13, 50, None))
    block = rec.result(server(150, 30, 90, 40))
    assert block is not None
    assert block["spec_decode"]["reconciled"] is None
    assert "1 requests" in block["spec_decode"]["reason"]
    assert verdicts(block) == (None, True)
    # No server figures: nothing compared, and the level is told why.
    failed = rec.result({"error": "scrape failed"})
    assert verdicts(failed) == (None, None)
    assert reconcile_flags(failed) == ["server_metrics_unavailable"]


class _Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code = status
        self._body = body

    def json(self) -> Any:
        if isinstance(self._body, Exception):
            raise self._body
        return self._body


def test_the_prefix_cache_reset_says_what_the_server_answered() -> None:
    def post(status: int, body: Any = None) -> Any:
        return lambda path: _Response(status, body)

    assert reset_prefix_cache(post(200, {"success": True}), cache_bust=False).done is True
    busy = reset_prefix_cache(post(200, {"success": False}), cache_bust=False)
    assert busy.done is False and busy.again and "running" in (busy.detail or "")
    absent = reset_prefix_cache(post(404), cache_bust=True)
    assert absent.done is False and not absent.again
    assert "VLLM_SERVER_DEV_MODE=1" in (absent.detail or "")
    assert "--cache-bust" in (absent.detail or "")
    assert reset_prefix_cache(post(200, ValueError("no json")), cache_bust=False).done is True

    def refused(path: str) -> Any:
        raise httpx.ConnectError("refused")

    failed = reset_prefix_cache(refused, cache_bust=False)
    assert failed.done is False and "ConnectError" in (failed.detail or "")


PAGE = """\
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="a"} 100
vllm:generation_tokens_total{engine="1",model_name="a"} 20
vllm:generation_tokens_total{engine="0",model_name="b"} 7
"""


def test_a_server_of_two_models_is_read_for_the_runs_model() -> None:
    assert snapshot(PAGE, "a").counters["generation_tokens"] == 120  # both engines of a
    assert snapshot(PAGE, "b").counters["generation_tokens"] == 7
    assert snapshot(PAGE, "c").counters["generation_tokens"] == 127  # unknown: every series
    assert snapshot(PAGE).counters["generation_tokens"] == 127
