"""Optional sources wired into ``headroom serve``: Kubernetes names, GPU, vLLM."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.config import Config
from exporter.model import PodDirectory
from exporter.paths import HostPaths
from exporter.render import SectionRenderer

log = logging.getLogger(__name__)


@dataclass
class Integrations:
    pods: PodDirectory | None = None
    background: list[Awaitable[None]] = field(default_factory=list)
    sections: list[SectionRenderer] = field(default_factory=list)
    collectors: list[Callable[[Any], Awaitable[tuple[str, Any]]]] = field(default_factory=list)


def build_integrations(config: Config, paths: HostPaths) -> Integrations:
    out = Integrations()
    if config.enabled("kubernetes"):
        _add_kubernetes(config, out)
    return out


def _add_kubernetes(config: Config, out: Integrations) -> None:
    try:
        from exporter import kube
    except ImportError:  # pragma: no cover - during development only
        return
    watcher = kube.watcher_from_config(config)
    if watcher is None:
        log.info("not in a Kubernetes cluster (no API URL): pods are labelled by UID")
        return
    out.pods = watcher
    out.background.append(watcher.run())
