"""The real-vLLM fixtures' process handling, against a fake ``vllm`` package.

The fixtures launch ``python -m vllm.entrypoints.openai.api_server`` in the server's
work dir; a stub package there stands in for vLLM (listens after a delay, serves
``/health``), so start-up, stop, restart, LRU eviction and the machine-wide slots
are checked in a second or two, without the real engine.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.fixtures import vllm as fx

pytestmark = pytest.mark.unit

FAKE_SERVER = textwrap.dedent(
    """
    import argparse, http.server, os, sys, time

    p = argparse.ArgumentParser()
    p.add_argument("--host"); p.add_argument("--port", type=int)
    p.add_argument("--served-model-name")
    args, _ = p.parse_known_args()
    print("fake vllm starting", flush=True)
    if os.environ.get("FAKE_VLLM_FAIL"):
        print("ValueError: boom, bad flag", flush=True)
        sys.exit(3)
    time.sleep(float(os.environ.get("FAKE_VLLM_LOAD_S", "0.1")))

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"{}" if self.path != "/health" else b""
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.HTTPServer((args.host, args.port), H).serve_forever()
    """
)


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> fx.VllmEnv:
    monkeypatch.setenv("SPECLOAD_VLLM_SLOT_DIR", str(tmp_path / "slots"))
    monkeypatch.setenv("SPECLOAD_VLLM_SLOTS", "2")
    (tmp_path / "slots").mkdir()
    return fx.VllmEnv(
        python=Path(sys.executable), models={"plain": tmp_path, "answering": tmp_path}
    )


def _workdir(tmp_path: Path, name: str = "w") -> Path:
    pkg = tmp_path / name / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg.parent.parent, pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    return tmp_path / name


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_restart_stop_keeps_the_url(fake_env: fx.VllmEnv, tmp_path: Path) -> None:
    server = fx.VllmServer(fx.SERVER_KINDS["plain"], fake_env, _workdir(tmp_path))
    try:
        server.start()
        assert httpx.get(f"{server.url}/health").status_code == 200
        url, pid, slot = server.url, server.pid, server._slot_fd
        assert pid is not None and slot is not None
        server.restart()
        assert server._slot_fd == slot  # a restart keeps its machine slot
        assert server.url == url and server.pid != pid
        assert not _group_alive(pid)
        assert httpx.get(f"{server.url}/health").status_code == 200
    finally:
        server.stop()
    assert fx.port_refuses(server.port)
    assert server.pid is None
    assert "--reasoning-parser deepseek_r1" in " ".join(server.command())


def test_port_refuses_until_ready(
    fake_env: fx.VllmEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_LOAD_S", "1.5")
    pool = fx.VllmPool(fake_env, _workdir(tmp_path))
    seen: list[bool] = []
    try:
        pool.ensure("plain", on_spawn=lambda s: seen.append(fx.port_refuses(s.port)))
        assert seen == [True]
        assert not fx.port_refuses(pool.server("plain").port)
    finally:
        pool.stop_all()


def test_failed_start_shows_the_log_tail(
    fake_env: fx.VllmEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    server = fx.VllmServer(fx.SERVER_KINDS["ngram"], fake_env, _workdir(tmp_path))
    with pytest.raises(fx.ServerExited, match=r"(?s)exited \(3\).*boom, bad flag"):
        server.start()
    assert server.pid is None
    # The slot went back: both are free again.
    fds = [fx._try_take_slot(), fx._try_take_slot()]
    for fd in fds:
        os.close(fd)


def test_pool_evicts_the_least_recently_used_idle_server(
    fake_env: fx.VllmEnv, tmp_path: Path
) -> None:
    pool = fx.VllmPool(fake_env, _workdir(tmp_path))
    try:
        pool.ensure("plain")
        pool.ensure("ngram")
        pool.ensure("plain")  # used again: ngram is now the least recently used
        pool.ensure("answering")
        assert {s.kind for s in pool.running()} == {"plain", "answering"}
        with pool.use("plain"):  # in use: never evicted, even as the LRU
            pool._last_used["plain"] = 0.0
            pool.ensure("profiled")
            assert {s.kind for s in pool.running()} == {"plain", "profiled"}
        assert pool.server("profiled").trace_dir is not None
        assert pool.server("profiled").trace_dir.is_dir()  # type: ignore[union-attr]
    finally:
        pool.stop_all()
    assert pool.running() == []


def test_machine_wide_slots_are_shared_across_pools(
    fake_env: fx.VllmEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECLOAD_VLLM_SLOTS", "1")
    monkeypatch.setattr(fx, "SLOT_WAIT_TIMEOUT_S", 0.5)
    mine = fx.VllmPool(fake_env, _workdir(tmp_path, "a"))
    other = fx.VllmPool(fake_env, _workdir(tmp_path, "b"))  # as if another pytest process
    try:
        with mine.use("plain"):
            with pytest.raises(RuntimeError, match="no free vLLM slot"):
                other.ensure("plain")
            # The server process itself holds the slot: closing our copy does not free it.
            server = mine.server("plain")
            assert server._slot_fd is not None
            os.close(server._slot_fd)
            server._slot_fd = None
            with pytest.raises(fx.SlotBusy):
                os.close(fx._try_take_slot())
        mine.stop_all()
        other.ensure("plain")
        # A pool whose own idle server holds the last slot frees it for a new kind.
        other.ensure("ngram")
        assert [s.kind for s in other.running()] == ["ngram"]
    finally:
        mine.stop_all()
        other.stop_all()


def test_missing_venv_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECLOAD_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECLOAD_VLLM_PYTHON", raising=False)
    env, reason = fx.find_vllm_env()
    assert env is None and "vllm-env.json" in reason
    monkeypatch.setenv("SPECLOAD_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    env, reason = fx.find_vllm_env()
    assert env is None and "missing" in reason
