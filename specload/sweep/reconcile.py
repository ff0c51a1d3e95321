"""A level's client counts against the server's counters over the same scrapes.

The level's ``server`` block is the difference of two scrapes of vLLM's ``/metrics``
(:mod:`specload.sweep.server_metrics`). Every request the server worked on between them
is one the client recorded, whole or in part: a request sent after the first scrape
returned and ended before the second was sent is counted whole by both; a request that
overlaps either scrape counted somewhere between none and all of its tokens there. So the
client's side is an interval — ``[Σ inside, Σ inside + Σ overlapping]`` — and the counts
reconcile when the server's delta lies in it, widened by :data:`TOLERANCE_RATIO` of its top
(at least :data:`TOLERANCE_MIN` tokens) for counters updated a moment after a chunk is
sent. With nothing overlapping the interval is one number: the check is exact.

A server delta above the interval is work the client did not send: other traffic on the
server (``other_traffic``); below it, work the client saw that the server did not count in
the window (``window_mismatch``: a scrape that did not bracket the requests, a restart).
Checked for generated tokens (the records' output tokens against
``vllm:generation_tokens_total``) and, where every request in the window carried the
server's per-request counts (``spec_decode``), for drafts, draft tokens and accepted
tokens (``vllm:spec_decode_num_*_total``).

Nothing is compared against server figures that are not there or not one server's: a
failed scrape (``server_unavailable``, the level flagged ``server_metrics_unavailable``),
pages of several servers (``server_unreliable``, flagged ``server_counters_inconsistent``)
and a counter that is not a finite number (its check ``reconciled: null`` with a
``reason``) each come with a warning that says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specload.records.request import RequestRecord

TOLERANCE_RATIO = 0.005
TOLERANCE_MIN = 1.0

# Record counts -> the server block's counter keys.
SPEC_KEYS = {
    "drafts": "spec_decode_num_drafts",
    "draft_tokens": "spec_decode_num_draft_tokens",
    "accepted_tokens": "spec_decode_num_accepted_tokens",
}
TOKENS_KEY = "generation_tokens"


@dataclass
class Reconciler:
    """Tallies the records around one level's two scrapes (wall-clock seconds: the
    first scrape was sent at ``start_sent`` and answered at ``start_done``)."""

    start_sent: float
    start_done: float
    _pending: list[tuple[float, float, dict[str, float], bool]] = field(default_factory=list)
    end_sent: float | None = None
    end_done: float | None = None

    def add(self, record: RequestRecord) -> None:
        """A record of any step; kept if it may overlap the scrapes."""
        if record.end_s < self.start_sent:
            return
        if self.end_done is not None and record.start_s > self.end_done:
            return
        counts = {TOKENS_KEY: float(record.tokens_output)}
        sd = record.spec_decode
        has_spec = sd is not None and sd.get("source") == "server" and sd.get("error") is None
        if has_spec:
            assert sd is not None
            for key in SPEC_KEYS:
                counts[key] = float(sd.get(key) or 0)
        self._pending.append((record.start_s, record.end_s, counts, has_spec))

    def close(self, end_sent: float, end_done: float) -> None:
        """The second scrape was sent at ``end_sent`` and answered at ``end_done``."""
        self.end_sent, self.end_done = end_sent, end_done

    def result(self, server: dict[str, Any]) -> dict[str, Any] | None:
        """The level's ``reconciliation`` block (None until the level's end scrape)."""
        if self.end_sent is None or self.end_done is None:
            return None
        if "error" in server:  # no server figures: nothing to compare, and said so
            return {
                "server_unavailable": str(server["error"]),
                "generated_tokens": None,
                "spec_decode": None,
            }
        if server.get("reliable") is False:  # several servers' pages: not compared
            return {
                "server_unreliable": str(server.get("reason") or "pages of several servers"),
                "generated_tokens": None,
                "spec_decode": None,
            }
        if server.get("counter_reset"):  # counted from zero after a restart: no comparison
            return {"restarted": True, "generated_tokens": None, "spec_decode": None}
        non_finite = set(server.get("non_finite") or ())
        inside: dict[str, float] = {}
        top: dict[str, float] = {}
        n_inside = n_over = without_spec = 0
        for start, end, counts, has_spec in self._pending:
            if start > self.end_done:
                continue
            whole = start >= self.start_done and end <= self.end_sent
            if whole:
                n_inside += 1
            else:
                n_over += 1
            if not has_spec and counts[TOKENS_KEY] > 0:
                without_spec += 1
            for key, value in counts.items():
                top[key] = top.get(key, 0.0) + value
                if whole:
                    inside[key] = inside.get(key, 0.0) + value
        out: dict[str, Any] = {
            "requests_inside": n_inside,
            "requests_overlapping": n_over,
            "tolerance_ratio": TOLERANCE_RATIO,
        }
        out["generated_tokens"] = _check(
            inside.get(TOKENS_KEY, 0.0),
            top.get(TOKENS_KEY, 0.0),
            server.get(TOKENS_KEY),
            TOKENS_KEY in non_finite,
        )
        spec_server = {k: server.get(v) for k, v in SPEC_KEYS.items()}
        spec_non_finite = {k for k, v in SPEC_KEYS.items() if v in non_finite}
        if all(v is None for v in spec_server.values()) and not spec_non_finite:
            out["spec_decode"] = None  # the server does not speculate (or says nothing)
        elif without_spec:
            out["spec_decode"] = {
                "reconciled": None,
                "reason": f"{without_spec} requests in the window carried no per-request "
                "counts (vLLM --per-request-spec-decode-metrics, streamed with include_usage)",
            }
        else:
            parts = {
                k: _check(inside.get(k, 0.0), top.get(k, 0.0), spec_server[k], k in spec_non_finite)
                for k in SPEC_KEYS
            }
            verdicts = [p["reconciled"] for p in parts.values()]
            out["spec_decode"] = {
                "reconciled": None if None in verdicts else all(verdicts),
                **parts,
            }
        return out


NON_FINITE = "the server's counter is not a finite number (NaN or Inf): not compared"


def _check(low: float, high: float, server: Any, non_finite: bool = False) -> dict[str, Any]:
    """One count: the client's interval, the server's delta, the verdict and its cause.

    ``non_finite``: the server's counter read NaN or ±Inf (so ``server`` is None): not
    compared, and the ``reason`` says so.
    """
    out: dict[str, Any] = {"client_min": low, "client_max": high, "server": server}
    if isinstance(server, float) and not math.isfinite(server):
        out["server"], non_finite = None, True
    if non_finite:
        out["reconciled"] = None
        out["reason"] = NON_FINITE
        return out
    if not isinstance(server, int | float) or isinstance(server, bool):
        out["reconciled"] = None
        return out
    slack = max(TOLERANCE_MIN, TOLERANCE_RATIO * high)
    if server > high + slack:
        out["reconciled"] = False
        out["cause"] = "other_traffic"
    elif server < low - slack:
        out["reconciled"] = False
        out["cause"] = "window_mismatch"
    else:
        out["reconciled"] = True
    return out


def verdicts(block: dict[str, Any] | None) -> tuple[bool | None, bool | None]:
    """``(spec_decode_reconciled, tokens_reconciled)`` of a reconciliation block."""
    if not block:
        return None, None
    spec = block.get("spec_decode")
    return (spec or {}).get("reconciled"), (block.get("generated_tokens") or {}).get("reconciled")


_NAMES = {
    "generated_tokens": "generated tokens",
    "drafts": "drafts",
    "draft_tokens": "draft tokens",
    "accepted_tokens": "accepted tokens",
}


def _checks(block: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    if not block:
        return []
    out = [("generated_tokens", block.get("generated_tokens") or {})]
    spec = block.get("spec_decode") or {}
    out.extend((k, spec[k]) for k in SPEC_KEYS if isinstance(spec.get(k), dict))
    return out


def reconcile_flags(block: dict[str, Any] | None) -> list[str]:
    """The level's flags: from a failed check ``other_traffic``, ``window_mismatch``; from
    server figures that are missing ``server_metrics_unavailable``, or not one server's
    ``server_counters_inconsistent``."""
    if block and block.get("server_unavailable"):
        return ["server_metrics_unavailable"]
    if block and block.get("server_unreliable"):
        return ["server_counters_inconsistent"]
    causes = [c.get("cause") for _, c in _checks(block) if c.get("reconciled") is False]
    return sorted({str(c) for c in causes if c})


def reconcile_warnings(block: dict[str, Any] | None) -> list[str]:
    """One sentence per count that did not reconcile, with both figures; one for server
    figures that are missing, not one server's, or not finite."""
    if block and block.get("server_unavailable"):
        return [
            f"the server's /metrics could not be read ({block['server_unavailable']}): the "
            "level has no server-side figures and its counts were not reconciled"
        ]
    if block and block.get("server_unreliable"):
        return [
            f"the server's counters are not one server's: {block['server_unreliable']} Its "
            "server-side figures are withheld (server.withheld) and were not reconciled; "
            "point --metrics-url at one replica's /metrics, or run against one replica"
        ]
    out: list[str] = []
    for key, c in _checks(block):
        if c.get("reason") == NON_FINITE:
            out.append(
                f"the server's {_NAMES[key]} counter is not a finite number (NaN or Inf): "
                "not reconciled, its server-side figures left out"
            )
        if c.get("reconciled") is not False:
            continue
        low, high, server = c["client_min"], c["client_max"], c["server"]
        client = f"{low:,.0f}" if low == high else f"{low:,.0f}..{high:,.0f}"
        if c.get("cause") == "other_traffic":
            why = "other traffic on the server: its figures include work specload did not send"
        else:
            why = "the scrapes did not bracket the requests (or the server restarted)"
        out.append(
            f"the server counted {server:,.0f} {_NAMES[key]} over the level, the client "
            f"{client}: {why}"
        )
    return out
