#!/usr/bin/env bash
# Build the Docker sandbox image (grader-sandbox:latest) on this machine, offline.
#
#   scripts/build-base-image.sh                      # offline debootstrap base (cached) + image
#   scripts/build-base-image.sh --base python:3.11-slim   # production: a public Python base
#   scripts/build-base-image.sh --force              # rebuild the sandbox image regardless
#
# Installs debootstrap when missing (Debian, root), makes sure the engine answers
# (scripts/docker-engine.sh), then runs `grader sandbox build` with the given options. The
# offline base image grader-base:<recipe hash> is made once (about 40 s) and reused while its
# recipe (suite, packages, apt mirror) is unchanged; an unchanged sandbox image is reused too,
# so a second run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "build-base-image: $*" >&2; }

python=.venv/bin/python
if [ ! -x "$python" ]; then
    say "no .venv: run scripts/setup.sh first"
    exit 1
fi

scripts/docker-engine.sh

# debootstrap is needed only for the offline base (no --base given).
offline=1
for arg in "$@"; do
    case "$arg" in --base|--base=*) offline=0 ;; esac
done
if [ "$offline" = "1" ] && ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" != "0" ]; then
        say "debootstrap is missing and installing it needs root"
        exit 1
    fi
    say "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq debootstrap >/dev/null
fi

exec "$python" -m grader sandbox build "$@"
