"""Flags and their ``HEADROOM_*`` environment twins -> one frozen Config.

Every value is parsed as a string first and validated afterwards, so a bad command line
gets one message that names every problem (argparse stops at the first).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLLECTORS: tuple[str, ...] = ("cgroup", "procfs", "tmpfs", "nvml", "vllm", "kubernetes")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("logfmt", "json")


class ConfigError(Exception):
    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Config:
    listen_host: str = ""
    listen_port: int = 9847
    web_config_file: Path | None = None  # exporter-toolkit web config: TLS, basic auth
    web_max_connections: int = 0  # 0: a quarter of the open-file limit, at most 256
    web_header_timeout: float = 10.0
    web_idle_timeout: float = 90.0
    procfs: Path = Path("/proc")
    cgroupfs: Path = Path("/sys/fs/cgroup")
    kmsg: Path | None = Path("/dev/kmsg")  # None: do not read the kernel log
    kubepods_path: str | None = None  # None: auto-detect
    track: tuple[str, ...] = ()
    collectors: frozenset[str] = frozenset(COLLECTORS)
    collector_timeout: float = 5.0
    procfs_max_processes: int = 10
    procfs_pss_interval: float = 60.0
    procfs_pss_max_rss: int = 2 << 30
    sampler_interval: float = 0.2
    sampler_window: float = 30.0
    node_name: str = ""
    kubernetes_api_url: str = ""  # empty: in-cluster when available
    vllm_endpoints: tuple[str, ...] = ()
    vllm_timeout: float = 2.0
    vllm_max_body_bytes: int = 8 << 20
    flight_recorder_dir: Path | None = None
    flight_recorder_window: float = 900.0
    log_level: str = "info"
    log_format: str = "logfmt"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def enabled(self, collector: str) -> bool:
        return collector in self.collectors


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|k|M|G|T)?$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "k": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}


def parse_duration(text: str) -> float:
    """Seconds from ``200ms``, ``30s``, ``1m30s``, ``1h`` (Prometheus style) or a number."""
    t = text.strip()
    units = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    parts = list(_DURATION_RE.finditer(t))
    if not t or "".join(m.group(0) for m in parts) != t or (
        len(parts) > 1 and any(m.group(2) is None for m in parts)
    ):
        raise ValueError(f"not a duration: {text!r} (use e.g. 200ms, 30s, 1m30s, 1h)")
    return sum(float(m.group(1)) * units[m.group(2)] for m in parts)


def parse_size(text: str) -> int:
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 2GiB, 512MiB, 1048576)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not a listen address: {text!r} (use host:port or :port)")
    return host.strip("[]"), int(port)


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def env_name(flag: str) -> str:
    return "HEADROOM_" + re.sub(r"[.\-]", "_", flag.lstrip("-")).upper()


@dataclass(frozen=True)
class Flag:
    flag: str
    dest: str
    help: str
    default: str | None
    convert: Callable[[str], Any] = str
    repeat: bool = False  # repeatable flag; its env twin is comma-separated


FLAGS: tuple[Flag, ...] = (
    Flag("--web.listen-address", "listen", "address to serve /metrics on", ":9847",
         parse_listen),
    Flag("--web.config.file", "web_config_file",
         "exporter-toolkit web config (TLS, basic auth, headers); re-read on SIGHUP "
         "(empty: plain HTTP)", "", lambda s: Path(s) if s else None),
    Flag("--web.max-connections", "web_max_connections",
         "open HTTP connections kept; beyond it the longest-idle one is closed (0: a "
         "quarter of the open-file limit, at most 256)", "0", int),
    Flag("--web.header-timeout", "web_header_timeout",
         "time a new connection has to send a request head (and a TLS handshake)", "10s",
         parse_duration),
    Flag("--web.idle-timeout", "web_idle_timeout",
         "time a keep-alive connection may wait between requests", "90s", parse_duration),
    Flag("--path.procfs", "procfs", "procfs mount point (the host's, with hostPID)", "/proc",
         Path),
    Flag("--path.cgroupfs", "cgroupfs", "cgroup filesystem root", "/sys/fs/cgroup", Path),
    Flag("--path.kmsg", "kmsg",
         "kernel log device, read for OOM victims when readable (empty: off)", "/dev/kmsg",
         lambda s: Path(s) if s else None),
    Flag("--cgroup.kubepods-path", "kubepods_path",
         "kubepods cgroup relative to the memory controller root (auto-detected when unset)",
         None),
    Flag("--cgroup.track", "track",
         "extra cgroup to watch outside Kubernetes, relative to the memory controller root "
         "(repeatable)", None, repeat=True),
    Flag("--collector.timeout", "collector_timeout", "time limit of one collector", "5s",
         parse_duration),
    Flag("--procfs.max-processes", "procfs_max_processes",
         "process names kept per container; the rest are summed as 'other'", "10", int),
    Flag("--procfs.pss-interval", "procfs_pss_interval",
         "how often one process's smaps_rollup (PSS) is read", "60s", parse_duration),
    Flag("--procfs.pss-max-rss", "procfs_pss_max_rss",
         "never read smaps_rollup of a process whose RSS is above this", "2GiB", parse_size),
    Flag("--sampler.interval", "sampler_interval",
         "how often the peak sampler reads usage of each tracked cgroup", "200ms",
         parse_duration),
    Flag("--sampler.window", "sampler_window",
         "trailing window of headroom_memory_peak_bytes (set it to the scrape interval)",
         "30s", parse_duration),
    Flag("--kubernetes.node-name", "node_name",
         "this node's name, to list its pods (env NODE_NAME works too)", ""),
    Flag("--kubernetes.api-url", "kubernetes_api_url",
         "Kubernetes API URL (default: in-cluster service account)", ""),
    Flag("--vllm.endpoint", "vllm_endpoints",
         "a vLLM /metrics URL to scrape in addition to the discovered ones (repeatable)",
         None, repeat=True),
    Flag("--vllm.timeout", "vllm_timeout", "time limit of one vLLM /metrics read", "2s",
         parse_duration),
    Flag("--vllm.max-body-bytes", "vllm_max_body_bytes",
         "largest vLLM /metrics body read", "8MiB", parse_size),
    Flag("--flight-recorder.dir", "flight_recorder_dir",
         "directory for OOM post-mortem documents (empty: keep them in memory only)", "",
         lambda s: Path(s) if s else None),
    Flag("--flight-recorder.window", "flight_recorder_window",
         "history the flight recorder keeps per workload", "15m", parse_duration),
    Flag("--log.level", "log_level", "debug, info, warning or error", "info"),
    Flag("--log.format", "log_format", "logfmt or json", "logfmt"),
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    for f in FLAGS:
        env = env_name(f.flag)
        default = f" (default {f.default})" if f.default not in (None, "") else ""
        if f.repeat:
            parser.add_argument(f.flag, dest=f.dest, action="append", default=None,
                                metavar="VALUE", help=f"{f.help}; env {env}, comma-separated")
        else:
            parser.add_argument(f.flag, dest=f.dest, default=None, metavar="VALUE",
                                help=f"{f.help}{default}; env {env}")
    for c in COLLECTORS:
        env = env_name(f"collector.{c}")
        parser.add_argument(f"--collector.{c}", dest=f"collector_{c}", action="store_const",
                            const="true", default=None,
                            help=f"enable the {c} collector (default on; env {env}=false "
                                 "disables)")
        parser.add_argument(f"--no-collector.{c}", dest=f"collector_{c}",
                            action="store_const", const="false",
                            help=f"disable the {c} collector")


def build_config(ns: argparse.Namespace, env: Mapping[str, str]) -> Config:
    """Flags win over environment twins; every problem is collected before raising."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for f in FLAGS:
        env_key = env_name(f.flag)
        raw = getattr(ns, f.dest)
        source = f.flag
        if raw is None and env.get(env_key, "") != "":
            raw = env[env_key].split(",") if f.repeat else env[env_key]
            source = env_key
        if f.dest == "node_name" and raw is None and env.get("NODE_NAME"):
            raw, source = env["NODE_NAME"], "NODE_NAME"
        if raw is None:
            raw = [] if f.repeat else f.default
        if raw is None:
            continue
        try:
            if f.repeat:
                values[f.dest] = tuple(f.convert(v.strip()) for v in raw if v.strip())
            else:
                values[f.dest] = f.convert(raw)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
    enabled = set(COLLECTORS)
    for c in COLLECTORS:
        raw = getattr(ns, f"collector_{c}")
        env_key = env_name(f"collector.{c}")
        source = f"--collector.{c}"
        if raw is None and env.get(env_key):
            raw, source = env[env_key], env_key
        if raw is None:
            continue
        try:
            if not parse_bool(raw):
                enabled.discard(c)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
    problems.extend(_check_ranges(values))
    if problems:
        raise ConfigError(problems)
    host, port = values.pop("listen")
    return Config(listen_host=host, listen_port=port, collectors=frozenset(enabled), **values)


