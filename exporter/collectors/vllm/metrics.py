"""vLLM's own /metrics, normalised across releases 0.8.5 to 0.33.

``parse_vllm_metrics`` is pure: exposition text in, frozen ``VllmStats`` out. Reading the
body (a total timeout, a size cap, byte budgets) is ``reading.py``'s job; where a vLLM is
reached, ``locate.py``'s; its KV cache events, ``kv_events.py``'s.

What vLLM really emits, checked in its source (vllm/v1/metrics/loggers.py, v1/engine/utils.py
and core_client.py, vllm/engine/metrics.py for V0):

- ``*_usage_perc`` gauges are ratios 0-1 ("1 means 100 percent usage"), whatever the name.
  ``vllm:kv_cache_usage_perc`` (V1, 0.9+) and ``vllm:gpu_cache_usage_perc`` (V0, and V1 up to
  0.11) carry the same value; V0's ``vllm:cpu_cache_usage_perc`` is its CPU swap space.
- V1 series carry ``model_name`` and ``engine`` (the DP rank). V0 series have no ``engine``:
  we use "0". ``vllm:cache_config_info`` has no ``model_name`` (its labels are the fields of
  CacheConfig plus ``engine``), so it joins the other series by engine.
- Data parallel: one ``cache_config_info`` series per engine, but the API server sums
  ``num_gpu_blocks`` over all its engines before it labels them (the "Sum values from all
  engines in DP case" step of the start-up handshake): every engine's series carries the
  instance total. Per-engine blocks = that total / number of engine series. Do not sum them
  again.
- ``kv_cache_memory_bytes`` (0.10+) is the KV budget per worker (GPU) that the user set with
  --kv-cache-memory-bytes or the CPU platform set from VLLM_CPU_KVCACHE_SPACE; vLLM leaves it
  "None" when it sizes the cache from gpu_memory_utilization. Bytes cannot be derived from
  blocks (bytes per token need layers, KV heads, head size and dtype, which no metric
  carries), so GPU capacity bytes are absent then.
- Several API servers (--api-server-count > 1, the default for DP since ~0.2x) run
  prometheus_client in multiprocess mode: /metrics on any of them aggregates all of them.
  Counters are summed, ``mostrecent`` gauges give one series, gauges without a mode get a
  ``pid`` label per API-server process (e.g. ``kv_cache_usage_perc`` up to 0.11). For those
  we take a pid-less twin when one exists, else the largest value (the API server that got
  no scheduler stats stays at 0). The process_* / python_* families are absent in this mode.
- CPU tier: ``vllm:kv_offload_config_info`` (vLLM main after 0.33: ``cpu_num_chunks`` x
  ``cpu_kv_bytes_per_chunk`` bytes, x ``cpu_blocks_per_chunk`` blocks, per engine), else
  ``vllm:simple_kv_offload_info`` ``capacity_blocks`` (0.32+) with bytes from the
  ``kv_offloading_size`` GiB of cache_config_info (0.11+), else V0's swap space
  (``num_cpu_blocks``, ``swap_space_bytes``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporter.catalog import MEDIUM_CPU as CPU
from exporter.catalog import MEDIUM_GPU as GPU
from exporter.catalog import REQUEST_STATES

DEFAULT_ENGINE = "0"


class VllmParseError(ValueError):
    """The body is not a Prometheus text exposition we can read."""


@dataclass(frozen=True)
class KvCapacity:
    blocks: int | None
    bytes: int | None
    source: str  # which vLLM series it came from, for debugging and the golden files


@dataclass(frozen=True)
class EngineStats:
    """One engine (DP rank) of one served model."""

    model_name: str
    engine: str
    capacity: Mapping[str, KvCapacity] = field(default_factory=dict)  # medium -> capacity
    usage_ratio: Mapping[str, float] = field(default_factory=dict)  # medium -> 0..1
    requests: Mapping[str, float] = field(default_factory=dict)  # running, waiting, swapped
    preemptions_total: float | None = None
    block_size: int | None = None


@dataclass(frozen=True)
class VllmStats:
    engines: tuple[EngineStats, ...] = ()  # sorted by (model_name, engine)
    # pids of the API servers that wrote per-process series (multiprocess mode); may be
    # empty in that mode when every vLLM gauge is "mostrecent" (0.13+)
    api_servers: tuple[str, ...] = ()
    multiprocess: bool = False  # several API servers aggregated by prometheus_client
    dropped: int = 0  # (model_name, engine) pairs beyond MAX_ENGINES, left out

    def engine(self, model_name: str, engine: str) -> EngineStats | None:
        for e in self.engines:
            if (e.model_name, e.engine) == (model_name, engine):
                return e
        return None


# --- parsing ---------------------------------------------------------------------------

Key = tuple[str, str]  # (model_name, engine)


@dataclass(frozen=True)
class _Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def _samples(text: str) -> list[_Sample]:
    try:
        return [
            _Sample(s.name, s.labels, s.value)
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError...
        raise VllmParseError(f"not a Prometheus text exposition: {exc!r}"[:300]) from exc


def _int_label(labels: Mapping[str, str], name: str) -> int | None:
    raw = labels.get(name)
    if raw is None or raw in ("", "None"):
        return None
    try:
        f = float(raw)
    except ValueError:
        return None
    return int(f) if math.isfinite(f) else None


def _pick(series: Sequence[tuple[Mapping[str, str], float]]) -> float | None:
    """One value from a gauge's series for one key: pid-less first, else the max over pids."""
    if not series:
        return None
    plain = [v for labels, v in series if "pid" not in labels]
    return plain[0] if plain else max(v for _, v in series)


