"""The exporter's own settings groups and the one frozen ``ExporterConfig``: those groups, which
sources are on, and each source's settings, all derived from declarations
(``exporter/contract/settings.py``) and the registry (``exporter/assembly/registry.py``)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from exporter.assembly.registry import SOURCES
from exporter.contract.settings import (
    Settings,
    env_name,
    one_of,
    optional_path,
    optional_str,
    parse_bool,
    parse_duration,
    parse_group,
    parse_listen,
    positive,
    repeated,
    setting,
)
from exporter.contract.settings import add_flags as add_setting_flags
from exporter.contract.source import Registered

S = TypeVar("S", bound=Settings)


class ConfigError(Exception):
    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


def _directory(path: Path) -> str | None:
    return None if path.is_dir() else f"{path} is not a directory"


def _non_negative(value: int) -> str | None:
    return None if value >= 0 else "must be 0 (automatic) or more"


@dataclass(frozen=True)
class WebSettings(Settings):
    listen: tuple[str, int] = setting("--web.listen-address", ":9847", parse_listen,
                                      "address to serve /metrics on")
    config_file: Path | None = setting(
        "--web.config.file", "", optional_path,
        "exporter-toolkit web config (TLS, basic auth, headers); re-read on SIGHUP "
        "(empty: plain HTTP)")
    max_connections: int = setting(
        "--web.max-connections", "0", int,
        "open HTTP connections kept; beyond it the longest-idle one is closed (0: a "
        "quarter of the open-file limit, at most 256)", check=_non_negative)
    header_timeout: float = setting(
        "--web.header-timeout", "10s", parse_duration,
        "time a new connection has to send a request head (and a TLS handshake)",
        check=positive)
    idle_timeout: float = setting(
        "--web.idle-timeout", "90s", parse_duration,
        "time a keep-alive connection may wait between requests", check=positive)


@dataclass(frozen=True)
class PathSettings(Settings):
    procfs: Path = setting("--path.procfs", "/proc", Path,
                           "procfs mount point (the host's, with hostPID)", check=_directory)
    cgroupfs: Path = setting("--path.cgroupfs", "/sys/fs/cgroup", Path,
                             "cgroup filesystem root", check=_directory)
    kmsg: Path | None = setting(
        "--path.kmsg", "/dev/kmsg", optional_path,
        "kernel log device, read for OOM victims when readable (empty: off)")


@dataclass(frozen=True)
class DiscoverySettings(Settings):
    kubepods_path: str | None = setting(
        "--cgroup.kubepods-path", "", optional_str,
        "kubepods cgroup relative to the memory controller root (auto-detected when unset)")
    track: tuple[str, ...] = repeated(
        "--cgroup.track", str,
        "extra cgroup to watch outside Kubernetes, relative to the memory controller root "
        "(repeatable)")
    host_vllm: bool = setting(
        "--cgroup.host-vllm", "true", parse_bool,
        "also track the cgroups of vLLM processes found outside Kubernetes by their "
        "command line (off: only kubepods and --cgroup.track)")


@dataclass(frozen=True)
class ScrapeSettings(Settings):
    collector_timeout: float = setting("--collector.timeout", "5s", parse_duration,
                                       "time limit of one collector", check=positive)


def _interval(value: float) -> str | None:
    return None if 0.01 <= value <= 1.0 else "must be between 10ms and 1s"


@dataclass(frozen=True)
class SamplerSettings(Settings):
    interval: float = setting(
        "--sampler.interval", "200ms", parse_duration,
        "how often the peak sampler reads usage of each tracked cgroup", check=_interval)
    window: float = setting(
        "--sampler.window", "30s", parse_duration,
        "trailing window of headroom_memory_peak_bytes (set it to the scrape interval)")

    def problems(self) -> list[str]:
        if self.window < self.interval:
            return ["--sampler.window: must be at least --sampler.interval"]
        return []


@dataclass(frozen=True)
class RecorderSettings(Settings):
    dir: Path | None = setting(
        "--flight-recorder.dir", "", optional_path,
        "directory for OOM post-mortem documents (empty: keep them in memory only)")
    window: float = setting("--flight-recorder.window", "15m", parse_duration,
                            "history the flight recorder keeps per workload", check=positive)


@dataclass(frozen=True)
class LogSettings(Settings):
    level: str = setting("--log.level", "info", one_of("debug", "info", "warning", "error"),
                         "debug, info, warning or error")
    format: str = setting("--log.format", "logfmt", one_of("logfmt", "json"),
                          "logfmt or json")


CORE: tuple[type[Settings], ...] = (
    WebSettings, PathSettings, DiscoverySettings, ScrapeSettings, SamplerSettings,
    RecorderSettings, LogSettings,
)


def _default_sources() -> tuple[Settings, ...]:
    return tuple(spec.settings() for spec in SOURCES)


@dataclass(frozen=True)
class ExporterConfig:
    web: WebSettings = field(default_factory=WebSettings)
    paths: PathSettings = field(default_factory=PathSettings)
    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    recorder: RecorderSettings = field(default_factory=RecorderSettings)
    log: LogSettings = field(default_factory=LogSettings)
    collectors: frozenset[str] = frozenset(s.name for s in SOURCES if s.default_enabled)
    sources: tuple[Settings, ...] = field(default_factory=_default_sources)

    def enabled(self, collector: str) -> bool:
        return collector in self.collectors

    def settings(self, kind: type[S]) -> S:
        """The settings group of that type (a core group or a source's)."""
        for value in (*(getattr(self, f.name) for f in dataclasses.fields(self)),
                      *self.sources):
            if isinstance(value, kind):
                return value
        raise KeyError(kind.__name__)

    def with_settings(self, *groups: Settings) -> ExporterConfig:
        """This config with some groups replaced (tests, benchmarks)."""
        cfg = self
        for g in groups:
            core = [f.name for f in dataclasses.fields(cfg)
                    if type(getattr(cfg, f.name)) is type(g)]
            if core:
                # g goes into the field of its own type
                cfg = dataclasses.replace(cfg, **{core[0]: g})  # type: ignore[arg-type]
            else:
                cfg = dataclasses.replace(cfg, sources=tuple(
                    g if type(s) is type(g) else s for s in cfg.sources))
        return cfg


def add_flags(parser: argparse.ArgumentParser,
              sources: Sequence[Registered] = SOURCES) -> None:
    add_setting_flags(parser, (*CORE, *(s.settings for s in sources)))
    for spec in sources:
        env = env_name(f"collector.{spec.name}")
        state = "on" if spec.default_enabled else "off"
        parser.add_argument(f"--collector.{spec.name}", dest=f"collector_{spec.name}",
                            action="store_const", const="true", default=None,
                            help=f"enable the {spec.name} collector: {spec.help} (default "
                                 f"{state}; env {env}=false disables)")
        parser.add_argument(f"--no-collector.{spec.name}", dest=f"collector_{spec.name}",
                            action="store_const", const="false",
                            help=f"disable the {spec.name} collector")


def build_config(ns: argparse.Namespace, env: Mapping[str, str],
                 sources: Sequence[Registered] = SOURCES) -> ExporterConfig:
    """Flags win over environment twins; every problem is collected before raising."""
    problems: list[str] = []

    def group(kind: type[S]) -> S:
        return parse_group(kind, ns, env, problems)

    web, paths, discovery, scrape = (group(WebSettings), group(PathSettings),
                                     group(DiscoverySettings), group(ScrapeSettings))
    sampler, recorder, log = group(SamplerSettings), group(RecorderSettings), group(LogSettings)
    settings = tuple(parse_group(spec.settings, ns, env, problems) for spec in sources)
    enabled = {s.name for s in sources if s.default_enabled}
    for spec in sources:
        raw = getattr(ns, f"collector_{spec.name}", None)
        source = f"--collector.{spec.name}"
        env_key = env_name(f"collector.{spec.name}")
        if raw is None and env.get(env_key):
            raw, source = env[env_key], env_key
        if raw is None:
            continue
        try:
            (enabled.add if parse_bool(raw) else enabled.discard)(spec.name)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
    if problems:
        raise ConfigError(problems)
    return ExporterConfig(web, paths, discovery, scrape, sampler, recorder, log,
                  collectors=frozenset(enabled), sources=settings)
