# syntax=docker/dockerfile:1.7
# The operator's image: slim, non-root, reproducible. Build it from the repository root:
#
#   docker build -t nodepool-operator:0.1.0 \
#     --build-arg SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" .
#
# or without a Docker daemon or a registry, on a base made from Debian packages, with
# `bash scripts/build-image.sh` (buildah; docs/image.md), which passes PYTHON_IMAGE.
#
# Reproducible: the base image is pinned (pin its digest too, `python:...@sha256:...`, to
# be independent of re-pushed tags); SOURCE_DATE_EPOCH fixes the timestamps inside the
# wheel, makes the .pyc files checked-hash instead of mtime-based, and (BuildKit >= 0.11)
# dates the image config. To clamp the file times in the layers as well, build with
#   docker buildx build --build-arg SOURCE_DATE_EPOCH=... \
#     --output type=image,name=nodepool-operator:0.1.0,rewrite-timestamp=true .
# (buildah: --timestamp, as scripts/build-image.sh does.)
# Dependencies are installed exactly as locked in requirements/runtime.txt (versions and
# file hashes; scripts/lock.sh regenerates it), pip and the build backend as pinned below,
# so two builds get the same packages.
#
# The uid/gid 65532 is the one deploy/manager/deployment.yaml runs as (runAsUser).

# Both stages' base: any image with python3 (>= 3.11, with its venv module), /bin/sh and
# coreutils; it needs no pip (the build stage fetches its own, pinned below).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# --- build: the project and every dependency as wheels -----------------------------------
FROM ${PYTHON_IMAGE} AS build
# 315532800 is 1980-01-01, the earliest time a zip (a wheel) can hold.
ARG SOURCE_DATE_EPOCH=315532800
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH}
WORKDIR /src
# pip for the build only, in a venv of its own (/opt/build, never copied into the
# runtime), from its wheel on PyPI checked against the hash pinned here; then the build
# backend the project's wheel is made with, pinned by hash like the dependencies.
ADD https://files.pythonhosted.org/packages/07/25/ee8c38ae72d66b844ce8eb9711ba905dba21ca1a8a0c960057c41cd23337/pip-26.3-py3-none-any.whl /tmp/pip/
# A network that intercepts TLS may pass its CA as the build secret pip-cert (buildah/docker
# --secret id=pip-cert,src=FILE); it is mounted for the step only, never in a layer.
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
 && echo 'f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13  /tmp/pip/pip-26.3-py3-none-any.whl' \
      | sha256sum -c - \
 && python3 -m venv --without-pip /opt/build \
 && /opt/build/bin/python /tmp/pip/pip-26.3-py3-none-any.whl/pip install --quiet \
      --no-cache-dir --no-index /tmp/pip/pip-26.3-py3-none-any.whl \
 && rm -r /tmp/pip \
 && printf '%s\n' \
      'setuptools==80.9.0 --hash=sha256:062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922' \
      > /opt/build/requirements.txt \
 && /opt/build/bin/pip install --quiet --no-cache-dir --require-hashes --no-deps \
      -r /opt/build/requirements.txt
# The lock first: its layer (every dependency's wheel) is reused while only src/ changes.
COPY requirements/runtime.txt requirements/runtime.txt
# Dependencies come as wheels too, so the final stage needs neither a compiler nor the
# network; pip refuses any file whose hash the lock does not list. (Were a dependency ever
# published without a wheel for this platform, its build tools would be installed here,
# never in the final stage.)
RUN --mount=type=secret,id=pip-cert \
    if [ -s /run/secrets/pip-cert ]; then export PIP_CERT=/run/secrets/pip-cert; fi \
 && /opt/build/bin/pip wheel --quiet --no-cache-dir --only-binary=:all: --wheel-dir /wheels \
      --require-hashes --no-deps -r requirements/runtime.txt
# README.md is the package's long description (pyproject.toml: readme). The wheel holds
# src/nodepool_operator only (pyproject.toml: packages.find); the development tools beside
# it in src/ are not packaged.
COPY pyproject.toml README.md ./
COPY src/ src/
RUN /opt/build/bin/pip wheel --quiet --no-cache-dir --no-build-isolation --no-deps \
      --wheel-dir /wheels .

# --- runtime: a venv with the wheels installed, run as a fixed non-root user ---------------
FROM ${PYTHON_IMAGE} AS runtime
ARG SOURCE_DATE_EPOCH=315532800
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}
# The wheels and the build's pip are bind-mounted from the build stage, so they never land
# in a layer; the venv has no pip of its own. .pyc files are compiled at install time:
# checked-hash (SOURCE_DATE_EPOCH, an ARG so in this step's environment only) with the set
# constants in a fixed order (PYTHONHASHSEED, for this step only: the operator keeps hash
# randomisation). The root filesystem is read-only at run time and PYTHONDONTWRITEBYTECODE
# keeps Python from trying to write.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/opt/build,target=/opt/build \
    python3 -m venv --without-pip /opt/venv \
 && export PIP_DISABLE_PIP_VERSION_CHECK=1 \
 && PYTHONHASHSEED=0 /opt/build/bin/pip --python /opt/venv/bin/python install --quiet \
      --no-cache-dir --no-index --no-deps /wheels/*.whl \
 && /opt/build/bin/pip --python /opt/venv/bin/python check \
 && nodepool-operator --help > /dev/null
# The user is written directly: useradd would record today's date in /etc/shadow.
RUN echo 'nodepool:x:65532:65532:nodepool-operator:/home/nodepool:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'nodepool:x:65532:' >> /etc/group \
 && install -d -m 0755 -o 65532 -g 65532 /home/nodepool

# Build-specific ones (version, revision, created, source) are given at build time
# (scripts/build-image.sh: --label).
LABEL org.opencontainers.image.title="nodepool-operator" \
      org.opencontainers.image.description="Kubernetes operator that provisions and autoscales node pools" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 65532:65532
WORKDIR /home/nodepool
# /metrics, /healthz and /readyz.
EXPOSE 8443 8081
ENTRYPOINT ["nodepool-operator"]
CMD ["run"]
