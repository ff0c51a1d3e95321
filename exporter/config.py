"""Exporter configuration: a YAML file and/or flags, validated into dataclasses.

A bad file gives one :class:`~specload.errors.UsageError` line naming the key
(``exporter.yaml: targets[1].url: ...``). The schema is documented in
``docs/exporter.md``; ``deploy/exporter.example.yaml`` is a full example.

Secrets never reach an error message, ``repr`` or ``/-/targets``: an API key is
checked when loaded (a line break or control character in it is an error that
names the key's field, not its value), and a URL's ``user:password@`` is split off
into :attr:`TargetConfig.userinfo` (sent as HTTP Basic auth) — the URL kept in
:attr:`TargetConfig.url` has none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from specload.durations import parse_duration
from specload.errors import UsageError
from specload.redact import MASK, redact_url, split_userinfo
from specload.urls import ServerURL, parse_server_url

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 9464
DEFAULT_INTERVAL_S = 5.0
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_VARIANT_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
#: What an API key may hold: visible ASCII, single spaces inside (an HTTP header value).
_API_KEY_RE = re.compile(r"[\x21-\x7e]+(?: [\x21-\x7e]+)*\Z")


@dataclass(frozen=True)
class ProfileConfig:
    """Where a target's torch-profiler traces land and how often to capture."""

    trace_dir: Path | None = None
    interval_s: float | None = None  # None: no scheduled capture (profiling slows the server)
    seconds: float = 10.0

    @property
    def enabled(self) -> bool:
        return self.trace_dir is not None


@dataclass(frozen=True)
class LogSource:
    """A vLLM server log to follow: a file path or a systemd unit's journal."""

    path: Path | None = None
    unit: str | None = None


@dataclass(frozen=True)
class TargetConfig:
    variant: str
    url: ServerURL  # never with userinfo: safe to show
    model: str | None = None  # when set, overrides what the server reports
    api_key: str | None = field(default=None, repr=False)
    log: LogSource | None = None
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    expected_reload_s: float | None = None
    timeout_s: float | None = None  # None: derived from the poll interval
    labels: Mapping[str, str] = field(default_factory=dict)  # declared variant facts
    # ``user:password`` from the configured URL (sent as HTTP Basic auth), kept apart.
    userinfo: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # A backstop for configs built in code; the loaders below name the field first.
        if self.api_key is not None:
            check_api_key(self.api_key, f"target {self.variant}: api_key")
        if split_userinfo(self.url.root)[1] is not None:
            raise UsageError(f"target {self.variant}: url must not carry user:password@")

    @property
    def request_url(self) -> ServerURL:
        """The URL with its userinfo, for clients that take credentials from the URL."""
        if not self.userinfo:
            return self.url
        scheme, sep, rest = self.url.root.partition("://")
        return ServerURL(f"{scheme}{sep}{self.userinfo}@{rest}")


@dataclass(frozen=True)
class ExporterConfig:
    targets: tuple[TargetConfig, ...]
    address: str = DEFAULT_ADDRESS
    port: int = DEFAULT_PORT
    interval_s: float = DEFAULT_INTERVAL_S
    max_response_bytes: int = DEFAULT_MAX_BYTES
    baselines: tuple[Path, ...] = ()

    def timeout_for(self, target: TargetConfig) -> float:
        if target.timeout_s is not None:
            return target.timeout_s
        return max(0.2, min(10.0, 0.8 * self.interval_s))


_TOP_KEYS = {"targets", "listen", "address", "port", "interval", "max_response_bytes", "baselines"}
_TARGET_KEYS = {
    "variant",
    "name",
    "url",
    "model",
    "api_key",
    "api_key_env",
    "log",
    "profile",
    "expected_reload",
    "timeout",
    "info",
}
_INFO_KEYS = {"method", "num_speculative_tokens", "draft_model", "tensor_parallel_size"}


def _where(source: str, key: str) -> str:
    return f"{source}: {key}" if source else key


