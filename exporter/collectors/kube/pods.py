"""The ``kubernetes`` source: it runs the pod watcher in the background, answers
``PodDirectory.lookup`` for discovery, the join and vLLM discovery, and reports the watch's
health as ``headroom_collector_success{collector="kubernetes"}``."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors.kube.parse import api_url_from_env
from exporter.collectors.kube.watch import (
    DEFAULT_CA_PATH,
    DEFAULT_TOKEN_PATH,
    KubePodWatcher,
    PathLike,
    SessionFactory,
)
from exporter.contract.settings import Settings, setting
from exporter.contract.source import Context, Key, Result, SourceBase, SourceSpec
from exporter.host.paths import HostPaths
from exporter.model import PodInfo

log = logging.getLogger("exporter.kube")


@dataclass(frozen=True)
class KubernetesSettings(Settings):
    node_name: str = setting("--kubernetes.node-name", "", str,
                             "this node's name, to list its pods (env NODE_NAME works too)",
                             env_fallback="NODE_NAME")
    api_url: str = setting("--kubernetes.api-url", "", str,
                           "Kubernetes API URL (default: in-cluster service account)")


@dataclass(frozen=True)
class KubeHealth:
    pods: int  # pods of this node known


KEY: Key[KubeHealth] = Key("kubernetes")


class KubernetesSource(SourceBase):
    """A ``PodDirectory`` (``lookup``) backed by the watcher."""

    def __init__(self, watcher: KubePodWatcher) -> None:
        self.watcher = watcher

    def lookup(self, pod_uid: str) -> PodInfo | None:
        return self.watcher.lookup(pod_uid)

    async def run(self) -> None:
        await self.watcher.run()

    async def collect(self, ctx: Context) -> Result[KubeHealth]:
        w = self.watcher
        if not w.synced:
            return Result(None, (f"pods not listed yet: {w.last_error or 'in progress'}",))
        if not w.healthy:
            return Result(KubeHealth(len(w.pods)), (w.last_error or "watch interrupted",))
        return Result(KubeHealth(len(w.pods)))


def in_cluster(
    node_name: str,
    *,
    token_path: PathLike = DEFAULT_TOKEN_PATH,
    ca_path: PathLike = DEFAULT_CA_PATH,
    environ: Mapping[str, str] | None = None,
    request_timeout: float = 10.0,
    session_factory: SessionFactory | None = None,
) -> KubePodWatcher | None:
    """A watcher configured from the standard in-cluster environment, or None.

    None outside a cluster (no ``KUBERNETES_SERVICE_HOST``/``_PORT`` or no token), or
    without a node name: the caller then labels pods by UID, as the contract says.
    """
    env = os.environ if environ is None else environ
    url = api_url_from_env(env)
    if url is None:
        log.info("kubernetes API: not in a cluster (no KUBERNETES_SERVICE_HOST/_PORT)")
        return None
    if not Path(token_path).is_file():
        log.warning("kubernetes API: no service account token at %s; pods keep UIDs", token_path)
        return None
    if not node_name:
        # Without it we would list every pod of the cluster: refuse.
        log.warning(
            "kubernetes API: node name unknown (set it from spec.nodeName with the "
            "downward API); pods keep UIDs"
        )
        return None
    ca = ca_path if Path(ca_path).is_file() else None
    return KubePodWatcher(
        url, token_path, ca, node_name, request_timeout, session_factory,
    )


def watcher_for(settings: KubernetesSettings) -> KubePodWatcher | None:
    """The watcher ``headroom serve`` runs: ``--kubernetes.api-url`` or in-cluster.

    An explicit URL (``kubectl proxy``, a test cluster) uses the service account token
    and CA when they exist, and no token otherwise.
    """
    if not settings.api_url:
        return in_cluster(settings.node_name)
    if not settings.node_name:
        log.warning(
            "kubernetes API: --kubernetes.api-url is set but the node name is unknown "
            "(--kubernetes.node-name or NODE_NAME); pods keep UIDs"
        )
        return None
    token = DEFAULT_TOKEN_PATH if DEFAULT_TOKEN_PATH.is_file() else None
    ca = DEFAULT_CA_PATH if DEFAULT_CA_PATH.is_file() else None
    return KubePodWatcher(settings.api_url, token, ca, settings.node_name)


def _build(settings: KubernetesSettings, _paths: HostPaths) -> KubernetesSource | None:
    watcher = watcher_for(settings)
    return KubernetesSource(watcher) if watcher is not None else None


SPEC = SourceSpec(KEY, "pod names from the Kubernetes API (LIST+WATCH of this node's pods)",
                  KubernetesSettings, _build, chart=False, needs_cgroups=False)
