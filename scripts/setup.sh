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
    # The multi-host simulation (tests/multihost.py): network namespaces, veths, nsenter.
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
    # Validates deploy/compose.yaml against the Compose schema (tests/server/test_deploy.py).
    command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
    # The bubblewrap sandbox's seccomp filter is compiled with libseccomp's bindings for the
    # system Python (grader/sandbox/hardening.py).
    /usr/bin/python3 -c 'import seccomp' >/dev/null 2>&1 || missing+=(python3-seccomp)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # A root grader runs bubblewrap as this user, never as root (README "Sandboxes").
    if ! id grader-sandbox >/dev/null 2>&1; then
        echo "setup: creating the system user grader-sandbox" >&2
        useradd --system --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin --user-group grader-sandbox
    fi
    # cgroup v1: a parent group per controller for the per-run groups. With
    # GRADER_SERVICE_USER set, delegate it to that user so a grader that is not root keeps
    # hard memory and pids limits. (cgroup v2 delegation is the service manager's job:
    # systemd's Delegate=yes.) Not persistent: run again after a reboot.
    for controller in memory pids; do
        root=/sys/fs/cgroup/$controller
        [ -w "$root/cgroup.procs" ] || continue
        mkdir -p "$root/grader"
        if [ -n "${GRADER_SERVICE_USER:-}" ]; then
            chown "$GRADER_SERVICE_USER" "$root/grader" "$root/grader/cgroup.procs" \
                "$root/grader/tasks"
        fi
    done
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
