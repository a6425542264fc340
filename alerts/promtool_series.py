"""What the promtool unit tests are written with: input series in promtool's expanding
notation, the labels of a workload, and the two evaluations that pin an alert's ``for:``
boundary (not firing one evaluation before, firing at it)."""

from __future__ import annotations

from typing import Any

from exporter.promql import DAY, MINUTE, MiB
from exporter.promql import duration as promql_duration

Test = dict[str, Any]
LONG_STEP = 5 * MINUTE
GiB = 1024 * MiB


def dur(seconds: int) -> str:
    return promql_duration(seconds) if seconds else "0s"


def firing_expr(alertname: str | None = None) -> str:
    sel = 'alertstate="firing"' + (f', alertname="{alertname}"' if alertname else "")
    return f"count by (alertname, severity, container) (ALERTS{{{sel}}})"



def alert_labels(alertname: str, severity: str, container: str | None) -> str:
    # Prometheus drops empty labels: the pod level (container="") has none.
    parts = [f'alertname="{alertname}"']
    if container:
        parts.append(f'container="{container}"')
    parts.append(f'severity="{severity}"')
    return "{" + ", ".join(parts) + "}"


def boundary(alertname: str, severity: str, container: str | None, fires_at_s: int,
             step_s: int = MINUTE) -> list[Test]:
    """Not firing one evaluation before fires_at_s, firing at it."""
    expr = firing_expr(alertname) if severity == "" else (
        f'count by (alertname, severity, container) (ALERTS{{alertstate="firing", '
        f'alertname="{alertname}", severity="{severity}"}})'
    )
    return [
        {"expr": expr, "eval_time": dur(fires_at_s - step_s), "exp_samples": []},
        {"expr": expr, "eval_time": dur(fires_at_s),
         "exp_samples": [{"labels": alert_labels(alertname, severity, container), "value": 1}]},
    ]


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    lbl = ", ".join(f'{k}="{v}"' for k, v in
                    {"job": "headroom", "instance": "n1", **labels}.items())
    return {"series": f"{name}{{{lbl}}}", "values": values}


def workload(pod: str = "p", container: str = "vllm") -> dict[str, str]:
    return {"namespace": "ns", "pod": pod, "container": container}


def whole(x: float) -> int:
    return round(x)


def steps(*runs: tuple[float, int]) -> str:
    """Constant runs: (value, samples) -> '10x4 20x9' style input."""
    return " ".join(f"{whole(v)}x{k - 1}" if k > 1 else f"{whole(v)}" for v, k in runs)


def linear(start: float, step: int, samples: int) -> str:
    return f"{whole(start)}+{step}x{samples - 1}"




def per_second(per_day: float) -> int:
    """A growth rate as whole bytes per second, so sampled values step evenly."""
    return round(per_day / DAY)

