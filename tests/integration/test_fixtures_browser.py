"""The headless-Chromium fixture (tests/fixtures/browser.py) reports what a page really did."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fixtures.browser import Browser, BrowserError, render
from tests.fixtures.processes import processes_mentioning

pytestmark = pytest.mark.integration

PAGES = {
    "/noisy.html": (
        "text/html",
        b"<!doctype html><title>t</title><body><p>hello from the page</p>"
        b"<script>fetch('/data.json').then(r => r.json()).then(d => {"
        b"document.body.insertAdjacentHTML('beforeend', '<p>fetched ' + d.n + '</p>');"
        b"console.error('boom', 42);});</script></body>",
    ),
    "/data.json": ("application/json", b'{"n": 7}'),
    # A site serves its favicon (the browser asks for it itself; a 404 would be logged).
    "/favicon.ico": ("image/svg+xml", b'<svg xmlns="http://www.w3.org/2000/svg"/>'),
    "/quiet.html": (
        "text/html",
        b"<!doctype html><title>q</title><body><p>just text</p>"
        b"<script>console.log('not an error')</script></body>",
    ),
    "/throws.html": (
        "text/html",
        b"<!doctype html><title>x</title><body>x<script>null.field</script></body>",
    ),
}


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        page = PAGES.get(self.path)
        if page is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", page[0])
        self.send_header("Content-Length", str(len(page[1])))
        self.end_headers()
        self.wfile.write(page[1])

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_page_request_and_console_error_are_reported(
    browser: Browser, site: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, seen = site
    shot = tmp_path / "noisy.png"
    page = browser.render(f"{base}/noisy.html", screenshot=shot, wait_s=1.0)
    # The browser asks for an http page's favicon itself: a request like any other.
    assert [u for u in page.requests if not u.endswith("/favicon.ico")] == [
        f"{base}/noisy.html",
        f"{base}/data.json",
    ]
    # The server agrees: exactly these were asked.
    assert sorted(seen) == sorted(urlsplit(u).path for u in page.requests)
    assert page.console_errors == ["console.error: boom 42"]
    assert "hello from the page" in page.text
    assert "fetched 7" in page.text  # the script ran after the fetch
    assert "<script>" in page.html and "fetched 7" in page.html
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quiet_page_reports_nothing(browser: Browser, site: tuple[str, list[str]]) -> None:
    base, _ = site
    page = browser.render(f"{base}/quiet.html", wait_s=0.2)
    assert [u for u in page.requests if not u.endswith("/favicon.ico")] == [f"{base}/quiet.html"]
    assert page.console_errors == []  # console.log is not an error
    assert page.text.strip() == "just text"


def test_uncaught_exception_and_failed_load_are_errors(
    browser: Browser, site: tuple[str, list[str]]
) -> None:
    base, _ = site
    page = browser.render(f"{base}/throws.html", wait_s=0.2)
    assert len(page.console_errors) == 1
    assert page.console_errors[0].startswith("exception: TypeError")
    missing = browser.render(f"{base}/missing.html", wait_s=0.2)
    assert any("404" in e for e in missing.console_errors), missing.console_errors


def test_file_url_and_isolation(browser: Browser, tmp_path: Path) -> None:
    local = tmp_path / "local.html"
    local.write_text(
        "<!doctype html><body><p id=c></p><script>"
        "document.getElementById('c').textContent = 'stored:' + localStorage.getItem('k');"
        "localStorage.setItem('k', 'v');</script></body>"
    )
    first = browser.render(local.as_uri(), wait_s=0.1)
    second = browser.render(local.as_uri(), wait_s=0.1)
    assert first.requests == [local.as_uri()]
    # Each render is a fresh browser context: nothing stored survives it.
    assert first.text.strip() == second.text.strip() == "stored:null"


@pytest.mark.serial  # counts every specload-chromium- process on the machine
def test_one_shot_render_kills_its_browser(site: tuple[str, list[str]]) -> None:
    base, _ = site
    before = set(processes_mentioning("specload-chromium-"))
    page = render(f"{base}/quiet.html", wait_s=0.1)
    assert page.text.strip() == "just text"
    assert set(processes_mentioning("specload-chromium-")) <= before


def test_close_leaves_no_process() -> None:
    one = Browser()
    profile = str(one.profile_dir)
    assert processes_mentioning(profile)
    one.close()
    assert processes_mentioning(profile) == []
    assert not Path(profile).exists()


def test_unreachable_url_raises(browser: Browser) -> None:
    with pytest.raises(BrowserError, match="ERR_"):
        browser.render("http://127.0.0.1:9/", wait_s=0.1)
