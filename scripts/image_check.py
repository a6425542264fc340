"""The container checks of `bash scripts/image.sh check`: the image, run as the chart runs it.

The chart's DaemonSet is rendered by real Helm and run with the equivalent `podman run`
(scripts/chart_to_podman.py) on the real kernel, watching test cgroups made beneath this
process's own cgroup. Each check prints one line, ``ok`` or ``FAIL``, and the exit status
is the number of failures (capped at 100):

- the security context took effect (host PID namespace, capabilities, no_new_privs, seccomp);
- every collector succeeds, and /healthz answers;
- cgroup usage and kinds, process RSS and PSS, the pod's /dev/shm and its orphaned file
  equal what this script reads from the host for the same workload;
- the chart's init container lets the exporter start only where every cgroup mount is
  read-only: on a v1 host (no recursive read-only in podman 4.3) the default chart must
  refuse, and with hostPaths.cgroupV1Controllers=[memory] a write into every cgroup
  filesystem mount inside the container fails (EROFS);
- an OOM kill of a test cgroup is counted and its victim named with the chart's default
  settings, idle and again with every core busy (stress-ng);
- the exporter's RSS stays under the chart's memory limit.

``--mutate hostPID|SYS_PTRACE|mount:NAME`` removes that from the rendered pod first: the
checks must then fail (scripts/test.sh runs each once). ``--emulated`` (a foreign-arch
image under qemu-user) runs only `headroom --version`, /healthz and one scrape.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import chart_to_podman as c2p  # noqa: E402

from exporter.host.paths import MemoryHierarchy  # noqa: E402
from tests.helpers.kernel import Grower, KernelUnavailable, own_memory_cgroup  # noqa: E402
from tests.helpers.net import free_port  # noqa: E402

MIB = 1 << 20
# One process in its own mount namespace with a private /dev/shm: anon memory, a shared
# mapping (shmem that is mapped), a /dev/shm file it keeps open, and one it wrote and
# closed (orphaned: no live process holds it).
WORKLOAD = r"""
import ctypes, mmap, os, sys
ctypes.CDLL(None).prctl(15, b"hr-workload", 0, 0, 0)
def touch(m):
    for off in range(0, len(m), 4096):
        m[off] = 1
    return m
