"""Board queries against a real Prometheus fed known series: the committed rules
(ranges scaled 30x: 5m -> 10s) over a fake load generator whose counters grow at
known rates, and the Variant comparison board's per-channel acceptance and
per-step TPOT panels giving the values worked out by hand.

The fake page is the load generator's (job ``specload-loadgen``, honor_labels):
two variants at two sweep steps, every request of a (variant, step) in one TPOT
bucket, so each median is exact (the middle of its bucket) whatever rate()'s
extrapolation does; and the speculative-decoding counters per channel of the
``ngram`` variant, proportional to one another, so each ratio is exact too.
"""

from __future__ import annotations

import http.server
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.observability import (
    Prometheus,
    dashboards,
    panels,
    scaled_rules,
    start_prometheus,
    substitute,
)

pytestmark = pytest.mark.integration

SCALE = 30
INTERVAL_S = 1.0
REQUESTS_PER_S = 10  # per (variant, step)
STEPS_PER_S = 20  # verification steps per channel of the ngram variant
BUCKETS = (0.008, 0.009, 0.010, 0.011, 0.020, 0.025)
# (variant, step) -> the bucket (upper bound) every request's TPOT falls in
TPOT_BUCKET = {
    ("baseline", "c1"): 0.011,  # median 0.0105
    ("baseline", "c4"): 0.020,  # median 0.0155
    ("ngram", "c1"): 0.009,  # median 0.0085: faster at low load
    ("ngram", "c4"): 0.025,  # median 0.0225: slower once the batch is full
}
# the middle of the bucket: histogram_quantile's linear interpolation at rank 1/2
MEDIAN = {
    key: round((le + BUCKETS[BUCKETS.index(le) - 1]) / 2, 6) for key, le in TPOT_BUCKET.items()
}
# channel -> (draft tokens, accepted tokens) per verification step (k = 3); "unknown" drafts nothing
SPEC = {"reasoning": (3, 2), "content": (3, 1), "unknown": (0, 0)}
LABELS = 'model="m",category="coding"'
MET = {"all": 0.6, "tpot": 0.8, "e2el": 0.7}  # share of the completed requests meeting it
VARIABLES = {
    "variant": "baseline|ngram",
    "model": ".+",
    "reference": "baseline",
    "datasource": "specload-prometheus",
}
BOARD = "specload-variants"


def loadgen_page(elapsed_s: float) -> str:
    """The fake load generator's /metrics after ``elapsed_s`` seconds of load."""
    n = int(REQUESTS_PER_S * elapsed_s)
    steps = int(STEPS_PER_S * elapsed_s)
    lines = ["# TYPE specload_client_tpot_seconds histogram"]
    for (variant, step), le in TPOT_BUCKET.items():
        labels = f'variant="{variant}",{LABELS},step="{step}"'
        for bound in BUCKETS:
            count = n if bound >= le else 0
            lines.append(f'specload_client_tpot_seconds_bucket{{{labels},le="{bound}"}} {count}')
        lines.append(f'specload_client_tpot_seconds_bucket{{{labels},le="+Inf"}} {n}')
        lines.append(f"specload_client_tpot_seconds_sum{{{labels}}} {n * MEDIAN[variant, step]}")
        lines.append(f"specload_client_tpot_seconds_count{{{labels}}} {n}")
    for family in ("drafts", "draft_tokens", "accepted_tokens"):
        name = f"specload_client_spec_decode_{family}_total"
        lines.append(f"# TYPE {name} counter")
        for channel, (tokens, accepted) in SPEC.items():
            per_step = {"drafts": min(tokens, 1), "draft_tokens": tokens}.get(family, accepted)
            labels = f'variant="ngram",{LABELS},step="c4",channel="{channel}"'
            lines.append(f"{name}{{{labels}}} {steps * per_step}")
    # --slo on the ngram variant: of REQUESTS_PER_S completed requests a second at c4,
    # MET[objective] met it (all: every objective)
    lines.append("# TYPE specload_client_requests_total counter")
    lines.append(
        f'specload_client_requests_total{{variant="ngram",{LABELS},step="c4",outcome="ok"}} {n}'
    )
    lines.append("# TYPE specload_client_slo_met_requests_total counter")
    for objective, share in MET.items():
        labels = f'variant="ngram",{LABELS},step="c4",objective="{objective}"'
        lines.append(f"specload_client_slo_met_requests_total{{{labels}}} {n * share}")
    return "\n".join(lines) + "\n"


