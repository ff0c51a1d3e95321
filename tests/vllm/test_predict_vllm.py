"""``specload predict`` against real vLLM (CPU build, the tiny plain model, greedy): the
forecast from a baseline run, then the same run on the real n-gram server (k 3, lookup 2..4).

Known truth is the n-gram server's own counters, scraped before and after its run: the counts
come from the baseline alone and match exactly. Both servers are warmed first (a fresh CPU
server's first requests ran ~60% slower). The TPOT ratio variant/baseline at concurrency 1,
from the baseline alone, is checked against the measured one; the TPOT figures are printed
(docs/predict.md).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from specload import promtext
from tests.fixtures.sweep import run_specload
from tests.fixtures.vllm import NGRAM_SPECULATIVE_CONFIG

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUN = [
    "--concurrency",
    "1,2,4,8,16",
    "--requests",
    "12",
    "--temperature",
    "0",
    "--max-tokens",
    "200",
    "--warmup",
    "0",
    "--record-token-ids",
    "--metrics-address",
    "off",
    "--progress",
    "off",
    "--no-plots",
    # A stream the CPU server stalls on fails in 2 min, not 10: the level goes on.
    "--request-timeout",
    "120",
]
RUN_TIMEOUT_S = 600
TOLERANCE = math.log(1.5)  # predicted against measured TPOT ratio at c1
# the forecast asks for the n-gram server's own configuration
SPEC = [
    *("--method", "ngram"),
    *("--num-speculative-tokens", str(NGRAM_SPECULATIVE_CONFIG["num_speculative_tokens"])),
    *("--prompt-lookup-min", str(NGRAM_SPECULATIVE_CONFIG["prompt_lookup_min"])),
    *("--prompt-lookup-max", str(NGRAM_SPECULATIVE_CONFIG["prompt_lookup_max"])),
    *("--max-model-len", "2048"),  # the fixture's servers
]
COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def _counters(url: str) -> dict[str, float]:
    parsed = promtext.parse(httpx.get(url + "/metrics", timeout=10).text)
    out: dict[str, float] = {}
    for name, family in COUNTERS.items():
        fam = parsed.get_family(family)
        total = fam.total() if fam is not None else None
        out[name] = float(total or 0.0)
    return out


def _warm(server: Any, out: Path) -> None:
    """A few requests at every level first: a CPU server's first steps of each batch shape
    run slow (kernels chosen and memory placed on first use; n-gram: the proposer's JIT), and
    the first requests of a fresh server measured 7.8-8.0 ms against 3.9-5.1 ms later."""
    warm = [*RUN, "--requests", "4"]  # the last --requests wins
    run = run_specload(["run", "--host", server.base_url, "--out", str(out), *warm], RUN_TIMEOUT_S)
    assert run.returncode == 0, run.stderr


def _alone(up: Any, down: Any, out: Path, warmed: set[str]) -> None:
    """Only ``up`` runs (started if it was down, warmed on its first use): two vLLM servers
    serving at once on two cores make the front end hold streams back (medians near zero,
    ratios of 20x). The other is paused (SIGSTOP: no CPU, its warm state kept), not stopped:
    a restart cost ~30 s and a warm-up at every switch."""
    down.pause()
    up.resume()
    if not up.is_running():
        up.start()
        warmed.discard(up.kind)
    if up.kind not in warmed:
        _warm(up, out)
        warmed.add(up.kind)


def _c1_ratio(plain: Any, ngram: Any, out: Path, warmed: set[str]) -> float | None:
    """n-gram median TPOT / baseline median TPOT at concurrency 1, each server alone;
    None when a level's tokens arrived in bursts (flagged ``streams_held``, or a median of
    zero)."""
    tpot = []
    for server, other, name in ((plain, ngram, "plain"), (ngram, plain, "ngram")):
        _alone(server, other, out / f"warm-{name}", warmed)
        args = ["run", "--host", server.base_url, "--out", str(out / name), *RUN]
        run = run_specload([*args, "--concurrency", "1"], RUN_TIMEOUT_S)
        assert run.returncode == 0, run.stderr
        level = _c1_level(out / name)
        if "streams_held" in level["flags"]:
            return None
        tpot.append(level["median_tpot_ms"])
    if not all(isinstance(t, float) and t > 0 for t in tpot):
        return None
    return float(tpot[1] / tpot[0])


def _c1_level(out: Path) -> dict[str, Any]:
    level: dict[str, Any] = json.loads((out / "summary.json").read_text())["levels"][0]
    assert level["concurrency"] == 1, level
    return level


def _falling_levels(data: dict[str, Any]) -> list[str]:
    """The forecast's own warnings that a baseline level's tokens arrived in bursts."""
    return [w for w in data["warnings"] if "arrived in bursts" in w]


def test_predict_ngram_against_the_real_ngram_server(vllm_plain, vllm_ngram, tmp_path) -> None:
    warmed: set[str] = set()
    _alone(vllm_plain, vllm_ngram, tmp_path / "warm-plain", warmed)

    def predict(baseline: Path, *extra: str) -> dict[str, Any]:
        # The baseline server's own startup log tells the engine path (vLLM 0.32, CPU).
        log = ["--server-log", str(vllm_plain.log_path)]
        result = run_specload(["predict", str(baseline), *SPEC, *log, "--json", *extra])
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    # On this 2-core VM vLLM's front end sometimes holds a request's whole stream until its
    # end (an independent httpx client sees it too: TTFT ~1.1 s, then 200 tokens at once), and
    # a level where most requests did has a median TPOT of 0.2 ms beside 6 ms. The sweep flags
    # such a level streams_held and the forecast names it (so does a level cheaper than one of
    # fewer tokens per step); the baseline is measured again (three tries) so that the TPOT
    # figures mean something. The counts do not depend on it; the c1 TPOT check does.
    for attempt in range(3):
        baseline = tmp_path / f"baseline-{attempt}"
        run = run_specload(
            ["run", "--host", vllm_plain.base_url, "--out", str(baseline), *RUN], RUN_TIMEOUT_S
        )
        assert run.returncode == 0, run.stderr
        falling = _falling_levels(predict(baseline))
        if not falling:
            break

    variant = tmp_path / "ngram"
    _alone(vllm_ngram, vllm_plain, tmp_path / "warm-ngram", warmed)
    before = _counters(vllm_ngram.url)
    run = run_specload(
        ["run", "--host", vllm_ngram.base_url, "--out", str(variant), *RUN], RUN_TIMEOUT_S
    )
    assert run.returncode == 0, run.stderr
    after = before
    for _ in range(50):  # the counters follow the last engine step closely
        after = _counters(vllm_ngram.url)
        if after["draft_tokens"] > before["draft_tokens"]:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    after = _counters(vllm_ngram.url)
    server = {name: after[name] - before[name] for name in COUNTERS}

    data = predict(baseline, "--measured", str(variant))
    assert data["engine_path"]["device"] == "cpu", data["engine_path"]
    totals = data["totals"]
    levels = {lv["concurrency"]: lv for lv in data["levels"]}
    rows = {row["concurrency"]: row for row in data["measured"]["levels"]}
    figures = {
        "server": server,
        "predicted": {n: totals[n] for n in COUNTERS}
        | {"accepted_max": totals["accepted_tokens_max"]},
        "tpot": {
            c: (r["predicted_median_tpot_ms"], r["measured_median_tpot_ms"], r["error_ratio"])
            for c, r in rows.items()
        },
        "speedup": {c: (r["predicted_speedup"], r["measured_speedup"]) for c, r in rows.items()},
        "baseline_attempts": attempt + 1,
        "baseline_warnings": falling,
    }
    print(json.dumps(figures))
    # Counts from the baseline alone: drafts and draft tokens within 3%; accepted tokens
    # within 3% of the range the replay allows (the server also counts drafts accepted past
    # a request's last token).
    assert server["drafts"] > 100, figures
    for name in ("drafts", "draft_tokens"):
        assert abs(totals[name] / server[name] - 1) <= 0.03, figures
    accepted = server["accepted_tokens"]
    low, high = totals["accepted_tokens"] * 0.97, totals["accepted_tokens_max"] * 1.03
    assert low <= accepted <= high, figures
    # TPOT at concurrency 1, judged as a ratio variant/baseline (a median moves 16-41% between
    # identical runs on this VM): the forecast's ratio from the baseline alone (the CPU
    # build's terms, docs/predict.md) against the median of up to three back-to-back
    # measurements. Within a factor of 1.5, and on the same side of 1 where the measurement
    # is clearly off 1. Measured here in three alternated rounds: predicted 0.66-0.71 against
    # 0.67-0.77; without the terms the forecast said 0.37-0.43 (a factor of 1.6-2.1: it fails).
    # A level whose streams the front end held back (flagged streams_held: first token late,
    # the rest at once) measured no decode pace: the baseline's c1 is measured again above,
    # and a c1 measurement so flagged is not a ratio. When the machine held them in every
    # try, the c1 forecast cannot be judged here: said, not guessed (the counts above held).
    held = _c1_level(baseline)
    if "streams_held" in held["flags"]:
        pytest.skip(
            f"the baseline's c1 streams arrived in bursts in all {attempt + 1} runs "
            f"({held['streams_held']} of {held['completed']} held): the c1 TPOT forecast "
            "is not judged; the counts were"
        )
    predicted = levels[1]["predicted_median_tpot_ms"] / levels[1]["baseline_median_tpot_ms"]
    usable = rows[1]["measured_speedup"] and "streams_held" not in rows[1]["measured_flags"]
    ratios = [1.0 / rows[1]["measured_speedup"]] if usable else []
    for again in range(4):  # this VM stalls every process now and then: the median of three
        if len(ratios) >= 3 or (
            len(ratios) % 2 and abs(math.log(predicted / statistics.median(ratios))) <= TOLERANCE
        ):
            break
        ratio = _c1_ratio(vllm_plain, vllm_ngram, tmp_path / f"c1-{again}", warmed)
        if ratio is not None:
            ratios.append(ratio)
    print(json.dumps({"c1_ratios": ratios, "c1_predicted_ratio": predicted}))
    if not ratios:
        pytest.skip("every c1 measurement's tokens arrived in bursts: the c1 forecast not judged")
    measured = statistics.median(ratios)
    assert abs(math.log(predicted / measured)) <= TOLERANCE, (predicted, ratios, figures)
    if measured < 0.85:
        assert predicted < 1.0, (predicted, ratios, figures)
    if measured > 1.15:
        assert predicted > 1.0, (predicted, ratios, figures)
