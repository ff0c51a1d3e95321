"""The tiny local models as built by scripts/build_tiny_models.py (no server needed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jinja2
import pytest
from tokenizers import Tokenizer

from tests.fixtures.vllm import VllmEnv

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]


def _manifest(env: VllmEnv) -> dict[str, object]:
    return json.loads((env.models["plain"].parent / "manifest.json").read_text())


@pytest.mark.parametrize("variant", ["plain", "answering"])
def test_model_shape_and_tokenizer(vllm_env: VllmEnv, variant: str) -> None:
    model_dir = vllm_env.models[variant]
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (128, 2)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert config["vocab_size"] == tok.get_vocab_size()
    added = {
        t["content"]: t
        for t in json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"]
    }
    for marker in ("<think>", "</think>"):
        assert added[marker]["special"] is False, f"{marker} must be a non-special added token"
    # A reasoning marker is one token, and decodes back to itself.
    ids = tok.encode("a<think>b</think>c").ids
    assert tok.token_to_id("<think>") in ids and tok.token_to_id("</think>") in ids
    assert tok.decode(ids, skip_special_tokens=True) == "a<think>b</think>c"
    # Byte-level: any text round-trips.
    text = "Zürich — 42 ≠ 41\n\tdef f(): pass"
    assert tok.decode(tok.encode(text).ids) == text


def test_chat_template_opens_the_assistant_turn_with_think(vllm_env: VllmEnv) -> None:
    template = (vllm_env.models["plain"] / "chat_template.jinja").read_text()
    rendered = (
        jinja2.Environment()
        .from_string(template)
        .render(
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Count to three."}]},
            ],
            add_generation_prompt=True,
        )
    )
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nCount to three.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )


def test_answering_variant_differs_only_in_the_think_bias(vllm_env: VllmEnv) -> None:
    manifest = _manifest(vllm_env)
    variants = manifest["variants"]
    assert isinstance(variants, dict)
    assert variants["plain"]["p_think_close"] < 1e-6
    assert 0.03 < variants["answering"]["p_think_close"] < 0.1
    for name in ("tokenizer.json", "chat_template.jinja", "config.json"):
        plain = (vllm_env.models["plain"] / name).read_bytes()
        assert plain == (vllm_env.models["answering"] / name).read_bytes()


def test_build_is_deterministic(vllm_env: VllmEnv, tmp_path: Path) -> None:
    """A fresh build gives byte-identical models (same sha256 as the cached build)."""
    subprocess.run(
        [
            str(vllm_env.python),
            str(ROOT / "scripts" / "build_tiny_models.py"),
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    fresh = json.loads((tmp_path / "manifest.json").read_text())
    assert fresh == _manifest(vllm_env)
