"""Tier 1: cgroup path shapes seen on real nodes -> pod UID, container ID, runtime, QoS."""

from __future__ import annotations

import pytest

from exporter.host.workloads import classify, workload_of
from exporter.model import CgroupRef, ContainerInfo, PodInfo

UID = "4c1e0b8e-7d0a-4c1b-9a53-1f7e2f0b9c11"
UIDU = UID.replace("-", "_")
CID = "0f" + "a1b2c3d4" * 7 + "e5f6a7"
assert len(CID) == 64

SHAPES = [
    # cgroupfs driver (v1 and v2), containerd / docker: bare ids
    (f"kubepods/burstable/pod{UID}/{CID}", UID, CID, None, "burstable"),
    (f"kubepods/besteffort/pod{UID}/{CID}", UID, CID, None, "besteffort"),
    (f"kubepods/pod{UID}/{CID}", UID, CID, None, "guaranteed"),
    (f"kubepods/burstable/pod{UID}", UID, None, None, "burstable"),
    # cgroupfs driver, CRI-O
    (f"kubepods/burstable/pod{UID}/crio-{CID}", UID, CID, "cri-o", "burstable"),
    # systemd driver: containerd, CRI-O, docker
    (f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UIDU}.slice/"
     f"cri-containerd-{CID}.scope", UID, CID, "containerd", "burstable"),
    (f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UIDU}.slice/"
     f"crio-{CID}.scope", UID, CID, "cri-o", "besteffort"),
    (f"kubepods.slice/kubepods-pod{UIDU}.slice/docker-{CID}.scope", UID, CID, "docker",
     "guaranteed"),
    (f"kubepods.slice/kubepods-pod{UIDU}.slice", UID, None, None, "guaranteed"),
    # nested: kind / k3d nodes, and a kubelet inside docker
    (f"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     f"kubelet-kubepods-besteffort-pod{UIDU}.slice/cri-containerd-{CID}.scope", UID, CID,
     "containerd", "besteffort"),
    (f"docker/{'9' * 64}/kubepods/burstable/pod{UID}/{CID}", UID, CID, None, "burstable"),
]


@pytest.mark.parametrize(("path", "uid", "cid", "runtime", "qos"), SHAPES)
def test_real_path_shapes(path: str, uid: str, cid: str | None, runtime: str | None,
                          qos: str) -> None:
    ref = classify(path)
    assert ref is not None
    assert (ref.pod_uid, ref.container_id, ref.runtime, ref.qos) == (uid, cid, runtime, qos)
    assert ref.path == path


@pytest.mark.parametrize("path", [
    f"kubepods.slice/kubepods-pod{UIDU}.slice/crio-conmon-{CID}.scope",  # CRI-O's monitor
    "kubepods.slice/kubepods-burstable.slice",
    "system.slice/containerd.service",
    "user.slice/user-0.slice/session-3.scope",
    f"kubepods/burstable/pod{UID}/{CID}/init.scope",  # systemd inside a container
    f"kubepods/burstable/pod{UID}/not-a-container",
])
def test_not_a_pod_or_container(path: str) -> None:
    assert classify(path) is None


class Pods:
    def lookup(self, pod_uid: str) -> PodInfo | None:
        if pod_uid != UID:
            return None
        return PodInfo(uid=UID, namespace="llm", name="llama-0",
                       containers=(ContainerInfo("vllm", CID),))


def test_labels_with_names_and_fallbacks() -> None:
    container = CgroupRef(path="p/c", pod_uid=UID, container_id=CID)
    pod = CgroupRef(path="p", pod_uid=UID)
    other = CgroupRef(path="q/c", pod_uid="00000000-0000-0000-0000-000000000000",
                      container_id="ab" * 32)
    assert workload_of(container, Pods()).labels() == ("llm", "llama-0", "vllm")
    assert workload_of(pod, Pods()).labels() == ("llm", "llama-0", "")
    # unknown pod: the design's fallback (UID, empty namespace, 12 hex of the id)
    assert workload_of(other, Pods()).labels() == (
        "", "00000000-0000-0000-0000-000000000000", "abababababab")
    assert workload_of(container, None).labels() == ("", UID, CID[:12])
    # a container the API does not list yet (or the sandbox): named by its short id
    stranger = CgroupRef(path="p/d", pod_uid=UID, container_id="cd" * 32)
    assert workload_of(stranger, Pods()).labels() == ("llm", "llama-0", "cdcdcdcdcdcd")
    # outside Kubernetes: the cgroup path as pod
    assert workload_of(CgroupRef(path="system.slice/vllm.service"), None).labels() == (
        "", "/system.slice/vllm.service", "")
