#!/usr/bin/env bash
# Idempotent set-up shared by scripts/demo and scripts/test.
#   - Debian packages: prometheus (with promtool), prometheus-alertmanager
#   - .venv with specload and its dev tools (editable install)
# Re-running is fast: each step is skipped when its stamp matches.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECLOAD_VENV:-$ROOT/.venv}"
PYTHON="${SPECLOAD_PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

log() { printf '[setup] %s\n' "$*" >&2; }

sudo_if_needed() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_debian_packages() {
    local missing=()
    command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
    command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
    command -v prometheus-alertmanager >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
    # Headless Chromium: the browser tests read `specload report` pages and Locust's web UI.
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing Debian packages: ${missing[*]}"
        sudo_if_needed apt-get update -qq
        DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null
        # The packages start system services; specload runs its own instances.
        if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
            sudo_if_needed systemctl disable --now prometheus prometheus-alertmanager \
                prometheus-node-exporter >/dev/null 2>&1 || true
        fi
    fi
}

ensure_venv() {
    local stamp="$VENV/.specload-stamp"
    local want
    want="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/specload/load/_fastpath.c" | sha256sum | cut -c1-16)"
    if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    log "creating $VENV"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    local pip_log="$VENV/pip-install.log"
    if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
           "$VENV/bin/python" -m pip install -e "$ROOT[dev]"; } >"$pip_log" 2>&1; then
        tail -n 40 "$pip_log" >&2
        log "pip install failed (full log: $pip_log)"
        exit 1
    fi
    echo "$want" >"$stamp"
}

ensure_build_tools() {
    # The load generator's C fast path (specload/load/_fastpath.c) is built by the editable
    # install: it needs a C compiler and the interpreter's headers (without them specload
    # installs without it, and its client spends about twice the CPU per streamed token).
    local missing=()
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    local inc
    inc="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)"
    if [ -n "$inc" ] && [ ! -f "$inc/Python.h" ]; then
        missing+=("$("$PYTHON" -c 'import sys; print("python%d.%d-dev" % sys.version_info[:2])')")
    fi
    if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing Debian packages: ${missing[*]}"
        sudo_if_needed apt-get update -qq
        DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null || log "could not install ${missing[*]}"
    fi
}

ensure_debian_packages
ensure_build_tools
ensure_venv