anon = touch(mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
shared = touch(mmap.mmap(-1, 16 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS))
held = open("/dev/shm/held", "wb")
held.write(b"\1" * (8 << 20)); held.flush()
with open("/dev/shm/orphan", "wb") as f:
    f.write(b"\2" * (20 << 20))
print("ready", flush=True)
sys.stdin.read()
"""
VICTIM = "hr-oom-victim"  # the OOM-killed grower's comm (what the kernel log names)
# The write attempt inside the container: mkdir in this script's own cgroup of every
# cgroup mount below the cgroupfs mount point (argv: JSON list of paths).
WRITE_PROBE = r"""
import errno, json, os, sys
for path in json.loads(sys.argv[1]):
    try:
        os.mkdir(path)
    except OSError as e:
        print(path, errno.errorcode.get(e.errno, e.errno))
    else:
        os.rmdir(path)
        print(path, "WRITABLE")
"""
SERVICE_PORT = 9847
# linux/capability.h, by bit number
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


Samples = list[tuple[str, dict[str, str], float]]


def parse(text: str) -> Samples:
    return [(s.name, dict(s.labels), s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def pick(samples: Samples, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [(lab, v) for n, lab, v in samples
            if n == name and all(lab.get(k) == want for k, want in labels.items())]


def total(samples: Samples, name: str, **labels: str) -> float | None:
    found = pick(samples, name, **labels)
    return sum(v for _, v in found) if found else None


def equal(name: str, got: float | None, want: int, slack: int = 0) -> Result:
    """``got`` (the exporter) against ``want`` (the host), within ``slack`` bytes."""
    if got is None:
        return Result(name, False, f"no series (host reads {want})")
    ok = abs(got - want) <= slack
    within = f" (+-{slack})" if slack else ""
    return Result(name, ok, f"exporter {int(got)}, host {want}{within}")


# -- host-side readings ------------------------------------------------------------------

def cgroup_pids(h: MemoryHierarchy, rel: str) -> list[int]:
    return [int(p) for p in (h.dir(rel) / "cgroup.procs").read_text().split()]


def proc_fields(pid: int, name: str, keys: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = int(rest.split()[0]) * 1024
    return out


@dataclass(frozen=True)
class HostReading:
    usage: int
    anon: int
    shmem: int
    rss_anon: int
    rss_shmem: int
    pss_anon: int
    pss_shmem: int
    shm_used: int
    orphaned: int


def read_host(h: MemoryHierarchy, rel: str) -> HostReading:
    d = h.dir(rel)
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    v1 = h.version == 1
    usage = int((d / ("memory.usage_in_bytes" if v1 else "memory.current")).read_text())
    pids = cgroup_pids(h, rel)
    status = [proc_fields(p, "status", ("RssAnon", "RssShmem")) for p in pids]
    rollup = [proc_fields(p, "smaps_rollup", ("Pss_Anon", "Pss_Shmem")) for p in pids]
    shm = os.statvfs(f"/proc/{pids[0]}/root/dev/shm")
    return HostReading(
        usage=usage,
        anon=int(stat["total_rss" if v1 else "anon"]),
        shmem=int(stat["total_shmem" if v1 else "shmem"]),
        rss_anon=sum(s["RssAnon"] for s in status),
        rss_shmem=sum(s["RssShmem"] for s in status),
        pss_anon=sum(r["Pss_Anon"] for r in rollup),
        pss_shmem=sum(r["Pss_Shmem"] for r in rollup),
        shm_used=(shm.f_blocks - shm.f_bfree) * shm.f_frsize,
        orphaned=orphaned_bytes(pids),
    )


def orphaned_bytes(pids: Sequence[int]) -> int:
    """Bytes of /dev/shm files that no process of the cgroup has open or mapped."""
    held: set[tuple[int, int]] = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                held.add((st.st_dev, st.st_ino))
        for name in os.listdir(f"/proc/{pid}/map_files"):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/map_files/{name}")
                held.add((st.st_dev, st.st_ino))
    shm = Path(f"/proc/{pids[0]}/root/dev/shm")
    return sum(st.st_blocks * 512 for st in (f.stat() for f in shm.iterdir() if f.is_file())
               if (st.st_dev, st.st_ino) not in held)


def cgroup_mounts_in_container(cgroupfs_mount: str) -> list[str]:
    """Paths to try to create inside the container: this process's own cgroup in every
    cgroup hierarchy the host mounts below /sys/fs/cgroup, as seen under the pod's mount."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[controllers] = path
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = right.split()[:3]
        mount_point = left.split()[4]
        if fstype not in ("cgroup", "cgroup2") or not mount_point.startswith("/sys/fs/cgroup"):
            continue
        if fstype == "cgroup2":
            rel = own.get("", "/")
        else:
            opts = set(options.split(","))
            keys = [k for k in own if k and set(k.split(",")) <= opts]
            rel = own[keys[0]] if keys else "/"
        inside = cgroupfs_mount + mount_point[len("/sys/fs/cgroup"):]
        out.append(f"{inside.rstrip('/')}{rel.rstrip('/')}/headroom-rw-probe-{os.getpid()}")
    return [*out, f"{cgroupfs_mount}/headroom-rw-probe-{os.getpid()}"]  # and the mount root


# -- the pod -----------------------------------------------------------------------------

def mutate(pod: dict[str, Any], what: str) -> None:
    """Remove one thing from the rendered pod (to prove the checks notice)."""
    (c,) = pod["containers"]
    if what == "hostPID":
        pod["hostPID"] = False
    elif what == "SYS_PTRACE":
        caps = c["securityContext"]["capabilities"]
        caps["add"] = [x for x in caps.get("add", []) if x != "SYS_PTRACE"]
    elif what.startswith("mount:"):
        name = what.split(":", 1)[1]
        before = len(c["volumeMounts"])
        # mount:cgroup also takes the per-controller mounts (cgroup-memory, ...)
        c["volumeMounts"] = [m for m in c["volumeMounts"]
                             if m["name"] != name and not m["name"].startswith(f"{name}-")]
        if len(c["volumeMounts"]) == before:
            raise SystemExit(f"no volume mount named {name!r} in the rendered pod")
    else:
        raise SystemExit(f"unknown mutation {what!r}")


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    out = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])}...: {out.stderr.strip()[-500:]}")
    return out.stdout


