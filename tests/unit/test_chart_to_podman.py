"""scripts/chart_to_podman.py: the rendered DaemonSet as the equivalent `podman run`.

The unit tests translate literal pod specs; the chart test translates what real Helm
renders from the chart's defaults, so a chart change the translation does not know fails here.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_chart import needs_helm

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "chart_to_podman", REPO / "scripts" / "chart_to_podman.py")
assert _spec and _spec.loader
c2p = importlib.util.module_from_spec(_spec)
sys.modules["chart_to_podman"] = c2p
_spec.loader.exec_module(c2p)

# The shape the chart renders (kubernetes.enabled=false), trimmed to what matters here.
POD: dict[str, Any] = {
    "automountServiceAccountToken": False,
    "hostPID": True,
    "dnsPolicy": "ClusterFirst",
    "priorityClassName": "system-node-critical",
    "serviceAccountName": "headroom",
    "terminationGracePeriodSeconds": 30,
    "tolerations": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}],
    "containers": [{
        "name": "headroom",
        "image": "localhost/headroom:0.1.0-amd64",
        "imagePullPolicy": "IfNotPresent",
        "args": ["serve", "--web.listen-address=:9847", "--path.procfs=/host/proc"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        "ports": [{"containerPort": 9847, "name": "metrics", "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}},
        "resources": {"limits": {"memory": "160Mi"}, "requests": {"cpu": "50m"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["SYS_PTRACE"], "drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsGroup": 0, "runAsNonRoot": False, "runAsUser": 0,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"mountPath": "/host/proc", "name": "proc", "readOnly": True,
             "recursiveReadOnly": "IfPossible"},
            {"mountPath": "/tmp", "name": "tmp"},
        ],
    }],
    "volumes": [
        {"name": "proc", "hostPath": {"path": "/proc", "type": "Directory"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
    ],
}


def translate(pod: dict[str, Any], tmp_path: Path, **host: Any) -> list[str]:
    ctx = c2p.HostContext(node_name="node-a", scratch_dir=tmp_path, **host)
    argv: list[str] = c2p.pod_to_podman(pod, ctx, "hr")
    return argv


@pytest.mark.unit
def test_every_field_of_the_pod_becomes_its_flag(tmp_path: Path) -> None:
    argv = translate(POD, tmp_path, publish_ip="127.0.0.1")
    image_at = argv.index("localhost/headroom:0.1.0-amd64")
    flags, args = argv[:image_at], argv[image_at + 1:]
    assert args == ["serve", "--web.listen-address=:9847", "--path.procfs=/host/proc"]
    for flag in ("--pid=host", "--user=0:0", "--read-only", "--read-only-tmpfs=false",
                 "no-new-privileges", "--cap-drop=ALL", "--cap-add=SYS_PTRACE",
                 f"seccomp={c2p.RUNTIME_DEFAULT_SECCOMP}", "--memory=167772160",
                 "--memory-swap=167772160", "--volume=/proc:/host/proc:ro",
                 f"--volume={tmp_path}/tmp:/tmp:rw", "--env=NODE_NAME=node-a",
                 "--env=NVIDIA_VISIBLE_DEVICES=all", "--publish=127.0.0.1:9847:9847/tcp"):
        assert flag in flags, flag
    # Drop before add: podman applies them in order, ALL last would undo the add.
    assert flags.index("--cap-drop=ALL") < flags.index("--cap-add=SYS_PTRACE")
    assert (tmp_path / "tmp").is_dir()


@pytest.mark.unit
def test_losing_host_pid_or_a_capability_changes_the_command(tmp_path: Path) -> None:
    pod = copy.deepcopy(POD)
    pod["hostPID"] = False
    pod["containers"][0]["securityContext"]["capabilities"]["add"] = []
    argv = translate(pod, tmp_path)
    assert "--pid=private" in argv and "--pid=host" not in argv
    assert not [a for a in argv if a.startswith("--cap-add")]
    assert not [a for a in argv if a.startswith("--publish")]  # none asked for


@pytest.mark.unit
@pytest.mark.parametrize(("path", "value", "message"), [
    (("containers", 0, "volumeMounts", 0, "mountPropagation"), "HostToContainer",
     "mountPropagation"),
    (("containers", 0, "volumeMounts", 0, "recursiveReadOnly"), "Enabled", "recursiveReadOnly"),
    (("containers", 0, "resources", "limits", "cpu"), "1", "cpu"),
    (("containers", 0, "securityContext", "seccompProfile", "type"), "Localhost", "Localhost"),
    (("containers", 0, "securityContext", "procMount"), "Unmasked", "procMount"),
    (("hostUsers",), False, "hostUsers"),
    (("automountServiceAccountToken",), True, "API server"),
    (("containers", 0, "env", 0, "valueFrom", "fieldRef", "fieldPath"), "status.podIP",
     "NODE_NAME"),
])
def test_a_field_without_an_equivalent_is_refused_by_name(
        tmp_path: Path, path: tuple[Any, ...], value: Any, message: str) -> None:
    pod = copy.deepcopy(POD)
    obj: Any = pod
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    with pytest.raises(c2p.Untranslatable, match=message):
        translate(pod, tmp_path)


@pytest.mark.unit
def test_a_missing_host_directory_is_refused(tmp_path: Path) -> None:
    pod = copy.deepcopy(POD)
    pod["volumes"][0]["hostPath"]["path"] = str(tmp_path / "absent")
    with pytest.raises(c2p.Untranslatable, match="not a directory"):
        translate(pod, tmp_path)


@pytest.mark.unit
@pytest.mark.parametrize(("quantity", "expected"), [
    ("160Mi", 167772160), ("1Gi", 2**30), ("512", 512), ("1G", 10**9), ("64Ki", 65536)])
def test_memory_quantities(quantity: str, expected: int) -> None:
    assert c2p.memory_bytes(quantity) == expected


@pytest.mark.unit
def test_a_memory_quantity_it_does_not_know_is_refused() -> None:
    with pytest.raises(c2p.Untranslatable):
        c2p.memory_bytes("1.5Gi")


@pytest.mark.unit
def test_image_values_point_the_chart_at_a_local_reference() -> None:
    assert c2p.image_values("localhost/headroom:0.1.0-arm64")["image"] == {
        "registry": "localhost", "repository": "headroom", "tag": "0.1.0-arm64"}


@pytest.mark.chart
@needs_helm
def test_the_charts_own_daemonset_translates(tmp_path: Path) -> None:
    """Real Helm, the chart's defaults: every field it renders is understood."""
    image = "localhost/headroom:0.1.0-amd64"
    values = {**c2p.image_values(image),
              "flightRecorder": {"hostPath": {"path": str(tmp_path / "fr")}}}
    pod = c2p.render_daemonset(values)
    argv = translate(pod, tmp_path)
    assert "--pid=host" in argv and "--cap-add=SYS_PTRACE" in argv
    assert "--volume=/sys/fs/cgroup:/host/sys/fs/cgroup:ro" in argv
    assert argv[argv.index(image) + 1] == "serve"


