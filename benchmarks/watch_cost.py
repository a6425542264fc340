"""What finding new cgroups and following kill counters cost the sampler, per mechanism
(a benchmark, not a test).

    python3 -m benchmarks.watch_cost [--containers 102] [--seconds 20] [--processes 100]

On a real kubelet-shaped tree beneath this process's memory cgroup (the kernel's cgroupfs,
v1 or v2, as scrape_cost.py builds it), with nothing changing (an idle node), it runs one
sampler tick's worth of each mechanism every 200 ms and reports the thread CPU time per
second (% of a core):

- discovery by inotify (``CgroupTree``, the default): one non-blocking read a tick;
- discovery by a scan (``CgroupTree`` without inotify): every directory listed each second;
- kill counters by notification (``KillNotifier``: v2 inotify, v1 eventfd): one
  ``epoll_wait`` a tick for all domains;
- kill counters by polling: every domain's counter file read each tick (the fallback where
  the kernel refuses a notification);
- the member listing (``MemberTable``): each container's cgroup.procs read each tick,
  with ``--processes`` idle processes in them (RSS re-read every 5 s), and as the sampler
  runs it on an idle node (a cgroup whose usage did not move is listed every
  ``LIST_EVERY``, its members' RSS re-read every ``RSS_IDLE``).
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import time
from collections.abc import Callable

from exporter.collectors.kill_counters import read_kill_counters
from exporter.host.paths import HostPaths, MemoryHierarchy, OpenFiles
from exporter.oom.members import LIST_EVERY, MemberTable
from exporter.sampling.cgroup_watch import CgroupTree
from exporter.sampling.kill_notify import KillNotifier
from tests.helpers.kernel import kube_tree

TICK = 0.2


def cpu_per_second(tick: Callable[[], object], seconds: float) -> float:
    """Thread CPU time of ``tick`` run every 200 ms, per wall second."""
    c0, t0 = time.thread_time(), time.monotonic()
    next_at = t0
    while time.monotonic() - t0 < seconds:
        tick()
        next_at += TICK
        time.sleep(max(0.0, next_at - time.monotonic()))
    return (time.thread_time() - c0) / (time.monotonic() - t0)


def sleeper(h: MemoryHierarchy, container: str) -> subprocess.Popen[bytes]:
    """An idle process (``sleep``) in ``container`` from its start."""
    procs = h.dir(container) / "cgroup.procs"
    return subprocess.Popen(["sleep", "600"],
                            preexec_fn=lambda: procs.write_text(str(os.getpid())))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=102)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--processes", type=int, default=100)
    args = ap.parse_args()
    with kube_tree() as tree:
        h = tree.hierarchy
        containers: list[str] = []
        pods: list[str] = []
        while len(containers) < args.containers:
            _, pod = tree.pod(qos=("burstable", "besteffort", "guaranteed")[len(pods) % 3])
            pods.append(pod)
            for _ in range(min(3, args.containers - len(containers))):
                containers.append(tree.container(pod)[1])
        domains = pods if h.version == 2 else containers
        results: dict[str, float] = {}
        for mode in ("inotify", "scan"):
            t = CgroupTree(h, tree.kubepods, use_inotify=mode == "inotify")
            assert len(t.refresh().added) == len(pods) + len(containers)
            results[f"discovery by {t.mode}"] = cpu_per_second(t.refresh, args.seconds)
            t.close()
        notifier = KillNotifier(h)
        epoll = select.epoll()
        armed = sum(notifier.register(d) for d in domains)
        for fd in notifier.take_new_fds():
            epoll.register(fd, select.EPOLLIN)

        def notified() -> None:
            for fd, _ in epoll.poll(0):
                notifier.ready(fd)

        results[f"kill counters by notification ({armed} armed)"] = cpu_per_second(
            notified, args.seconds)
        notifier.close()
        files = OpenFiles()

        def polled() -> None:
            for d in domains:
                read_kill_counters(h, d, files.read_text)
            files.sweep()

        results[f"kill counters polled ({len(domains)} domains)"] = cpu_per_second(
            polled, args.seconds)
        files.close()
        # Who is in each container (oom/members.py), with --processes sleepers spread
        # over the containers: the listing that names victims without the kernel log.
        sleepers = [sleeper(h, containers[i % len(containers)]) for i in range(args.processes)]
        try:
            table = MemberTable(HostPaths())
            table.refresh(h, containers)  # the first look reads every name

            def listed() -> None:
                table.refresh(h, containers)

            results[f"member listing, every tick ({args.processes} processes)"] = \
                cpu_per_second(listed, args.seconds)
            # As the sampler runs it: usage readings say which moved (none: idle).
            idle = dict.fromkeys(containers, 1)

            def listed_when_moved() -> None:
                table.refresh(h, containers, usage=idle)

            results[f"member listing, idle (each cgroup every {LIST_EVERY:g} s)"] = cpu_per_second(
                listed_when_moved, args.seconds)
        finally:
            for proc in sleepers:
                proc.kill()
                proc.wait()
    print(f"cgroup v{h.version}: {len(containers)} containers in {len(pods)} pods, "
          f"a tick every {TICK * 1000:.0f} ms, {args.seconds:g} s each")
    for name, share in results.items():
        print(f"{name:44s} {share * 100:.3f}% of a core")


if __name__ == "__main__":
    main()
