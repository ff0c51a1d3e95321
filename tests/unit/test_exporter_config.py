"""exporter.config: the YAML file and the flags; a bad file gives one line naming the key."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.config import load_config, parse_config
from specload.commands.exporter import add_arguments, build_config
from specload.errors import UsageError

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_example_file_loads() -> None:
    cfg = load_config(REPO / "deploy" / "exporter.example.yaml", env={"VLLM_API_KEY": "s3cret"})
    assert [t.variant for t in cfg.targets] == ["baseline", "ngram", "eagle3"]
    base, ngram, eagle = cfg.targets
    assert base.url.metrics == "http://10.0.0.5:8000/metrics"
    assert base.expected_reload_s == 1800.0
    assert base.log is not None and base.log.unit == "vllm-baseline.service"
    assert base.profile.trace_dir == Path("/var/lib/vllm/traces/baseline")
    assert base.profile.interval_s is None and base.profile.seconds == 10.0
    assert ngram.api_key == "s3cret" and ngram.timeout_s == 4.0
    assert ngram.log is not None and ngram.log.path == Path("/var/log/vllm/ngram.log")
    assert dict(ngram.labels) == {"method": "ngram", "num_speculative_tokens": "5"}
    assert eagle.model == "kimi-k2.5"
    assert cfg.interval_s == 5.0 and cfg.port == 9464 and cfg.address == "127.0.0.1"
    assert cfg.timeout_for(base) == pytest.approx(4.0)
    assert cfg.baselines == (Path("/var/lib/specload/results/baseline/baseline.json"),)


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"targets": [{"variant": "a", "url": "h:1", "colour": 1}]},
         "targets[0].colour: unknown key"),
        ({"targets": [{"url": "h:1"}]}, "targets[0].variant: missing"),
        ({"targets": [{"variant": "a"}]}, "targets[0].url: missing"),
        ({"targets": [{"variant": "a", "url": "ftp://x"}]}, "targets[0].url"),
        ({"targets": [{"variant": "a b", "url": "h:1"}]}, "targets[0].variant"),
        ({"targets": [{"variant": "a", "url": "h:1", "expected_reload": "soon"}]},
         "targets[0].expected_reload"),
        ({"targets": [{"variant": "a", "url": "h:1", "profile": {"interval": "1m"}}]},
         "targets[0].profile.trace_dir: missing"),
        ({"targets": [{"variant": "a", "url": "h:1", "log": {"path": "x", "unit": "y"}}]},
         "targets[0].log"),
        ({"targets": [{"variant": "a", "url": "h:1", "api_key_env": "NOPE_NOT_SET"}]},
         "targets[0].api_key_env"),
        ({"targets": [{"variant": "a", "url": "h:1"}, {"variant": "a", "url": "h:2"}]},
         "targets[1].variant: 'a' is used twice"),
        ({"port": 70000}, "port"),
        ({"interval": "-1"}, "interval"),
        ({"listen": "nohost"}, "listen"),
        ({"targets": "a=b"}, "targets"),
        ({"tragets": []}, "tragets: unknown key"),
        ([1, 2], "config: expected a mapping"),
    ],
)  # fmt: skip
def test_bad_config_names_the_key(doc: object, needle: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_config(doc, env={})
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "exp.yaml"
    p.write_text("targets:\n  - variant: a\n    url: [unclosed\n")
    with pytest.raises(UsageError, match=r"exp\.yaml: line \d+"):
        load_config(p)
    p.write_text("targets:\n  - variant: a\n    url: h:1\n    oops: 2\n")
    with pytest.raises(UsageError, match=r"exp\.yaml: targets\[0\]\.oops: unknown key"):
        load_config(p)


def test_relative_paths_resolve_against_the_file(tmp_path: Path) -> None:
    p = tmp_path / "exp.yaml"
    p.write_text(
        "baselines: b.json\ntargets:\n  - {variant: a, url: 'h:1', log: logs/a.log,"
        " profile: {trace_dir: traces}}\n"
    )
    cfg = load_config(p)
    assert cfg.baselines == (tmp_path / "b.json",)
    assert cfg.targets[0].log is not None and cfg.targets[0].log.path == tmp_path / "logs/a.log"
    assert cfg.targets[0].profile.trace_dir == tmp_path / "traces"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_override_and_add(tmp_path: Path) -> None:
    p = tmp_path / "exp.yaml"
    p.write_text("port: 1234\ninterval: 10\ntargets:\n  - {variant: a, url: 'h:1', model: m}\n")
    cfg = build_config(
        _args("--config", str(p), "--target", "b=http://h:2/v1", "--port", "0", "--interval", "2s")
    )
    assert [t.variant for t in cfg.targets] == ["a", "b"]
    assert cfg.targets[1].url.root == "http://h:2"
    assert cfg.port == 0 and cfg.interval_s == 2.0
    with pytest.raises(UsageError, match="--target"):
        build_config(_args("--target", "nourl"))
    with pytest.raises(UsageError, match="no targets"):
        build_config(_args())
    with pytest.raises(UsageError, match="--interval"):
        build_config(_args("--target", "a=h:1", "--interval", "0"))


def test_cli_bad_file_is_one_line_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "exp.yaml"
    p.write_text("targets:\n  - {variant: a, url: 'h:1', timeout: forever}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "specload", "exporter", "--config", str(p)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "targets[0].timeout" in lines[0], proc.stderr
