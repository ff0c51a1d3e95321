"""Locust's web UI as a person sees it: the specload tab in Chromium, against known truth.

A fixed-timing simulator (50 ms to the first token, then one token every 16 ms, 8
reasoning and 4 content tokens: TPOT 16 ms, end-to-end 226 ms) serves
``locust -f locustfiles/chat.py`` with its web UI; a swarm is started through
Locust's HTTP API (``POST /swarm``), as the start form does. The tab is read from
the rendered DOM while the test runs (it refreshes: the page polls and shows the
counts of the last seconds) and after the stop (``--stop-timeout``: every request
started ends), where its counts must equal Locust's own ``/stats/requests`` and the
simulator's count of requests served, and Locust's statistics must count each
request once. A same-origin page frames the tab at 1600 and 1280 px and measures
that nothing scrolls sideways. Screenshots go to ``tmp_path`` (and ``$SPECLOAD_ARTIFACTS``).
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import http.server
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from specload.load.report import CSV_COLUMNS
from specload.load.webui import HEADERS, TAB_KEY
from tests.fixtures.browser import Browser, Page
from tests.fixtures.html import Tables
from tests.fixtures.load import LOCUSTFILE, free_port, wait_http

pytestmark = pytest.mark.integration

TTFT_S, ITL_S, REASONING, CONTENT = 0.05, 0.016, 8, 4
TOKENS = REASONING + CONTENT
E2E_S = TTFT_S + (TOKENS - 1) * ITL_S
SIM = [
    "--timing",
    "fixed",
    "--fixed-ttft",
    str(TTFT_S),
    "--fixed-itl",
    str(ITL_S),
    "--fixed-tokens-per-chunk",
    "1",
    "--fixed-reasoning-tokens",
    str(REASONING),
    "--fixed-content-tokens",
    str(CONTENT),
]
USERS = 8
TITLES = [title for _, title in HEADERS]
WIDTHS = (1600, 1280)  # the screenshots, and the browser fixture's window


def tab_rows(page: Page) -> dict[str, dict[str, str]]:
    """The specload tab's rows from the rendered DOM, by category (title -> text)."""
    parser = Tables()
    parser.feed(page.html)
    (table,) = parser.tables  # the open tab's table, the only one on the page
    head, *body = table
    assert head == TITLES
    return {row[1]: dict(zip(TITLES, row, strict=True)) for row in body}


def number(text: str) -> float:
    return float(text.replace(",", ""))


def stats(base: str) -> dict[str, Any]:
    report: dict[str, Any] = httpx.get(f"{base}/stats/requests", timeout=5).json()
    return report


