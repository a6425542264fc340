"""The chart's DaemonSet, rendered by real Helm, as the equivalent `podman run`.

`podman kube play` (podman 4.3) drops ``hostPID`` without a word, so a faithful run is
derived flag for flag from the rendered pod spec instead. Every field of the pod spec is
either translated, listed as meaningless outside a cluster (scheduling, API access), or
refused with an error naming it: a chart change that this script does not understand
fails the container check instead of being silently left out.

    python3 scripts/chart_to_podman.py --image localhost/headroom:0.1.0-amd64 \
        [--set-json '{"extraArgs": [...]}'] [--name NAME] [--publish 127.0.0.1:9847]

prints the commands (the init containers' first), one argument per line.
scripts/image_check.py imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "headroom"
HELM_PYTHON = REPO / ".helm-venv" / "bin" / "python"
# The kubelet's RuntimeDefault under podman: the engine's own default profile.
RUNTIME_DEFAULT_SECCOMP = "/usr/share/containers/seccomp.json"

# Pod-spec fields that only matter to the scheduler or the API server.
POD_FIELDS_IGNORED = frozenset({
    "serviceAccountName", "priorityClassName", "tolerations", "nodeSelector", "affinity",
    "terminationGracePeriodSeconds", "dnsPolicy", "imagePullSecrets", "runtimeClassName",
})
CONTAINER_FIELDS_IGNORED = frozenset({
    # Probes are the kubelet's, from outside the container; the check asks /healthz itself.
    "name", "imagePullPolicy", "livenessProbe", "readinessProbe", "startupProbe",
})

_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


class Untranslatable(ValueError):
    """A pod-spec field with no faithful `podman run` equivalent."""


@dataclass(frozen=True)
class HostContext:
    """What the kubelet would supply on a node: its name and the pod's scratch space."""

    node_name: str
    scratch_dir: Path  # emptyDir volumes become directories below it
    publish_ip: str | None = None  # publish the container's ports on this host address
    host_ports: Mapping[int, int] = field(default_factory=dict)  # containerPort -> host port
    downward: Mapping[str, str] = field(default_factory=dict)  # fieldPath -> value


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity ("160Mi", "1G", "512") in bytes."""
    m = _QUANTITY.match(str(quantity))
    if not m:
        raise Untranslatable(f"memory quantity {quantity!r} not understood")
    return int(m.group(1)) * _FACTORS[m.group(2)]


def _check_known(obj: Mapping[str, Any], known: set[str] | frozenset[str], where: str) -> None:
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise Untranslatable(f"{where}: no podman equivalent for {', '.join(unknown)}")


def security_flags(pod_ctx: Mapping[str, Any], ctx: Mapping[str, Any]) -> list[str]:
    """The container's security context (over the pod's) as podman flags."""
    merged = {**pod_ctx, **ctx}
    _check_known(merged, {"runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem",
                          "allowPrivilegeEscalation", "capabilities", "privileged",
                          "seccompProfile"}, "securityContext")
    flags: list[str] = []
    user, group = merged.get("runAsUser"), merged.get("runAsGroup")
    if merged.get("runAsNonRoot") and user in (None, 0):
        raise Untranslatable("securityContext: runAsNonRoot with uid 0 would not start")
    if user is not None:
        flags.append(f"--user={user}:{group if group is not None else 0}")
    if merged.get("readOnlyRootFilesystem"):
        # podman adds tmpfs on /run, /tmp, /var/tmp with --read-only unless told not to;
        # the pod has none of them.
        flags += ["--read-only", "--read-only-tmpfs=false"]
    if merged.get("privileged"):
        flags.append("--privileged")
    if merged.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    caps = merged.get("capabilities") or {}
    _check_known(caps, {"add", "drop"}, "securityContext.capabilities")
    flags += [f"--cap-drop={c}" for c in caps.get("drop", [])]
    flags += [f"--cap-add={c}" for c in caps.get("add", [])]
    seccomp = (merged.get("seccompProfile") or {}).get("type")
    if seccomp == "RuntimeDefault":
        flags += ["--security-opt", f"seccomp={RUNTIME_DEFAULT_SECCOMP}"]
    elif seccomp == "Unconfined":
        flags += ["--security-opt", "seccomp=unconfined"]
    elif seccomp is not None:
        raise Untranslatable(f"securityContext.seccompProfile.type {seccomp!r}")
    return flags


def env_flags(env: Sequence[Mapping[str, Any]], host: HostContext) -> list[str]:
    flags = []
    for var in env:
        if "value" in var:
            flags.append(f"--env={var['name']}={var['value']}")
            continue
        path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path == "spec.nodeName":
            flags.append(f"--env={var['name']}={host.node_name}")
        elif isinstance(path, str) and path in host.downward:
            flags.append(f"--env={var['name']}={host.downward[path]}")
        else:
            raise Untranslatable(f"env {var['name']}: valueFrom {var.get('valueFrom')}")
    return flags


def _volume_source(volume: Mapping[str, Any], host: HostContext) -> tuple[str, str]:
    """(host path, kind) of a volume; emptyDir directories are made under scratch_dir."""
    if "hostPath" in volume:
        hp = volume["hostPath"]
        path, kind = hp["path"], hp.get("type", "")
        if kind == "DirectoryOrCreate":
            os.makedirs(path, exist_ok=True)
        elif kind == "Directory" and not os.path.isdir(path):
            raise Untranslatable(f"volume {volume['name']}: hostPath {path} is not a directory")
        elif kind == "CharDevice" and not os.path.exists(path):
            raise Untranslatable(f"volume {volume['name']}: no device {path}")
        return path, "hostPath"
    if "emptyDir" in volume:
        if (volume["emptyDir"] or {}).get("medium") == "Memory":
            return "", "tmpfs"
        path = host.scratch_dir / volume["name"]
        path.mkdir(parents=True, exist_ok=True)
        return str(path), "emptyDir"
    raise Untranslatable(f"volume {volume['name']}: only hostPath and emptyDir are translated")


def mount_flags(volumes: Sequence[Mapping[str, Any]], mounts: Sequence[Mapping[str, Any]],
                host: HostContext) -> list[str]:
    by_name = {v["name"]: v for v in volumes}
    flags = []
    for m in mounts:
        _check_known(m, {"name", "mountPath", "readOnly", "recursiveReadOnly", "subPath"},
                     f"volumeMount {m['name']}")
        rro = m.get("recursiveReadOnly", "Disabled")
        if rro == "Enabled":
            # podman 4.3 and runc 1.1 have no recursive read-only: refusing is honest,
            # IfPossible falls back to plain read-only exactly as a kubelet would.
            raise Untranslatable(f"volumeMount {m['name']}: recursiveReadOnly Enabled")
        src, kind = _volume_source(by_name[m["name"]], host)
        if m.get("subPath"):
            src = os.path.join(src, m["subPath"])
        mode = "ro" if m.get("readOnly") else "rw"
        if kind == "tmpfs":
            flags.append(f"--tmpfs={m['mountPath']}:{mode}")
        else:
            flags.append(f"--volume={src}:{m['mountPath']}:{mode}")
    return flags


def pod_to_podman(pod: Mapping[str, Any], host: HostContext, name: str) -> list[str]:
    """`podman run` arguments (without "podman run") for the pod's only container."""
    _check_known(pod, POD_FIELDS_IGNORED | {"containers", "initContainers", "hostPID",
                                            "hostNetwork", "hostIPC", "securityContext",
                                            "volumes", "automountServiceAccountToken"},
                 "pod spec")
    if pod.get("automountServiceAccountToken", True):
        raise Untranslatable("automountServiceAccountToken: no API server outside a cluster "
                             "(render with kubernetes.enabled=false)")
    containers = pod["containers"]
    if len(containers) != 1:
        raise Untranslatable(f"{len(containers)} containers; one is translated")
    return _container_argv(pod, containers[0], host, ["--detach", f"--name={name}"])


