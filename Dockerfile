# syntax=docker/dockerfile:1
# headroom exporter image: `docker build -t headroom .` at the repository root.
#
# Two stages. The builder turns the source tree into wheels (ours and every dependency's);
# the final stage installs those wheels and nothing else: no compiler, no source tree, no
# pip cache. Every dependency ships manylinux wheels (x86_64 and aarch64) for CPython 3.13,
# so not even the builder needs a compiler, on either architecture. Debian trixie, because
# its own python3 is 3.13: scripts/image.sh makes this base from the Debian archive when no
# registry is reachable, and then builds exactly what `docker build` builds.

ARG PYTHON_IMAGE=python:3.13-slim-trixie

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is built from (see .dockerignore).
COPY pyproject.toml README.md* ./
COPY exporter/ exporter/
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The wheels come in through a bind mount, so they never land in a layer. pip compiles
# the bytecode at install time: the chart runs with a read-only root filesystem.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels /wheels/vllm_headroom-*.whl \
    && headroom --version
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