@pytest.mark.chart
@needs_helm
def test_v1_controllers_each_on_a_read_only_mount_of_their_own(tmp_path: Path) -> None:
    """hostPaths.cgroupV1Controllers: no whole-cgroupfs mount (its v1 sub-mounts would stay
    writable without recursiveReadOnly); each controller read-only, and podman follows."""
    values = {**c2p.image_values("localhost/headroom:0.1.0-amd64"),
              "flightRecorder": {"hostPath": {"path": str(tmp_path / "fr")}},
              "hostPaths": {"cgroupfs": str(tmp_path), "cgroupV1Controllers": ["memory"]}}
    (tmp_path / "memory").mkdir()
    pod = c2p.render_daemonset(values)
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert "cgroup" not in mounts
    assert mounts["cgroup-memory"] == {"name": "cgroup-memory", "readOnly": True,
                                       "mountPath": "/host/sys/fs/cgroup/memory"}
    argv = translate(pod, tmp_path)
    assert f"--volume={tmp_path}/memory:/host/sys/fs/cgroup/memory:ro" in argv


@pytest.mark.chart
@needs_helm
@pytest.mark.parametrize("v1_controllers", [[], ["memory"]])
def test_the_init_container_checks_the_exporters_own_cgroup_mounts(
        tmp_path: Path, v1_controllers: list[str]) -> None:
    """The check before the exporter sees exactly its cgroup mounts, holds no capability,
    and runs first in podman too; refuseWritableCgroupfs=false drops it."""
    (tmp_path / "memory").mkdir()
    values = {**c2p.image_values("localhost/headroom:0.1.0-amd64"),
              "flightRecorder": {"hostPath": {"path": str(tmp_path / "fr")}},
              "hostPaths": {"cgroupfs": str(tmp_path), "cgroupV1Controllers": v1_controllers}}
    pod = c2p.render_daemonset(values)
    (init,) = pod["initContainers"]
    exporter_mounts = [m for m in pod["containers"][0]["volumeMounts"]
                       if m["name"].startswith("cgroup")]
    assert init["volumeMounts"] == exporter_mounts
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert init["securityContext"]["runAsUser"] != 0
    ((name, argv),) = c2p.init_containers_to_podman(
        pod, c2p.HostContext(node_name="node-a", scratch_dir=tmp_path, publish_ip="127.0.0.1"),
        "hr")
    assert name == "cgroupfs-read-only" and argv[:2] == ["--rm", "--name=hr-cgroupfs-read-only"]
    assert not [a for a in argv if a.startswith("--publish")]
    assert "--cap-drop=ALL" in argv and not [a for a in argv if a.startswith("--cap-add")]
    values["hostPaths"]["refuseWritableCgroupfs"] = False
    assert "initContainers" not in c2p.render_daemonset(values)


@pytest.mark.kernel
@needs_helm
def test_the_init_containers_check_refuses_a_writable_sub_mount(tmp_path: Path) -> None:
    """The rendered check, run in a mount namespace of its own on the real kernel: a
    read-only mount with a writable one beneath (cgroup v1 under a plain readOnly bind)
    fails naming the writable one; once that is read-only too, it passes."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    pod = c2p.render_daemonset(c2p.image_values("localhost/headroom:0.1.0-amd64"))
    (init,) = pod["initContainers"]
    python, flag, script, _ = init["command"]
    root = tmp_path / "cgroupfs"
    root.mkdir()
    shell = (f'mount -t tmpfs none {root} && mkdir {root}/memory && '
             f'mount -t tmpfs none {root}/memory && mount -o remount,ro {root} && '
             f'{sys.executable} -c "$1" {root}; echo "rc=$?"; '
             f'mount -o remount,ro {root}/memory && {sys.executable} -c "$1" {root}; '
             f'echo "rc=$?"')
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                          shell, "sh", script], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert (python, flag) == ("python3", "-c")
    assert text.count("rc=") == 2, text
    first, second = text.split("rc=")[1:3]
    assert first.startswith("1"), text
    assert f"{root}/memory" in text and "cgroupV1Controllers" in text, text
    assert second.startswith("0") and "is read-only" in text, text