def ours(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The tab's rows as they travel in Locust's report (snake_case keys), by category."""
    (entry,) = [e for e in report.get("extended_stats", []) if e["key"] == TAB_KEY]
    return {row["category"]: row for row in entry["data"]}


class Sampler(threading.Thread):
    """Every 0.2 s: (monotonic time, requests completed as the tab's data says)."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.times: list[float] = []
        self.counts: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                row = ours(stats(self.base)).get("all")
            except (httpx.HTTPError, ValueError):
                continue
            if row is not None:
                self.times.append(time.monotonic())
                self.counts.append(int(number(row["completed"])))

    def count_at(self, t: float) -> int:
        """The last count sampled at or before ``t`` (0 before the first)."""
        i = bisect.bisect_right(self.times, t)
        return self.counts[i - 1] if i else 0


MEASURE_PAGE = f"""<!doctype html><meta charset=utf-8><title>measure</title>
<link rel=icon href="data:,">
<body style="margin:0"><iframe id=f style="height:900px;border:0"></iframe>
<pre id=out>waiting</pre>
<script>
const frame = document.getElementById('f'), out = document.getElementById('out');
frame.style.width = location.hash.slice(1) + 'px';
frame.src = '/?tab={TAB_KEY}';
function look() {{
  const d = frame.contentDocument, table = d && d.querySelector('table');
  if (!table || table.rows.length < 3) {{ setTimeout(look, 100); return; }}
  const box = table.parentElement, root = d.documentElement;
  out.textContent = JSON.stringify({{
    view: root.clientWidth, page: root.scrollWidth,
    box: box.clientWidth, table: box.scrollWidth, rows: table.rows.length}});
}}
frame.addEventListener('load', () => setTimeout(look, 100));
</script>"""


@contextlib.contextmanager
def same_origin_proxy(base: str) -> Iterator[str]:
    """A loopback server serving MEASURE_PAGE at /measure.html and Locust's UI elsewhere
    (one origin, so the page can measure the framed tab)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/measure.html":
                status, kind, body = 200, "text/html", MEASURE_PAGE.encode()
            else:
                answer = httpx.get(base + self.path, timeout=10)
                status, body = answer.status_code, answer.content
                kind = answer.headers.get("content-type", "application/octet-stream")
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # page closed
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} in {timeout_s:.0f} s")


def keep(*shots: Path) -> None:
    """Copy screenshots to $SPECLOAD_ARTIFACTS (when set)."""
    folder = os.environ.get("SPECLOAD_ARTIFACTS")
    if folder:
        target = Path(folder) / "locust-webui"
        target.mkdir(parents=True, exist_ok=True)
        for shot in shots:
            if shot.exists():
                shutil.copy2(shot, target / shot.name)


@dataclass
class LocustWeb:
    base: str  # the web UI
    sim: Any  # tests.fixtures.sim.SimHandle
    mode: str  # "local" (one process) or "processes" (a master and two workers)


@pytest.fixture(params=["local", "processes"])
def locust_web(
    request: pytest.FixtureRequest, sim_factory: Any, tmp_path: Path
) -> Iterator[LocustWeb]:
    """``locust -f locustfiles/chat.py`` with its web UI, alone or ``--processes 2``."""
    sim = sim_factory(SIM)
    port = free_port()
    log = tmp_path / "locust.log"
    mode = str(request.param)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(LOCUSTFILE),
                "--host",
                sim.url,
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(port),
                "--metrics-address",
                "off",
                "--stop-timeout",
                "10",
                "--loglevel",
                "WARNING",
                *(["--processes", "2"] if mode == "processes" else []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,  # --processes forks: the group is ended together
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/", 60, proc)
        yield LocustWeb(base, sim, mode)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]


def test_specload_tab_shows_live_figures_that_match_locust_and_the_simulator(
    locust_web: LocustWeb, browser: Browser, tmp_path: Path
) -> None:
    base, sim = locust_web.base, locust_web.sim
    swarm = httpx.post(
        f"{base}/swarm",
        data={"user_count": USERS, "spawn_rate": USERS, "host": sim.url},
        timeout=10,
    )
    assert swarm.status_code == 200 and swarm.json()["success"], swarm.text
    sampler = Sampler(base)
    sampler.start()
    shot = f"specload-tab-{locust_web.mode}"
    running_shot, final_shot = tmp_path / f"{shot}-running.png", tmp_path / f"{shot}.png"
    wide_shots = [tmp_path / f"{shot}-{width}px.png" for width in WIDTHS]
    try:
        wait_for(lambda: sampler.count_at(time.monotonic()) >= 40, 60, "40 requests")

        # While it runs: the tab polls Locust's report and shows recent counts.
        page = browser.render(f"{base}/?tab={TAB_KEY}", screenshot=running_shot, wait_s=8)
        read_at = time.monotonic()
        assert page.console_errors == []
        polls = [u for u in page.requests if u.split("?")[0].endswith("/stats/requests")]
        assert len(polls) >= 3, polls  # every 2 s for 8 s
        assert TAB_KEY.upper() in page.text.upper()  # the tab's title, among Locust's
        live = tab_rows(page)
        shown = int(number(live["all"]["OK"]))
        # Not the count the page first fetched: at most ~3 s old (2 s polls, 1 s row cache).
        assert sampler.count_at(read_at - 5.0) <= shown <= sampler.counts[-1] + USERS
        assert shown > sampler.count_at(read_at - 8.5)

        # 1600 and 1280 px wide: neither the page nor the table scrolls sideways.
        with same_origin_proxy(base) as proxy:
            for width, wide_shot in zip(WIDTHS, wide_shots, strict=True):
                url = f"{proxy}/measure.html#{width}"
                framed = browser.render(url, screenshot=wide_shot, wait_s=4)
                assert framed.console_errors == []
                measured = json.loads(framed.text.strip().splitlines()[-1])
                assert measured["view"] == width and measured["rows"] >= 3, measured
                assert measured["page"] <= measured["view"], measured
                assert measured["table"] <= measured["box"], measured

        # Stopped: users end the requests they started (--stop-timeout); once the workers'
        # last reports are in, Locust, the tab and the simulator agree, and nothing moves.
        assert httpx.post(f"{base}/stop", timeout=10).status_code == 200
        seen: list[tuple[str, int, int, int]] = []

        def agree() -> bool:
            report = stats(base)
            (total,) = [s for s in report["stats"] if s["name"] == "Aggregated"]
            row = ours(report)["all"]
            tab = int(number(row["completed"])) + int(number(row["failed"]))
            seen.append(
                (report["state"], total["num_requests"], tab, sim.state()["requests_served"])
            )
            return seen[-1][0] == "stopped" and len(set(seen[-1][1:])) == 1

        try:
            wait_for(agree, 30, "agreement of Locust, the tab and the simulator")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; (state, Locust, tab, simulator): {seen[-3:]}") from None
        served = sim.state()["requests_served"]
        time.sleep(2.5)  # Locust caches its report for 2 s
        report = stats(base)
        assert sim.state()["requests_served"] == served
    finally:
        sampler.stop.set()
        sampler.join(5)
        keep(running_shot, *wide_shots)

    page = browser.render(f"{base}/?tab={TAB_KEY}", screenshot=final_shot, wait_s=2)
    keep(final_shot)
    assert page.console_errors == []
    rows = tab_rows(page)
    every = rows["all"]
    completed, failed = int(number(every["OK"])), int(number(every["Failed"]))
    assert (failed, number(every["Unfinished"])) == (0, 0)

    # Locust's own statistics: one CHAT row per category, each request counted once.
    entries = [s for s in report["stats"] if s["name"] != "Aggregated"]
    (total,) = [s for s in report["stats"] if s["name"] == "Aggregated"]
    assert {s["method"] for s in entries} == {"CHAT"}
    assert sorted(s["name"] for s in entries) == sorted(set(rows) - {"all"})
    assert sum(s["num_requests"] for s in entries) == total["num_requests"]
    assert total["num_requests"] == completed + failed == served > 40
    for s in entries:
        row = rows[s["name"]]
        assert s["num_requests"] == number(row["OK"]) + number(row["Failed"]), s["name"]
        assert s["num_failures"] == number(row["Failed"])
    # Its response time is the whole request; its size is bytes, which are not counted.
    # (Locust rounds it: to 10 ms from 100 ms up.)
    assert E2E_S * 1000 * 0.95 <= total["median_response_time"] <= E2E_S * 1000 * 1.2, total
    assert total["avg_content_length"] == 0

    # The figures against the simulator's profile, with their units' resolution.
    for category, row in rows.items():
        tpot, ttft = row["TPOT p50 (ms)"], row["TTFT p50 (ms)"]
        assert re.fullmatch(r"\d+\.\d", tpot), (category, tpot)  # 0.1 ms
        assert ITL_S * 1000 - 0.5 <= number(tpot) <= ITL_S * 1000 * 1.1, (category, tpot)
        assert TTFT_S * 1000 * 0.97 <= number(ttft) <= TTFT_S * 1000 * 1.25, (category, ttft)
        assert E2E_S * 0.97 <= number(row["E2E p50 (s)"]) <= E2E_S * 1.2, category
        # Every answer reached its content (the budget fits): none cut inside reasoning.
        assert row["Truncated in reasoning"] == "0", category
        assert row["Tokens per chunk"] == "1.00", category
    assert sum(number(r["OK"]) for c, r in rows.items() if c != "all") == completed

    # /specload (the same table as a page) and /specload/csv (every column) still serve.
    page_html = httpx.get(f"{base}/specload", timeout=5)
    assert page_html.status_code == 200 and "text/html" in page_html.headers["content-type"]
    page_shot = tmp_path / f"specload-page-{locust_web.mode}.png"
    alone = browser.render(f"{base}/specload", screenshot=page_shot, wait_s=1)
    keep(page_shot)
    assert alone.console_errors == []
    assert tab_rows(alone) == rows
    download = httpx.get(f"{base}/specload/csv", timeout=5)
    assert download.status_code == 200 and "attachment" in download.headers["content-disposition"]
    table = list(csv.DictReader(io.StringIO(download.text)))
    assert tuple(table[0]) == CSV_COLUMNS
    (csv_all,) = [r for r in table if r["category"] == "all"]
    assert int(csv_all["completed"]) == completed
    assert int(csv_all["output_tokens"]) == TOKENS * completed
    assert int(csv_all["reasoning_tokens"]) == REASONING * completed
