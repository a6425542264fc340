"""Tier 8: the Helm chart renders with real Helm, validates, and keeps its security context.

Helm runs in its own Python >= 3.12 venv (``.helm-venv/``, made by
``scripts/install-helm-test-deps.sh``): ``tests/helpers/helm_harness.py`` drives helm-sdkpy (the
Helm Go library) against a fake API server on loopback and hands back the rendered
objects as JSON. This module needs no Helm itself; it skips the Helm-backed tests only
when that venv is missing (set ``HEADROOM_REQUIRE_HELM=1`` to fail instead, as CI should).
The Dockerfile tests and the exporter-flag contract tests need nothing extra.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.collectors.kube.pods import KubernetesSettings

pytestmark = pytest.mark.chart  # real Helm: the chart tier

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "headroom"
HARNESS = REPO / "tests" / "helpers" / "helm_harness.py"
HELM_VENV = Path(os.environ.get("HEADROOM_HELM_VENV", REPO / ".helm-venv"))
HELM_PY = HELM_VENV / "bin" / "python"
INSTALLER = REPO / "scripts" / "install-helm-test-deps.sh"

CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
# Kubernetes versions the rendered objects are validated against (kubernetes-validate's
# bundled schemas). Every variant at the two the brief names; the defaults also at the
# chart's minimum and at the last version without recursiveReadOnly.
KUBE_VERSIONS = ("1.30.0", "1.37.0")
DEFAULT_ONLY_KUBE_VERSIONS = ("1.25.0", "1.29.0")
CRD_GROUP = "monitoring.coreos.com/"

_helm_missing = not HELM_PY.exists()
if _helm_missing and os.environ.get("HEADROOM_REQUIRE_HELM") == "1":
    raise RuntimeError(f"HEADROOM_REQUIRE_HELM=1 but {HELM_PY} is missing: run {INSTALLER}")
needs_helm = pytest.mark.skipif(
    _helm_missing,
    reason=f"no Helm test venv at {HELM_VENV}: run `bash scripts/install-helm-test-deps.sh`",
)


# --- values ------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


DEFAULTS: dict[str, Any] = load_yaml(CHART / "values.yaml")


def merge(base: Any, override: Any) -> Any:
    """Helm's coalescing: maps merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(override)


# Extra cases beyond defaults and ci/: value combinations the ci files do not cover.
EXTRA_CASES: dict[str, dict[str, Any]] = {
    "kmsg-unprivileged": {"kmsg": {"enabled": True}},
    "window-follows-interval": {"monitor": {"interval": "30s", "scrapeTimeout": "25s"}},
    "window-explicit": {"monitor": {"interval": "30s"}, "exporter": {"sampler": {"window": "1m"}}},
    "no-folder": {"dashboards": {"folder": ""}},
    "release-name": {"nameOverride": "hr"},
    "web-config-tls": {
        "webConfig": {"secretName": "headroom-web", "tls": True},
        "monitor": {"kind": "PodMonitor",
                    "tlsConfig": {"ca": {"secret": {"name": "headroom-web", "key": "ca.crt"}},
                                  "serverName": "headroom"},
                    "basicAuth": {"username": {"name": "scrape", "key": "user"},
                                  "password": {"name": "scrape", "key": "password"}}}},
    "web-config-mtls": {"webConfig": {"secretName": "headroom-web", "key": "web.yml",
                                      "tls": True, "clientAuth": True}},
}
# Values Helm must refuse (values.schema.json, or a template `fail`).
REJECTED_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "misspelled-top": ({"hostPid": False}, "hostPid"),
    "misspelled-nested": ({"exporter": {"logLvl": "debug"}}, "logLvl"),
    "wrong-type": ({"hostPID": "yes"}, "hostPID"),
    "wrong-enum": ({"monitor": {"kind": "ScrapeConfig"}}, "kind"),
    "compound-interval": ({"monitor": {"interval": "1m30s"}}, "interval"),
    "servicemonitor-without-service": ({"service": {"enabled": False}}, "service.enabled"),
}


def case_values() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {"default": {}}
    for f in CI_FILES:
        cases[f"ci/{f.name}"] = load_yaml(f) or {}
    cases.update(EXTRA_CASES)
    return cases


CASES = case_values()


# --- rendering through real Helm ---------------------------------------------------------


