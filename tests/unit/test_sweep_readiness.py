"""The readiness gate against a loopback server that becomes ready late, a fake
transport's permanent and transient answers, TLS on one side only, and a stop."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from specload.errors import UsageError
from specload.sweep.ports import free_port
from specload.sweep.readiness import STOP_CHECK_S, Interrupted, is_refusing, wait_ready
from specload.urls import parse_server_url

pytestmark = pytest.mark.unit


class _Handler(BaseHTTPRequestHandler):
    healthy = True
    models: list[str] = ["tiny"]
    seen: list[str] = []

    def do_GET(self):
        self.seen.append(self.path)
        if self.path == "/health":
            self.send_response(200 if self.healthy else 503)
            self.end_headers()
        elif self.path == "/v1/models":
            body = json.dumps({"data": [{"id": m} for m in self.models]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/version":
            body = b'{"version": "0.32.0"}'
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("H", (_Handler,), {"healthy": True, "models": ["tiny"], "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()


def test_ready_with_models_and_version(server):
    httpd, _ = server
    # /v1 in the base URL must not double
    url = parse_server_url(f"http://127.0.0.1:{httpd.server_port}/v1/")
    ready = wait_ready(url, timeout_s=5)
    assert ready.models == ("tiny",) and ready.server_version == "0.32.0"
    assert not is_refusing(url)


def test_waits_with_countdown_until_healthy(server):
    httpd, handler = server
    handler.healthy = False
    url = parse_server_url(f"127.0.0.1:{httpd.server_port}")
    calls = []

    def on_wait(left, problem):
        calls.append((left, problem))
        if len(calls) == 3:
            handler.healthy = True

    ready = wait_ready(url, timeout_s=10, interval_s=0.01, on_wait=on_wait)
    assert ready.models == ("tiny",)
    assert len(calls) == 3 and calls[0][1] == "HTTP 503"
    assert calls[0][0] > calls[2][0]  # counting down


def test_no_models_is_not_ready(server):
    httpd, handler = server
    handler.models = []
    url = parse_server_url(f"127.0.0.1:{httpd.server_port}")
    with pytest.raises(UsageError, match="no model"):
        wait_ready(url, timeout_s=0.2, interval_s=0.05)


def test_unreachable_host_after_timeout_is_one_line():
    port = free_port()
    url = parse_server_url(f"http://127.0.0.1:{port}")
    with pytest.raises(UsageError) as err:
        wait_ready(url, timeout_s=0.3, interval_s=0.05)
    text = str(err.value)
    assert text == (
        f"--host http://127.0.0.1:{port}: not ready after 0.3s "
        "(/health and /v1/models: connection refused)"
    )
    assert err.value.exit_code == 3
    assert is_refusing(url)


# -- permanent answers end the gate at once (exit 2, one line); transient ones are waited --


def _mock(handler):
    """A transport answering every request with ``handler(request)``."""
    return httpx.MockTransport(handler)


def _routes(routes: dict[str, httpx.Response]):
    def handler(request: httpx.Request) -> httpx.Response:
        return routes.get(request.url.path, httpx.Response(404))

    return _mock(handler)


def _no_sleep(_s):
    raise AssertionError("a permanent answer must not be waited for")


MODELS_OK = httpx.Response(200, json={"data": [{"id": "tiny"}]})


def _gate(url: str, transport, **kw):
    return wait_ready(
        parse_server_url(url), timeout_s=600, transport=transport, sleep=_no_sleep, **kw
    )


@pytest.mark.parametrize("status", [401, 403])
def test_unauthorized_names_the_key_option_at_once(status):
    transport = _routes({"/health": httpx.Response(200), "/v1/models": httpx.Response(status)})
    with pytest.raises(UsageError) as err:
        _gate("http://h:8000", transport)
    assert err.value.exit_code == 2
    assert str(err.value) == (
        f"--host http://h:8000: /v1/models answers HTTP {status}: the server wants an API "
        "key: give it with --api-key or env SPECLOAD_API_KEY"
    )
    with pytest.raises(UsageError) as err:
        _gate("http://h:8000", transport, api_key="sekrit-key-123")
    text = str(err.value)
    assert "refuses the API key given (--api-key or env SPECLOAD_API_KEY)" in text
    assert "sekrit" not in text  # never the key itself


def test_unauthorized_health_is_permanent_too():
    transport = _routes({"/health": httpx.Response(401)})
    with pytest.raises(UsageError, match=r"/health answers HTTP 401: .*--api-key"):
        _gate("http://h:8000", transport)


@pytest.mark.parametrize(
    ("pasted", "base"),
    [
        ("http://h:8000/v1/chat/completions", "http://h:8000"),
        ("h:8000/v1/models/", "http://h:8000"),
        ("https://gw.example/llm/v1/completions", "https://gw.example/llm"),
        ("http://user:pw@h:8000/chat", "http://***@h:8000"),
    ],
)
def test_pasted_endpoint_url_names_the_base_url(pasted, base):
    # the server's real paths answer; the pasted endpoint's prefix makes them all 404
    transport = _routes({"/health": httpx.Response(200), "/v1/models": MODELS_OK})
    with pytest.raises(UsageError) as err:
        _gate(pasted, transport)
    assert err.value.exit_code == 2
    text = str(err.value)
    assert text.endswith(
        f"answers HTTP 404 (not found): use --host {base} (the server's "
        "base URL, not an endpoint's)"
    )
    assert "pw" not in text


def test_not_found_at_the_root_says_no_api_there():
    transport = _routes({})
    with pytest.raises(UsageError, match=r"/health answers HTTP 404 \(not found\): no Open"):
        _gate("http://h:8000", transport)


def test_redirect_says_where_it_points():
    def handler(request):
        return httpx.Response(301, headers={"location": "https://h:8443" + request.url.path})

    with pytest.raises(UsageError) as err:
        _gate("http://h:8000", _mock(handler))
    assert err.value.exit_code == 2
    assert str(err.value) == (
        "--host http://h:8000: /health redirects (HTTP 301) to https://h:8443/health: "
        "use --host https://h:8443"
    )
    # a relative redirect elsewhere: where it points, resolved
    transport = _routes({"/health": httpx.Response(302, headers={"location": "/login"})})
    with pytest.raises(UsageError, match=r"redirects \(HTTP 302\) to http://h:8000/login$"):
        _gate("http://h:8000", transport)


def test_transient_answers_are_waited_for():
    """503, 502, refused and timed-out connections, a loading server (no model yet)."""
    # one (/health, /v1/models) pair per probe; an exception is raised as the transport's
    probes = iter(
        [
            (httpx.Response(503), None),
            (httpx.Response(502), None),
            (httpx.ConnectError("refused"), None),
            (httpx.ReadTimeout("slow"), None),
            (httpx.Response(200), httpx.Response(200, json={"data": []})),
            (httpx.Response(200), MODELS_OK),
        ]
    )
    current = {}

    def handler(request):
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if request.url.path == "/health":
            current["health"], current["models"] = next(probes)
        answer = current["health" if request.url.path == "/health" else "models"]
        if isinstance(answer, Exception):
            raise answer
        return answer

    problems = []
    now = [0.0]

    def sleep(s):
        now[0] += s

    ready = wait_ready(
        parse_server_url("http://h:8000"),
        timeout_s=600,
        transport=_mock(handler),
        on_wait=lambda left, problem: problems.append(problem),
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert ready.models == ("tiny",) and ready.server_version == "0.32.0"
    assert problems == [
        "HTTP 503",
        "HTTP 502",
        "connection refused",
        "timed out",
        "ValueError: /v1/models lists no model",
    ]


def test_model_the_server_does_not_list_names_those_it_does(server):
    httpd, handler = server
    handler.models = ["tiny", "tiny-lora"]
    url = parse_server_url(f"127.0.0.1:{httpd.server_port}")
    with pytest.raises(UsageError) as err:
        wait_ready(url, timeout_s=5, model="Qwen/Qwen3-8B", sleep=_no_sleep)
    assert err.value.exit_code == 2
    assert str(err.value) == (
        "--model 'Qwen/Qwen3-8B': the server does not serve it; it lists tiny, tiny-lora"
    )
    assert wait_ready(url, timeout_s=5, model="tiny-lora").models == ("tiny", "tiny-lora")


def test_https_against_a_plain_http_port_says_so(server):
    httpd, _ = server
    url = parse_server_url(f"https://127.0.0.1:{httpd.server_port}")
    with pytest.raises(UsageError) as err:
        wait_ready(url, timeout_s=600, sleep=_no_sleep)
    assert err.value.exit_code == 2
    text = str(err.value)
    assert text.startswith(
        f"--host https://127.0.0.1:{httpd.server_port}: the port does not speak TLS ("
    )
    assert text.endswith(f"): use --host http://127.0.0.1:{httpd.server_port}")


@pytest.fixture
def tls_server(tmp_path):
    """A loopback HTTPS server (a self-signed certificate made by openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    handler = type("H", (_Handler,), {"healthy": True, "models": ["tiny"], "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_plain_http_against_a_tls_port_says_so(tls_server):
    port = tls_server.server_port
    url = parse_server_url(f"http://127.0.0.1:{port}")
    with pytest.raises(UsageError) as err:
        wait_ready(url, timeout_s=600, sleep=_no_sleep)
    assert err.value.exit_code == 2
    assert str(err.value) == (
        f"--host http://127.0.0.1:{port}: the port speaks TLS (HTTPS), not plain HTTP: "
        f"use --host https://127.0.0.1:{port}"
    )
    # https with a certificate nobody vouches for: said at once, not waited out
    secure = parse_server_url(f"https://127.0.0.1:{port}")
    with pytest.raises(UsageError, match="TLS certificate is not trusted"):
        wait_ready(secure, timeout_s=600, sleep=_no_sleep)


def test_stop_ends_the_wait_between_probes():
    """SIGINT while the target refuses: the wait ends within a check interval, not at its
    timeout."""
    port = free_port()
    now = [0.0]
    stop_at = 3.0

    def sleep(s):
        now[0] += s

    with pytest.raises(Interrupted) as err:
        wait_ready(
            parse_server_url(f"http://127.0.0.1:{port}"),
            timeout_s=2700,
            interval_s=0.5,
            clock=lambda: now[0],
            sleep=sleep,
            stop=lambda: "SIGINT" if now[0] >= stop_at else None,
        )
    assert err.value.reason == "SIGINT"
    assert stop_at <= now[0] <= stop_at + STOP_CHECK_S + 1e-9
