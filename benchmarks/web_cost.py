"""What a hostile client can make the web front spend, per request and per connection
(docs/threats.md: index-burst, password-flood, huge-web-config, tmpfs-scan-budget): the
figures behind the README's budgets.

    python benchmarks/web_cost.py [--json out.json]

Runs the real application in process on loopback, over the v1 fixture host (so the
same script measures any checkout: ``PYTHONPATH=<old checkout>`` gives the before
figures; parts a checkout lacks are reported as skipped):

- ``oom_index``: 50 flight-recorder documents of ~400 kB; latency of one HTML index
  request cold and warm, then 40 concurrent ones while Prometheus scrapes (collector
  timeout 1 s): the burst's duration and whether every scrape kept discovery;
- ``auth_flood``: basic auth at bcrypt cost 10; 200 distinct wrong passwords at once
  while Prometheus scrapes every 300 ms (a new connection each): its latency (p50, max),
  how the wrong ones were answered (401 / 503) and how fast;
- ``web_config_worst``: CPU seconds to load the worst 1 MiB web configs, and /healthz
  latency (max) while a SIGHUP-style reload of one runs;
- ``orphan_scan``: a pod of 1,000 processes x 300 descriptors whose tmpfs usage moves
  every scrape: descriptor stats per scrape and scrapes per finished scan.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.web.app import make_app
from exporter.web.security import Security
from tests.conftest import fixture_pipeline, host_config
from tests.helpers.hostile import (
    FIXTURE_ARGS,
    basic,
    bcrypt_hash,
    serve,
    write_big_documents,
)
from tests.helpers.net import serve_app

DISCOVERY_OK = b'headroom_collector_success{collector="discovery"} 1'


async def _timed(fn: Callable[[], Awaitable[int]]) -> tuple[int, float]:
    t = time.monotonic()
    status = await fn()
    return status, time.monotonic() - t


async def oom_index(tmp: Path) -> dict[str, Any]:
    docs = tmp / "oom"
    write_big_documents(docs)
    out: dict[str, Any] = {}
    with serve([*FIXTURE_ARGS, f"--flight-recorder.dir={docs}",
                "--collector.timeout=1s"], tmp) as served:
        url = served.url
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=300)) as s:
            async def index() -> int:
                async with s.get(url + "/debug/oom/", headers={"Accept": "text/html"}) as r:
                    await r.read()
                    return r.status

            async def scrape() -> bool:
                async with s.get(url + "/metrics") as r:
                    return DISCOVERY_OK in await r.read()

            out["cold_s"] = round((await _timed(index))[1], 4)
            for _ in range(6):  # the cache fills a bounded number of rows per request
                await index()
            out["warm_s"] = round((await _timed(index))[1], 4)
            t = time.monotonic()
            burst = [asyncio.ensure_future(index()) for _ in range(40)]
            scrapes = []
            for _ in range(4):
                await asyncio.sleep(0.2)
                scrapes.append(asyncio.ensure_future(scrape()))
            statuses = await asyncio.gather(*burst)
            out["burst_40_s"] = round(time.monotonic() - t, 3)
            out["burst_statuses"] = {str(k): statuses.count(k) for k in set(statuses)}
            kept = await asyncio.gather(*scrapes)
            out["scrapes_with_discovery"] = f"{sum(kept)}/{len(kept)}"
    return out


async def auth_flood(tmp: Path) -> dict[str, Any]:
    web_yml = tmp / "web.yml"
    web_yml.write_text(f'basic_auth_users: {{prometheus: "{bcrypt_hash("s3cret", 10)}"}}\n')
    out: dict[str, Any] = {}
    with serve([*FIXTURE_ARGS, f"--web.config.file={web_yml}"], tmp) as served:
        url = served.url
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=300)) as s, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True),
                                      timeout=aiohttp.ClientTimeout(total=60)) as fresh:
            async def get(headers: dict[str, str], session: aiohttp.ClientSession = s
                          ) -> int:
                try:
                    async with session.get(url + "/metrics", headers=headers) as r:
                        await r.read()
                        return r.status
                except aiohttp.ClientError:
                    return 0  # reset: the connection cap evicted it

            good = basic("prometheus", "s3cret")
            await get(good)
            t0 = time.monotonic()
            # 200 connections: under the cap (256), which would evict idle ones
            flood = [asyncio.ensure_future(_timed(partial(
                get, basic("prometheus", f"guess-{i}")))) for i in range(200)]
            prom = []
            for _ in range(10):
                await asyncio.sleep(0.3)
                prom.append(asyncio.ensure_future(_timed(partial(get, good, fresh))))
            wrong = await asyncio.gather(*flood)
            scrapes = await asyncio.gather(*prom)
            out["flood_s"] = round(time.monotonic() - t0, 3)
            lat = [d for _, d in scrapes]
            out["prometheus_statuses"] = sorted({st for st, _ in scrapes})
            out["prometheus_p50_s"] = round(statistics.median(lat), 4)
            out["prometheus_max_s"] = round(max(lat), 4)
            codes = [st for st, _ in wrong]
            out["wrong"] = {str(k): codes.count(k) for k in set(codes)}
            for code in set(codes):
                ds = sorted(d for st, d in wrong if st == code)
                out[f"wrong_{code}_p50_s"] = round(ds[len(ds) // 2], 3)
                out[f"wrong_{code}_max_s"] = round(ds[-1], 3)
    return out


WORST_WEB: dict[str, Callable[[int], str]] = {
    "flow list": lambda n: "rate_limit: [" + "1," * (n // 2) + "1]\n",
    "flow nesting (16 KiB)": lambda n: "[" * (16 << 10),
    "block nesting": lambda n: ("- " * 64 + "x\n") * (n // 130),
    "one long string": lambda n: "basic_auth_users: {a: '" + "x y" * (n // 3) + "'}\n",
    "many users": lambda n: "basic_auth_users:\n" + "".join(
        f"  u{i}: x\n" for i in range(n // 10)),
}


async def web_config_worst(tmp: Path) -> dict[str, Any]:
    from exporter.web.webconfig import load_web_config

    out: dict[str, Any] = {}
    n = 1 << 20
    for name, make in WORST_WEB.items():
        path = tmp / "web.yml"
        path.write_text(make(n)[:n])
        t = time.thread_time()
        try:
            load_web_config(path)
            verdict = "accepted"
        except Exception as exc:  # a figure, whatever it raises
            verdict = type(exc).__name__
        out[name] = {"cpu_s": round(time.thread_time() - t, 3), "verdict": verdict}
        if out[name]["cpu_s"] > 60:
            break
    # /healthz while a reload of the slowest accepted-size file runs
    path = tmp / "web.yml"
    path.write_text(WORST_WEB["one long string"](n)[: n - 8])
    sec = Security(path)
    exporter = fixture_pipeline(host_config("v1-cgroupfs-containerd"))
    runner, port = await serve_app(make_app(exporter, sec))
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            if hasattr(sec, "request_reload"):
                sec.request_reload()
            else:  # the old, blocking reload: run as the SIGHUP handler ran it
                asyncio.get_running_loop().call_soon(sec.reload)
            lat = []
            t_end = time.monotonic() + 3
            while time.monotonic() < t_end:
                t = time.monotonic()
                async with s.get(url + "/healthz") as r:
                    await r.read()
                lat.append(time.monotonic() - t)
                await asyncio.sleep(0.02)
            out["healthz_during_reload_max_s"] = round(max(lat), 4)
    finally:
        await runner.cleanup()
        await exporter.aclose()
    return out


def orphan_scan() -> dict[str, Any]:
    from exporter.collectors.procfs import ProcfsData
    from exporter.collectors.tmpfs import TmpfsData
    from exporter.collectors.tmpfs_orphans import TmpfsOrphansSettings, TmpfsOrphansSource
    from exporter.collectors.tmpfs_scan import ProcReader
    from exporter.host.paths import HostPaths
    from exporter.model import CgroupRef, ProcessStatus, TmpfsMount

    stats = [0]
    fds = [str(i) for i in range(300)]

    def stat(path: str) -> os.stat_result:
        stats[0] += 1
        return os.stat_result((0o100600, 1, 99, 1, 0, 0, 0, 0, 0, 0))

    with tempfile.TemporaryDirectory() as tmp:
        pids = list(range(1000, 2000))
        shm = Path(tmp) / "proc" / "1000" / "root" / "dev" / "shm"
        shm.mkdir(parents=True)
        (shm / "psm_0").write_bytes(b"x" * 8192)
        src = TmpfsOrphansSource(TmpfsOrphansSettings(), HostPaths(
            procfs=Path(tmp) / "proc", cgroupfs=Path(tmp) / "cg"))
        src._reader = ProcReader(procfs=str(Path(tmp) / "proc"), listdir=lambda p: fds,
                                 stat=stat, read_bytes=lambda p: b"")
        refs = [CgroupRef("kubepods/podX", pod_uid="X"),
                CgroupRef("kubepods/podX/c", pod_uid="X", container_id="c")]
        pf = ProcfsData(groups={}, processes={"kubepods/podX/c": tuple(
            ProcessStatus(p, "python", 0, 0, 0, 0) for p in pids)})
        per, cpu, finished = [], [], []
        for i in range(30):
            tf = TmpfsData({"kubepods/podX": (TmpfsMount("/dev/shm", 8192 + i, 1 << 26),)})
            before, t = stats[0], time.thread_time()
            r = src.read(refs, pf, tf)
            cpu.append(time.thread_time() - t)
            per.append(stats[0] - before)
            stale: frozenset[str] = getattr(r.data, "stale", frozenset())
            if r.data is not None and "kubepods/podX" in r.data.orphans \
                    and "kubepods/podX" not in stale:
                finished.append(i)
    gaps = [b - a for a, b in itertools.pairwise(finished)]
    return {"stats_per_scrape_max": max(per), "cpu_per_scrape_max_s": round(max(cpu), 3),
            "scrapes_per_finished_scan": max(gaps) if gaps else None}


async def main() -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        parts: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
            "oom_index": partial(oom_index, Path(tmp)),
            "auth_flood": partial(auth_flood, Path(tmp)),
            "web_config_worst": partial(web_config_worst, Path(tmp)),
        }
        for name, part in parts.items():
            try:
                out[name] = await part()
            except Exception as exc:  # one part failing (a checkout without it) is a figure
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    out["orphan_scan"] = orphan_scan()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    figures = asyncio.run(main())
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
