#!/usr/bin/env bash
# Set up this checkout on a fresh Debian 12 machine: system packages, then a virtualenv in .venv
# with the project installed (editable) and its dev tools. Safe to run again: it skips what is
# already done. Set GRADER_SETUP_SYSTEM=0 to skip the apt step (e.g. without root).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${GRADER_SETUP_SYSTEM:-1}" = "1" ]; then
    missing=()
    command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
    command -v make >/dev/null 2>&1 || missing+=(make)
    # The server tests: headless Chromium for Playwright (never `playwright install`) and a
    # private redis-server per test run.
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.grader-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -e '.[dev]'
    echo "$want" > "$stamp"
fi
