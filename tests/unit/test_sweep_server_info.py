"""summary.json's server_info: what a real vLLM 0.32 server's pages tell (canned in
tests/data/vllm-0.32.0), bounded, and read back by predict's engine-path detection."""

from __future__ import annotations

from pathlib import Path

import httpx
import jsonschema
import orjson
import pytest

from specload.errors import UsageError
from specload.predict import engine_path as ep
from specload.results import summary_schema
from specload.sweep import server_info
from specload.urls import parse_server_url

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0"
URL = parse_server_url("http://vllm.test:8000")


def _transport(metrics: str, models: bytes, *, fail: tuple[str, ...] = ()) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path in fail:
            return httpx.Response(500, text="no")
        if path == "/v1/models":
            return httpx.Response(200, content=models)
        if path == "/metrics":
            return httpx.Response(200, text=metrics)
        return httpx.Response(404)

    return httpx.MockTransport(handle)


def _gather(**kw):
    transport = kw.pop("transport", None) or _transport(
        (DATA / "metrics_ngram.txt").read_text(), (DATA / "models.json").read_bytes()
    )
    args = {
        "version": "0.32.0",
        "simulator": False,
        "model": "tiny-plain",
        "metrics_url": URL.metrics,
    }
    return server_info.gather(URL, **(args | kw), transport=transport)


def test_real_pages():
    info = _gather()
    assert info["vllm_version"] == "0.32.0" and info["simulator"] is False
    assert info["max_model_len"] == 2048  # models.json
    cache = info["metrics_info"]["vllm:cache_config_info"]
    assert cache["block_size"] == "128" and cache["enable_prefix_caching"] == "True"
    assert "engine" not in cache  # every sample's label, not information
    assert "python_info" not in info["metrics_info"]  # vllm:* families only
    assert "unread" not in info


def test_bounded_and_no_credentials():
    labels = ",".join(f'l{i}="{"x" * 500}"' for i in range(100))
    page = "\n".join(
        [f'vllm:f{j}_info{{api_key="s3cret",hf_token="t",{labels}}} 1.0' for j in range(20)]
    )
    info = _gather(transport=_transport(page, b'{"data": []}'))
    fams = info["metrics_info"]
    assert len(fams) == server_info.MAX_FAMILIES
    for labels_of in fams.values():
        assert len(labels_of) == server_info.MAX_LABELS
        assert "api_key" not in labels_of and "hf_token" not in labels_of
        assert all(len(v) == server_info.MAX_VALUE_CHARS for v in labels_of.values())
    assert "s3cret" not in orjson.dumps(info).decode()
    assert info["max_model_len"] is None


def test_unread_parts_are_named_not_guessed():
    t = _transport("", b"{}", fail=("/v1/models", "/metrics"))
    info = _gather(transport=t)
    assert info["unread"] == ["/v1/models", "/metrics"]
    assert "max_model_len" not in info and "metrics_info" not in info
    assert "metrics_info" not in _gather(metrics_url=None)


def test_server_log_and_detection(tmp_path):
    info = _gather(server_log=str(DATA / "engine_log_plain_cpu.txt"))
    assert info["log"]["device"] == "cpu" and info["log"]["role"] == "baseline"
    summary = {
        "schema_version": 1,
        "specload_version": "0",
        "status": "complete",
        "variant": "baseline",
        "host": "http://vllm.test:8000",
        "model": "tiny-plain",
        "started_at": "2026-12-04T10:00:00+00:00",
        "mode": "closed",
        "options": {},
        "levels": [],
        "server_info": info,
    }
    jsonschema.validate(summary, summary_schema())
    (tmp_path / "summary.json").write_bytes(orjson.dumps(summary))
    path = ep.detect(tmp_path)
    assert path is not None and ep.is_detected(path)
    assert (path.device, path.replay_rule, path.vllm_version) == ("cpu", "v1", "0.32.0")
    assert path.source("vllm_version") == "baseline server GET /version"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {**summary, "server_info": {**info, "log": {"device": "tpu"}}}, summary_schema()
        )


def test_bad_server_log(tmp_path):
    with pytest.raises(UsageError, match=r"--server-log .*: No such file"):
        _gather(server_log=str(tmp_path / "none.log"))
    junk = tmp_path / "junk.log"
    junk.write_text("not vLLM\n")
    info = _gather(server_log=str(junk))
    assert "log" not in info and info["unread"][0].startswith("--server-log")