def exporter_log(name: str, lines: int = 4) -> str:
    """The container's log: its last ``lines`` joined on one line, or all of it (0)."""
    out = subprocess.run(["podman", "logs", name], capture_output=True, text=True, timeout=60)
    text = (out.stdout + out.stderr).strip()
    return text if lines == 0 else " | ".join(text.splitlines()[-lines:])[-600:]


def http(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except OSError as exc:
        return 0, str(exc)


def running(name: str) -> bool:
    return podman("inspect", "--format", "{{.State.Running}}", name, check=False).strip() == "true"


def wait_healthy(name: str, base: str, timeout: float) -> bool:
    """Until /healthz answers 200; False at once when the container has exited."""
    return wait_for(lambda: http(f"{base}/healthz")[0] == 200 or not running(name), timeout,
                    0.3) and http(f"{base}/healthz")[0] == 200


def wait_for(what: Callable[[], bool], timeout: float, step: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(step)
    return what()


@contextlib.contextmanager
def scratch_cgroups(h: MemoryHierarchy, own: str,
                    names: dict[str, int]) -> Iterator[dict[str, str]]:
    """Child cgroups of our own cgroup, name -> limit; removed afterwards."""
    root = f"{own.rstrip('/')}/headroom-image-check-{os.getpid()}"
    made = [root]
    h.dir(root).mkdir()
    rels = {}
    try:
        for name, limit in names.items():
            rel = f"{root}/{name}"
            h.dir(rel).mkdir()
            made.append(rel)
            if limit:
                limit_name = "memory.limit_in_bytes" if h.version == 1 else "memory.max"
                (h.dir(rel) / limit_name).write_text(str(limit))
            rels[name] = rel
        yield rels
    finally:
        for rel in reversed(made):
            for _ in range(50):
                for pid in cgroup_pids(h, rel) if h.dir(rel).exists() else []:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    h.dir(rel).rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def start_workload(h: MemoryHierarchy, rel: str) -> subprocess.Popen[str]:
    procs = h.dir(rel) / "cgroup.procs"

    def enter() -> None:
        procs.write_text(str(os.getpid()))

    script = ("mount -t tmpfs -o size=64m tmpfs /dev/shm && "
              f"exec {sys.executable} -c '{WORKLOAD}'")
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=enter)
    assert p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError("the test workload did not start")
    return p


# -- the checks --------------------------------------------------------------------------

def security_checks(container_pid: int, want_caps: Sequence[str]) -> list[Result]:
    status = {k: v.strip() for k, _, v in
              (line.partition(":") for line in
               Path(f"/proc/{container_pid}/status").read_text().splitlines())}
    eff = int(status["CapEff"], 16)
    held = sorted(CAPABILITIES[b] if b < len(CAPABILITIES) else str(b)
                  for b in range(64) if eff >> b & 1)
    same_ns = os.readlink(f"/proc/{container_pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
    return [
        Result("hostPID", same_ns,
               "the node's PID namespace" if same_ns else "a PID namespace of its own"),
        Result("capabilities", held == sorted(want_caps),
               f"effective {held or ['none']}, chart adds {sorted(want_caps) or ['none']}"),
        Result("no_new_privs", status.get("NoNewPrivs") == "1",
               f"NoNewPrivs {status.get('NoNewPrivs')}"),
        Result("seccomp", status.get("Seccomp") == "2", f"Seccomp mode {status.get('Seccomp')}"),
    ]


def collector_checks(samples: Samples, log: str = "", test_root: str | None = None
                     ) -> list[Result]:
    """Every collector succeeds. One exception, said in the line: on a shared machine a
    hostPID exporter also finds vLLM servers of the host outside the test's cgroups, which
    a pod's network namespace cannot reach (the vllm collector fails on those only)."""
    rows = pick(samples, "headroom_collector_success")
    failed = sorted(lab["collector"] for lab, v in rows if v != 1)
    names = sorted(lab["collector"] for lab, _ in rows)
    foreign = [m.group(1) for m in re.finditer(r"collector vllm failed: .*? first: (\S+?):", log)]
    if (failed == ["vllm"] and foreign and not any(
            test_root is not None and test_root.strip("/") in path for path in foreign)):
        return [Result("collectors", True, f"all succeed but vllm, failing only on the host's "
                                           f"own vLLM outside the test ({foreign[-1]})")]
    return [Result("collectors", bool(rows) and not failed,
                   f"failing {failed}" if failed else f"all succeed: {', '.join(names)}")]


def degraded_check(samples: Samples, want_caps: Sequence[str]) -> Result:
    """A capability the pod lacks must show as headroom_collector_degraded, never silently."""
    got = sorted((lab["collector"], lab["reason"])
                 for lab, v in pick(samples, "headroom_collector_degraded") if v == 1)
    want = [] if "SYS_PTRACE" in want_caps else [
        ("procfs", "missing_cap_sys_ptrace"), ("tmpfs", "missing_cap_sys_ptrace")]
    ok = all(w in got for w in want) and (bool(want) or not got)
    return Result("degraded signals", ok, f"exported {got or 'none'}, expected "
                                          f"{want or 'none'}")


def figure_checks(samples: Samples, pod: str, host: HostReading) -> list[Result]:
    w = {"pod": pod, "container": ""}
    page = 64 * 1024  # usage moves by a few pages between two reads; the rest is static
    return [
        equal("cgroup usage", total(samples, "headroom_memory_usage_bytes", **w), host.usage, page),
        equal("cgroup anon", total(samples, "headroom_memory_bytes", kind="anon", **w),
              host.anon, page),
        equal("cgroup shmem", total(samples, "headroom_memory_bytes", kind="shmem", **w),
              host.shmem, page),
        equal("process rss_anon", total(samples, "headroom_process_memory_bytes", pod=pod,
                                        kind="rss_anon"), host.rss_anon, page),
        equal("process rss_shmem", total(samples, "headroom_process_memory_bytes", pod=pod,
                                         kind="rss_shmem"), host.rss_shmem, page),
        equal("process pss anon", total(samples, "headroom_process_memory_pss_bytes", pod=pod,
                                        kind="anon"), host.pss_anon, page),
        equal("process pss shmem", total(samples, "headroom_process_memory_pss_bytes", pod=pod,
                                         kind="shmem"), host.pss_shmem, page),
        equal("/dev/shm used", total(samples, "headroom_tmpfs_used_bytes", pod=pod,
                                     mount="/dev/shm"), host.shm_used),
        equal("/dev/shm orphaned", total(samples, "headroom_tmpfs_orphaned_bytes", pod=pod,
                                         mount="/dev/shm"), host.orphaned),
    ]


def write_probe_check(name: str, probe_paths: list[str]) -> Result:
    """mkdir in each path inside the container: EROFS, or absent (ENOENT: the hierarchy is
    not mounted there), never created. At least one must be a real refusal."""
    out = podman("exec", name, "python3", "-c", WRITE_PROBE, json.dumps(probe_paths), check=False)
    answers = dict(ln.rsplit(" ", 1) for ln in out.splitlines() if " " in ln)
    writable = [p for p, a in answers.items() if a == "WRITABLE"]
    refused = [p for p, a in answers.items() if a == "EROFS"]
    odd = {p: a for p, a in answers.items() if a not in ("WRITABLE", "EROFS", "ENOENT")}
    ok = not writable and not odd and bool(refused) and len(answers) == len(probe_paths)
    if writable:
        detail = f"{len(writable)} of {len(probe_paths)} writable: " + "; ".join(writable[:3])
    elif ok:
        detail = (f"mkdir refused (EROFS) in {len(refused)} cgroup mounts, "
                  f"{len(answers) - len(refused)} not mounted")
    else:
        detail = f"unexpected answers: {odd or out.strip()[:300] or 'none'}"
    return Result("cgroupfs read-only", ok, detail)


def host_context(scratch: str, port: int) -> c2p.HostContext:
    return c2p.HostContext(node_name=os.uname().nodename, scratch_dir=Path(scratch),
                           publish_ip="127.0.0.1", host_ports={SERVICE_PORT: port})


def run_init_containers(pod: dict[str, Any], host: c2p.HostContext, name: str) -> Result:
    """Each init container to completion, as the kubelet would before the exporter."""
    said = []
    for init, argv in c2p.init_containers_to_podman(pod, host, name):
        out = subprocess.run(["podman", "run", *argv], capture_output=True, text=True,
                             timeout=300)
        text = (out.stdout + out.stderr).strip().replace("\n", " | ")
        if out.returncode != 0:
            return Result("init containers", False, f"{init} exit {out.returncode}: {text[:400]}")
        said.append(f"{init}: {text[-160:]}")
    return Result("init containers", True, "; ".join(said) or "none")


def start_pod(pod: dict[str, Any], host: c2p.HostContext, name: str, base: str,
              timeout: float, what: str, say_running: bool = False) -> list[Result]:
    """The pod's init containers, then the exporter's container until its /healthz at
    ``base`` answers (``timeout`` seconds at most): their results, the last one (``what``)
    ok once it answers. ``say_running``: a failure says whether the container still runs."""
    inits = run_init_containers(pod, host, name)
    if not inits.ok:
        return [inits]
    podman("run", *c2p.pod_to_podman(pod, host, name))
    started = time.monotonic()
    healthy = wait_healthy(name, base, timeout)
    still = f" (running: {running(name)})" if say_running else ""
    return [inits, Result(what, healthy,
                          f"200 after {time.monotonic() - started:.1f} s" if healthy
                          else f"no answer{still}; log: " + exporter_log(name))]


def default_refusal_check(values: dict[str, Any], host: c2p.HostContext, name: str) -> Result:
    """cgroup v1 without recursive read-only (this host, podman 4.3): the chart's default
    (the whole cgroupfs) must not start the exporter, and must say what to set."""
    init = run_init_containers(c2p.render_daemonset(values), host, f"{name}-default")
    ok = not init.ok and "cgroupV1Controllers" in init.detail
    return Result("default chart refuses a writable cgroupfs (v1)", ok, init.detail[:300])


def oom_checks(label: str, base: str, h: MemoryHierarchy, rel: str,
               busy: bool, listing_timeout: float = 30) -> list[Result]:
    """Kill a grower in ``rel``: the exporter must count the kill once and name the victim."""
    stress = None
    if busy:
        stress = subprocess.Popen(["stress-ng", "--cpu", str(os.cpu_count() or 2),
                                   "--timeout", "120s", "--quiet"])
        time.sleep(2)
    pod = "/" + rel.strip("/")
    grower = Grower(h, rel)
    try:
        grower.send(f"name {VICTIM}")
        # As in production, a scrape sees the process before it grows to the limit.
        alive: list[str] = []

        def listed() -> bool:
            alive[:] = [lab["process"] for lab, _ in
                        pick(parse(http(f"{base}/metrics")[1]), "headroom_processes", pod=pod)]
            return bool(alive)
        wait_for(listed, listing_timeout)
        grower.send("grow 4 20", wait=False)
        code = grower.wait(timeout=120)
    finally:
        grower.close()
        if stress is not None:
            stress.terminate()
            stress.wait(timeout=30)
    seen: list[tuple[dict[str, str], float]] = []

    def counted() -> bool:
        nonlocal seen
        status, text = http(f"{base}/metrics")
        seen = pick(parse(text), "headroom_oom_kills_total", pod=pod) if status == 200 else []
        return sum(v for _, v in seen) >= 1
    wait_for(counted, 30)
    victims = {lab.get("process", ""): v for lab, v in seen}
    kills = sum(victims.values())
    return [
        Result(f"OOM kill counted ({label})", code == -signal.SIGKILL and kills == 1,
               f"grower exit {code}, headroom_oom_kills_total {kills:g}"),
        # The name the exporter gave the live process (its own naming, e.g. argv[0]).
        Result(f"OOM victim named ({label})",
               len(alive) == 1 and victims.get(alive[0], 0) == 1 and alive[0] != "unknown",
               f"by process {victims or 'none'}; alive it was {alive or 'not listed'}"),
    ]


def run_checks(args: argparse.Namespace) -> list[Result]:
    h, own = own_memory_cgroup()
    results: list[Result] = []
    limits = {"workload": 512 * MIB, "oom-idle": 48 * MIB, "oom-busy": 48 * MIB, "kubepods": 0}
    with scratch_cgroups(h, own, limits) as cg, tempfile.TemporaryDirectory(
            prefix="headroom-image-check-") as tmp:
        workload = start_workload(h, cg["workload"])
        name = f"headroom-check-{os.getpid()}"
        port = free_port()
        values = c2p.image_values(args.image)
        values["flightRecorder"] = {"hostPath": {"path": f"{tmp}/flight-recorder"}}
        values["extraArgs"] = [f"--cgroup.track={cg[k].strip('/')}"
                               for k in ("workload", "oom-idle", "oom-busy")]
        # An empty kubepods tree of our own: the host's (or another test's) stay out.
        values["extraArgs"].append(f"--cgroup.kubepods-path={cg['kubepods'].strip('/')}")
        if args.whole_cgroupfs:
            # The whole cgroupfs, past the init container's refusal: the write probe must
            # then find it writable on v1 (where podman 4.3 has no recursive read-only).
            values["hostPaths"] = {"refuseWritableCgroupfs": False}
        elif h.version == 1:
            # The chart's default refuses to start here; what a v1 node needs instead.
            results.append(default_refusal_check(dict(values), host_context(tmp, 0), name))
            values["hostPaths"] = {"cgroupV1Controllers": ["memory"]}
        values.update(json.loads(args.set_json))
        pod = c2p.render_daemonset(values)
        for what in args.mutate:
            mutate(pod, what)
        (container,) = pod["containers"]
        want_caps = container["securityContext"]["capabilities"].get("add", [])
        limit = c2p.memory_bytes(container["resources"]["limits"]["memory"])
        cgroupfs = next(a.split("=", 1)[1] for a in container["args"]
                        if a.startswith("--path.cgroupfs="))
        host = host_context(tmp, port)
        base = f"http://127.0.0.1:{port}"
        try:
            up = start_pod(pod, host, name, base, 90, "/healthz", say_running=True)
            results += up
            if not up[-1].ok:
                return results
            pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).strip())
            results += security_checks(pid, want_caps)
            # PSS and orphans come on their own schedules: wait until they are there.
            samples: Samples = []

            first_scrape = time.monotonic()

            def complete() -> bool:
                nonlocal samples
                status, text = http(f"{base}/metrics")
                samples = parse(text) if status == 200 else []
                if (time.monotonic() - first_scrape > 15 and not pick(
                        samples, "headroom_processes", pod="/" + cg["workload"].strip("/"))):
                    return True  # no process seen at all (no host PID namespace): none will be
                return all(total(samples, m, pod="/" + cg["workload"].strip("/")) is not None
                           for m in ("headroom_process_memory_pss_bytes",
                                     "headroom_tmpfs_orphaned_bytes")) or bool(
                    pick(samples, "headroom_collector_degraded"))  # they will not come
            wait_for(complete, 90)
            reading = read_host(h, cg["workload"])
            results += collector_checks(samples, exporter_log(name, lines=0),
                                        cg["workload"].rsplit("/", 1)[0])
            results.append(degraded_check(samples, want_caps))
            results += figure_checks(samples, "/" + cg["workload"].strip("/"), reading)
            results.append(write_probe_check(name, cgroup_mounts_in_container(cgroupfs)))
            # Without the host's PID namespace no process is ever listed: do not wait long.
            seen = 30 if pick(samples, "headroom_processes",
                              pod="/" + cg["workload"].strip("/")) else 5
            results += oom_checks("idle", base, h, cg["oom-idle"], False, seen)
            results += oom_checks("cores busy", base, h, cg["oom-busy"], True, seen)
            _, text = http(f"{base}/metrics")
            rss = total(parse(text), "process_resident_memory_bytes")
            results.append(Result("RSS under the limit", rss is not None and rss < limit,
                                  f"{(rss or 0) / MIB:.0f} MiB of {limit / MIB:.0f} MiB"))
        finally:
            if args.keep:
                print(f"kept container {name}", file=sys.stderr)
            else:
                podman("rm", "--force", "--time=2", name, check=False)
            workload.kill()
            workload.wait(timeout=10)
    return results