def init_containers_to_podman(pod: Mapping[str, Any], host: HostContext,
                              name: str) -> list[tuple[str, list[str]]]:
    """(name, `podman run` arguments) of each init container, in order: each is run to
    completion (--rm, in the foreground) and must exit 0 before the next, as the kubelet
    runs them."""
    unpublished = replace(host, publish_ip=None)
    return [(c["name"], _container_argv(pod, c, unpublished,
                                        ["--rm", f"--name={name}-{c['name']}"]))
            for c in pod.get("initContainers", [])]


def _container_argv(pod: Mapping[str, Any], c: Mapping[str, Any], host: HostContext,
                    argv: list[str]) -> list[str]:
    _check_known(c, CONTAINER_FIELDS_IGNORED | {"image", "args", "command", "env", "ports",
                                                "resources", "securityContext",
                                                "volumeMounts"}, "container")
    argv = list(argv)
    argv.append("--pid=host" if pod.get("hostPID") else "--pid=private")
    if pod.get("hostIPC"):
        argv.append("--ipc=host")
    if pod.get("hostNetwork"):
        argv.append("--network=host")
    argv += security_flags(pod.get("securityContext") or {}, c.get("securityContext") or {})
    limits = (c.get("resources") or {}).get("limits") or {}
    _check_known(limits, {"memory", "cpu"}, "resources.limits")
    if "memory" in limits:
        # The kubelet sets swap to the limit too (no swap for the pod): --memory-swap equal.
        mem = memory_bytes(limits["memory"])
        argv += [f"--memory={mem}", f"--memory-swap={mem}"]
    if "cpu" in limits:
        raise Untranslatable("resources.limits.cpu (the chart sets none on purpose)")
    argv += mount_flags(pod.get("volumes", []), c.get("volumeMounts", []), host)
    argv += env_flags(c.get("env", []), host)
    if host.publish_ip is not None and not pod.get("hostNetwork"):
        for port in c.get("ports", []):
            proto = port.get("protocol", "TCP").lower()
            cp = port["containerPort"]
            hp = host.host_ports.get(cp, port.get("hostPort", cp))
            argv.append(f"--publish={host.publish_ip}:{hp}:{cp}/{proto}")
    if c.get("command"):
        argv.append(f"--entrypoint={json.dumps(c['command'])}")
    argv.append(c["image"])
    argv += c.get("args", [])
    return argv


