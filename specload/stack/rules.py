"""specload's Prometheus rules and alerts: one source, one rendering per profile.

The source is ``deploy/prometheus/source/`` — the recording-rule and alert files with
``${name}`` wherever a profile decides: the window every performance rule and alert judges
(``${window}``), the long window of acceptance and of the reload silences
(``${long_window}``, ``${long_window_text}`` in sentences), the ``for:`` of the performance
alerts (``${for_regression}``, ``${for_traffic}``) and every alert threshold (the constants of
``config.rules.yml``). A profile gives each a value (:data:`PROFILES`); rendering substitutes
them and nothing else, so every profile has the same rules, names and expressions:

- ``production`` → ``deploy/prometheus/{rules,alerts}/`` (what every deployment loads; the
  files read exactly as they were written by hand before there was a source);
- ``demo`` → ``deploy/prometheus/demo/{rules,alerts}/``: the same rules on the clock of
  ``specload demo``, whose simulator runs :data:`DEMO_TIME_SCALE` times faster than the
  reference deployment (see :data:`DEMO`).

Recording-rule names keep the production window in them (``…:p50_5m``) in every profile:
boards, alerts and tools read them by name. The lifecycle alerts (target down, reload too
long, exporter down) judge real processes on the wall clock, not the simulator's, so their
``for:`` is the same in every profile. Both renderings are committed and checked by
``promtool`` (``deploy/prometheus/tests``, ``deploy/prometheus/demo/tests``); a unit test fails
when a committed file differs from its rendering::

    python -m specload.stack.rules            # write every profile's files
    python -m specload.stack.rules --check    # exit 1 if a committed file differs
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specload.records.stats import HELD_STREAM_LIMIT

#: The repository's ``deploy/prometheus`` (the source tree this module lives in).
PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
SOURCE_DIR = PROMETHEUS_DIR / "source"
#: The rule and alert files of the source, relative to it (and to each profile's folder).
SOURCE_FILES = (
    "rules/client.rules.yml",
    "rules/config.rules.yml",
    "rules/signals.rules.yml",
    "rules/vllm.rules.yml",
    "alerts/specload.alerts.yml",
)

#: The alert thresholds (``config.rules.yml``), as written in the rules.
THRESHOLDS: Mapping[str, str] = {
    "tpot_regression_margin": "0.10",
    "min_requests_to_judge": "20",
    "acceptance_collapse_fraction": "0.5",
    "reload_overrun_factor": "1.25",
    "error_ratio_threshold": "0.05",
    "reasoning_truncated_threshold": "0.20",
    # the level flag's own limit: one definition
    "streams_held_threshold": f"{HELD_STREAM_LIMIT:.2f}",
}

_PLACEHOLDER = re.compile(r"\$\{([a-z_]+)\}")
_DURATION = re.compile(r"^([1-9][0-9]*)(s|m|h)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


def duration_s(text: str) -> int:
    """Seconds of a profile's duration (``20s``, ``5m``, ``1h``: one unit, whole numbers)."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r}: not a duration like 20s, 5m or 1h")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class Profile:
    """The values one rendering gives the source's placeholders."""

    name: str
    #: Folder of the rendered ``rules/`` and ``alerts/``, relative to ``deploy/prometheus``.
    folder: str
    window: str
    long_window: str
    for_regression: str  # TPOT regression, acceptance collapse, reasoning truncated
    for_traffic: str  # error ratio, load generator stalled
    thresholds: Mapping[str, str] = field(default_factory=lambda: dict(THRESHOLDS))
    #: Comment lines put before each rendered file ("" for none).
    header: str = ""

    @property
    def out_dir(self) -> Path:
        return PROMETHEUS_DIR / self.folder if self.folder else PROMETHEUS_DIR

    def values(self) -> dict[str, str]:
        for text in (self.window, self.long_window, self.for_regression, self.for_traffic):
            duration_s(text)
        return {
            "window": self.window,
            "long_window": self.long_window,
            # "over the last hour" in production's sentences
            "long_window_text": "hour" if self.long_window == "1h" else self.long_window,
            "for_regression": self.for_regression,
            "for_traffic": self.for_traffic,
            **self.thresholds,
        }

    def rule_files(self) -> list[Path]:
        """The rendered files, in the source's order."""
        return [self.out_dir / name for name in SOURCE_FILES]


PRODUCTION = Profile(
    name="production",
    folder="",
    window="5m",
    long_window="1h",
    for_regression="10m",
    for_traffic="5m",
)

#: How much faster than the reference deployment the demo's simulator runs.
DEMO_TIME_SCALE = 30
DEMO = Profile(
    name="demo",
    folder="demo",
    # 10 reference minutes at the demo's time scale, twice production's 5: at 4 users an
    # n-gram server finishes ~16 of the demo's 4096-token reasoning requests in 5 reference
    # minutes, fewer than the 20 every ratio alert needs to judge.
    window="20s",
    long_window="2m",  # 1 h on the reference clock
    for_regression="20s",  # 10 min
    for_traffic="10s",  # 5 min
    header=(
        "# Generated by `python -m specload.stack.rules` from deploy/prometheus/source/\n"
        "# (profile demo) — do not edit. The production rules on the clock of\n"
        f"# `specload demo`, whose simulator runs {DEMO_TIME_SCALE}x faster than the reference\n"
        "# deployment: windows 20s (10 reference minutes), long windows 2m (1h), `for:`\n"
        "# 20s (10m) and 10s (5m). Thresholds, expressions and names as in production\n"
        "# (names keep production's windows: …:p50_5m judges 20s here); the lifecycle\n"
        "# alerts judge processes on the wall clock and keep production's `for:`.\n"
    ),
)

PROFILES: dict[str, Profile] = {p.name: p for p in (PRODUCTION, DEMO)}


def render_text(template: str, profile: Profile, where: str = "template") -> str:
    """``template`` with every ``${name}`` replaced by the profile's value."""
    values = profile.values()

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"{where}: ${{{name}}} is not a profile value ({', '.join(values)})")
        return values[name]

    text = _PLACEHOLDER.sub(value, template)
    if "${" in text:
        raise ValueError(f"{where}: a placeholder that is not ${{name}} is left")
    return profile.header + text


def rendered(profile: Profile) -> dict[Path, str]:
    """Every file of ``profile``: its path and text."""
    out: dict[Path, str] = {}
    for name, path in zip(SOURCE_FILES, profile.rule_files(), strict=True):
        source = SOURCE_DIR / name
        out[path] = render_text(source.read_text(encoding="utf-8"), profile, str(source))
    return out


def stale_files() -> list[Path]:
    """Committed files that differ from their rendering (or are missing)."""
    stale: list[Path] = []
    for profile in PROFILES.values():
        for path, text in rendered(profile).items():
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specload.stack.rules",
        description="Render specload's Prometheus rules and alerts for every profile.",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a committed file differs from its rendering"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"{path.relative_to(PROMETHEUS_DIR.parents[1])}: differs from its rendering")
        if stale:
            print("run: python -m specload.stack.rules", file=sys.stderr)
        return 1 if stale else 0
    for profile in PROFILES.values():
        for path, text in rendered(profile).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(PROMETHEUS_DIR.parents[1])} ({profile.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
