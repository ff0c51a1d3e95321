"""systemd units for vLLM variants: round trips, quoting, hostile values, systemd-analyze."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specload.cli import main
from specload.deploy import speculative
from specload.deploy.execline import ExecLineError, literal_value, quote_word, split_words
from specload.deploy.systemd import rewrite_unit, variant_unit_path
from specload.deploy.unitfile import parse_unit
from specload.errors import UsageError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_UNIT = ROOT / "deploy" / "systemd" / "vllm.service"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (package systemd)"
)

VARIANTS = {
    "baseline": speculative.baseline(),
    "ngram": speculative.ngram(5, 2, 4),
    "eagle3": speculative.eagle3("/data/models/Kimi-K2.5-eagle3", 3, 1),
    "suffix": speculative.from_json("suffix", '{"method": "suffix", "num_speculative_tokens": 8}'),
}


def exec_words(text: str) -> list[str]:
    unit = parse_unit(text)
    (setting,) = [s for s in unit.get("Service", "ExecStart") if s.value]
    return [w.value for w in split_words(setting.logical, setting.value_start)]


def other_settings(text: str) -> list[tuple[str, str, str]]:
    unit = parse_unit(text)
    return [(s.section, s.key, s.value) for s in unit.settings if s.key != "ExecStart"]


def speculative_part(words: list[str]) -> dict[str, object] | None:
    if "--speculative-config" not in words:
        return None
    value = words[words.index("--speculative-config") + 1]
    literal = literal_value(value)
    assert literal is not None
    parsed = json.loads(literal)
    assert isinstance(parsed, dict)
    return parsed


# --- the reference unit round-trips to every variant ----------------------------------------


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_reference_unit_round_trips_to_each_variant(name: str) -> None:
    original = REFERENCE_UNIT.read_text()
    variant = VARIANTS[name]
    new = rewrite_unit(original, variant).text

    # Every other setting (Environment=, EnvironmentFile=, User=, limits…) is unchanged.
    assert other_settings(new) == other_settings(original)
    assert ("Service", "Environment", "NCCL_PROTO=LL") in other_settings(new)
    # The command is the same but for the speculative config.
    before, after = exec_words(original), exec_words(new)
    assert [w for w in after if w not in ("--speculative-config",)][: len(before)] == before
    assert speculative_part(after) == variant.speculative_config
    # And back to the baseline gives the original file byte for byte.
    assert rewrite_unit(new, speculative.baseline()).text == original


def test_only_exec_start_lines_change() -> None:
    original = REFERENCE_UNIT.read_text()
    new = rewrite_unit(original, VARIANTS["ngram"]).text
    setting = parse_unit(original).get("Service", "ExecStart")[0]
    old_lines, new_lines = original.splitlines(), new.splitlines()
    assert old_lines[: setting.first_line] == new_lines[: setting.first_line]
    tail = len(old_lines) - setting.last_line - 1
    assert old_lines[-tail:] == new_lines[-tail:]
    # Continuation lines of ExecStart= before the last one are kept verbatim.
    assert (
        old_lines[setting.first_line : setting.last_line]
        == new_lines[setting.first_line : setting.last_line]
    )


SPEC_FORMS = [
    '--speculative-config \'{"method":"ngram","num_speculative_tokens":5}\'',
    '--speculative-config={\\"method\\":\\"ngram\\"}',
    '--speculative_config \'{"method": "eagle"}\'',
    '-sc \'{"method":"ngram"}\'',
    "--speculative-config.method ngram --speculative-config.num_speculative_tokens 4",
    "--spec-method ngram --spec-tokens 3",
    "--speculative-model [ngram] --num-speculative-tokens 5 --ngram-prompt-lookup-max 4",
    "--speculative-model /m/draft --speculative-disable-mqa-scorer"
    " --speculative-draft-tensor-parallel-size 1",
]


@pytest.mark.parametrize("form", SPEC_FORMS)
def test_every_spelling_of_speculation_is_replaced(form: str) -> None:
    unit = (
        "[Service]\nEnvironment=A=1\n"
        f"ExecStart=/usr/bin/vllm serve m --port 8000 {form} --max-model-len 4096\n"
    )
    for variant in (VARIANTS["baseline"], VARIANTS["ngram"]):
        words = exec_words(rewrite_unit(unit, variant).text)
        expected = ["/usr/bin/vllm", "serve", "m", "--port", "8000", "--max-model-len", "4096"]
        if variant.speculative_config is None:
            assert words == expected
        else:
            # Put where the old flags stood.
            assert words[:5] == expected[:5] and words[-2:] == expected[-2:]
            assert speculative_part(words) == variant.speculative_config


def test_flag_on_its_own_line_is_replaced_in_place() -> None:
    unit = (
        "[Service]\n"
        "ExecStart=/opt/v/bin/vllm serve m \\\n"
        '    --speculative-config \'{"method":"ngram"}\' \\\n'
        "    # a comment inside the continuation\n"
        "    --port 8000\n"
    )
    new = rewrite_unit(unit, VARIANTS["eagle3"]).text.splitlines()
    assert new[1] == "ExecStart=/opt/v/bin/vllm serve m \\"
    assert new[2].startswith('    --speculative-config \'{"method":"eagle3"')
    assert new[2].endswith(" \\")
    assert new[3:] == ["    # a comment inside the continuation", "    --port 8000"]
    baseline = rewrite_unit(unit, VARIANTS["baseline"]).text.splitlines()
    assert baseline[1:] == [
        "ExecStart=/opt/v/bin/vllm serve m \\",
        "    # a comment inside the continuation",
        "    --port 8000",
    ]


def test_last_line_removed_drops_the_dangling_backslash() -> None:
    unit = '[Service]\nExecStart=/v/vllm serve m \\\n  --port 1 \\\n  -sc \'{"method":"ngram"}\'\n'
    assert rewrite_unit(unit, VARIANTS["baseline"]).text == (
        "[Service]\nExecStart=/v/vllm serve m \\\n  --port 1\n"
    )


def test_python_module_entrypoint_and_prefixes_are_recognised() -> None:
    unit = (
        "[Service]\nExecStart=-/venv/bin/python -m vllm.entrypoints.openai.api_server --model m\n"
    )
    words = exec_words(rewrite_unit(unit, VARIANTS["ngram"]).text)
    assert words[:5] == [
        "-/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "m",
    ]
    assert speculative_part(words) == VARIANTS["ngram"].speculative_config


@pytest.mark.parametrize(
    ("unit", "message"),
    [
        ("[Service]\nExecStart=/bin/bash -c 'vllm serve m'\n", "runs a shell"),
        ("[Service]\nExecStart=/usr/bin/python app.py\n", "does not run vllm"),
        ("[Service]\nType=simple\n", "no ExecStart="),
        ("[Service]\nExecStart=/v/vllm serve 'm\n", "unbalanced"),
        ("Description=x\n", r"outside any \[Section\]"),
    ],
)
def test_units_that_cannot_be_edited_are_refused(unit: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        rewrite_unit(unit, VARIANTS["ngram"])


def test_environment_variables_in_exec_start_are_warned_about() -> None:
    unit = "[Service]\nExecStart=/v/vllm serve m $VLLM_EXTRA_ARGS\n"
    result = rewrite_unit(unit, VARIANTS["ngram"])
    assert any("environment variables" in w for w in result.warnings)
    assert exec_words(result.text)[3] == "$VLLM_EXTRA_ARGS"


def test_variant_unit_path() -> None:
    assert variant_unit_path(Path("/etc/x/vllm.service"), "ngram") == Path(
        "/etc/x/vllm-ngram.service"
    )
    assert variant_unit_path(Path("vllm@.service"), "eagle3") == Path("vllm-eagle3@.service")
    with pytest.raises(UsageError, match=r"not a \.service"):
        variant_unit_path(Path("vllm.conf"), "ngram")


# --- quoting: systemd's rules, hostile values ------------------------------------------------


_PRINTABLE = st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_PRINTABLE))
def test_quote_word_round_trips_through_systemd_splitting(value: str) -> None:
    raw = quote_word(value)
    words = split_words(f"/bin/prog {raw} tail")
    assert words[0].value == "/bin/prog"
    assert words[-1].value == "tail"
    assert len(words) == 3
    assert literal_value(words[1].value) == value


@pytest.mark.parametrize("value", ["a\nb", "x\x00", "tab\there", "bell\x07"])
def test_control_characters_are_refused(value: str) -> None:
    with pytest.raises(ExecLineError):
        quote_word(value)
    with pytest.raises(UsageError, match="--draft-model"):
        speculative.eagle3(value)


HOSTILE = [
    "/m/x' --trust-remote-code '",
    '/m/x" ; rm -rf / ; "',
    "/m/$(id) `id` ${HOME} $HOME",
    "/m/100%n %i %%",
    "/m/back\\slash\\'q",
    "/m/sp ace;&|<>*?[]{}",
]


@pytest.mark.parametrize("draft", HOSTILE)
def test_hostile_draft_model_stays_one_json_value(draft: str) -> None:
    unit = "[Service]\nExecStart=/v/vllm serve m --port 8000\n"
    words = exec_words(rewrite_unit(unit, speculative.eagle3(draft)).text)
    assert words[:5] == ["/v/vllm", "serve", "m", "--port", "8000"]
    assert len(words) == 7
    config = speculative_part(words)
    assert config is not None and config["model"] == draft


@pytest.mark.parametrize("name", ["../evil", "a b", "x;y", "$(id)", "", "Upper", "-dash"])
def test_hostile_variant_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match="--variant"):
        speculative.check_variant_name(name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ("{}", "JSON object"),
        ('{"method": 3}', "must be a string"),
    ],
)
def test_bad_spec_json_is_refused(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        speculative.from_json("custom", text)


def test_ngram_bounds() -> None:
    with pytest.raises(UsageError, match="--prompt-lookup-min"):
        speculative.ngram(3, 5, 4)
    with pytest.raises(UsageError, match="--num-speculative-tokens"):
        speculative.ngram(0)


# --- systemd-analyze ---------------------------------------------------------------------------


def _verify(unit_path: Path) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", "--generators=no", str(unit_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _with_executable(text: str, tmp_path: Path) -> str:
    """Point ExecStart= at an executable that exists here (verify checks it)."""
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    return re.sub(r"(ExecStart=)\S+", lambda m: m.group(1) + str(fake), text, count=1)


@needs_systemd
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_generated_units_pass_systemd_analyze_verify(name: str, tmp_path: Path) -> None:
    source = _with_executable(REFERENCE_UNIT.read_text(), tmp_path)
    unit = tmp_path / f"vllm-{name}.service"
    unit.write_text(rewrite_unit(source, VARIANTS[name]).text)
    result = _verify(unit)
    assert result.returncode == 0, result.stderr


@needs_systemd
def test_hostile_values_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    source = _with_executable("[Service]\nExecStart=/x serve m\n", tmp_path)
    for index, draft in enumerate(HOSTILE):
        unit = tmp_path / f"h{index}.service"
        unit.write_text(rewrite_unit(source, speculative.eagle3(draft)).text)
        result = _verify(unit)
        assert result.returncode == 0, (draft, result.stderr)


@needs_systemd
@pytest.mark.parametrize("value", [*HOSTILE, '{"a":"b c"}', "plain", "it's", 'say "hi"', "x\\y"])
def test_systemd_itself_unquotes_our_quoting(value: str, tmp_path: Path) -> None:
    # systemd prints argv[0] after its own unquoting when the command is missing:
    # the real parser reads back exactly the value we quoted (``$`` is not expanded there).
    path = "/nonexistent-specload/v=" + value
    unit = tmp_path / "q.service"
    unit.write_text(f"[Service]\nExecStart={quote_word(path)} arg\n")
    result = _verify(unit)
    assert result.returncode != 0
    match = re.search(
        r"(?:Executable name contains special characters: (.*)"
        r"|Command (.*) is not executable: .*)$",
        result.stderr,
        re.M,
    )
    assert match is not None, result.stderr
    shown = match.group(1) or match.group(2)
    assert shown.replace("$$", "$") == path


@needs_systemd
def test_shipped_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
    assert len(units) >= 4
    for source in units:
        target = tmp_path / source.name
        target.write_text(_with_executable(source.read_text(), tmp_path))
        result = _verify(target)
        assert result.returncode == 0, (source.name, result.stderr)


# --- the command line ---------------------------------------------------------------------------


def test_cli_writes_beside_the_source_and_prints_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "vllm.service"
    shutil.copy(REFERENCE_UNIT, source)
    source.chmod(0o640)
    assert (
        main(
            [
                "deploy",
                "systemd",
                "--from",
                str(source),
                "--variant",
                "ngram",
                "-k",
                "5",
                "--prompt-lookup-max",
                "4",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    target = tmp_path / "vllm-ngram.service"
    assert target.exists() and oct(target.stat().st_mode & 0o777) == "0o640"
    assert '+    --speculative-config \'{"method":"ngram","num_speculative_tokens":5,' in out
    assert speculative_part(exec_words(target.read_text())) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    # Same output again is fine; a different one needs --force.
    assert main(["deploy", "systemd", "--from", str(source), "--variant", "ngram", "-k", "5"]) == 0
    assert main(["deploy", "systemd", "--from", str(source), "--variant", "ngram", "-k", "3"]) == 2
    assert "--force" in capsys.readouterr().err


def test_cli_spec_from_file_and_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "vllm.service"
    shutil.copy(REFERENCE_UNIT, source)
    spec = tmp_path / "spec.json"
    spec.write_text('{"method": "suffix", "num_speculative_tokens": 16}')
    assert (
        main(
            [
                "deploy",
                "systemd",
                "--from",
                str(source),
                "--variant",
                "suffix",
                "--spec",
                f"@{spec}",
                "--dry-run",
            ]
        )
        == 0
    )
    assert '"method":"suffix"' in capsys.readouterr().out
    assert not (tmp_path / "vllm-suffix.service").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--variant", "eagle3"], "--draft-model: required"),
        (["--variant", "ngram", "--draft-model", "/m"], "--draft-model: not allowed"),
        (["--variant", "baseline", "-k", "3"], "--num-speculative-tokens: not allowed"),
        (["--variant", "custom"], "give its config with --spec"),
        (["--variant", "baseline", "--spec", "{}"], "baseline variant has no"),
        (["--variant", "ngram", "--spec", '{"method":"eagle3"}'], "does not match"),
        (["--variant", "../x", "--spec", '{"method":"x"}'], "not a variant name"),
    ],
)
def test_cli_errors_are_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy", "systemd", "--from", str(REFERENCE_UNIT), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_missing_source_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["deploy", "systemd", "--from", "/nonexistent/vllm.service", "--variant", "ngram"])
        == 2
    )
    assert "--from: cannot read" in capsys.readouterr().err


def test_reference_unit_is_the_documented_deployment() -> None:
    text = REFERENCE_UNIT.read_text()
    for needle in (
        "NCCL_PROTO=LL",
        "NCCL_ALGO=Ring",
        "NCCL_MAX_NCHANNELS=16",
        "HF_HOME",
        "--tensor-parallel-size 8",
        "--tool-call-parser",
        "--reasoning-parser",
    ):
        assert needle in text
    assert os.access(REFERENCE_UNIT, os.R_OK)


# --- vLLM's per-request speculative-decoding counts -----------------------------------------


def test_per_request_counts_go_with_speculation_only() -> None:
    original = REFERENCE_UNIT.read_text()
    detailed = replace(VARIANTS["ngram"], per_request_metrics="detailed")
    words = exec_words(rewrite_unit(original, detailed).text)
    flag = words.index("--per-request-spec-decode-metrics")
    assert words[flag + 1] == "detailed"
    assert words[flag - 2] == "--speculative-config"
    ngram_unit = rewrite_unit(original, detailed).text
    # Another speculative variant keeps the unit's own level; the baseline drops it (vLLM
    # refuses it without speculation) and is the original again.
    eagle = exec_words(rewrite_unit(ngram_unit, VARIANTS["eagle3"]).text)
    assert eagle[eagle.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert rewrite_unit(ngram_unit, speculative.baseline()).text == original
    off = replace(VARIANTS["eagle3"], per_request_metrics="none")
    assert "--per-request-spec-decode-metrics" not in exec_words(rewrite_unit(ngram_unit, off).text)


def test_per_request_counts_on_the_baseline_are_a_usage_error(tmp_path: Path, capsys) -> None:
    unit = tmp_path / "vllm.service"
    unit.write_text(REFERENCE_UNIT.read_text())
    argv = ["deploy", "systemd", "--from", str(unit), "--variant", "baseline"]
    assert main([*argv, "--per-request-spec-decode-metrics", "detailed", "--dry-run"]) == 2
    assert "--per-request-spec-decode-metrics" in capsys.readouterr().err
