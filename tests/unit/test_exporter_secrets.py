"""Exporter secrets: API keys and URL userinfo never reach errors, logs, repr or /-/targets."""

from __future__ import annotations

import base64
import io
import logging
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from exporter.app import Exporter
from exporter.config import ExporterConfig, load_config, parse_config, parse_target_flag
from exporter.fetch import fetch
from specload.errors import UsageError
from specload.redact import ScrubFilter, redact_url, scrub, split_userinfo
from tests.fixtures.exporter import vllm_page

pytestmark = pytest.mark.unit

KEY = "sk-SECRETKEY-0123456789"
PASSWORD = "hunter2-PASSWORD"


def load(tmp_path: Path, doc: object, env: dict[str, str] | None = None) -> ExporterConfig:
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env=env or {})


def one_line_without(exc: pytest.ExceptionInfo[UsageError], *secrets: str) -> str:
    text = str(exc.value)
    assert "\n" not in text and "\r" not in text
    for secret in secrets:
        assert secret not in text
        assert secret.strip() not in text
    return text


@pytest.mark.parametrize("bad", [KEY + "\n", KEY + "\r\n", KEY + "\r", "a\nb" + KEY, KEY + " "])
def test_an_api_key_with_a_line_break_is_refused_at_load(tmp_path: Path, bad: str) -> None:
    doc = {"targets": [{"variant": "a", "url": "http://h:1", "api_key": bad}]}
    with pytest.raises(UsageError) as exc:
        load(tmp_path, doc)
    text = one_line_without(exc, KEY)
    assert "targets[0].api_key" in text and "exporter.yaml" in text


def test_an_api_key_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    doc = {"targets": [{"variant": "a", "url": "http://h:1", "api_key_env": "THE_KEY"}]}
    with pytest.raises(UsageError) as exc:
        load(tmp_path, doc, env={"THE_KEY": KEY + "\n"})
    text = one_line_without(exc, KEY)
    assert "targets[0].api_key_env (THE_KEY)" in text and "line break" in text
    assert load(tmp_path, doc, env={"THE_KEY": KEY}).targets[0].api_key == KEY


@pytest.mark.parametrize("value", [[KEY], {"key": KEY}, 12345678901234, 1.5e300, True])
def test_a_non_string_api_key_is_named_not_echoed(tmp_path: Path, value: Any) -> None:
    doc = {"targets": [{"variant": "a", "url": "http://h:1", "api_key": value}]}
    with pytest.raises(UsageError) as exc:
        load(tmp_path, doc)
    text = one_line_without(exc, KEY, str(value), repr(value))
    assert "targets[0].api_key: expected a string" in text


def test_repr_and_targets_page_hold_no_secret() -> None:
    cfg = parse_config(
        {
            "targets": [
                {"variant": "keyed", "url": "http://a.test:8000/v1", "api_key": KEY},
                {"variant": "basic", "url": f"http://scraper:{PASSWORD}@b.test:8000"},
            ]
        }
    )
    keyed, basic = cfg.targets
    assert basic.url.root == "http://b.test:8000" and basic.userinfo == f"scraper:{PASSWORD}"
    assert basic.request_url.root == f"http://scraper:{PASSWORD}@b.test:8000"
    for text in (repr(cfg), repr(keyed), repr(basic), str(basic)):
        assert KEY not in text and PASSWORD not in text

    seen: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.url.host] = request.headers.get("authorization")
        assert PASSWORD not in str(request.url)
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        return httpx.Response(200, text=vllm_page("ngram"))

    ex = Exporter(cfg, sources=[], transport=httpx.MockTransport(handler))
    ex.poller.once()
    token = base64.b64encode(f"scraper:{PASSWORD}".encode()).decode()
    assert seen == {"a.test": f"Bearer {KEY}", "b.test": f"Basic {token}"}
    page = ex._targets_json().decode()
    assert KEY not in page and PASSWORD not in page and token not in page
    urls = {t["variant"]: t["url"] for t in orjson.loads(page)}
    assert urls == {"keyed": "http://a.test:8000", "basic": "http://b.test:8000"}
    ex.stop()