def _mapping(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise UsageError(f"{name}: expected a mapping, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str):
            raise UsageError(f"{name}: keys must be strings, got {k!r}")
    return value


def _unknown(data: Mapping[str, Any], allowed: set[str], name: str) -> None:
    for key in data:
        if key not in allowed:
            prefix = f"{name}." if name else ""
            raise UsageError(f"{prefix}{key}: unknown key (known: {', '.join(sorted(allowed))})")


def _string(value: object, name: str) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool) or value == "":
        raise UsageError(f"{name}: expected a non-empty string, got {value!r}")
    return str(value)


def _secret_string(value: object, name: str) -> str:
    """A string that may be secret: errors name the field and the type, never the value."""
    if not isinstance(value, str):
        raise UsageError(
            f"{name}: expected a string (quote it in YAML), got {type(value).__name__} "
            "(value not shown)"
        )
    if value == "":
        raise UsageError(f"{name}: must not be empty")
    return value


def check_api_key(key: str, name: str) -> str:
    """``key`` if it can go in ``Authorization: Bearer KEY``; else a one-line error without it."""
    if _API_KEY_RE.match(key):
        return key
    if any(c in key for c in "\r\n"):
        problem = "contains a line break (CR or LF; a key file's trailing newline?)"
    elif key != key.strip():
        problem = "starts or ends with whitespace"
    elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        problem = "contains a control character"
    elif not key.isascii():
        problem = "contains non-ASCII characters"
    else:
        problem = "contains repeated or non-space whitespace"
    raise UsageError(f"{name}: the API key {problem}; key not shown")


def _target_url(value: object, name: str) -> tuple[ServerURL, str | None]:
    """The server URL without userinfo, and the userinfo; errors never show the userinfo."""
    raw = _secret_string(value, name).strip()
    clean, userinfo = split_userinfo(raw)
    try:
        return parse_server_url(clean, name=name), userinfo or None
    except UsageError:
        if userinfo is not None or "@" not in raw:
            raise  # the message shows the URL without its userinfo
        # A URL too broken to split cleanly: show nothing before its last "@".
        head, _, tail = raw.rpartition("@")
        scheme, sep, _ = head.partition("://")
        masked = f"{scheme}{sep}{MASK}@{tail}" if sep else f"{MASK}@{tail}"
        raise UsageError(f"{name}: {masked!r} is not a valid http(s) URL") from None


def _duration(value: object, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"{name}: {value!r} is not a duration")
    return parse_duration(value, name=name, allow_zero=allow_zero)


def _variant(value: object, name: str) -> str:
    text = _string(value, name)
    if not _VARIANT_RE.match(text):
        raise UsageError(f"{name}: {text!r} must be 1-64 of letters, digits, '_', '.', '-'")
    return text


def _port(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise UsageError(f"{name}: {value!r} is not a port number (0-65535)")
    return value


def _parse_target(data: object, name: str, env: Mapping[str, str]) -> TargetConfig:
    d = _mapping(data, name)
    _unknown(d, _TARGET_KEYS, name)
    if "variant" in d and "name" in d:
        raise UsageError(f"{name}: give 'variant' or 'name', not both")
    vkey = "variant" if "variant" in d else "name"
    if vkey not in d:
        raise UsageError(f"{name}.variant: missing")
    variant = _variant(d[vkey], f"{name}.{vkey}")
    if "url" not in d:
        raise UsageError(f"{name}.url: missing")
    url, userinfo = _target_url(d["url"], f"{name}.url")
    model = _string(d["model"], f"{name}.model") if d.get("model") is not None else None
    api_key: str | None = None
    if d.get("api_key") is not None:
        api_key = check_api_key(_secret_string(d["api_key"], f"{name}.api_key"), f"{name}.api_key")
    if d.get("api_key_env") is not None:
        var = _string(d["api_key_env"], f"{name}.api_key_env")
        if var not in env:
            raise UsageError(f"{name}.api_key_env: environment variable {var} is not set")
        api_key = check_api_key(env[var], f"{name}.api_key_env ({var})")
    if api_key is not None and userinfo is not None:
        raise UsageError(
            f"{name}: the url's user:password@ and the API key both set Authorization; give one"
        )
    log: LogSource | None = None
    if d.get("log") is not None:
        raw = d["log"]
        if isinstance(raw, str):
            log = LogSource(path=Path(raw))
        else:
            lm = _mapping(raw, f"{name}.log")
            _unknown(lm, {"path", "unit"}, f"{name}.log")
            if ("path" in lm) == ("unit" in lm):
                raise UsageError(f"{name}.log: give exactly one of 'path' or 'unit'")
            if "path" in lm:
                log = LogSource(path=Path(_string(lm["path"], f"{name}.log.path")))
            else:
                log = LogSource(unit=_string(lm["unit"], f"{name}.log.unit"))
    profile = ProfileConfig()
    if d.get("profile") is not None:
        pm = _mapping(d["profile"], f"{name}.profile")
        _unknown(pm, {"trace_dir", "interval", "seconds"}, f"{name}.profile")
        if "trace_dir" not in pm:
            raise UsageError(f"{name}.profile.trace_dir: missing")
        interval = pm.get("interval")
        profile = ProfileConfig(
            trace_dir=Path(_string(pm["trace_dir"], f"{name}.profile.trace_dir")),
            interval_s=None
            if interval is None
            else _duration(interval, f"{name}.profile.interval"),
            seconds=_duration(pm.get("seconds", 10), f"{name}.profile.seconds"),
        )
    expected = d.get("expected_reload")
    timeout = d.get("timeout")
    labels: dict[str, str] = {}
    if d.get("info") is not None:
        im = _mapping(d["info"], f"{name}.info")
        _unknown(im, _INFO_KEYS, f"{name}.info")
        labels = {k: _string(v, f"{name}.info.{k}") for k, v in im.items()}
    return TargetConfig(
        variant=variant,
        url=url,
        model=model,
        api_key=api_key,
        log=log,
        profile=profile,
        expected_reload_s=None
        if expected is None
        else _duration(expected, f"{name}.expected_reload"),
        timeout_s=None if timeout is None else _duration(timeout, f"{name}.timeout"),
        labels=labels,
        userinfo=userinfo,
    )


def parse_config(
    data: object, *, env: Mapping[str, str] | None = None, base: Path | None = None
) -> ExporterConfig:
    """Validate a loaded YAML document (``base``: directory relative paths resolve against)."""
    environ = env if env is not None else {}
    if data is None:
        data = {}
    d = _mapping(data, "config")
    _unknown(d, _TOP_KEYS, "")
    address = DEFAULT_ADDRESS
    port = DEFAULT_PORT
    if d.get("listen") is not None:
        listen = _string(d["listen"], "listen")
        host, sep, port_text = listen.rpartition(":")
        if not sep or not port_text.isdigit():
            raise UsageError(f"listen: {listen!r} must be HOST:PORT")
        address, port = host.strip("[]") or DEFAULT_ADDRESS, _port(int(port_text), "listen")
    if d.get("address") is not None:
        address = _string(d["address"], "address")
    if d.get("port") is not None:
        port = _port(d["port"], "port")
    interval = DEFAULT_INTERVAL_S
    if d.get("interval") is not None:
        interval = _duration(d["interval"], "interval")
    max_bytes = DEFAULT_MAX_BYTES
    if d.get("max_response_bytes") is not None:
        mb = d["max_response_bytes"]
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1024:
            raise UsageError(f"max_response_bytes: {mb!r} must be an integer >= 1024")
        max_bytes = mb
    raw_targets = d.get("targets") or []
    if not isinstance(raw_targets, Sequence) or isinstance(raw_targets, str):
        raise UsageError("targets: expected a list of targets")
    targets = [_parse_target(t, f"targets[{i}]", environ) for i, t in enumerate(raw_targets)]
    baselines: list[Path] = []
    raw_baselines = d.get("baselines")
    if raw_baselines is not None:
        items = [raw_baselines] if isinstance(raw_baselines, str) else raw_baselines
        if not isinstance(items, Sequence):
            raise UsageError("baselines: expected a path or a list of paths")
        baselines = [Path(_string(p, f"baselines[{i}]")) for i, p in enumerate(items)]
    if base is not None:
        targets = [_resolve_paths(t, base) for t in targets]
        baselines = [p if p.is_absolute() else base / p for p in baselines]
    cfg = ExporterConfig(
        targets=tuple(targets),
        address=address,
        port=port,
        interval_s=interval,
        max_response_bytes=max_bytes,
        baselines=tuple(baselines),
    )
    _check_unique(cfg.targets, "targets")
    return cfg


def _resolve_paths(t: TargetConfig, base: Path) -> TargetConfig:
    log = t.log
    if log is not None and log.path is not None and not log.path.is_absolute():
        log = LogSource(path=base / log.path)
    profile = t.profile
    if profile.trace_dir is not None and not profile.trace_dir.is_absolute():
        profile = replace(profile, trace_dir=base / profile.trace_dir)
    return replace(t, log=log, profile=profile)


def _check_unique(targets: Sequence[TargetConfig], name: str) -> None:
    seen: set[str] = set()
    for i, t in enumerate(targets):
        if t.variant in seen:
            raise UsageError(f"{name}[{i}].variant: {t.variant!r} is used twice")
        seen.add(t.variant)


def load_config(path: Path, *, env: Mapping[str, str] | None = None) -> ExporterConfig:
    """Read and validate a YAML file; errors are one line naming the file and key."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--config: cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UsageError(f"{path}:{where} {problem}") from None
    try:
        return parse_config(data, env=env, base=path.resolve().parent)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def parse_target_flag(text: str) -> TargetConfig:
    """``--target NAME=URL``."""
    name, sep, url = text.partition("=")
    if not sep or not name or not url:
        shown = text if split_userinfo(url)[1] is None else name + "=" + redact_url(url)
        raise UsageError(f"--target: {shown!r} must be NAME=URL (e.g. baseline=http://h:8000)")
    variant = _variant(name, "--target")
    server, userinfo = _target_url(url, f"--target {name}")
    return TargetConfig(variant=variant, url=server, userinfo=userinfo)


def merge_flags(
    cfg: ExporterConfig,
    *,
    targets: Sequence[TargetConfig] = (),
    address: str | None = None,
    port: int | None = None,
    interval_s: float | None = None,
) -> ExporterConfig:
    """Flags override the file; ``--target`` adds to (or replaces by variant) its targets."""
    merged = {t.variant: t for t in cfg.targets}
    for t in targets:
        merged[t.variant] = t
    out = replace(
        cfg,
        targets=tuple(merged.values()),
        address=address if address is not None else cfg.address,
        port=port if port is not None else cfg.port,
        interval_s=interval_s if interval_s is not None else cfg.interval_s,
    )
    if not math.isfinite(out.interval_s) or out.interval_s <= 0:
        raise UsageError(f"--interval: {out.interval_s!r} must be greater than zero")
    return out