def run_emulated(args: argparse.Namespace) -> list[Result]:
    """A foreign-arch image: the chart's pod (no test cgroups), --version and one scrape."""
    results = []
    version = subprocess.run(["podman", "run", "--rm", args.image, "--version"],
                             capture_output=True, text=True, timeout=300)
    results.append(Result("headroom --version", version.returncode == 0,
                          (version.stdout or version.stderr).strip()[-200:]))
    with tempfile.TemporaryDirectory(prefix="headroom-image-check-") as tmp:
        values = c2p.image_values(args.image)
        values["flightRecorder"] = {"hostPath": {"path": f"{tmp}/flight-recorder"}}
        if Path("/sys/fs/cgroup/memory/memory.usage_in_bytes").exists():
            values["hostPaths"] = {"cgroupV1Controllers": ["memory"]}  # v1: as in run_checks
        values.update(json.loads(args.set_json))
        pod = c2p.render_daemonset(values)
        port = free_port()
        name = f"headroom-check-{os.getpid()}"
        host = host_context(tmp, port)
        base = f"http://127.0.0.1:{port}"
        try:
            up = start_pod(pod, host, name, base, 240, "/healthz (emulated)")
            results += up
            if up[-1].ok:
                status, text = http(f"{base}/metrics", timeout=60)
                results += collector_checks(parse(text) if status == 200 else [],
                                            exporter_log(name, lines=0))
        finally:
            podman("rm", "--force", "--time=2", name, check=False)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", required=True)
    ap.add_argument("--set-json", default="{}", help="more chart values (JSON)")
    ap.add_argument("--mutate", action="append", default=[],
                    help="hostPID, SYS_PTRACE or mount:NAME: remove it from the pod first")
    ap.add_argument("--whole-cgroupfs", action="store_true",
                    help="v1: mount the whole cgroup filesystem (the chart's default) instead "
                         "of hostPaths.cgroupV1Controllers=[memory], and run the exporter "
                         "despite its writable controllers (refuseWritableCgroupfs=false)")
    ap.add_argument("--emulated", action="store_true", help="foreign arch: smallest check")
    ap.add_argument("--keep", action="store_true", help="leave the container running")
    args = ap.parse_args(argv)
    try:
        results = run_emulated(args) if args.emulated else run_checks(args)
    except KernelUnavailable as exc:
        print(f"FAIL kernel: {exc}")
        return 1
    for r in results:
        print(r.line(), flush=True)
    failed = sum(not r.ok for r in results)
    changes = [*args.mutate, *(["whole cgroupfs"] if args.whole_cgroupfs else [])]
    print(f"{len(results) - failed} of {len(results)} checks ok"
          + (f" (mutated: {', '.join(changes)})" if changes else ""))
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
