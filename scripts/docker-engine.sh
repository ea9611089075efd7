#!/usr/bin/env bash
# Make sure a Docker engine is installed and answering on this machine (Debian 12, root).
#
#   scripts/docker-engine.sh            # install docker.io if needed, start dockerd, wait for it
#
# Idempotent: with the engine already answering it only checks and exits 0 in well under a
# second. The daemon is started detached (setsid) because there is no systemd here; its log goes
# to $DOCKERD_LOG (default /var/log/dockerd.log). Exit status is non-zero, with a one-line reason
# on stderr, when the engine cannot be made to answer within $DOCKER_ENGINE_TIMEOUT seconds (60).
set -euo pipefail

timeout_s="${DOCKER_ENGINE_TIMEOUT:-60}"
log="${DOCKERD_LOG:-/var/log/dockerd.log}"

say() { echo "docker-engine: $*" >&2; }
die() { say "error: $*"; exit 1; }

# Debian's client (/usr/bin/docker) is the one that matches Debian's daemon. A newer client in
# /usr/local/bin may shadow it on PATH; it negotiates the API version down as well, but we
# prefer the matching one so that `docker info` here means exactly "the daemon answers".
pick_client() {
    if [ -x /usr/bin/docker ]; then
        echo /usr/bin/docker
    else
        command -v docker || true
    fi
}

# No pgrep: procps is not part of every minimal Debian.
dockerd_running() {
    local comm
    for comm in /proc/[0-9]*/comm; do
        [ "$(cat "$comm" 2>/dev/null)" = "dockerd" ] && return 0
    done
    return 1
}

engine_answers() {
    local client
    client=$(pick_client)
    [ -n "$client" ] && "$client" info >/dev/null 2>&1
}

if engine_answers; then
    say "engine already answering ($("$(pick_client)" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    exit 0
fi

if [ "$(id -u)" != "0" ]; then
    die "the engine is not answering and starting it needs root; run this script as root"
fi

if ! command -v dockerd >/dev/null 2>&1; then
    say "installing docker.io (Debian package)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq docker.io >/dev/null || die "apt-get install docker.io failed"
    command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd is not on PATH"
fi

# A daemon may already be starting (another run of this script, or a stale pid file from a
# killed one). Only start a new one when no dockerd process exists at all.
if dockerd_running; then
    say "dockerd is running but not answering yet; waiting"
else
    # A leftover pid file from a killed daemon makes dockerd refuse to start.
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
        rm -f /var/run/docker.pid
    fi
    say "starting dockerd (log: $log)"
    mkdir -p "$(dirname "$log")"
    setsid dockerd >"$log" 2>&1 </dev/null &
fi

deadline=$(( $(date +%s) + timeout_s ))
until engine_answers; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        say "last lines of $log:"
        tail -n 20 "$log" >&2 2>/dev/null || true
        die "dockerd did not answer within ${timeout_s}s (see $log)"
    fi
    if ! dockerd_running; then
        say "last lines of $log:"
        tail -n 20 "$log" >&2 2>/dev/null || true
        die "dockerd exited during start-up (see $log)"
    fi
    sleep 0.5
done
say "engine answering ($("$(pick_client)" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
