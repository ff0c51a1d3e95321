"""exporter.lifecycle and exporter.logs: a server's life through reloads, and its log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.lifecycle import Lifecycle
from exporter.logs import FileFollower, JournalFollower, LogState, parse_speculative_config

pytestmark = pytest.mark.unit

VLLM_CONFIG_LINE = (
    "(EngineCore_DP0 pid=123) INFO 11-29 10:00:01 [core.py:93] Initializing a V1 LLM engine "
    "(v0.32.0) with config: model='/models/kimi', speculative_config=SpeculativeConfig("
    "method='eagle3', model='/models/kimi-eagle3', num_spec_tokens=3), tokenizer='/models/kimi', "
    "skip_tokenizer_init=False, tensor_parallel_size=8, pipeline_parallel_size=1, seed=0"
)


def test_ready_loading_ready_measures_downtime() -> None:
    lc = Lifecycle()
    assert lc.view(0).state == "unknown"
    lc.ok(100.0, 50.0)
    assert lc.view(100).state == "ready"
    lc.ok(105.0, 50.0)
    lc.failed(110.0, refused=True)  # went away between 105 and 110
    v = lc.view(117.0)
    assert v.state == "loading" and v.reload_in_progress
    assert v.reload_elapsed_s == pytest.approx(7.0)
    lc.failed(115.0, refused=True)
    lc.ok(140.0, 112.0)  # new process started at 112, after the last good poll
    v = lc.view(140.0)
    assert v.state == "ready" and not v.reload_in_progress
    assert v.reloads_total == 1
    # From the earlier of first failure (110) and new process start (112) to 140.
    assert v.last_reload_duration_s == pytest.approx(30.0)
    assert v.start_time_s == 112.0


def test_process_start_refines_reload_start() -> None:
    lc = Lifecycle()
    lc.ok(100.0, 50.0)
    lc.failed(110.0, refused=True)
    lc.ok(130.0, 103.0)  # the new process started at 103, before the failed poll saw it
    assert lc.view(130).last_reload_duration_s == pytest.approx(27.0)


def test_restart_between_polls_counts_as_reload() -> None:
    lc = Lifecycle()
    lc.ok(100.0, 50.0)
    lc.ok(105.0, 103.0)  # process start changed, no failed poll in between
    v = lc.view(105.0)
    assert v.reloads_total == 1 and v.last_reload_duration_s == pytest.approx(2.0)
    lc.ok(110.0, 103.0, restarted=True)  # counters went backwards
    assert lc.view(110).reloads_total == 2


def test_refused_before_ever_up_is_down_and_other_faults_are_down() -> None:
    lc = Lifecycle()
    lc.failed(1.0, refused=True)
    assert lc.view(1).state == "down"
    lc.ok(2.0, 1.0)
    lc.failed(3.0, refused=False)  # a listening server answering 500
    assert lc.view(3).state == "down"
    lc.ok(4.0, 1.0)
    assert lc.view(4).reloads_total == 0


def test_restart_after_a_down_spell_counts() -> None:
    lc = Lifecycle()
    lc.ok(100.0, 50.0)
    lc.failed(105.0, refused=False)  # answering 500s
    lc.ok(110.0, 108.0)  # and then restarted
    v = lc.view(110.0)
    assert v.state == "ready" and v.reloads_total == 1
    assert v.last_reload_duration_s == pytest.approx(2.0)


def test_log_loading_marks_loading_even_if_never_up() -> None:
    lc = Lifecycle()
    lc.failed(10.0, refused=True, log_loading=True, log_started_s=8.0)
    v = lc.view(12.0)
    assert v.state == "loading" and v.reload_elapsed_s == pytest.approx(4.0)
    lc.ok(20.0, 8.5)
    assert lc.view(20).last_reload_duration_s == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("line", "method", "k", "draft"),
    [
        (VLLM_CONFIG_LINE, "eagle3", 3, "/models/kimi-eagle3"),
        (
            "speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=5),"
            " tokenizer='x'",
            "ngram",
            5,
            None,
        ),
        (
            'with config: model=\'m\', speculative_config=SpeculativeConfig({"method": "ngram", '
            '"num_speculative_tokens": 5, "prompt_lookup_max": 4}), tensor_parallel_size=8',
            "ngram",
            5,
            None,
        ),
        (
            "non-default args: {'model': 'm', 'speculative_config': {'method': 'ngram', "
            "'num_speculative_tokens': 3, 'prompt_lookup_max': 4}}",
            "ngram",
            3,
            None,
        ),
        ("model='m', speculative_config=None, tokenizer='m'", "none", 0, None),
    ],
)
def test_speculative_config_forms(line: str, method: str, k: int, draft: str | None) -> None:
    spec = parse_speculative_config(line)
    assert spec is not None
    assert (spec.method, spec.num_speculative_tokens, spec.draft_model) == (method, k, draft)


def test_log_state_reads_config_progress_and_ready() -> None:
    st = LogState()
    st.feed(["INFO vLLM API server version 0.32.0", VLLM_CONFIG_LINE], 10.0)
    assert st.loading and st.load_started_s == 10.0 and st.load_progress == 0.0
    assert st.spec is not None and st.spec.method == "eagle3"
    assert st.tensor_parallel_size == 8 and st.vllm_version == "0.32.0"
    st.feed(["Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:03<00:04]"], 11.0)
    assert st.load_progress == pytest.approx(0.4)
    st.feed(["Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:08<00:00]"], 12.0)
    assert st.load_progress == pytest.approx(1.0)
    st.feed(["INFO:     Application startup complete."], 13.0)
    assert not st.loading


def test_file_follower_tail_rotation_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text("old line\n")
    f = FileFollower(path)
    assert f.poll() == ["old line"]
    with path.open("a") as fh:
        fh.write("a\nb")  # "b" is not complete yet
    assert f.poll() == ["a"]
    with path.open("a") as fh:
        fh.write("c\n")
    assert f.poll() == ["bc"]
    path.rename(tmp_path / "vllm.log.1")  # rotated: a new file appears
    path.write_text("new1\n")
    assert f.poll() == ["new1"]
    path.write_text("")  # truncated
    assert f.poll() == []
    with path.open("a") as fh:
        fh.write("after truncate\n")
    assert f.poll() == ["after truncate"]
    f.close()


def test_file_follower_missing_file_is_quiet(tmp_path: Path) -> None:
    f = FileFollower(tmp_path / "nope.log")
    assert f.poll() == []
    (tmp_path / "nope.log").write_text("hello\n")
    assert f.poll() == ["hello"]
    f.close()


def test_journal_follower_reads_a_command(tmp_path: Path) -> None:
    script = tmp_path / "fake-journalctl"
    script.write_text("#!/bin/sh\necho one\necho two\nexec sleep 30\n")
    script.chmod(0o755)
    j = JournalFollower("vllm.service", command=[str(script)])
    lines: list[str] = []
    deadline = time.monotonic() + 5
    while len(lines) < 2 and time.monotonic() < deadline:
        lines += j.poll()
        time.sleep(0.05)
    j.close()
    assert lines == ["one", "two"]
    missing = JournalFollower("x", command=[str(tmp_path / "no-such-binary")])
    assert missing.poll() == [] and missing.error is not None