def test_url_errors_do_not_show_the_password(tmp_path: Path) -> None:
    for url in (
        f"http://scraper:{PASSWORD}@b.test:notaport",
        f"ftp://scraper:{PASSWORD}@b.test",
        f"http://scraper:{PASSWORD}@b.test:8000/?q=1",
        f"http://scraper:pa/ss{PASSWORD}@b.test",  # an unencoded "/" in the password
    ):
        with pytest.raises(UsageError) as exc:
            load(tmp_path, {"targets": [{"variant": "a", "url": url}]})
        one_line_without(exc, PASSWORD)
        assert "targets[0].url" in str(exc.value)
        with pytest.raises(UsageError) as exc:
            parse_target_flag(f"a={url}")
        one_line_without(exc, PASSWORD)
    with pytest.raises(UsageError) as exc:
        parse_target_flag(f"=http://u:{PASSWORD}@h:1")
    one_line_without(exc, PASSWORD)
    flag = parse_target_flag(f"a=http://u:{PASSWORD}@h:1")
    assert flag.url.root == "http://h:1" and flag.userinfo == f"u:{PASSWORD}"


def test_userinfo_and_api_key_together_are_refused() -> None:
    doc = {"targets": [{"variant": "a", "url": f"http://u:{PASSWORD}@h:1", "api_key": KEY}]}
    with pytest.raises(UsageError, match="give one") as exc:
        parse_config(doc)
    one_line_without(exc, KEY, PASSWORD)


def test_fetch_errors_never_quote_header_values() -> None:
    def local_error(request: httpx.Request) -> httpx.Response:
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {KEY}\\n'")

    def echoing_error(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError(f"peer said: Authorization: Bearer {KEY} (and {PASSWORD!r})")

    for handler in (local_error, echoing_error):
        res = fetch(
            httpx.MockTransport(handler),
            "http://h.test/metrics",
            timeout_s=1.0,
            max_bytes=1024,
            headers={"Authorization": f"Bearer {KEY}"},
            secrets=(f"Bearer {KEY}", KEY, PASSWORD),
        )
        assert res.reason == "error"
        assert KEY not in res.detail and PASSWORD not in res.detail, res.detail


def test_redact_helpers() -> None:
    assert split_userinfo("http://u:p@h:1/x?y") == ("http://h:1/x?y", "u:p")
    assert split_userinfo("u:p@h:1") == ("h:1", "u:p")
    assert split_userinfo("http://h:1/a@b") == ("http://h:1/a@b", None)
    assert redact_url(f"https://u:{PASSWORD}@h:1/v1") == "https://***@h:1/v1"
    assert redact_url("http://h:1") == "http://h:1"
    text = f"cannot reach http://u:{PASSWORD}@h:1/start_profile; b'Bearer {KEY}\\n' {KEY!r}"
    clean = scrub(text, [KEY + "\n"])
    assert PASSWORD not in clean and KEY not in clean and "http://***@h:1" in clean


def test_log_filter_masks_messages_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ScrubFilter([KEY, PASSWORD]))
    logger = logging.getLogger("test.exporter.secrets")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("header %s and url %s", f"Bearer {KEY}", f"http://u:{PASSWORD}@h")
        try:
            raise ValueError(f"Illegal header value b'Bearer {KEY}\\n'")
        except ValueError:
            logger.exception("send failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "send failed" in out and "ValueError" in out
    assert KEY not in out and PASSWORD not in out, out


def test_profile_capture_errors_do_not_show_the_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from exporter.profiling import ProfilingSource  # noqa: PLC0415
    from specload.profile.capture import REASON_UNREACHABLE, CaptureError  # noqa: PLC0415

    cfg = parse_config(
        {
            "targets": [
                {
                    "variant": "p",
                    "url": f"http://scraper:{PASSWORD}@h.test:8000",
                    "profile": {"trace_dir": str(tmp_path)},
                }
            ]
        }
    )
    urls: list[str] = []

    def capture(target: Any, cancel: Any) -> Any:
        urls.append(target.url.root)
        raise CaptureError(f"cannot reach {target.url.join('/start_profile')}", REASON_UNREACHABLE)

    source = ProfilingSource.from_config(cfg.targets, capture_fn=capture)
    with caplog.at_level(logging.WARNING, logger="exporter.profiling"):
        source.run_once("p")
    assert urls == [f"http://scraper:{PASSWORD}@h.test:8000"]  # the capture needs them
    error = source.last_error("p")
    assert error is not None and "http://***@h.test:8000/start_profile" in error
    assert PASSWORD not in error and PASSWORD not in caplog.text
    assert PASSWORD not in repr(source._states)
