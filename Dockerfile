# syntax=docker/dockerfile:1
# headroom exporter image: `docker build -t headroom .` at the repository root.
#
# Two stages. The builder installs our wheel and every dependency's into /opt/headroom;
# the final stage copies that folder and nothing else: no compiler, no source tree, no
# pip cache. Every dependency ships manylinux wheels (x86_64 and aarch64) for CPython
# 3.13, so not even the builder needs a compiler, on either architecture. Debian trixie, because
# its own python3 is 3.13: scripts/image.sh makes this base from the Debian archive when no
# registry is reachable, and then builds exactly what `docker build` builds.

ARG PYTHON_IMAGE=python:3.13-slim-trixie
# The builder runs on the building machine's own architecture (a registry's multi-arch
# python image resolves to it by itself; scripts/image.sh, with one local image per
# architecture, names the host's here), so nothing but `headroom --version` runs under
# emulation when the target is another architecture.
ARG BUILD_PYTHON_IMAGE=${PYTHON_IMAGE}

FROM --platform=$BUILDPLATFORM ${BUILD_PYTHON_IMAGE} AS builder
ARG TARGETARCH
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (see .dockerignore).
COPY pyproject.toml README.md* ./
COPY exporter/ exporter/
# Our wheel (pure Python), then it and every dependency installed for the target
# architecture into one folder: pip takes the target's manylinux wheels (binary only, so
# a dependency without one fails here). Bytecode is compiled here, natively (it does not
# depend on the architecture), and never checked against the sources' mtimes, which the
# copy into the final stage need not keep: the root filesystem is read-only at run time.
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && arch=${TARGETARCH:-$(dpkg --print-architecture)} \
    && case $arch in amd64) m=x86_64 ;; arm64) m=aarch64 ;; \
         *) echo "unsupported target architecture $arch" >&2; exit 1 ;; esac \
    && pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
    && pip install --no-compile --target /opt/headroom --only-binary=:all: \
         --implementation cp --python-version "$pyver" \
         --platform "manylinux2014_$m" --platform "manylinux_2_28_$m" \
         --platform "manylinux_2_34_$m" --platform "manylinux_2_39_$m" \
         /wheels/vllm_headroom-*.whl \
    && python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/headroom

# Said although it is the default: buildah 1.28 otherwise takes this stage's platform from
# the builder's (scripts/image.sh passes both platforms, which it does not set itself).
# hadolint ignore=DL3065
FROM --platform=$TARGETPLATFORM ${PYTHON_IMAGE}
COPY --from=builder /opt/headroom /opt/headroom
ENV PYTHONPATH=/opt/headroom \
    PATH=/opt/headroom/bin:$PATH
RUN headroom --version
# Bytecode is already compiled; at run time the root filesystem is read-only.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

LABEL org.opencontainers.image.title="headroom" \
      org.opencontainers.image.description="Prometheus exporter of the true host memory of vLLM pods" \
      org.opencontainers.image.licenses="Apache-2.0"

EXPOSE 9847
# No USER: the exporter runs as root (uid 0), on purpose. It reads other processes'
# /proc/PID/smaps_rollup and /proc/PID/root, which the kernel allows only with
# CAP_SYS_PTRACE, and Kubernetes can grant added capabilities only to uid 0 (there are
# no ambient capabilities in a pod spec; file capabilities on the interpreter would need
# allowPrivilegeEscalation). The Helm chart drops every other capability, sets
# allowPrivilegeEscalation false, a read-only root filesystem and seccomp RuntimeDefault,
# and says runAsUser 0 explicitly.
ENTRYPOINT ["headroom"]
CMD ["serve"]
