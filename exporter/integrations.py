"""Optional sources wired into ``headroom serve``: Kubernetes names, GPU, vLLM."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field

from exporter.config import Config
from exporter.extensions import Extension, GpuExtension, KubeHealth, VllmExtension
from exporter.model import PodDirectory
from exporter.paths import HostPaths

log = logging.getLogger(__name__)


@dataclass
class Integrations:
    pods: PodDirectory | None = None
    background: list[Awaitable[None]] = field(default_factory=list)
    extensions: list[Extension] = field(default_factory=list)


def build_integrations(config: Config, paths: HostPaths) -> Integrations:
    out = Integrations()
    if config.enabled("kubernetes"):
        from exporter import kube

        watcher = kube.watcher_from_config(config)
        if watcher is not None:
            out.pods = watcher
            out.background.append(watcher.run())
            out.extensions.append(KubeHealth(watcher))
    if config.enabled("nvml"):
        out.extensions.append(GpuExtension())
    if config.enabled("vllm"):
        out.extensions.append(VllmExtension(
            out.pods, paths, config.vllm_endpoints, timeout=config.vllm_timeout,
            max_bytes=config.vllm_max_body_bytes,
        ))
    return out
