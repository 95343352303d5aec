# syntax=docker/dockerfile:1.7
# The operator's image: slim, non-root, reproducible. Build it from the repository root:
#
#   docker build -t nodepool-operator:0.1.0 \
#     --build-arg SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" .
#
# Reproducible: the base image is pinned (pin its digest too, `python:...@sha256:...`, to
# be independent of re-pushed tags); SOURCE_DATE_EPOCH fixes the timestamps inside the
# wheel, makes the .pyc files checked-hash instead of mtime-based, and (BuildKit >= 0.11)
# dates the image config. To clamp the file times in the layers as well, build with
#   docker buildx build --build-arg SOURCE_DATE_EPOCH=... \
#     --output type=image,name=nodepool-operator:0.1.0,rewrite-timestamp=true .
# Dependencies are installed exactly as locked in requirements/runtime.txt (versions and
# file hashes; scripts/lock.sh regenerates it), so two builds get the same packages.
#
# The uid/gid 65532 is the one deploy/manager/deployment.yaml runs as (runAsUser).

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# --- build: the project and every dependency as wheels -----------------------------------
FROM ${PYTHON_IMAGE} AS build
# 315532800 is 1980-01-01, the earliest time a zip (a wheel) can hold.
ARG SOURCE_DATE_EPOCH=315532800
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH}
WORKDIR /src
# The lock first: its layer (every dependency's wheel) is reused while only src/ changes.
COPY requirements/runtime.txt requirements/runtime.txt
# Dependencies come as wheels too, so the final stage needs neither a compiler nor the
# network; pip refuses any file whose hash the lock does not list. (Were a dependency ever
# published without a wheel for this platform, its build tools would be installed here,
# never in the final stage.)
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels \
      --require-hashes --no-deps -r requirements/runtime.txt
# README.md is the package's long description (pyproject.toml: readme); setup.py leaves
# the test helpers out of the wheel and bundles tools/ and deploy/rbac into it.
COPY pyproject.toml setup.py README.md ./
COPY tools/ tools/
COPY deploy/rbac/ deploy/rbac/
COPY src/ src/
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels --no-deps .

# --- runtime: a venv with the wheels installed, run as a fixed non-root user ---------------
FROM ${PYTHON_IMAGE} AS runtime
ARG SOURCE_DATE_EPOCH=315532800
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}
# The user is written directly: useradd would record today's date in /etc/shadow.
RUN echo 'nodepool:x:65532:65532:nodepool-operator:/home/nodepool:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'nodepool:x:65532:' >> /etc/group \
 && install -d -m 0755 -o 65532 -g 65532 /home/nodepool
# The wheels are bind-mounted from the build stage, so they never land in a layer; the
# venv has no pip of its own (the base image's pip installs into it). .pyc files are
# compiled at install time (checked-hash, see SOURCE_DATE_EPOCH): the root filesystem is
# read-only at run time and PYTHONDONTWRITEBYTECODE keeps Python from trying to write.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/venv \
 && python -m pip --python /opt/venv/bin/python install --no-cache-dir --no-index \
      --no-deps /wheels/*.whl \
 && python -m pip --python /opt/venv/bin/python check \
 && nodepool-operator --help > /dev/null

LABEL org.opencontainers.image.title="nodepool-operator" \
      org.opencontainers.image.description="Kubernetes operator that provisions and autoscales node pools" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 65532:65532
WORKDIR /home/nodepool
# /metrics, /healthz and /readyz.
EXPOSE 8443 8081
ENTRYPOINT ["nodepool-operator"]
CMD ["run"]
