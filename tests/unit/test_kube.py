"""The Kubernetes pod watcher, against a fake kube-apiserver on loopback.

The fake serves recorded API payloads (tests/fixtures/kube/) over real HTTP: LIST with
limit/continue pagination, and WATCH as a chunked newline-delimited JSON stream, the way
kube-apiserver does. Backoffs are tiny so the failure paths run in milliseconds.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.collectors.kube.parse import (
    LineSplitter,
    api_url_from_env,
    backoff_delay,
    decode_watch_event,
    parse_pod,
    strip_container_id,
)
from exporter.collectors.kube.pods import KubernetesSettings, in_cluster, watcher_for
from exporter.collectors.kube.watch import KubePodWatcher
from exporter.model import ContainerInfo, PodInfo
from tests.helpers.net import free_port

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kube"
NODE = "ip-10-42-7-19.us-west-2.compute.internal"
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6IkJ3In0.headroom-test-token"

VLLM_UID = "7f3c2a9e-5b1d-4c8e-9f2a-3d6b8e1c4a70"
DCGM_UID = "2b9e6d14-8a3f-47c2-b5e0-91d7c3f8a6e2"
PROXY_UID = "e4a81c3f-0d62-4b9e-8f57-2ac6b1d9e304"
PENDING_UID = "91c4e2b7-6f0a-4d38-a2e9-5b8c7d1f0e46"
JOB_UID = "5d7a0f3e-9b21-4c64-8e0f-a1b3c5d7e9f2"
CRIO_UID = "c83f1a52-4d9e-4b07-9e6c-2f8a0b7d5e13"

KSERVE_ID = "505163db156f33c51345caf8a1c772b3cfc87069f8a4dbe5aba539ab9a3b9217"
ISTIO_ID = "b8e9c2a497daf0198e1b79d0044361efcbeb110b0e12096e96fcf46aadefd73e"
STORAGE_INIT_ID = "97a62ad21d79c01cceb7767952acec4fec86bfe909b06e5f3f6963365cf91ab8"
DEBUGGER_ID = "4c44d7c28ec0f6ca3e2624c6af1d3be324576d01ef6f6c2dc0af7e61664b8c2c"
PENDING_KSERVE_ID = "930a2c5be8e5b25fb6a2d678ea0dffc0555b881e0626da9460a60487b0714c5f"
TOOLKIT_ID = "a46e5d2bbe2d3b05b2d28b6054d98c18046bce28893d04e050724168116d5587"
DCGM_ID = "69f97546c05d33cb2e92b8224e9071cd9114725f1a6361996d439e65ae9bf2b4"
WARMUP_ID = "c6cf1309cd700e5a84e18d0b1d5877b9a608141037ac40445d484398256fc56c"
CRIO_KSERVE_ID = "4f72a11f908df210bdc4d8262050857dc7b23f82a90243de4f0b109196f86a6d"
CRIO_QP_ID = "171bf4be4714973fcfeed57e7fadd1882362eb39350210f8a5894e5e123589e8"

LIST_RV = "48220117"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def pod_items(name: str = "podlist-containerd.json") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = load(name)["items"]
    return items


def item(uid: str, name: str = "podlist-containerd.json") -> dict[str, Any]:
    return next(p for p in pod_items(name) if p["metadata"]["uid"] == uid)


def write(path: Path, text: str) -> None:
    path.write_text(text)


def compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# --- pure helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "bare"),
    [
        (f"containerd://{KSERVE_ID}", KSERVE_ID),
        (f"cri-o://{CRIO_KSERVE_ID}", CRIO_KSERVE_ID),
        (f"docker://{DCGM_ID}", DCGM_ID),
        (DCGM_ID, DCGM_ID),
        (f" containerd://{KSERVE_ID.upper()}\n", KSERVE_ID),
        ("", ""),
    ],
)
def test_strip_container_id(raw: str, bare: str) -> None:
    assert strip_container_id(raw) == bare


def test_parse_vllm_pod_with_native_sidecar() -> None:
    pod = parse_pod(item(VLLM_UID))
    assert pod is not None
    assert (pod.uid, pod.namespace, pod.name, pod.pod_ip) == (
        VLLM_UID, "llm-serving", "llama-3-1-8b-predictor-6d9c7b8f5d-q2x8r", "10.42.7.143",
    )
    # Main containers first, then init containers (a native sidecar keeps its port).
    assert pod.containers == (
        ContainerInfo("kserve-container", KSERVE_ID, (8080,)),
        ContainerInfo("storage-initializer", STORAGE_INIT_ID, ()),
        ContainerInfo("istio-proxy", ISTIO_ID, (15090,)),
    )
    assert pod.container_name(KSERVE_ID) == "kserve-container"
    assert pod.annotations["serving.kserve.io/deploymentMode"] == "RawDeployment"
    assert pod.annotations["prometheus.io/port"] == "15020"


def test_parse_pod_with_init_container() -> None:
    pod = parse_pod(item(DCGM_UID))
    assert pod is not None
    assert (pod.namespace, pod.name) == ("gpu-operator", "nvidia-dcgm-exporter-mx4b7")
    assert pod.containers == (
        ContainerInfo("nvidia-dcgm-exporter", DCGM_ID, (9400,)),
        ContainerInfo("toolkit-validation", TOOLKIT_ID, ()),
    )
    assert dict(pod.annotations) == {}


def test_parse_crio_pod() -> None:
    pod = parse_pod(item(CRIO_UID, "podlist-crio.json"))
    assert pod is not None
    assert pod.namespace == "rhoai-models"
    assert pod.pod_ip == "10.131.2.57"
    assert pod.containers == (
        ContainerInfo("kserve-container", CRIO_KSERVE_ID, (8080,)),
        ContainerInfo("queue-proxy", CRIO_QP_ID, (8022, 9090, 9091, 8012, 8112)),
    )


def test_parse_pending_pod_without_statuses() -> None:
    obj = item(PENDING_UID)
    assert "containerStatuses" not in obj["status"]
    pod = parse_pod(obj)
    assert pod is not None
    assert (pod.uid, pod.namespace, pod.name, pod.containers, pod.pod_ip) == (
        PENDING_UID, "llm-serving", "llama-3-1-8b-predictor-6d9c7b8f5d-w7j4n", (), "",
    )


def test_parse_pod_skips_statuses_without_container_id() -> None:
    # The first watch event of the pending pod: statuses are there, containers are not.
    line = (FIXTURES / "watch-containerd.ndjson").read_bytes().splitlines()[0]
    event = decode_watch_event(line)
    assert event.type == "MODIFIED"
    assert event.object["status"]["containerStatuses"][0]["name"] == "kserve-container"
    pod = parse_pod(event.object)
    assert pod is not None
    assert pod.containers == ()


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": None},
        {"metadata": {"name": "no-uid"}},
        {"metadata": {"uid": 12}},
    ],
)
def test_parse_pod_without_uid(obj: dict[str, Any]) -> None:
    assert parse_pod(obj) is None


def test_parse_pod_tolerates_nulls_and_junk() -> None:
    obj = {
        "metadata": {"uid": "ABCDEF01-0000-4000-8000-000000000001", "annotations": None,
                     "namespace": None},
        "spec": {"containers": [
            None,
            {"name": "app", "ports": [{"containerPort": True}, {"containerPort": "80"},
                                      {"containerPort": 70000}, {"containerPort": 9000},
                                      {"containerPort": 9000}, None]},
        ]},
        "status": {
            "containerStatuses": None,
            "initContainerStatuses": [None, {"name": "a"}, {"name": "b", "containerID": None},
                                      {"containerID": "containerd://00ff"}],
            "ephemeralContainerStatuses": [{"name": "app", "containerID": "containerd://00AA"}],
            "podIP": None,
        },
    }
    pod = parse_pod(obj)
    assert pod == PodInfo(
        uid="abcdef01-0000-4000-8000-000000000001", namespace="", name="",
        containers=(ContainerInfo("app", "00aa", (9000,)),), annotations={}, pod_ip="",
    )


def test_parse_pod_drops_last_applied_configuration() -> None:
    obj = item(PROXY_UID)
    obj["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 5000 + "}",
        "team": "platform",
    }
    pod = parse_pod(obj)
    assert pod is not None
    assert dict(pod.annotations) == {"team": "platform"}


def test_decode_watch_event_bookmark() -> None:
    line = (FIXTURES / "watch-containerd.ndjson").read_bytes().splitlines()[-1]
    event = decode_watch_event(line)
    assert event.type == "BOOKMARK"
    assert event.object["metadata"]["resourceVersion"] == "48220777"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"<html><body>502 Bad Gateway</body></html>", "not JSON"),
        (b'{"type":"ADDED","object":{"metadata"', "not JSON"),
        (b"[1, 2]", "not a JSON object but list"),
        (b'{"type":"ADDED"}', "no 'type'"),
        (b'{"type":null,"object":{}}', "no 'type'"),
        (b"\xff\xfe\x00garbage", "not JSON"),
    ],
)
def test_decode_watch_event_rejects(line: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_watch_event(line)


def test_line_splitter_any_chunking() -> None:
    stream = (FIXTURES / "watch-containerd.ndjson").read_bytes()
    expected = stream.splitlines()
    for size in (1, 7, 4096, len(stream)):
        splitter = LineSplitter()
        lines: list[bytes] = []
        for i in range(0, len(stream), size):
            lines += splitter.feed(stream[i : i + size])
        assert lines == expected
        assert splitter.pending == 0
        assert splitter.skipped == 0


def test_line_splitter_skips_long_lines() -> None:
    splitter = LineSplitter(max_bytes=10)
    # An over-long line inside one chunk, then one spread over several chunks.
    assert splitter.feed(b"short\r\n" + b"y" * 11 + b"\nok\n\n") == [b"short", b"ok"]
    assert splitter.skipped == 1
    assert splitter.feed(b"zzzzzzzz") == []
    assert splitter.feed(b"zzzzzzzz") == []  # over the cap: now discarding
    assert splitter.pending == 0
    assert splitter.feed(b"zz\nafter\npart") == [b"after"]
    assert splitter.skipped == 2
    assert splitter.pending == 4
    assert splitter.feed(b"ial\n") == [b"partial"]


def test_backoff_delay() -> None:
    assert [backoff_delay(n, 0.5, 30, 0.0) for n in (1, 2, 3, 6, 7, 20)] == [
        0.5, 1.0, 2.0, 16.0, 30.0, 30.0,
    ]
    # Jitter only shortens, so the cap holds.
    assert backoff_delay(20, 0.5, 30, 0.2, rand=lambda: 1.0) == pytest.approx(24.0)
    assert backoff_delay(20, 0.5, 30, 0.2, rand=lambda: 0.0) == 30.0


def test_api_url_from_env() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert api_url_from_env(env) == "https://10.100.0.1:443"
    v6 = {"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert api_url_from_env(v6) == "https://[fd00:10:96::1]:443"
    assert api_url_from_env({"KUBERNETES_SERVICE_HOST": "10.100.0.1"}) is None
    assert api_url_from_env({}) is None


def test_in_cluster(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.kube")
    token = tmp_path / "token"
    ca = tmp_path / "ca.crt"
    env = {"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "6443"}

    assert in_cluster(NODE, token_path=token, ca_path=ca, environ={}) is None
    assert in_cluster(NODE, token_path=token, ca_path=ca, environ=env) is None  # no token
    token.write_text(TOKEN)
    assert in_cluster("", token_path=token, ca_path=ca, environ=env) is None  # no node
    watcher = in_cluster(NODE, token_path=token, ca_path=ca, environ=env)
    assert watcher is not None
    assert watcher.api_url == "https://[fd00:10:96::1]:6443/api/v1/pods"
    assert (watcher.healthy, watcher.synced, watcher.lookup(VLLM_UID)) == (False, False, None)
    messages = [r.getMessage() for r in caplog.records if r.name == "exporter.kube"]
    assert any("not in a cluster" in m for m in messages)
    assert any("node name unknown" in m for m in messages)


def test_watcher_for_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert watcher_for(KubernetesSettings(node_name=NODE)) is None  # not in a cluster
    url = "http://127.0.0.1:8001"  # kubectl proxy
    assert watcher_for(KubernetesSettings(api_url=url)) is None  # no node name
    watcher = watcher_for(KubernetesSettings(api_url=url + "/", node_name=NODE))
    assert watcher is not None
    assert watcher.api_url == "http://127.0.0.1:8001/api/v1/pods"


# --- the fake apiserver ----------------------------------------------------------------


@dataclass
class Seen:
    query: dict[str, str]
    authorization: str | None

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") == "1"


@dataclass
class WatchScript:
    """One WATCH answer: a status, or a stream of bytes in chunks, then close or hold."""

    data: bytes = b""
    status: int = 200
    body: Any = None
    chunk: int = 1000
    hold: bool = False  # keep the stream open after the data (an idle watch)
    gate: asyncio.Event | None = None  # wait for it before sending anything


@dataclass
class FakeApiServer:
    items: list[dict[str, Any]] = field(default_factory=pod_items)
    list_rv: str = LIST_RV
    token: str | None = TOKEN  # expected bearer token; None accepts anything
    list_status: tuple[int, Any] | None = None  # answer every LIST with this while set
    watch_status: tuple[int, Any] | None = None  # answer WATCHes with this once scripts run out
    expire_continue_once: bool = False
    watch_scripts: list[WatchScript] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def lists(self) -> list[Seen]:
        return [s for s in self.seen if not s.is_watch]

    @property
    def watches(self) -> list[Seen]:
        return [s for s in self.seen if s.is_watch]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        self.seen.append(Seen(dict(request.query), auth))
        if self.token is not None and auth != f"Bearer {self.token}":
            return web.json_response(load("status-401.json"), status=401)
        if request.query.get("watch") == "1":
            return await self.watch(request)
        return self.list(request)

    def list(self, request: web.Request) -> web.StreamResponse:
        if self.list_status is not None:
            status, body = self.list_status
            return web.json_response(body, status=status)
        q = request.query
        limit = int(q.get("limit", "0")) or len(self.items)
        start = 0
        if "continue" in q:
            assert "resourceVersion" not in q  # the real apiserver rejects both together
            if self.expire_continue_once:
                self.expire_continue_once = False
                return web.json_response(load("status-410-continue.json"), status=410)
            start = json.loads(base64.urlsafe_b64decode(q["continue"]))["start"]
        page = self.items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": self.list_rv}
        rest = len(self.items) - start - len(page)
        if rest > 0:
            token = {"v": "meta.k8s.io/v1", "rv": int(self.list_rv), "start": start + limit}
            meta["continue"] = base64.urlsafe_b64encode(compact(token)).decode()
            meta["remainingItemCount"] = rest
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}
        )

    async def watch(self, request: web.Request) -> web.StreamResponse:
        if self.watch_scripts:
            script = self.watch_scripts.pop(0)
        elif self.watch_status is not None:
            status, body = self.watch_status
            return web.json_response(body, status=status)
        else:
            script = WatchScript(hold=True)
        if script.gate is not None:
            await script.gate.wait()
        if script.status != 200:
            return web.json_response(script.body, status=script.status)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for i in range(0, len(script.data), script.chunk):
            await resp.write(script.data[i : i + script.chunk])
            await asyncio.sleep(0)
        while script.hold and not self.stop.is_set():
            if request.transport is None or request.transport.is_closing():
                break
            await asyncio.sleep(0.01)
        return resp


async def start_server(fake: FakeApiServer, port: int | None = None) -> TestServer:
    server = TestServer(fake.app(), host="127.0.0.1", port=port)
    await server.start_server()
    return server


async def eventually(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == "exporter.kube" and r.levelno >= logging.WARNING
    ]


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


Runner = Callable[..., Awaitable[KubePodWatcher]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    f = FakeApiServer()
    yield f
    f.stop.set()


@pytest.fixture
async def watch(
    token_file: Path, caplog: pytest.LogCaptureFixture, fake: FakeApiServer,
) -> AsyncIterator[Runner]:
    """Starts a watcher against a URL (the fake by default); stops it and the servers."""
    caplog.set_level(logging.DEBUG, logger="exporter.kube")
    tasks: list[asyncio.Task[None]] = []
    servers: list[TestServer] = []

    async def start(url: str | None = None, **kw: Any) -> KubePodWatcher:
        if url is None:
            server = await start_server(fake)
            servers.append(server)
            url = str(server.make_url("")).rstrip("/")
        options: dict[str, Any] = {
            "backoff_initial": 0.01, "backoff_max": 0.04, "backoff_jitter": 0.5,
            "watch_timeout": 60, "request_timeout": 2.0,
        }
        options.update(kw)
        watcher = KubePodWatcher(
            url, options.pop("token_path", token_file), options.pop("ca_file", None), NODE,
            **options,
        )
        tasks.append(asyncio.create_task(watcher.run()))
        return watcher

    yield start
    for task in tasks:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    fake.stop.set()
    for server in servers:
        await server.close()


# --- the watcher against the fake ------------------------------------------------------


async def test_list_then_lookup(watch: Runner, fake: FakeApiServer) -> None:
    sessions: list[aiohttp.ClientSession] = []

    def factory() -> aiohttp.ClientSession:
        sessions.append(aiohttp.ClientSession())
        return sessions[-1]

    w = await watch(session_factory=factory)
    await eventually(lambda: w.synced and len(fake.watches) == 1)
    assert w.healthy and w.last_error == ""
    assert len(sessions) == 1
    assert sorted(w.pods) == sorted([VLLM_UID, DCGM_UID, PROXY_UID, PENDING_UID])

    pod = w.lookup(VLLM_UID)
    assert pod is not None
    assert (pod.namespace, pod.name) == ("llm-serving", "llama-3-1-8b-predictor-6d9c7b8f5d-q2x8r")
    assert pod.container_name(KSERVE_ID) == "kserve-container"
    # The systemd cgroup driver spells the UID with underscores.
    assert w.lookup(VLLM_UID.replace("-", "_")) is pod
    pending = w.lookup(PENDING_UID)
    assert pending is not None and pending.containers == ()
    assert w.lookup("00000000-0000-0000-0000-000000000000") is None

    first = fake.lists[0]
    assert first.authorization == f"Bearer {TOKEN}"
    assert first.query == {
        "fieldSelector": f"spec.nodeName={NODE}", "limit": "500", "resourceVersion": "0",
    }
    wq = fake.watches[0].query
    assert wq["fieldSelector"] == f"spec.nodeName={NODE}"
    assert wq["resourceVersion"] == LIST_RV
    assert (wq["watch"], wq["allowWatchBookmarks"]) == ("1", "true")
    assert 60 <= int(wq["timeoutSeconds"]) < 120
    assert fake.watches[0].authorization == f"Bearer {TOKEN}"


async def test_watch_events(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    fake.watch_scripts.append(
        WatchScript((FIXTURES / "watch-containerd.ndjson").read_bytes(), chunk=777)
    )
    w = await watch()
    # The stream ends after the BOOKMARK; the next WATCH resumes from it, with no LIST.
    await eventually(lambda: len(fake.watches) == 2)
    assert w.resource_version == "48220777"
    assert fake.watches[1].query["resourceVersion"] == "48220777"
    assert len(fake.lists) == 1

    # MODIFIED: the pending pod now runs, with container IDs and an IP.
    pending = w.lookup(PENDING_UID)
    assert pending is not None
    assert pending.pod_ip == "10.42.7.161"
    assert pending.container_name(PENDING_KSERVE_ID) == "kserve-container"
    assert [c.name for c in pending.containers] == [
        "kserve-container", "storage-initializer", "istio-proxy",
    ]
    # MODIFIED: `kubectl debug` added an ephemeral container to the vLLM pod.
    vllm = w.lookup(VLLM_UID)
    assert vllm is not None
    assert vllm.container_name(DEBUGGER_ID) == "debugger-x7k2p"
    assert vllm.container_name(KSERVE_ID) == "kserve-container"
    # DELETED: gone.
    assert w.lookup(DCGM_UID) is None
    assert sorted(w.pods) == sorted([VLLM_UID, PROXY_UID, PENDING_UID])
    assert w.healthy
    assert warnings_logged(caplog) == []


async def test_pagination(watch: Runner, fake: FakeApiServer) -> None:
    w = await watch(page_limit=1)
    await eventually(lambda: w.synced)
    assert len(w.pods) == 4
    assert [s.query.get("limit") for s in fake.lists] == ["1", "1", "1", "1"]
    assert "continue" not in fake.lists[0].query
    assert all("continue" in s.query for s in fake.lists[1:])
    assert all("resourceVersion" not in s.query for s in fake.lists[1:])
    assert all(s.authorization == f"Bearer {TOKEN}" for s in fake.lists)
    await eventually(lambda: len(fake.watches) == 1)
    assert fake.watches[0].query["resourceVersion"] == LIST_RV


async def test_expired_continue_token_restarts_the_list(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    fake.expire_continue_once = True
    w = await watch(page_limit=3)
    await eventually(lambda: w.synced)
    assert len(w.pods) == 4
    # first page, expired continue, then a fresh (consistent) list of two pages
    assert ["continue" in s.query for s in fake.lists] == [False, True, False, True]
    assert fake.lists[2].query.get("resourceVersion") is None
    assert warnings_logged(caplog) == []


async def test_watch_error_410_relists(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    gate = asyncio.Event()
    fake.watch_scripts.append(
        WatchScript((FIXTURES / "watch-error-410.ndjson").read_bytes(), gate=gate)
    )
    w = await watch()
    await eventually(lambda: w.synced and len(fake.watches) == 1)
    assert w.lookup(PROXY_UID) is not None
    # While we were away kube-proxy went, and history was compacted.
    fake.items = [p for p in fake.items if p["metadata"]["uid"] != PROXY_UID]
    fake.list_rv = "48231950"
    gate.set()
    await eventually(lambda: len(fake.watches) == 2)
    assert w.lookup(PROXY_UID) is None
    assert w.lookup(VLLM_UID) is not None
    assert len(fake.lists) == 2
    assert "resourceVersion" not in fake.lists[1].query  # a consistent relist
    assert fake.watches[1].query["resourceVersion"] == "48231950"
    assert w.healthy
    assert warnings_logged(caplog) == []  # 410 is routine, not an error
    assert any("too old resource version" in r.getMessage() for r in caplog.records)


async def test_watch_http_410_relists(watch: Runner, fake: FakeApiServer) -> None:
    gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 48220117 (48231950)", "reason": "Expired",
            "code": 410}
    fake.watch_scripts.append(WatchScript(status=410, body=gone))
    w = await watch()
    await eventually(lambda: len(fake.watches) == 2)
    assert len(fake.lists) == 2
    assert w.healthy and w.synced


async def test_unreachable_at_start_then_recovers(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    w = await watch(f"http://127.0.0.1:{port}")
    await eventually(lambda: w.error_count >= 5)
    assert w.lookup(VLLM_UID) is None
    assert (w.healthy, w.synced) == (False, False)
    assert f"127.0.0.1:{port}" in w.last_error
    assert w.last_error.startswith("LIST pods: ClientConnectorError")
    logged = warnings_logged(caplog)
    assert len(logged) == 1, logged  # one line, however many retries
    assert "keeping 0 known pods" in logged[0]

    server = await start_server(fake, port=port)
    try:
        await eventually(lambda: w.synced and w.healthy)
        assert w.lookup(VLLM_UID) is not None
        assert w.last_error == ""
        assert len(warnings_logged(caplog)) == 1
        assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        fake.stop.set()
        await server.close()


async def test_api_blip_keeps_known_pods(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    fake.watch_scripts.append(WatchScript(b""))  # the first watch is cut at once
    fake.watch_status = (403, load("status-403.json"))
    w = await watch()
    await eventually(lambda: w.synced and w.error_count >= 4)
    assert not w.healthy
    assert w.last_error.startswith("WATCH pods: HTTP 403 Forbidden: pods is forbidden: User")
    assert "RBAC" in w.last_error
    pod = w.lookup(VLLM_UID)  # names survive the outage
    assert pod is not None and pod.name == "llama-3-1-8b-predictor-6d9c7b8f5d-q2x8r"
    logged = warnings_logged(caplog)
    # "closed at once" then 403: two distinct errors, each logged once
    assert len(logged) == 2, logged
    assert "closed the stream" in logged[0]
    assert "403" in logged[1] and "keeping 4 known pods" in logged[1]

    fake.watch_status = None
    await eventually(lambda: w.healthy)
    assert len(fake.lists) == 1  # the WATCH resumed; no relist was needed


async def test_401_then_token_rotates(
    watch: Runner, fake: FakeApiServer, token_file: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    write(token_file, "expired-token")
    w = await watch()
    await eventually(lambda: w.error_count >= 3)
    assert not w.synced
    assert w.last_error.startswith("LIST pods: HTTP 401 Unauthorized")
    assert all(s.authorization == "Bearer expired-token" for s in fake.seen)
    assert len(warnings_logged(caplog)) == 1

    write(token_file, TOKEN)  # the kubelet rotated the projected token
    await eventually(lambda: w.synced and w.healthy)
    assert fake.seen[-1].authorization == f"Bearer {TOKEN}"
    assert w.lookup(DCGM_UID) is not None


async def test_list_forbidden(watch: Runner, fake: FakeApiServer) -> None:
    fake.list_status = (403, load("status-403.json"))
    w = await watch()
    await eventually(lambda: w.error_count >= 2)
    assert w.last_error.startswith(
        'LIST pods: HTTP 403 Forbidden: pods is forbidden: User '
        '"system:serviceaccount:monitoring:headroom" cannot list resource "pods"'
    )
    assert (w.healthy, w.synced, len(w.pods)) == (False, False, 0)


async def test_missing_token_file(watch: Runner, tmp_path: Path) -> None:
    w = await watch(token_path=tmp_path / "nope")
    await eventually(lambda: w.error_count >= 2)
    assert "cannot read the service account token" in w.last_error
    assert not w.healthy


async def test_unreadable_ca_file_is_an_error_not_a_crash(
    watch: Runner, tmp_path: Path,
) -> None:
    w = await watch(ca_file=tmp_path / "ca.crt")
    await eventually(lambda: w.error_count >= 2)
    assert w.last_error.startswith("LIST pods: FileNotFoundError")
    assert not w.healthy


async def test_garbage_line_rewatches_from_last_good_event(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    added = compact(load("watch-event-added-job.json"))
    fake.watch_scripts.append(
        WatchScript(added + b"\n<html><body>502 Bad Gateway</body></html>\n" + added, chunk=64)
    )
    w = await watch()
    await eventually(lambda: len(fake.watches) == 2 and w.healthy)
    job = w.lookup(JOB_UID)
    assert job is not None
    assert (job.namespace, job.name) == ("llm-serving", "model-warmup-28511220-k9p2s")
    assert job.container_name(WARMUP_ID) == "warmup"
    # Resumed from the event before the bad line: no event lost, no relist.
    assert fake.watches[1].query["resourceVersion"] == "48221002"
    assert len(fake.lists) == 1
    logged = warnings_logged(caplog)
    assert len(logged) == 1, logged
    assert "bad line '<html><body>502 Bad Gateway</body></html>'" in logged[0]


async def test_oversized_line_is_skipped(
    watch: Runner, fake: FakeApiServer, caplog: pytest.LogCaptureFixture,
) -> None:
    huge = copy.deepcopy(item(PROXY_UID))
    huge["metadata"]["annotations"] = {"blob": "x" * 20000}
    huge["metadata"]["resourceVersion"] = "48220999"
    stream = compact({"type": "MODIFIED", "object": huge}) + b"\n"
    stream += compact(load("watch-event-added-job.json")) + b"\n"
    fake.watch_scripts.append(WatchScript(stream, chunk=4096, hold=True))
    w = await watch(max_line_bytes=10_000)
    await eventually(lambda: w.lookup(JOB_UID) is not None)
    proxy = w.lookup(PROXY_UID)
    assert proxy is not None and "blob" not in proxy.annotations
    assert w.resource_version == "48221002"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["kubernetes API: WATCH pods: skipped an event over 10000 bytes"]
    assert w.healthy and len(fake.watches) == 1


async def test_pods_of_other_nodes_are_not_kept(watch: Runner, fake: FakeApiServer) -> None:
    # A server that ignored the field selector must not make us hold the cluster.
    fake.items = pod_items() + pod_items("podlist-crio.json")
    w = await watch()
    await eventually(lambda: w.synced)
    assert w.lookup(CRIO_UID) is None
    assert len(w.pods) == 4


async def test_run_stops_on_cancel_only(watch: Runner, fake: FakeApiServer) -> None:
    fake.list_status = (500, {"kind": "Status", "message": "etcdserver: request timed out",
                              "code": 500})
    w = await watch()
    await eventually(lambda: w.error_count >= 3)
    assert w.last_error.startswith(
        "LIST pods: HTTP 500 Internal Server Error: etcdserver: request timed out"
    )
    # the fixture's teardown asserts that cancelling run() raises CancelledError
