#!/usr/bin/env bash
# Build the grader's own image (grader-server:latest, deploy/Dockerfile.server) on this machine,
# offline, the way the sandbox image is built (scripts/build-base-image.sh):
#
#   scripts/build-server-image.sh                            # FROM the offline debootstrap base
#   scripts/build-server-image.sh --base python:3.11-slim    # production: a public Python base
#
# 1. wheels of the grader and of every dependency are built on the host (`pip wheel .`, with the
#    host's pip configuration and cache), so the image build needs no network;
# 2. the base is grader-base:<recipe hash> with pip (made once with debootstrap, shared with the
#    sandbox build) unless --base names another;
# 3. the engine's legacy builder builds deploy/Dockerfile.server with only the wheels as context,
#    tagged grader-server:<content hash> and grader-server:latest. An unchanged content hash
#    (wheels, Dockerfile, base) skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "build-server-image: $*" >&2; }

python=.venv/bin/python
if [ ! -x "$python" ]; then
    say "no .venv: run scripts/setup.sh first"
    exit 1
fi
base=""
if [ "${1:-}" = "--base" ] && [ -n "${2:-}" ]; then
    base=$2
elif [ $# -gt 0 ]; then
    say "usage: $0 [--base IMAGE]"
    exit 2
fi

scripts/docker-engine.sh

if [ -z "$base" ]; then
    base=$("$python" - <<'PY'
from grader.sandbox.base_image import base_recipe, ensure_base_image
from grader.sandbox.images import docker_client

print(ensure_base_image(docker_client(timeout=600), base_recipe(with_pip=True), log=print))
PY
)
    base=$(echo "$base" | tail -n 1)
fi

context=$(mktemp -d /var/tmp/grader-server-build-XXXXXX)
trap 'rm -rf "$context"' EXIT
say "wheels of the grader and its dependencies (on the host)"
# From a clean copy of the sources: setuptools reuses an in-tree build/ folder, which would
# carry files deleted or renamed since (a stale migration makes two Alembic heads).
mkdir "$context/src"
tar --exclude=./.git --exclude=./.venv --exclude=./build --exclude='./*.egg-info' \
    --exclude=./var --exclude='__pycache__' -cf - . | tar -C "$context/src" -xf -
# SOURCE_DATE_EPOCH makes the wheels reproducible, so an unchanged grader hashes the same.
# async-timeout: redis needs it on Python < 3.11.3 (Debian 12's python3 is 3.11.2); a host
# Python newer than that leaves it out of the resolution, so it is asked for explicitly.
SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --quiet --disable-pip-version-check \
    "$context/src" 'async-timeout>=4.0.3' -w "$context/wheels" \
    2> >(grep -v "is ignored: it is neither" >&2) >&2
rm -rf "$context/src"
cp deploy/Dockerfile.server "$context/Dockerfile"
base_id=$(docker image inspect --format '{{.Id}}' "$base")
digest=$( (cd "$context" && find . -type f -printf '%P\n' | sort | xargs -d '\n' sha256sum; \
    echo "$base_id") | sha256sum | cut -c1-16)
if docker image inspect "grader-server:$digest" >/dev/null 2>&1; then
    say "grader-server:$digest already built"
else
    say "docker build FROM $base"
    DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$base" \
        -t "grader-server:$digest" "$context" >&2
fi
docker tag "grader-server:$digest" grader-server:latest
echo "grader-server:$digest"