MAX_LABEL_CHARS = 128  # a model name or engine longer than this is cut, with a marker
MAX_ENGINES = 16  # (model_name, engine) pairs kept per vLLM: more is not one pod's vLLM
_CUT = "...(cut)"


def bounded_label(value: str) -> str:
    """A label value from the pod, at most ``MAX_LABEL_CHARS``."""
    if len(value) <= MAX_LABEL_CHARS:
        return value
    return value[: MAX_LABEL_CHARS - len(_CUT)] + _CUT


def _key(labels: Mapping[str, str], default_model: str) -> Key:
    return (bounded_label(labels.get("model_name", default_model)),
            bounded_label(labels.get("engine") or DEFAULT_ENGINE))


def _gauge_by_key(
    samples: Iterable[_Sample], names: Sequence[str], default_model: str
) -> dict[Key, float]:
    """Per key, the first of ``names`` (in preference order) that has a value."""
    grouped: dict[str, dict[Key, list[tuple[Mapping[str, str], float]]]] = {
        n: defaultdict(list) for n in names
    }
    for s in samples:
        if s.name in grouped:
            grouped[s.name][_key(s.labels, default_model)].append((s.labels, s.value))
    out: dict[Key, float] = {}
    # pid-less series of any name beat per-pid series (see the module docstring)
    for want_plain in (True, False):
        for n in names:
            for key, series in grouped[n].items():
                if key in out:
                    continue
                has_plain = any("pid" not in labels for labels, _ in series)
                if has_plain == want_plain:
                    value = _pick(series)
                    if value is not None:
                        out[key] = value
    return out


def _gpu_capacity(infos: Sequence[Mapping[str, str]]) -> dict[str, tuple[KvCapacity, int | None]]:
    """engine -> (GPU capacity, block size) from the cache_config_info series."""
    out: dict[str, tuple[KvCapacity, int | None]] = {}
    n = len({bounded_label(i.get("engine") or DEFAULT_ENGINE) for i in infos}) or 1
    for labels in infos:
        engine = bounded_label(labels.get("engine") or DEFAULT_ENGINE)
        total = _int_label(labels, "num_gpu_blocks")
        blocks = total // n if total is not None else None
        mem = _int_label(labels, "kv_cache_memory_bytes")
        source = "cache_config_info" + (f" num_gpu_blocks/{n} engines" if n > 1 else "")
        out[engine] = (KvCapacity(blocks, mem, source), _int_label(labels, "block_size"))
    return out


def _cpu_capacity(
    samples: Sequence[_Sample], infos: Sequence[Mapping[str, str]], default_model: str
) -> dict[Key | str, KvCapacity]:
    """CPU tier capacity, keyed by (model, engine), or by engine alone from cache_config_info."""
    out: dict[Key | str, KvCapacity] = {}
    for labels in infos:  # fallbacks first, overwritten by the more precise series below
        engine = bounded_label(labels.get("engine") or DEFAULT_ENGINE)
        gib = labels.get("kv_offloading_size")
        swap_blocks = _int_label(labels, "num_cpu_blocks")
        if gib not in (None, "", "None"):
            try:
                size = float(gib)
            except ValueError:
                continue
            out[engine] = KvCapacity(
                None, round(size * 2**30), "cache_config_info kv_offloading_size"
            )
        elif swap_blocks:  # V0 swap space; V1 never sets num_cpu_blocks in the API server
            out[engine] = KvCapacity(
                swap_blocks, _int_label(labels, "swap_space_bytes"), "cache_config_info swap space"
            )
    for s in samples:
        key = _key(s.labels, default_model)
        if s.name == "vllm:simple_kv_offload_info":
            cap = _int_label(s.labels, "capacity_blocks")
            prev = out.get(key[1])
            out[key] = KvCapacity(cap, prev.bytes if prev else None, "simple_kv_offload_info")
    for s in samples:
        key = _key(s.labels, default_model)
        if s.name == "vllm:kv_offload_config_info":
            chunks = _int_label(s.labels, "cpu_num_chunks")
            per_chunk_blocks = _int_label(s.labels, "cpu_blocks_per_chunk")
            per_chunk_bytes = _int_label(s.labels, "cpu_kv_bytes_per_chunk")
            out[key] = KvCapacity(
                chunks * per_chunk_blocks if chunks is not None and per_chunk_blocks else None,
                chunks * per_chunk_bytes if chunks is not None and per_chunk_bytes else None,
                "kv_offload_config_info",
            )
    return out