def render_daemonset(values: Mapping[str, Any], kube_version: str = "1.31.0",
                     helm_python: Path = HELM_PYTHON) -> dict[str, Any]:
    """The pod template spec of the chart's DaemonSet, rendered by real Helm."""
    with tempfile.TemporaryDirectory(prefix="headroom-chart-") as tmp:
        cases = Path(tmp) / "cases.json"
        cases.write_text(json.dumps([{"id": "podman", "release": "headroom",
                                      "namespace": "monitoring", "values": dict(values)}]))
        out = subprocess.run(
            [str(helm_python), str(REPO / "tests" / "helpers" / "helm_harness.py"), "render",
             "--chart", str(CHART), "--cases", str(cases), "--kube-version", kube_version],
            check=True, capture_output=True, text=True, timeout=300,
        ).stdout
    (result,) = json.loads(out)
    if not result["ok"]:
        raise Untranslatable(f"helm: {result['error']}")
    (ds,) = [o for o in result["objects"] if o["kind"] == "DaemonSet"]
    spec: dict[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def image_values(image: str) -> dict[str, Any]:
    """Chart values that point the DaemonSet at a local image reference."""
    repo, _, tag = image.rpartition(":")
    registry, _, repository = repo.partition("/")
    return {"image": {"registry": registry, "repository": repository, "tag": tag},
            "kubernetes": {"enabled": False}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", required=True)
    ap.add_argument("--set-json", default="{}", help="more chart values (JSON, merged on top)")
    ap.add_argument("--name", default="headroom")
    ap.add_argument("--node-name", default=os.uname().nodename)
    ap.add_argument("--publish", default=None, help="host address to publish the ports on")
    ap.add_argument("--scratch", default=None, help="where emptyDir volumes are made")
    args = ap.parse_args(argv)
    values = {**image_values(args.image), **json.loads(args.set_json)}
    pod = render_daemonset(values)
    host = HostContext(node_name=args.node_name,
                       scratch_dir=Path(args.scratch or tempfile.mkdtemp(prefix="headroom-pod-")),
                       publish_ip=args.publish)
    for _, init in init_containers_to_podman(pod, host, args.name):
        print("\n".join(["podman", "run", *init]), end="\n\n")
    print("\n".join(["podman", "run", *pod_to_podman(pod, host, args.name)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
