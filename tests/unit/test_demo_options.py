"""``specload demo``'s options (quick mode, overrides, bad values) and the stack's
``--baseline`` that the demo hands its baseline file through."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from exporter.config import parse_config
from specload.commands import demo
from specload.commands import stack as stack_cli
from specload.errors import UsageError
from specload.stack.configs import exporter_config
from specload.stack.plan import StackOptions, build_plan
from specload.stack.rules import DEMO_TIME_SCALE

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    args = parser.parse_args(list(argv))
    demo._resolve(args)
    return args


def test_defaults_quick_mode_and_explicit_options_win() -> None:
    normal = parse()
    # the reference's budget, on the clock the demo profile of the rules is made for
    assert (normal.concurrency, normal.duration, normal.max_tokens) == ("1,4", "20s", 4096)
    assert (normal.time_scale, normal.load_time_s) == (DEMO_TIME_SCALE, 8.0)
    quick = parse("--quick")
    assert (quick.concurrency, quick.duration, quick.max_tokens, quick.load_time_s) == (
        "1,4",
        "10s",
        4096,
        3.0,
    )
    assert quick.time_scale == DEMO_TIME_SCALE
    assert quick.scrape_interval == "1s"
    mixed = parse("--quick", "--duration", "30s", "--load-time", "2s")
    assert (mixed.duration, mixed.load_time_s, mixed.concurrency) == ("30s", 2.0, "1,4")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--time-scale", "0"], "--time-scale"),
        (["--load-time", "soon"], "--load-time"),
        (["--load-time", "0"], "--load-time"),
        (["--scrape-interval=-1s"], "--scrape-interval"),
    ],
)
def test_bad_options_are_one_line_errors(argv: list[str], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        parse(*argv)


def test_stack_up_baseline_reaches_the_exporter_config(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    stack_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "up",
            "--state-dir",
            str(tmp_path),
            "--baseline",
            "b.json",
            "--baseline",
            str(tmp_path / "c.json"),
            "--repo",
            str(ROOT),
            "--free-ports",
        ]
    )
    options = stack_cli._options(args, tmp_path)
    assert options.baselines == ((Path.cwd() / "b.json").resolve(), tmp_path / "c.json")
    plan = build_plan(options)
    config = exporter_config(plan)
    assert config["baselines"] == [str(p) for p in options.baselines]
    assert parse_config(config).baselines == options.baselines  # the exporter accepts it
    without = exporter_config(
        build_plan(StackOptions(state_dir=tmp_path, repo=ROOT, free_ports=True))
    )
    assert "baselines" not in without


def test_a_previous_demo_is_cleared_and_foreign_results_are_refused(tmp_path: Path) -> None:
    previous = tmp_path / "previous"
    for name in ("baseline", "fifth-prompt", "ngram-steady", "ngram", "stack/logs"):
        (previous / name).mkdir(parents=True)
    (previous / "baseline" / "requests.jsonl").write_text("{}\n")
    (previous / "demo.json").write_text("{}")
    (previous / "mine.txt").write_text("kept")
    demo._clear_previous(previous)
    assert sorted(p.name for p in previous.iterdir()) == ["mine.txt"]

    foreign = tmp_path / "foreign"
    (foreign / "baseline").mkdir(parents=True)
    with pytest.raises(UsageError, match="not written by the demo"):
        demo._clear_previous(foreign)
    assert (foreign / "baseline").is_dir()
