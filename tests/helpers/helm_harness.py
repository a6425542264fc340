"""Render and lint a Helm chart with the real Helm library, without a helm binary.

Run with the helm venv's Python (>= 3.12, see scripts/install-helm-test-deps.sh), not
with the project's test interpreter: ``tests/e2e/test_chart.py`` calls it as a subprocess.

helm-sdkpy embeds Helm's Go library. It can ``Lint`` offline, but it has no
``template``/``--dry-run``: ``Install`` talks to an API server. So this module serves a
tiny fake Kubernetes API on loopback (``/version``, discovery, and a ``POST`` per object
that answers 201 with the object echoed) and records every object Helm creates. With
``HELM_DRIVER=memory`` Helm keeps its release record in memory, so the recorded POST
bodies are exactly the rendered manifests with the values applied.

Commands (JSON in, JSON out, so the caller needs no Helm and no PyYAML of its own)::

    python tests/helpers/helm_harness.py lint   --chart charts/headroom
    python tests/helpers/helm_harness.py render --chart charts/headroom --cases cases.json \
        [--kube-version 1.30.0] > rendered.json

``cases.json`` is a list of ``{"id": str, "values": {...}, "release": str?,
"namespace": str?, "kubeVersion": str?}``; the output is a list of ``{"id", "ok",
"error", "objects", "manifest", "notes"}`` in the same order. A case whose install fails (schema
rejection, template ``fail``) is reported with ``ok: false`` and Helm's message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Helm reads its environment (HELM_DRIVER above all) through Go's os.Getenv, and a Go
# shared library takes the environment the process *started* with: setting os.environ
# here is too late. main() therefore re-executes this script once with these set.
HELM_ENV = {"HELM_DRIVER": "memory"}
_REEXEC_MARK = "HELM_HARNESS_REEXEC"


def _helm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HELM_ENV)
    if not env.get("HELM_CACHE_HOME"):
        # One fixed place, reused by every run (the exec'd process cannot clean up after
        # itself); Helm keeps nothing there for a local chart.
        home = os.path.join(tempfile.gettempdir(), "headroom-helm-harness")
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            env[var] = os.path.join(home, var.lower())
    env[_REEXEC_MARK] = "1"
    return env


# (group, version) -> [(plural, kind, namespaced)]: everything the chart may create.
RESOURCES: dict[tuple[str, str], list[tuple[str, str, bool]]] = {
    ("", "v1"): [
        ("namespaces", "Namespace", False),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("pods", "Pod", True),
    ],
    ("apps", "v1"): [
        ("daemonsets", "DaemonSet", True),
        ("deployments", "Deployment", True),
    ],
    ("rbac.authorization.k8s.io", "v1"): [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    ("monitoring.coreos.com", "v1"): [
        ("servicemonitors", "ServiceMonitor", True),
        ("podmonitors", "PodMonitor", True),
        ("prometheusrules", "PrometheusRule", True),
    ],
    ("scheduling.k8s.io", "v1"): [
        ("priorityclasses", "PriorityClass", False),
    ],
    ("node.k8s.io", "v1"): [
        ("runtimeclasses", "RuntimeClass", False),
    ],
}

_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<gv>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)


class FakeKubeAPI:
    """A loopback HTTP server that plays just enough of the Kubernetes API for Helm."""

    def __init__(self, kube_version: str = "1.30.0") -> None:
        self.kube_version = kube_version
        self.created: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        handler = self._handler_class()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            out, self.created = self.created, []
        return out

    def kubeconfig(self) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": "fake"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )

    # -- HTTP ------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _not_found(self, what: str) -> None:
                self._send(
                    404,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": f"{what} not found",
                        "reason": "NotFound",
                        "code": 404,
                    },
                )

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                body = api.discovery(path)
                if body is not None:
                    self._send(200, body)
                else:
                    self._not_found(path)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                m = _PATH.match(path)
                if not m:
                    self._not_found(path)
                    return
                try:
                    obj = json.loads(raw or b"{}")
                except (json.JSONDecodeError, UnicodeDecodeError):
                    self._send(400, {"kind": "Status", "code": 400, "message": "bad json"})
                    return
                with api.lock:
                    api.created.append(obj)
                self._send(201, obj)

            def do_PUT(self) -> None:
                self.do_POST()

            def do_PATCH(self) -> None:
                self.do_POST()

            def do_DELETE(self) -> None:
                self._not_found(self.path)

        return Handler

    def discovery(self, path: str) -> dict[str, Any] | None:
        major, minor, *_ = self.kube_version.split(".")
        if path == "/version":
            return {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{self.kube_version}",
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
                ],
            }
        if path == "/apis":
            groups = []
            for group, version in RESOURCES:
                if not group:
                    continue
                gv = {"groupVersion": f"{group}/{version}", "version": version}
                groups.append(
                    {"name": group, "versions": [gv], "preferredVersion": gv}
                )
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        for (group, version), resources in RESOURCES.items():
            gv_path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
            if path == gv_path:
                return {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}" if group else version,
                    "resources": [
                        {
                            "name": plural,
                            "singularName": kind.lower(),
                            "namespaced": namespaced,
                            "kind": kind,
                            "verbs": ["create", "delete", "get", "list", "patch",
                                      "update", "watch"],
                        }
                        for plural, kind, namespaced in resources
                    ],
                }
        return None


# -- Helm actions ------------------------------------------------------------------------


def lint(chart: str) -> dict[str, Any]:
    import helm_sdkpy

    config = helm_sdkpy.Configuration(namespace="default")
    return asyncio.run(helm_sdkpy.Lint(config).run(chart))


def render(chart: str, cases: list[dict[str, Any]], kube_version: str) -> list[dict[str, Any]]:
    import helm_sdkpy

    results = []
    with FakeKubeAPI(kube_version) as api, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(api.kubeconfig())
        for case in cases:
            namespace = case.get("namespace", "monitoring")
            release = case.get("release", "headroom")
            # The version /version reports: Helm's .Capabilities.KubeVersion.
            api.kube_version = case.get("kubeVersion") or kube_version
            api.take()
            out: dict[str, Any] = {"id": case["id"], "ok": False, "error": "", "objects": [],
                                   "manifest": "", "notes": ""}
            try:
                # A fresh Configuration per case: a fresh in-memory release store, so every
                # case can use the same release name.
                config = helm_sdkpy.Configuration(namespace=namespace,
                                                  kubeconfig=str(kubeconfig))
                result = asyncio.run(
                    helm_sdkpy.Install(config).run(
                        release, chart, values=case.get("values") or None, wait=False,
                        timeout=60,
                    )
                )
                out["ok"] = True
                out["manifest"] = _find_key(result, "manifest") or ""
                out["notes"] = _find_key(result, "notes") or ""
            except helm_sdkpy.HelmError as e:
                out["error"] = str(e)
            out["objects"] = api.take()
            results.append(out)
    return results


def _find_key(obj: Any, key: str) -> Any:
    """The release JSON's shape differs between helm-sdkpy versions: search for the key."""
    if isinstance(obj, dict):
        if isinstance(obj.get(key), str):
            return obj[key]
        for v in obj.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for v in obj:
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


def main(argv: list[str] | None = None) -> int:
    if any(os.environ.get(k) != v for k, v in HELM_ENV.items()):
        if os.environ.get(_REEXEC_MARK):
            raise SystemExit(f"helm_harness: could not set {HELM_ENV} for the Helm library")
        args = sys.argv[1:] if argv is None else argv
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *args],
                  _helm_env())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_lint = sub.add_parser("lint")
    p_lint.add_argument("--chart", required=True)
    p_render = sub.add_parser("render")
    p_render.add_argument("--chart", required=True)
    p_render.add_argument("--cases", required=True, help="JSON file: list of cases")
    p_render.add_argument("--kube-version", default="1.30.0",
                          help="version the fake API server reports, unless a case says")
    args = parser.parse_args(argv)

    if args.cmd == "lint":
        json.dump(lint(args.chart), sys.stdout)
    else:
        cases = json.loads(Path(args.cases).read_text())
        json.dump(render(args.chart, cases, args.kube_version), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
