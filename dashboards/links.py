"""Links between headroom's dashboards (the header's drop-down, data links to a pod) and
to outside pages; they keep the data source, job and time range."""

from __future__ import annotations

from typing import Any

from grafanalib import core as g

# Uids and URL slugs of the dashboards, for links between them.
UIDS = {
    "fleet": "headroom-fleet",
    "pod": "headroom-pod",
    "node": "headroom-node",
    "exporter": "headroom-exporter",
}
SLUGS = {
    "fleet": "headroom-fleet",
    "pod": "headroom-pod-memory",
    "node": "headroom-node",
    "exporter": "headroom-exporter",
}


def dashboard_url(key: str, *params: str) -> str:
    """A link to another headroom dashboard, keeping datasource, job and time range."""
    query = "&".join(("var-datasource=${datasource}", "${job:queryparam}", *params,
                      "${__url_time_range}"))
    return f"/d/{UIDS[key]}/{SLUGS[key]}?{query}"


def pod_link(title: str, namespace: str, pod: str) -> dict[str, Any]:
    """A data link to the pod dashboard."""
    return {"title": title, "url": dashboard_url("pod", f"var-namespace={namespace}",
                                                 f"var-pod={pod}")}


# On a series (its labels) and in a table (the row's namespace, the cell's pod).
SERIES_POD_LINK = pod_link(
    "Pod ${__field.labels.namespace}/${__field.labels.pod}",
    "${__field.labels.namespace}", "${__field.labels.pod}",
)
TABLE_POD_LINK = pod_link(
    "Pod ${__data.fields.namespace}/${__value.raw}", "${__data.fields.namespace}",
    "${__value.raw}",
)


def link(title: str, url: str, *, tooltip: str = "", new_tab: bool = False) -> Any:
    return g.DashboardLink(
        title=title, uri=url, type="link", tooltip=tooltip, targetBlank=new_tab,
        keepTime=False, includeVars=False, asDropdown=False, icon="external link",
    )


def dashboard_links(*extra: Any) -> list[Any]:
    """A drop-down of every headroom dashboard (time range and variables carried), then
    the dashboard's own links."""
    return [
        g.DashboardLink(
            asDropdown=True, includeVars=True, keepTime=True, tags=["headroom"],
            title="headroom", type="dashboards",
        ),
        *extra,
    ]