def run_harness(*args: str, timeout: int = 300) -> Any:
    proc = subprocess.run(
        [str(HELM_PY), str(HARNESS), *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
    )
    assert proc.returncode == 0, f"helm_harness {args[0]} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


def render_cases(chart: Path, cases: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    spec = tmp / "cases.json"
    spec.write_text(json.dumps(cases))
    out = run_harness("render", "--chart", str(chart), "--cases", str(spec))
    return {r["id"]: r for r in out}


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """(case id, kube version) -> harness result, every case rendered once by real Helm."""
    if _helm_missing:
        pytest.skip(needs_helm.kwargs["reason"])
    cases = []
    for kv in KUBE_VERSIONS:
        for cid, values in CASES.items():
            cases.append({"id": f"{cid}@{kv}", "values": values, "kubeVersion": kv})
    for kv in DEFAULT_ONLY_KUBE_VERSIONS:
        cases.append({"id": f"default@{kv}", "values": {}, "kubeVersion": kv})
    for cid, (values, _) in REJECTED_CASES.items():
        cases.append({"id": f"rejected/{cid}", "values": values})
    return render_cases(CHART, cases, tmp_path_factory.mktemp("render"))


def objects(rendered: dict[str, Any], case: str, kube: str = KUBE_VERSIONS[0]) -> list[dict]:
    result = rendered[f"{case}@{kube}"]
    assert result["ok"], f"{case}: helm install failed: {result['error']}"
    return result["objects"]


def one(objs: list[dict], kind: str) -> dict:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def kinds(objs: list[dict]) -> list[str]:
    return sorted(o["kind"] for o in objs)


def container(objs: list[dict]) -> dict:
    pod = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return c


def pod_spec(objs: list[dict]) -> dict:
    return one(objs, "DaemonSet")["spec"]["template"]["spec"]


# --- Helm itself ---------------------------------------------------------------------------


@needs_helm
def test_helm_lint_has_no_errors() -> None:
    result = run_harness("lint", "--chart", str(CHART))
    assert not result.get("Errors"), result
    # Severity 1 is INFO (e.g. "icon is recommended"); 2 WARNING, 3 ERROR.
    bad = [m for m in result.get("Messages") or [] if m.get("Severity", 0) >= 2]
    assert not bad, bad


@needs_helm
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_variant_renders(rendered: dict[str, Any], case: str, kube: str) -> None:
    objs = objects(rendered, case, kube)
    assert "DaemonSet" in kinds(objs)
    assert rendered[f"{case}@{kube}"]["notes"].strip(), "NOTES.txt rendered nothing"


@needs_helm
@pytest.mark.parametrize("case", sorted(REJECTED_CASES))
def test_helm_rejects_bad_values(rendered: dict[str, Any], case: str) -> None:
    result = rendered[f"rejected/{case}"]
    assert not result["ok"], f"Helm accepted {REJECTED_CASES[case][0]}"
    assert REJECTED_CASES[case][1] in result["error"], result["error"]
    assert not result["objects"], "a rejected install must create nothing"


# --- Kubernetes schemas ------------------------------------------------------------------


def _kubernetes_validate(objs: list[dict], version: str, tmp: Path) -> None:
    files = []
    for i, obj in enumerate(o for o in objs if not o["apiVersion"].startswith(CRD_GROUP)):
        f = tmp / f"{i:02d}-{obj['kind']}-{obj['metadata']['name']}.yaml"
        f.write_text(yaml.safe_dump(obj))
        files.append(str(f))
    assert files
    proc = subprocess.run(
        [str(HELM_VENV / "bin" / "kubernetes-validate"), "--strict", "--quiet",
         "-k", version, *files],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_helm
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_all_variants_pass_kubernetes_validate_strict(
    rendered: dict[str, Any], kube: str, tmp_path: Path
) -> None:
    everything = [o for case in CASES for o in objects(rendered, case, kube)]
    _kubernetes_validate(everything, kube, tmp_path)


@needs_helm
@pytest.mark.parametrize("kube", DEFAULT_ONLY_KUBE_VERSIONS)
def test_defaults_validate_on_older_kubernetes(
    rendered: dict[str, Any], kube: str, tmp_path: Path
) -> None:
    objs = objects(rendered, "default", kube)
    _kubernetes_validate(objs, kube, tmp_path)
    for m in container(objs)["volumeMounts"]:
        assert "recursiveReadOnly" not in m, "recursiveReadOnly exists from Kubernetes 1.30"


@needs_helm
def test_host_mounts_are_recursively_read_only_where_supported(rendered: dict[str, Any]) -> None:
    mounts = {m["name"]: m for m in container(objects(rendered, "default"))["volumeMounts"]}
    for name in ("proc", "cgroup"):
        assert mounts[name]["recursiveReadOnly"] == "IfPossible"
        assert mounts[name]["readOnly"] is True


def _check_crd_structure(obj: dict, pod_labels: dict[str, str], services: list[dict]) -> None:
    """What kubernetes-validate cannot check: the Prometheus Operator objects' shape."""
    meta = obj["metadata"]
    assert meta["name"] and meta["namespace"]
    spec = obj["spec"]
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    if obj["kind"] == "PrometheusRule":
        assert set(spec) == {"groups"}
        assert spec["groups"], "a PrometheusRule with no group"
        for g in spec["groups"]:
            assert isinstance(g["name"], str) and g["rules"]
            for r in g["rules"]:
                assert isinstance(r["expr"], str) and r["expr"].strip()
                assert ("alert" in r) != ("record" in r)
        return
    assert obj["kind"] in ("ServiceMonitor", "PodMonitor")
    allowed = {"selector", "namespaceSelector", "endpoints", "podMetricsEndpoints"}
    assert set(spec) <= allowed, set(spec) - allowed
    key = "endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    assert set(spec) == {"selector", "namespaceSelector", key}
    assert spec["namespaceSelector"] == {"matchNames": [meta["namespace"]]}
    sel = spec["selector"]["matchLabels"]
    if obj["kind"] == "ServiceMonitor":
        (svc,) = services
        assert sel.items() <= svc["metadata"]["labels"].items(), "selects no Service"
        ports = {p["name"] for p in svc["spec"]["ports"]}
    else:
        assert sel.items() <= pod_labels.items(), "selects no exporter pod"
        ports = {"metrics"}
    endpoint_keys = {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
                     "relabelings", "metricRelabelings", "tlsConfig", "basicAuth"}
    for ep in spec[key]:
        assert set(ep) <= endpoint_keys, set(ep) - endpoint_keys
        assert ep["scheme"] in ("http", "https")
        # The operator's SafeTLSConfig and BasicAuth take Secret/ConfigMap references.
        assert set(ep.get("tlsConfig", {})) <= {"ca", "cert", "keySecret", "serverName",
                                                "insecureSkipVerify"}
        assert set(ep.get("basicAuth", {})) <= {"username", "password"}
        assert ep["port"] in ports
        assert re.fullmatch(r"[0-9]+(ms|s|m|h)", ep["interval"])
        for r in ep.get("relabelings", []) + ep.get("metricRelabelings", []):
            assert set(r) <= {"action", "sourceLabels", "separator", "targetLabel", "regex",
                              "modulus", "replacement"}, r
            assert r.get("action", "replace") in {
                "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
                "lowercase", "uppercase", "keepequal", "dropequal"}


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_prometheus_operator_objects_are_well_formed(rendered: dict[str, Any], case: str) -> None:
    objs = objects(rendered, case)
    pod_labels = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    services = [o for o in objs if o["kind"] == "Service"]
    for obj in objs:
        if obj["apiVersion"].startswith(CRD_GROUP):
            _check_crd_structure(obj, pod_labels, services)


# --- security context and host access ----------------------------------------------------


@needs_helm
def test_default_security_context(rendered: dict[str, Any]) -> None:
    sc = container(objects(rendered, "default"))["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["capabilities"]["add"] == ["SYS_PTRACE"]
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_security_context_holds_in_every_variant(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    objs = objects(rendered, case)
    c = container(objs)
    sc = c["securityContext"]
    expected_caps = ["SYS_PTRACE"] + (["SYSLOG"] if values["kmsg"]["enabled"] else [])
    assert sc["capabilities"] == {"drop": ["ALL"], "add": expected_caps}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    privileged = values["kmsg"]["enabled"] and values["kmsg"]["privileged"]
    assert sc["privileged"] is privileged
    # The API server rejects privileged with allowPrivilegeEscalation false.
    assert sc["allowPrivilegeEscalation"] is privileged
    assert pod_spec(objs)["hostPID"] is values["hostPID"]
    assert not pod_spec(objs).get("hostNetwork")
    assert not pod_spec(objs).get("hostIPC")


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_host_mounts_read_only(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    objs = objects(rendered, case)
    volumes = {v["name"]: v for v in pod_spec(objs)["volumes"]}
    mounts = {m["name"]: m for m in container(objs)["volumeMounts"]}
    assert volumes["proc"]["hostPath"]["path"] == values["hostPaths"]["procfs"]
    assert volumes["cgroup"]["hostPath"]["path"] == values["hostPaths"]["cgroupfs"]
    assert mounts["proc"]["mountPath"] == "/host/proc"
    assert mounts["cgroup"]["mountPath"] == "/host/sys/fs/cgroup"
    if values["kmsg"]["enabled"]:
        assert volumes["kmsg"]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
        assert mounts["kmsg"]["mountPath"] == "/host/dev/kmsg"
    else:
        assert "kmsg" not in volumes and "kmsg" not in mounts
    # Every host path is mounted read-only, save the flight recorder's own directory.
    for name, vol in volumes.items():
        if "hostPath" in vol and name != "flight-recorder":
            assert mounts[name].get("readOnly") is True, name
    fr = values["flightRecorder"]
    if not fr["enabled"]:
        assert "flight-recorder" not in volumes
    elif fr["volume"] == "hostPath":
        assert volumes["flight-recorder"]["hostPath"] == {
            "path": fr["hostPath"]["path"], "type": "DirectoryOrCreate"}
        assert mounts["flight-recorder"]["mountPath"] == fr["mountPath"]
    else:
        assert volumes["flight-recorder"]["emptyDir"] == {"sizeLimit": fr["emptyDir"]["sizeLimit"]}


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_service_account_token_and_rbac(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    objs = objects(rendered, case)
    on = values["kubernetes"]["enabled"]
    assert pod_spec(objs)["automountServiceAccountToken"] is on
    sa = one(objs, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is on
    assert pod_spec(objs)["serviceAccountName"] == sa["metadata"]["name"]
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    if not on:
        assert roles == []
        return
    role = one(objs, "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_pod_placement_and_nvidia(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    objs = objects(rendered, case)
    spec = pod_spec(objs)
    assert spec.get("tolerations", []) == values["tolerations"]
    assert spec.get("nodeSelector", {}) == values["nodeSelector"]
    assert spec.get("priorityClassName", "") == values["priorityClassName"]
    assert spec.get("runtimeClassName", "") == values["nvidia"]["runtimeClassName"]
    env = {e["name"]: e for e in container(objs)["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    nv = values["nvidia"]["visibleDevices"]
    assert env.get("NVIDIA_VISIBLE_DEVICES", {}).get("value", "") == nv
    for extra in values["extraEnv"]:
        assert env[extra["name"]] == extra
    ds = one(objs, "DaemonSet")
    assert ds["spec"]["updateStrategy"] == values["updateStrategy"]
    c = container(objs)
    assert c["resources"] == values["resources"]
    if not values["webConfig"]["secretName"]:  # else: test_web_config_secret_probes_and_scheme
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["ports"] == [{"name": "metrics", "containerPort": values["exporter"]["port"],
                           "protocol": "TCP"}]
    secrets = spec.get("imagePullSecrets", [])
    assert secrets == values["imagePullSecrets"]


@needs_helm
def test_image_reference(rendered: dict[str, Any]) -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    assert container(objects(rendered, "default"))["image"] == (
        f"ghcr.io/vllm-headroom/headroom:{chart['appVersion']}")
    pinned = container(objects(rendered, "ci/host-pid-off-values.yaml"))["image"]
    assert re.fullmatch(r"ghcr\.io/vllm-headroom/headroom@sha256:[0-9a-f]{64}", pinned)


# --- exporter arguments ------------------------------------------------------------------


def expected_args(values: dict[str, Any]) -> list[str]:
    """The chart's contract with `headroom serve`, written independently of the template."""
    e = values["exporter"]
    args = ["serve", f"--web.listen-address=:{e['port']}",
            "--path.procfs=/host/proc", "--path.cgroupfs=/host/sys/fs/cgroup"]
    if values["kmsg"]["enabled"]:
        args.append("--path.kmsg=/host/dev/kmsg")
    for name in ("cgroup", "procfs", "tmpfs", "tmpfs_orphans", "nvml", "vllm", "node_pressure"):
        args.append(("--collector." if e["collectors"][name] else "--no-collector.") + name)
    if values["kubernetes"]["enabled"]:
        args += ["--collector.kubernetes", "--kubernetes.node-name=$(NODE_NAME)"]
    else:
        args.append("--no-collector.kubernetes")
    if e["procfs"]["maxProcesses"]:
        args.append(f"--procfs.max-processes={e['procfs']['maxProcesses']}")
    if e["procfs"]["pssInterval"]:
        args.append(f"--procfs.pss-interval={e['procfs']['pssInterval']}")
    if e["procfs"]["pssMaxRss"]:
        args.append(f"--procfs.pss-max-rss={e['procfs']['pssMaxRss']}")
    if e["sampler"]["interval"]:
        args.append(f"--sampler.interval={e['sampler']['interval']}")
    args.append(f"--sampler.window={e['sampler']['window'] or values['monitor']['interval']}")
    fr = values["flightRecorder"]
    if fr["enabled"]:
        args.append(f"--flight-recorder.dir={fr['mountPath']}")
    if fr["window"]:
        args.append(f"--flight-recorder.window={fr['window']}")
    if values["webConfig"]["secretName"]:
        args.append(f"--web.config.file=/etc/headroom/web/{values['webConfig']['key']}")
    args += [f"--log.level={e['logLevel']}", f"--log.format={e['logFormat']}"]
    return args + list(values["extraArgs"])


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_args_match_values(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    c = container(objects(rendered, case))
    assert c["args"] == expected_args(values)
    assert "command" not in c, "the image's ENTRYPOINT is `headroom`"


def test_sampler_window_defaults_to_scrape_interval() -> None:
    assert DEFAULTS["exporter"]["sampler"]["window"] == ""
    v = merge(DEFAULTS, {"monitor": {"interval": "30s"}})
    assert "--sampler.window=30s" in expected_args(v)


def _exporter_parse(args: list[str], tmp: Path) -> Any:
    """Parse rendered args with the exporter's own flag table (exporter/assembly/config.py)."""
    from exporter.assembly import config as cfg

    host = {"/host/proc": tmp / "proc", "/host/sys/fs/cgroup": tmp / "cgroup"}
    for d in host.values():
        d.mkdir(exist_ok=True)
    fixed = []
    for a in args[1:]:
        a = a.replace("$(NODE_NAME)", "gpu-node-1")
        for k, v in host.items():
            a = a.replace(f"={k}", f"={v}")
        fixed.append(a)
    parser = argparse.ArgumentParser(exit_on_error=False)
    cfg.add_flags(parser)
    ns, unknown = parser.parse_known_args(fixed)
    assert not unknown, f"flags `headroom serve` does not know: {unknown}"
    return cfg.build_config(ns, {})


@pytest.mark.parametrize("case", sorted(CASES))
def test_exporter_accepts_the_args(case: str, tmp_path: Path) -> None:
    """No Helm needed: the contract test runs on expected_args, which test_args_match_values
    ties to the rendered DaemonSet."""
    values = merge(DEFAULTS, CASES[case])
    args = expected_args(values)
    assert args[0] == "serve"
    config = _exporter_parse(args, tmp_path)
    e = values["exporter"]
    assert config.web.listen[1] == e["port"]
    assert config.log.level == e["logLevel"] and config.log.format == e["logFormat"]
    enabled = {c for c, on in e["collectors"].items() if on}
    if values["kubernetes"]["enabled"]:
        enabled.add("kubernetes")
        assert config.settings(KubernetesSettings).node_name == "gpu-node-1"
    assert set(config.collectors) == enabled
    window = e["sampler"]["window"] or values["monitor"]["interval"]
    from exporter.contract.settings import parse_duration

    assert config.sampler.window == parse_duration(window)
    if values["flightRecorder"]["enabled"]:
        assert str(config.recorder.dir) == values["flightRecorder"]["mountPath"]
    else:
        assert config.recorder.dir is None
    w = values["webConfig"]
    assert config.web.config_file == (
        Path("/etc/headroom/web") / w["key"] if w["secretName"] else None)


# --- Service and monitors ------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_web_config_secret_probes_and_scheme(rendered: dict[str, Any], case: str) -> None:
    """The web config Secret is mounted read-only; probes follow TLS (HTTPS) and client
    auth (a TCP check); the monitor scrapes https with the TLS and basic auth given."""
    values = merge(DEFAULTS, CASES[case])
    w = values["webConfig"]
    objs = objects(rendered, case)
    c, pod = container(objs), pod_spec(objs)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        if w["secretName"] and w["clientAuth"]:
            assert "httpGet" not in probe and probe["tcpSocket"] == {"port": "metrics"}
        else:
            assert probe["httpGet"]["path"] == "/healthz"
            assert probe["httpGet"].get("scheme", "HTTP") == (
                "HTTPS" if w["secretName"] and w["tls"] else "HTTP")
    if not w["secretName"]:
        assert "web-config" not in mounts and "web-config" not in volumes
        return
    assert mounts["web-config"] == {"name": "web-config", "mountPath": "/etc/headroom/web",
                                    "readOnly": True}
    assert volumes["web-config"]["secret"] == {"secretName": w["secretName"],
                                               "defaultMode": 0o400}
    monitors = [o for o in objs if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    for m in monitors:
        key = "endpoints" if m["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
        (ep,) = m["spec"][key]
        assert ep["scheme"] == ("https" if w["tls"] else "http")
        assert ep.get("tlsConfig", {}) == values["monitor"]["tlsConfig"]
        assert ep.get("basicAuth", {}) == values["monitor"]["basicAuth"]


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_service_and_monitor(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    objs = objects(rendered, case)
    pod_labels = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    services = [o for o in objs if o["kind"] == "Service"]
    if values["service"]["enabled"]:
        (svc,) = services
        assert svc["spec"]["type"] == values["service"]["type"]
        assert svc["spec"]["ports"] == [{"name": "metrics", "port": values["service"]["port"],
                                         "targetPort": "metrics", "protocol": "TCP"}]
        assert svc["spec"]["selector"].items() <= pod_labels.items()
    else:
        assert services == []
    monitors = [o for o in objs if o["kind"] in ("ServiceMonitor", "PodMonitor")]
    mon = values["monitor"]
    if not mon["enabled"]:
        assert monitors == []
        return
    (m,) = monitors
    assert m["kind"] == mon["kind"]
    assert mon["labels"].items() <= m["metadata"]["labels"].items()
    key = "endpoints" if m["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    (ep,) = m["spec"][key]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    assert ep["interval"] == mon["interval"]
    assert ep["scrapeTimeout"] == mon["scrapeTimeout"]
    relabel = ep["relabelings"]
    assert relabel[:3] == [
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
         "targetLabel": "node"},
        {"action": "replace", "targetLabel": "job", "replacement": mon["job"]},
        {"action": "labeldrop", "regex": "(namespace|pod|container)"},
    ]
    assert relabel[3:] == mon["relabelings"]
    assert ep.get("metricRelabelings", []) == mon["metricRelabelings"]
    assert ep["honorLabels"] is False


def test_job_label_is_what_the_rules_select() -> None:
    """The rules select job="headroom"; the monitor must produce exactly that."""
    assert DEFAULTS["monitor"]["job"] == "headroom"
    rules = load_yaml(CHART / "files" / "rules" / "headroom.rules.yaml")
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert any('job="headroom"' in e for e in exprs)


# --- rules and dashboards ------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_rules_are_the_generated_file(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    objs = objects(rendered, case)
    rules = [o for o in objs if o["kind"] == "PrometheusRule"]
    files = sorted((CHART / "files" / "rules").glob("*.yaml"))
    if not values["prometheusRule"]["enabled"]:
        assert rules == []
        return
    assert len(rules) == len(files) >= 1
    by_origin = {}
    for f in files:
        want = load_yaml(f)
        match = [r for r in rules if r["spec"] == want]
        assert match, f"no PrometheusRule equals {f.name}"
        by_origin[f.name] = match[0]
        assert values["prometheusRule"]["labels"].items() <= match[0]["metadata"]["labels"].items()
    # Alert templates reach Prometheus untouched by Helm's own templating.
    text = json.dumps([r["spec"] for r in rules])
    assert "{{ $labels." in text


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_dashboards_are_the_generated_files(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    d = values["dashboards"]
    objs = objects(rendered, case)
    cms = [o for o in objs if o["kind"] == "ConfigMap" and d["label"] in o["metadata"]["labels"]]
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    if not d["enabled"]:
        assert [o for o in objs if o["kind"] == "ConfigMap"] == []
        return
    assert len(cms) == len(files) >= 1
    for f in files:
        (cm,) = [c for c in cms if f.name in c["data"]]
        assert list(cm["data"]) == [f.name], "one dashboard per ConfigMap"
        # Byte for byte, and the same JSON document.
        assert cm["data"][f.name] == f.read_text()
        assert json.loads(cm["data"][f.name]) == json.loads(f.read_text())
        meta = cm["metadata"]
        assert meta["labels"][d["label"]] == d["labelValue"]
        assert d["labels"].items() <= meta["labels"].items()
        assert meta["namespace"] == (d["namespace"] or "monitoring")
        annotations = meta.get("annotations", {})
        if d["folder"]:
            assert annotations[d["folderAnnotation"]] == d["folder"]
        else:
            assert d["folderAnnotation"] not in annotations
        assert len(json.dumps(cm)) < 1024 * 1024


@needs_helm
def test_oversized_dashboard_fails_clearly(tmp_path: Path) -> None:
    chart = tmp_path / "headroom"
    shutil.copytree(CHART, chart)
    big = {"title": "too big", "panels": [{"id": i, "title": "x" * 1000} for i in range(1100)]}
    (chart / "files" / "dashboards" / "huge.json").write_text(json.dumps(big))
    result = render_cases(chart, [{"id": "big", "values": {}}], tmp_path)["big"]
    assert not result["ok"]
    assert "huge.json" in result["error"] and "1 MiB" in result["error"]


# --- labels and names ----------------------------------------------------------------------


@needs_helm
@pytest.mark.parametrize("case", sorted(CASES))
def test_standard_labels_everywhere(rendered: dict[str, Any], case: str) -> None:
    values = merge(DEFAULTS, CASES[case])
    name = values["nameOverride"] or "headroom"
    for obj in objects(rendered, case):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == name, obj["kind"]
        assert labels["app.kubernetes.io/instance"] == "headroom"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"].startswith("headroom-")
        assert values["commonLabels"].items() <= labels.items()
        if values["fullnameOverride"]:
            assert obj["metadata"]["name"].startswith(values["fullnameOverride"])


# --- values.schema.json via check-jsonschema -----------------------------------------------


def _check_jsonschema(values_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM_VENV / "bin" / "check-jsonschema"), "--schemafile",
         str(CHART / "values.schema.json"), str(values_file)],
        capture_output=True, text=True, timeout=120, check=False,
    )


@needs_helm
@pytest.mark.parametrize("values_file", [CHART / "values.yaml", *CI_FILES],
                         ids=lambda p: p.name)
def test_schema_accepts_shipped_values(values_file: Path, tmp_path: Path) -> None:
    # Helm validates the merged values: so do we (an override file alone lacks, e.g., the
    # required image.repository).
    merged = tmp_path / values_file.name
    merged.write_text(yaml.safe_dump(merge(DEFAULTS, load_yaml(values_file) or {})))
    proc = _check_jsonschema(merged)
    assert proc.returncode == 0, proc.stdout + proc.stderr


BAD_VALUES = {
    "misspelled-key": ("hostPid: true\n", "hostPid"),
    "misspelled-nested-key": ("monitor:\n  intervall: 30s\n", "intervall"),
    "wrong-type-bool": ("kubernetes:\n  enabled: \"yes\"\n", "yes"),
    "wrong-type-int": ("exporter:\n  port: \"9847\"\n", "9847"),
    "bad-duration": ("exporter:\n  sampler:\n    window: 15 seconds\n", "15 seconds"),
    "bad-enum": ("exporter:\n  logFormat: xml\n", "xml"),
}


@needs_helm
@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_schema_rejects_bad_values(name: str, tmp_path: Path) -> None:
    text, needle = BAD_VALUES[name]
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(merge(DEFAULTS, yaml.safe_load(text))))
    proc = _check_jsonschema(f)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert needle in proc.stdout + proc.stderr


def test_schema_is_draft7_and_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["additionalProperties"] is False
    # Every top-level key of values.yaml is described, and nothing else is.
    assert set(DEFAULTS) <= set(schema["properties"])
    assert set(schema["properties"]) - set(DEFAULTS) <= {"global"}

    def closed(node: dict, path: str) -> Iterator[str]:
        props = node.get("properties")
        # Closed unless a pass-through object says so explicitly (e.g. extraEnv items).
        if props is not None and "additionalProperties" not in node:
            yield path
        elif props is not None and node["additionalProperties"] is not False:
            assert node["additionalProperties"] is True, path
        for k, v in (props or {}).items():
            yield from closed(v, f"{path}.{k}")

    assert list(closed(schema, "")) == [], "objects with declared keys must be closed"


def test_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()

    def leaves(node: Any, prefix: str) -> Iterator[str]:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                # Kubernetes objects passed through whole are documented as one key.
                if prefix + k in ("resources", "securityContext", "livenessProbe",
                                  "readinessProbe", "updateStrategy"):
                    yield prefix + k
                else:
                    yield from leaves(v, f"{prefix}{k}.")
        else:
            yield prefix.rstrip(".")

    missing = [k for k in leaves(DEFAULTS, "") if f"`{k}`" not in readme]
    assert not missing, f"values not in charts/headroom/README.md: {missing}"


# --- Dockerfile ------------------------------------------------------------------------------


def dockerfile_stages() -> list[dict[str, Any]]:
    """Stages of the root Dockerfile: {base, name, instructions: [(KEYWORD, args)]}."""
    text = (REPO / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)  # line continuations
    stages: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            parts = [p for p in parts if not p.startswith("--")]
            name = parts[2] if len(parts) >= 3 and parts[1].lower() == "as" else None
            stages.append({"base": parts[0], "name": name, "instructions": []})
        elif keyword == "ARG" and not stages:
            continue
        else:
            assert stages, f"instruction before FROM: {line}"
            stages[-1]["instructions"].append((keyword, rest.strip()))
    return stages


def test_dockerfile_is_multi_stage_slim_with_wheel() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    builder, final = stages[0], stages[-1]
    arg_text = (REPO / "Dockerfile").read_text()
    for s in stages:
        base = s["base"]
        if base.startswith("${"):
            m = re.search(r"ARG\s+PYTHON_IMAGE=(\S+)", arg_text)
            assert m, "base image ARG without default"
            base = m.group(1)
        assert re.fullmatch(r"python:3\.13-slim(-trixie)?(@sha256:[0-9a-f]{64})?", base), base
    runs = " ".join(a for k, a in builder["instructions"] if k == "RUN")
    assert "pip wheel" in runs or "-m build" in runs, "the builder must build a wheel"
    final_runs = " ".join(a for k, a in final["instructions"] if k == "RUN")
    assert re.search(r"(--from=|,from=)" + re.escape(builder["name"]), final_runs) or any(
        k == "COPY" and f"--from={builder['name']}" in a for k, a in final["instructions"]
    ), "the final stage takes what the builder installed"
    # The builder installs our wheel (and its dependencies', for the target architecture,
    # binary only) into the folder the final stage copies.
    assert re.search(r"pip install .*--only-binary=:all:.*\.whl", runs), runs
    target = re.search(r"--target (\S+)", runs)
    assert target and any(k == "COPY" and target.group(1) in a for k, a in final["instructions"])


def test_dockerfile_final_stage_has_no_build_tools() -> None:
    final = dockerfile_stages()[-1]
    text = " ".join(a for _, a in final["instructions"]).lower()
    for tool in ("gcc", "g++", "build-essential", "make ", "python3-dev", "libc6-dev",
                 "apt-get install", "clang"):
        assert tool not in text, f"final stage mentions {tool!r}"
    # No COPY of the source tree into the final image: only the wheel is installed.
    for k, a in final["instructions"]:
        if k == "COPY":
            assert "--from=" in a, f"final stage copies from the build context: {a}"


def test_dockerfile_entrypoint_and_cmd() -> None:
    final = dict((k, a) for k, a in dockerfile_stages()[-1]["instructions"]
                 if k in ("ENTRYPOINT", "CMD", "USER", "EXPOSE"))
    assert json.loads(final["ENTRYPOINT"]) == ["headroom"]
    assert json.loads(final["CMD"]) == ["serve"]
    assert final["EXPOSE"].split()[0] == "9847"
    # Root is required (see the Dockerfile); if a USER is given it must be numeric.
    if "USER" in final:
        assert re.fullmatch(r"[0-9]+(:[0-9]+)?", final["USER"])


@needs_helm
def test_hadolint_passes() -> None:
    """A real Dockerfile parser and linter (installed into the helm venv)."""
    proc = subprocess.run([str(HELM_VENV / "bin" / "hadolint"), str(REPO / "Dockerfile")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    for entry in (".git", ".helm-venv", ".vllm-venv", "tests", "charts"):
        assert any(e.strip("/*") == entry for e in ignored), entry


# --- installer -------------------------------------------------------------------------------


def test_installer_script_is_valid_bash() -> None:
    assert INSTALLER.exists()
    proc = subprocess.run(["bash", "-n", str(INSTALLER)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