def parse_vllm_metrics(text: str) -> VllmStats:
    """Normalise one /metrics body. Raises ``VllmParseError`` on text that is not an exposition.

    A valid body with no ``vllm:`` series (stats logging off) gives ``VllmStats()``.
    """
    all_samples = _samples(text)
    samples = [s for s in all_samples if s.name.startswith("vllm:")]
    models = sorted({s.labels["model_name"] for s in samples if "model_name" in s.labels})
    default_model = models[0] if len(models) == 1 else ""
    families = {s.name for s in all_samples}
    multiprocess = bool(samples) and not any(n.startswith("process_") for n in families)
    pids = sorted({s.labels["pid"] for s in samples if "pid" in s.labels}, key=_pid_order)
    multiprocess = multiprocess or bool(pids)

    infos = [s.labels for s in samples if s.name == "vllm:cache_config_info"]
    gpu_cap = _gpu_capacity(infos)
    cpu_cap = _cpu_capacity(samples, infos, default_model)

    usage_gpu = _gauge_by_key(
        samples, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), default_model
    )
    # V0's CPU swap space only: V1's vllm:kv_offload_cpu_cache_usage_perc counts blocks
    # pinned by in-flight transfers (0 at idle), not what the CPU tier holds
    usage_cpu = _gauge_by_key(samples, ("vllm:cpu_cache_usage_perc",), default_model)
    used_simple = _gauge_by_key(samples, ("vllm:simple_kv_offload_used_blocks",), default_model)
    requests = {
        state: _gauge_by_key(samples, (f"vllm:num_requests_{state}",), default_model)
        for state in REQUEST_STATES
    }
    preempt: dict[Key, float] = defaultdict(float)
    for s in samples:
        if s.name == "vllm:num_preemptions_total":  # V0 and V1 both expose this sample name
            preempt[_key(s.labels, default_model)] += s.value

    keys: set[Key] = set(usage_gpu) | set(preempt) | set(used_simple)
    for per_state in requests.values():
        keys |= set(per_state)
    keys |= {k for k in cpu_cap if isinstance(k, tuple)}
    known_engines = {e for _, e in keys}
    keys |= {(default_model, e) for e in gpu_cap if e not in known_engines}

    kept = sorted(keys)[:MAX_ENGINES]
    engines = []
    for key in kept:
        model, engine = key
        capacity: dict[str, KvCapacity] = {}
        block_size = None
        if engine in gpu_cap:
            capacity[GPU], block_size = gpu_cap[engine]
        cpu = cpu_cap.get(key) or cpu_cap.get(engine)
        if cpu is not None:
            capacity[CPU] = cpu
        usage: dict[str, float] = {}
        if key in usage_gpu:
            usage[GPU] = usage_gpu[key]
        if key in usage_cpu:
            usage[CPU] = usage_cpu[key]
        elif key in used_simple and cpu is not None and cpu.blocks:
            usage[CPU] = used_simple[key] / cpu.blocks
        engines.append(
            EngineStats(
                model_name=model,
                engine=engine,
                capacity=capacity,
                usage_ratio=usage,
                requests={st: v[key] for st, v in requests.items() if key in v},
                preemptions_total=preempt.get(key),
                block_size=block_size,
            )
        )
    return VllmStats(tuple(engines), tuple(pids[:MAX_ENGINES]), multiprocess,
                     dropped=len(keys) - len(kept))


def _pid_order(pid: str) -> tuple[int, str]:
    return (int(pid), pid) if pid.isdigit() else (1 << 62, pid)


# What ``parse_vllm_metrics`` reads of a body: these vLLM families, and process_* (its
# absence tells prometheus_client's multiprocess mode). Every other line (comments,
# histograms, python_*, a pod's own families) is dropped as the body streams in, so what
# a read holds is a few hundred lines of a real vLLM, whatever the size of its body.
USED_FAMILIES = frozenset({
    "vllm:cache_config_info", "vllm:kv_offload_config_info", "vllm:simple_kv_offload_info",
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc",
    "vllm:simple_kv_offload_used_blocks", "vllm:num_preemptions_total",
    *(f"vllm:num_requests_{state}" for state in REQUEST_STATES),
})
