"""headroom / exporter: is headroom itself healthy?

Collector success and duration per source, vLLM /metrics reads, and the exporter's own
cost (scrape duration, samples, memory). A failing collector does not fail the scrape:
its series go missing, and the alerts that read them are blind.
"""

from __future__ import annotations

from typing import Any

from dashboards.knobs import Knobs
from dashboards.layout import assemble
from dashboards.links import dashboard_url, link
from dashboards.names import Config
from dashboards.panels import Panel, row, stat, timeseries
from dashboards.selectors import INSTANCE, JOB, RATE, metric
from dashboards.style import thresholds
from dashboards.variables import instance_var
from exporter import catalog as c

SEL = (JOB, INSTANCE)
# Series Prometheus itself writes for every target (not the exporter's).
UP = "up"
SCRAPE_DURATION = "scrape_duration_seconds"
SCRAPE_SAMPLES = "scrape_samples_scraped"
# prometheus_client's process collector; absent while the exporter does not register it.
RESIDENT_MEMORY = c.SELF_RESIDENT_MEMORY_BYTES

def panels(k: Knobs) -> list[Panel]:
    """The exporter's health, collectors and cost."""
    return [
        row("Now"),
        stat(
            "Exporters up",
            "headroom targets Prometheus scraped successfully, out of all targets of the job "
            "(HeadroomExporterDown fires for a target down 15m).",
            [
                (f"sum({metric(UP, *SEL)})", "up"),
                (f"count({metric(UP, *SEL)})", "targets"),
            ],
            unit="short", w=6, text_mode="value_and_name",
            runbooks=k.runbooks("HeadroomExporterDown"),
        ),
        stat(
            "Collectors failing now",
            "Collector x exporter pairs whose last run failed (headroom_collector_success 0).",
            [(f"count(max by (instance, collector) ({metric(c.COLLECTOR_SUCCESS, *SEL)}) == 0)"
              " or vector(0)", "")],
            unit="short", w=6, steps=thresholds(("green", 0), ("red", 1)),
            runbooks=k.runbooks("HeadroomCollectorFailing"),
        ),
        stat(
            "vLLM /metrics failing now",
            "vLLM servers whose /metrics headroom could not read on the last scrape.",
            [(f"count(max by (namespace, pod, container) ({metric(c.VLLM_UP, *SEL)}) == 0)"
              " or vector(0)", "")],
            unit="short", w=6, steps=thresholds(("green", 0), ("orange", 1)),
            runbooks=k.runbooks("HeadroomVLLMScrapeFailing"),
        ),
        stat(
            "Versions",
            "Exporters per headroom version: more than one during a rollout only.",
            [(f"count by (version) ({metric(c.BUILD_INFO, *SEL)})", "{{version}}")],
            unit="short", w=6, text_mode="value_and_name",
        ),
        row("Collectors"),
        timeseries(
            "Collector success",
            "Share of scrapes each collector succeeded on (worst exporter). Below 50% for "
            "15m fires HeadroomCollectorFailing; the exporter's log says why.",
            [(
                f"min by (collector) (avg_over_time({metric(c.COLLECTOR_SUCCESS, *SEL)}[{RATE}]))",
                "{{collector}}",
            )],
            unit="percentunit", min_zero=True,
        ),
        timeseries(
            "Collector duration",
            "Wall time each collector took on the last scrape (slowest exporter): procfs and "
            "PSS reads grow with the number of processes.",
            [(f"max by (collector) ({metric(c.COLLECTOR_DURATION_SECONDS, *SEL)})",
              "{{collector}}")],
            unit="s", min_zero=True,
        ),
        stat(
            "Collectors degraded",
            "Collectors that lost data to a missing capability or a denied device "
            "(headroom_collector_degraded; the exporter's log says which files): their series "
            "are missing, not zero, though the collector may still succeed. "
            "missing_cap_sys_ptrace: the pod lacks SYS_PTRACE (no PSS, tmpfs or orphans).",
            [(f"count by (collector, reason) ({metric(c.COLLECTOR_DEGRADED, *SEL)} == 1)"
              " or vector(0)", "{{collector}} {{reason}}")],
            unit="short", w=24, text_mode="value_and_name",
            steps=thresholds(("green", 0), ("orange", 1)),
        ),
        timeseries(
            "vLLM /metrics scrape success",
            "Share of scrapes on which headroom read each vLLM's /metrics: the KV-cache series "
            "and HeadroomKVOffloadWillNotFit are blind while it fails.",
            [(
                f"max by (namespace, pod, container) "
                f"(avg_over_time({metric(c.VLLM_UP, *SEL)}[{RATE}]))",
                "{{namespace}}/{{pod}} {{container}}",
            )],
            unit="percentunit", min_zero=True, w=24, legend_table=True,
        ),
        row("Cost"),
        timeseries(
            "Scrape duration",
            "How long Prometheus took to scrape each exporter. Near the scrape timeout, "
            "scrapes fail and every headroom alert goes blind for that node.",
            [(f"max by (instance) ({metric(SCRAPE_DURATION, *SEL)})", "{{instance}}")],
            unit="s", w=8, min_zero=True,
        ),
        timeseries(
            "Samples per scrape",
            "Series each exporter returns: the cardinality headroom costs Prometheus.",
            [(f"max by (instance) ({metric(SCRAPE_SAMPLES, *SEL)})", "{{instance}}")],
            unit="short", w=8, min_zero=True,
        ),
        timeseries(
            "Exporter resident memory",
            "Resident memory of each exporter process (process_resident_memory_bytes of job "
            "headroom). headroom_process_memory_bytes does not describe the exporter itself.",
            [(f"max by (instance) ({metric(RESIDENT_MEMORY, *SEL)})", "{{instance}}")],
            unit="bytes", w=8, min_zero=True,
        ),
    ]


def dashboard(config: Config) -> Any:
    return assemble(
        uid="headroom-exporter",
        title="headroom / exporter",
        description="Health of the headroom exporters: collectors, vLLM /metrics reads, "
        "scrape cost and the exporter's own memory.",
        variables=[instance_var()],
        panels=panels(Knobs(config)),
        links=[link("Node of this exporter", dashboard_url("node", "var-node=${instance}"),
                    tooltip="headroom / node for the selected exporter")],
        time_from="now-6h",
    )
