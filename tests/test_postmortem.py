"""The post-mortem's pure parts: kernel-log records (as this machine's kernel wrote them)
and the flight recorder's bounds. The kills themselves are in tests/test_kernel.py."""

from __future__ import annotations

import json

from exporter.collectors.kmsg import parse_kmsg_record
from exporter.oom.recorder import FlightRecorder

# /dev/kmsg records written by this machine's kernel (6.18) for a real memcg OOM kill.
OOM_KILL = (
    "6,416,1416981076,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
    "mems_allowed=0,oom_memcg=/process_api/74a5/headroom-test-0e76a783/kubepods/burstable/"
    "pod162b8089-8fe2-4468-939a-eccc9bd5ed36/a67ad2df,task_memcg=/process_api/74a5/"
    "headroom-test-0e76a783/kubepods/burstable/pod162b8089-8fe2-4468-939a-eccc9bd5ed36/"
    "a67ad2df,task=python,pid=26603,uid=0\n"
)
KILLED = (
    "3,417,1416981140,-;Memory cgroup out of memory: Killed process 26603 (python) "
    "total-vm:82292kB, anon-rss:65152kB, file-rss:6712kB, shmem-rss:0kB, UID:0 "
    "pgtables:192kB oom_score_adj:0\n"
)


def test_kmsg_records() -> None:
    v = parse_kmsg_record(OOM_KILL)
    assert v is not None and (v.pid, v.comm) == (26603, "python")
    assert v.memcg == ("process_api/74a5/headroom-test-0e76a783/kubepods/burstable/"
                       "pod162b8089-8fe2-4468-939a-eccc9bd5ed36/a67ad2df")
    k = parse_kmsg_record(KILLED)
    assert k is not None and (k.pid, k.comm, k.memcg) == (26603, "python", "")
    assert parse_kmsg_record("4,339,1416980502,-;python invoked oom-killer: gfp_mask=0xcc0") \
        is None
    # VLLM titles are cut at 15 characters in comm: the process table names it fully.
    cut = OOM_KILL.replace("task=python", "task=VLLM::EngineCor")
    assert parse_kmsg_record(cut).comm == "VLLM::EngineCor"  # type: ignore[union-attr]


def test_flight_recorder_is_bounded_by_time_and_slots() -> None:
    now = [1000.0]
    r = FlightRecorder(window=60, scrape_slots=10, clock=lambda: now[0])
    for i in range(300):
        now[0] += 0.5
        r.record_usage({"a": i})
    h = r.history("a")
    assert len(h["usage"]) == 61  # one per second over the window
    assert h["usage"][-1] == [now[0] // 1, 299]  # the second's maximum
    assert h["usage"][0][0] >= now[0] - 60
    assert json.dumps(h)  # what the OOM document embeds is JSON as it is
