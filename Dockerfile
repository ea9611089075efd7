# The grading sandbox image: Python plus the course's allowed libraries, nothing else.
#
# Built by `grader sandbox build` (grader/sandbox/images.py), which sends only this file and
# sandbox-requirements.txt as the build context and passes BASE_IMAGE:
#   - offline machines: an image made with debootstrap + `docker import` (grader-base:<hash>);
#   - production: a public Python image, e.g. `grader sandbox build --base python:3.11-slim`.
# The runner (grader/sandbox/runner.py) is NOT baked in: the grader mounts it read-only at
# /grader/runner.py for every run, and sets every limit (user, network, read-only root, ...)
# itself when it creates a container, so nothing here is relied on for isolation.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Must match grader.sandbox.images.SANDBOX_UID (the build passes it as a build argument).
ARG SANDBOX_UID=10001

# PATH is set explicitly because an image made with `docker import` carries no environment.
# Everything set with ENV is visible to agents, so pip's settings stay on its own command line.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1

# `grader sandbox build` puts wheels for every listed requirement (built on the host with the
# host's pip configuration) in wheels/, so the image build never needs the network; `wheel[s]`
# is a glob so that a plain `docker build` without that folder still works (pip then uses the
# index). The folder's contents land next to the requirements file in /tmp/build.
COPY sandbox-requirements.txt wheel[s] /tmp/build/

# pip runs only when the requirements file lists something: a debootstrap base has no pip
# (the build adds python3-pip to the base recipe when it is needed). A listed package with no
# pip available fails the build loudly rather than producing an image without the libraries.
# The user is written into /etc/passwd directly so that this works on any Debian-like base,
# with or without the `passwd` tools.
RUN set -eu; \
    if grep -Eqv '^[[:space:]]*(#|$)' /tmp/build/sandbox-requirements.txt; then \
        if ! python3 -m pip --version >/dev/null 2>&1; then \
            echo "sandbox-requirements.txt lists packages but the base image has no pip" >&2; \
            exit 1; \
        fi; \
        offline=""; \
        if ls /tmp/build/*.whl >/dev/null 2>&1; then offline="--no-index --find-links /tmp/build"; fi; \
        PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
            python3 -m pip install --no-compile $offline -r /tmp/build/sandbox-requirements.txt; \
    fi; \
    rm -rf /tmp/build; \
    grep -q "^agent:" /etc/group || echo "agent:x:${SANDBOX_UID}:" >> /etc/group; \
    grep -q "^agent:" /etc/passwd || \
        echo "agent:x:${SANDBOX_UID}:${SANDBOX_UID}:grader sandbox:/tmp:/usr/sbin/nologin" >> /etc/passwd; \
    mkdir -p /agent /corpus /grader; \
    python3 -c "import json, importlib, os, sys; assert sys.version_info >= (3, 11), sys.version"

WORKDIR /agent
USER ${SANDBOX_UID}:${SANDBOX_UID}
# Harmless default; the grader always gives the command (python3 /grader/runner.py).
CMD ["python3", "--version"]
