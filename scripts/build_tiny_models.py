#!/usr/bin/env python3
"""Build the tiny reasoning models that the real-vLLM tests run against.

No download: the weights are random (seeded), the tokenizer is a byte-level BPE
trained here on a corpus this script generates (seeded), so the output is the
same on every machine with the same torch/tokenizers versions.

Two variants, written to ``OUT/plain`` and ``OUT/answering``:

* ``plain``: reasons until ``max_tokens``. The chat template opens the assistant
  turn with ``<think>\\n``; the ``</think>`` and end-of-sequence logits are pushed
  far down in the weights, so every completion is reasoning only and ends with
  ``finish_reason == "length"`` (``completion_tokens == max_tokens``).
* ``answering``: the same network with the ``</think>`` logit raised (about 6%
  per step at temperature 1, so ~16 reasoning tokens on average), so it ends
  reasoning and then produces content until ``max_tokens``. Greedy decoding
  picks ``</think>`` at once (its logit is the largest), so use temperature 1.

Generated text is printable ASCII: tokens with other bytes are suppressed too.

How the logit is moved: embedding dimension 0 is a constant 1.0 for every token
and no layer writes to it (row 0 of every ``o_proj``/``down_proj`` is zero), so
after the final RMSNorm dimension 0 is a positive number of about 1 at every
position. A ``lm_head`` row that is zero except for column 0 then acts as a
per-token bias.

Run with the vLLM venv's python (it has torch, transformers, tokenizers):
    python scripts/build_tiny_models.py --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from pathlib import Path

# The vLLM venv has these (scripts/install-vllm.sh runs this script with its python).
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

SEED = 20261129
HIDDEN = 128
LAYERS = 2
HEADS = 2  # head_dim 64: a head size every CPU attention backend supports
KV_HEADS = 2
INTERMEDIATE = 256
VOCAB_TARGET = 1024
MAX_POSITIONS = 4096
LM_HEAD_STD = 0.1  # logits std ~1.1: varied text at temperature 1
THINK_BIAS_ANSWERING = 4.6  # P(</think>) per step ~ 6% at temperature 1
SUPPRESS_BIAS = -40.0

EOS = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set text = message['content'] %}"
    "{%- else %}{%- set text = message['content'] | map(attribute='text') | join('') %}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + text + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)

_WORD_TEXT = """
the a an of to in on for with from by at as is are was were be been being this that these those
it its we you they he she i me my our your their them us not no yes and or but if then else when
while because so than too very more most less least many much few some any each every all both
model token tokens reason reasoning answer question step steps first second third next last final
think thought check compute count sum add subtract multiply divide number numbers value values
result results equal greater smaller list item items order sort search find match pattern string
code function return call loop index array map key keys set graph node edge path tree root leaf
server request response latency throughput decode prefill batch queue cache memory time second
speculative draft accept accepted reject verify proposal length rate mean median percentile
prime even odd square root power factor ratio fraction percent total average minimum maximum
let us consider suppose assume therefore hence thus since given because wait actually hmm okay
write explain describe compare prove show solve simplify evaluate derive estimate measure test
good bad fast slow large small long short high low new old same different simple hard easy
apple river mountain city music paper light water stone window garden story letter bridge market
"""
_WORDS = _WORD_TEXT.split()

_TEMPLATES = [
    "{W} {w} {w} {w}, so the {w} is {n}.",
    "Let me {w} the {w}: {n} plus {n} equals {n}.",
    "First, {w} {w} {w}. Then {w} the {w} {w}.",
    "Wait, the {w} {w} {w} {n} times, not {n}.",
    "def {w}_{w}({w}, {w}):\n    return {w} + {n}\n",
    "{W} {w} {w} {w} {w} {w} {w}.",
    "Q: What is {n} * {n}? A: {n}.",
    "The {w} of {w} {w} is {n}.{n} {w} per {w}.",
    "{W}? {W} {w} {w} - {w} {w}; {w} {w} ({w}).",
    'print("{w} {w}", {n}, [{n}, {n}])',
]


def generate_corpus(rng: random.Random, lines: int = 6000) -> list[str]:
    """Deterministic pseudo-text: English words, numbers, punctuation, a little code."""

    def fill(template: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(template):
            if template.startswith("{w}", i):
                out.append(rng.choice(_WORDS))
                i += 3
            elif template.startswith("{W}", i):
                out.append(rng.choice(_WORDS).capitalize())
                i += 3
            elif template.startswith("{n}", i):
                out.append(str(rng.randint(0, 9999)))
                i += 3
            else:
                out.append(template[i])
                i += 1
        return "".join(out)

    return [fill(rng.choice(_TEMPLATES)) for _ in range(lines)]


def build_tokenizer(out_dir: Path) -> dict[str, int]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=[EOS, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(generate_corpus(random.Random(SEED)), trainer=trainer)
    # Reasoning markers are ordinary text (not special) so they survive detokenisation.
    tok.add_tokens(
        [
            AddedToken(THINK_OPEN, special=False, normalized=False),
            AddedToken(THINK_CLOSE, special=False, normalized=False),
        ]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=IM_END,
        pad_token=EOS,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    vocab = fast.get_vocab()
    return {name: vocab[name] for name in (EOS, IM_START, IM_END, THINK_OPEN, THINK_CLOSE)}


def unprintable_token_ids(out_dir: Path) -> list[int]:
    """Tokens whose bytes are not printable ASCII (or newline)."""
    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    bad: list[int] = []
    for token_id in range(tok.get_vocab_size()):
        text = tok.decode([token_id], skip_special_tokens=False)
        if not text or any(not (ch == "\n" or " " <= ch <= "~") for ch in text):
            bad.append(token_id)
    return bad


def build_model(
    out_dir: Path, ids: dict[str, int], vocab_size: int, think_bias: float, unprintable: list[int]
) -> None:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=ids[EOS],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[EOS],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed.normal_(0.0, 1.0)
        embed[:, 0] = 1.0  # the constant "bias" dimension
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        head = model.lm_head.weight
        head.normal_(0.0, LM_HEAD_STD)

        def bias(token_id: int, value: float) -> None:
            head[token_id, :] = 0.0
            head[token_id, 0] = value

        for name in (EOS, IM_START, IM_END, THINK_OPEN):
            bias(ids[name], SUPPRESS_BIAS)
        # Keep generated text printable ASCII: no control bytes, no partial UTF-8.
        for token_id in unprintable:
            bias(token_id, SUPPRESS_BIAS)
        bias(ids[THINK_CLOSE], think_bias)
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    GenerationConfig(
        bos_token_id=ids[EOS], eos_token_id=[ids[IM_END], ids[EOS]], pad_token_id=ids[EOS]
    ).save_pretrained(str(out_dir))


def measure_think_close(out_dir: Path, ids: dict[str, int]) -> float:
    """Probability of ``</think>`` at temperature 1, averaged over a short prompt's positions."""
    tok = AutoTokenizer.from_pretrained(str(out_dir))
    model = LlamaForCausalLM.from_pretrained(str(out_dir), torch_dtype=torch.float32)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Count the primes below 30 and explain the answer."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    input_ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        probs = torch.softmax(model(input_ids).logits[0].float(), dim=-1)
    return float(probs[:, ids[THINK_CLOSE]].mean())


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_logging.disable_progress_bar()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {"seed": SEED, "variants": {}}
    variants = {"plain": SUPPRESS_BIAS, "answering": THINK_BIAS_ANSWERING}
    for name, think_bias in variants.items():
        target = out / name
        target.mkdir(exist_ok=True)
        ids = build_tokenizer(target)
        vocab_size = max(ids.values()) + 1
        build_model(target, ids, vocab_size, think_bias, unprintable_token_ids(target))
        p_close = measure_think_close(target, ids)
        info = {
            "path": name,
            "vocab_size": vocab_size,
            "token_ids": ids,
            "p_think_close": round(p_close, 4),
            "sha256": digest(target),
        }
        assert isinstance(manifest["variants"], dict)
        manifest["variants"][name] = info
        print(f"{name}: vocab {vocab_size}, P(</think>) ~ {p_close:.3g}, {target}", file=sys.stderr)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