@dataclass
class FakeLoadgen:
    server: http.server.ThreadingHTTPServer
    started_s: float

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def loadgen() -> Iterator[FakeLoadgen]:
    started = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = loadgen_page(time.monotonic() - started).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield FakeLoadgen(server, started)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def prometheus(
    loadgen: FakeLoadgen, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    workdir = tmp_path_factory.mktemp("boards")
    prom = start_prometheus(
        workdir,
        scrape={"specload-loadgen": [{"targets": [loadgen.address]}]},
        rule_files=scaled_rules(workdir / "rules", SCALE),
        interval_s=INTERVAL_S,
    )
    try:
        yield prom
    finally:
        prom.stop()


def panel_exprs(title: str) -> list[str]:
    """The panel's queries with the board's variables filled in ($__range: 120 s, longer
    than the fake load has run, so the time-range table covers all of it)."""
    (panel,) = [p for p in panels(dashboards()[BOARD]) if p["title"] == title]
    return [substitute(t["expr"], VARIABLES) for t in panel["targets"]]


def values(prom: Prometheus, expr: str, *keys: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(s["metric"].get(k, "") for k in keys): float(s["value"][1]) for s in prom.query(expr)
    }


def settled(prom: Prometheus, expr: str, keys: tuple[str, ...], expected: dict) -> dict:
    """The query's values once every expected series is there (rates need a few scrapes)."""
    deadline = time.monotonic() + 60
    got: dict[tuple[str, ...], float] = {}
    while time.monotonic() < deadline:
        got = values(prom, expr, *keys)
        if set(got) >= set(expected):
            # one more evaluation, so that no window still holds the first scrape only
            time.sleep(2 * INTERVAL_S)
            return values(prom, expr, *keys)
        time.sleep(INTERVAL_S)
    raise AssertionError(f"{expr}: after 60 s only {got}, expected {expected}")


def assert_values(got: dict, expected: dict) -> None:
    assert set(got) == set(expected), (got, expected)
    for key, value in expected.items():
        assert math.isfinite(got[key]), (key, got)
        assert got[key] == pytest.approx(value, rel=1e-9), (key, got)


def test_the_fake_page_is_what_the_medians_say() -> None:
    page = loadgen_page(2.0)
    assert 'step="c4",le="0.02"} 20' in page and 'step="c4",le="0.011"} 0' in page
    assert MEDIAN == {("baseline", "c1"): 0.0105, ("baseline", "c4"): 0.0155,
                      ("ngram", "c1"): 0.0085, ("ngram", "c4"): 0.0225}  # fmt: skip


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        # accepted / drafted tokens per channel; "unknown" drafted nothing: no series
        ("Draft acceptance rate by channel (client)", {("ngram", "reasoning"): 2 / 3,
                                                       ("ngram", "content"): 1 / 3}),
        # 1 + accepted tokens / drafts
        ("Mean acceptance length by channel (client)", {("ngram", "reasoning"): 3.0,
                                                        ("ngram", "content"): 2.0}),
    ],
)  # fmt: skip
def test_acceptance_by_channel(prometheus: Prometheus, title: str, expected: dict) -> None:
    (expr,) = panel_exprs(title)
    got = settled(prometheus, expr, ("variant", "channel"), expected)
    assert_values(got, expected)


CROSSOVER = {
    (variant, step): MEDIAN[variant, step] / MEDIAN["baseline", step]
    for variant, step in TPOT_BUCKET
}  # baseline 1 at both steps; ngram 0.81 at c1, 1.45 at c4


@pytest.mark.parametrize(
    "title",
    [
        "Median TPOT relative to $reference per step",
        "Median TPOT relative to $reference per step (time range)",
    ],
)
def test_tpot_relative_to_the_reference_per_step(prometheus: Prometheus, title: str) -> None:
    (expr,) = panel_exprs(title)
    got = settled(prometheus, expr, ("variant", "step"), CROSSOVER)
    assert_values(got, CROSSOVER)
    assert got["ngram", "c1"] < 1 < got["ngram", "c4"]  # the crossover lies between c1 and c4


def test_the_per_step_median_is_recorded_exactly(prometheus: Prometheus) -> None:
    expr = "variant_model_step:specload_client_tpot_seconds:p50_5m"
    expected = {(v, "m", s): m for (v, s), m in MEDIAN.items()}
    got = settled(prometheus, expr, ("variant", "model", "step"), expected)
    assert_values(got, expected)


def test_rules_evaluate_cleanly(prometheus: Prometheus, loadgen: FakeLoadgen) -> None:
    # settled: run first (random order), the target had not been scraped yet
    expected = {(loadgen.address,): 1.0}
    up = settled(prometheus, 'up{job="specload-loadgen"}', ("instance",), expected)
    assert up == expected
    log = Path(prometheus.log).read_text(errors="replace")
    assert "Evaluating rule failed" not in log, log[-3000:]


def test_slo_attainment(prometheus: Prometheus) -> None:
    (expr,) = panel_exprs("SLO attainment")
    expected = {("ngram", objective): share for objective, share in MET.items()}
    got = settled(prometheus, expr, ("variant", "objective"), expected)
    assert_values(got, expected)
