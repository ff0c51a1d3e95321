"""Per-request speculative-decoding metrics as vLLM 0.32 reports them, and the simulator's truth.

``--per-request-spec-decode-metrics summary|detailed`` (vLLM 0.32's option, same values): every
*verify step* of a request (a decode step in which it had draft tokens) is observed —
``histogram[accepted] += 1``, ``num_draft_tokens += drafts``, with ``detailed`` the step's
accepted and drafted counts appended — exactly as vLLM's ``RequestSpecDecodeMetrics``
(``vllm/v1/metrics/stats.py``). Accepted counts are taken before the ``max_tokens`` cut, as the
``vllm:spec_decode_*`` counters are, so a request's sums are its share of the counters.
:meth:`RequestSpecDecode.to_dict` is vLLM's payload; the API puts it under
``metrics.speculative_decoding`` (:mod:`simulator.api`).

The truth beside it (:class:`SpecTruth`, served on the control port as
``GET /truth/spec_decode``) splits the same verify steps by channel: a step belongs to the
channel of the first token it produces — reasoning if the request had generated fewer than its
reasoning tokens before the step, else content.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

SPEC_METRICS_LEVELS: tuple[str, ...] = ("none", "summary", "detailed")
TRUTH_KEEP = 10_000


class ChannelCounts:
    """Verify steps, draft tokens and accepted draft tokens of one channel of one request."""

    __slots__ = ("accepted_tokens", "draft_tokens", "drafts")

    def __init__(self) -> None:
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
        }


class RequestSpecDecode:
    """One request's verify steps: vLLM's ``RequestSpecDecodeMetrics`` and the channel truth."""

    __slots__ = (
        "content",
        "detailed",
        "histogram",
        "num_draft_tokens",
        "num_spec_tokens",
        "per_step_accepted",
        "per_step_drafted",
        "reasoning",
    )

    def __init__(self, num_spec_tokens: int, *, detailed: bool) -> None:
        self.num_spec_tokens = num_spec_tokens
        self.detailed = detailed
        self.histogram = [0] * (num_spec_tokens + 1)
        self.num_draft_tokens = 0
        self.per_step_accepted: list[int] = []
        self.per_step_drafted: list[int] = []
        self.reasoning = ChannelCounts()
        self.content = ChannelCounts()

    def observe(self, drafts: int, accepted: int, reasoning: bool) -> None:
        """A verify step of ``drafts`` draft tokens of which ``accepted`` were accepted;
        ``reasoning``: the step's first token is a reasoning token."""
        self.histogram[accepted] += 1
        self.num_draft_tokens += drafts
        if self.detailed:
            self.per_step_accepted.append(accepted)
            self.per_step_drafted.append(drafts)
        channel = self.reasoning if reasoning else self.content
        channel.drafts += 1
        channel.draft_tokens += drafts
        channel.accepted_tokens += accepted

    def to_dict(self) -> dict[str, Any]:
        """vLLM 0.32's ``RequestSpecDecodeMetrics.to_dict``: the per-step arrays only when
        populated (``detailed`` and at least one verify step)."""
        steps = sum(self.histogram)
        accepted = sum(j * count for j, count in enumerate(self.histogram))
        result: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.num_draft_tokens
            if self.num_draft_tokens
            else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
        if self.per_step_accepted:
            result["per_step_accepted"] = list(self.per_step_accepted)
            result["per_step_drafted"] = list(self.per_step_drafted)
        return result

    def stream_metrics(self) -> dict[str, Any]:
        """``metrics`` of the final usage chunk: vLLM dumps it with ``exclude_none`` and
        ``exclude_unset``, so only ``speculative_decoding`` and the fields it set."""
        return {"speculative_decoding": self.to_dict()}

    def response_metrics(self) -> dict[str, Any]:
        """``metrics`` of a whole response: vLLM's ``PerRequestMetrics.model_dump()``, every
        field present (the timing ones null without ``--enable-per-request-metrics``)."""
        spec = self.to_dict()
        spec.setdefault("per_step_accepted", None)
        spec.setdefault("per_step_drafted", None)
        return {
            "time_to_first_token_ms": None,
            "generation_time_ms": None,
            "queue_time_ms": None,
            "mean_itl_ms": None,
            "tokens_per_second": None,
            "speculative_decoding": spec,
        }

    def truth(
        self, rid: str, category: str, completion_tokens: int, reasoning_tokens: int
    ) -> dict[str, Any]:
        r, c = self.reasoning, self.content
        return {
            "id": rid,
            "category": category,
            "completion_tokens": completion_tokens,
            "reasoning_tokens": reasoning_tokens,
            "reasoning": r.as_dict(),
            "content": c.as_dict(),
            "total": {
                "drafts": r.drafts + c.drafts,
                "draft_tokens": r.draft_tokens + c.draft_tokens,
                "accepted_tokens": r.accepted_tokens + c.accepted_tokens,
            },
        }


class SpecTruth:
    """The last ``keep`` finished requests' per-channel truth, by response id."""

    def __init__(self, keep: int = TRUTH_KEEP) -> None:
        self.keep = keep
        self.records: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def add(self, record: dict[str, Any]) -> None:
        records = self.records
        records[record["id"]] = record
        while len(records) > self.keep:
            records.popitem(last=False)

    def as_json(self) -> dict[str, Any]:
        return {"keep": self.keep, "requests": dict(self.records)}