def _check_ranges(v: Mapping[str, Any]) -> list[str]:
    problems = []
    if v.get("log_level") not in (None, *LOG_LEVELS):
        problems.append(f"--log.level: {v['log_level']!r} is not one of {', '.join(LOG_LEVELS)}")
    if v.get("log_format") not in (None, *LOG_FORMATS):
        problems.append(
            f"--log.format: {v['log_format']!r} is not one of {', '.join(LOG_FORMATS)}"
        )
    interval = v.get("sampler_interval")
    window = v.get("sampler_window")
    if interval is not None and not 0.01 <= interval <= 1.0:
        problems.append("--sampler.interval: must be between 10ms and 1s")
    if window is not None and interval is not None and window < interval:
        problems.append("--sampler.window: must be at least --sampler.interval")
    for key, flag in (("collector_timeout", "--collector.timeout"),
                      ("vllm_timeout", "--vllm.timeout"),
                      ("procfs_pss_interval", "--procfs.pss-interval"),
                      ("flight_recorder_window", "--flight-recorder.window"),
                      ("web_header_timeout", "--web.header-timeout"),
                      ("web_idle_timeout", "--web.idle-timeout")):
        if key in v and v[key] <= 0:
            problems.append(f"{flag}: must be positive")
    if v.get("web_max_connections", 0) < 0:
        problems.append("--web.max-connections: must be 0 (automatic) or more")
    if "procfs_max_processes" in v and v["procfs_max_processes"] < 1:
        problems.append("--procfs.max-processes: must be at least 1")
    for key, flag in (("procfs", "--path.procfs"), ("cgroupfs", "--path.cgroupfs")):
        if key in v and not Path(v[key]).is_dir():
            problems.append(f"{flag}: {v[key]} is not a directory")
    return problems
