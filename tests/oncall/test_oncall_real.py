"""The on-call tools against the real thing: a real ``headroom serve`` on real memory
cgroups (beneath the test's own cgroup), scraped by a real Prometheus every second.

* ``headroom top`` runs in a real terminal (tmux): the growing pod sorts first, keys sort,
  filter and open a pod's processes, ``q`` quits and gives the terminal back.
* ``headroom explain`` names the process growing anon memory toward its limit, then,
  after the kernel really OOM-kills it, the kill with its victim and post-mortem link.
* The post-mortem page of that kill loads in a real headless Chromium: its chart has the
  kinds, usage, unreclaimable, the limit line and the kill, and usage climbs to the limit.
  The screenshot is kept (``HEADROOM_TEST_ARTIFACTS``, else the test's temp dir).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_e2e_alerting import query
from tests.helpers.kernel import Grower, KubeTree, kube_tree
from tests.helpers.net import free_port, stop_all, wait_http
from tests.helpers.stack import need_kernel_and, prometheus_yml, serve_on_tree, start_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.kernel]

MiB = 1 << 20
OOM_LIMIT = 160 * MiB
VICTIM = os.path.basename(sys.executable)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@dataclass
class Stack:
    tree: KubeTree
    tmp: Path
    exporter: str
    prom: str
    growers: list[Grower] = field(default_factory=list)
    pods: dict[str, str] = field(default_factory=dict)  # role -> pod UID
    oom: Grower | None = None
    killed: bool = False

    def pod(self, role: str, limit: int, first: str) -> Grower:
        uid, pod_rel = self.tree.pod(limit=limit)
        _, container = self.tree.container(pod_rel)
        g = Grower(self.tree.hierarchy, container)
        self.growers.append(g)
        self.pods[role] = uid
        if first:
            g.send(first)
        return g

    def wait_scraped(self, role: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = query(self.prom, f'headroom_memory_usage_bytes{{pod="{self.pods[role]}"}}')
            if r["data"]["result"]:
                return
            time.sleep(0.5)
        raise AssertionError(f"Prometheus never scraped pod {role}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    need_kernel_and("prometheus")
    tmp = tmp_path_factory.mktemp("oncall")
    procs: list[subprocess.Popen[bytes]] = []
    logs = [(tmp / n).open("wb") for n in ("exporter.log", "prometheus.log")]
    growers: list[Grower] = []
    with kube_tree() as tree:
        try:
            ep, pp = free_port(), free_port()
            exporter = subprocess.Popen(
                serve_on_tree(tree, ep, tmp / "oom", "--flight-recorder.window=2m"),
                stderr=logs[0])
            procs.append(exporter)
            prom = start_prometheus(tmp, pp, prometheus_yml(f"127.0.0.1:{ep}"), stderr=logs[1])
            procs.append(prom)
            wait_http(f"http://127.0.0.1:{ep}/healthz", exporter)
            wait_http(f"http://127.0.0.1:{pp}/-/ready", prom)
            st = Stack(tree, tmp, f"http://127.0.0.1:{ep}", f"http://127.0.0.1:{pp}",
                       growers)
            st.pod("flat", 256 * MiB, "anon 32")
            slow = st.pod("slow", 1024 * MiB, "anon 16")
            slow.send("grow 1 200", wait=False)  # 5 MiB/s: far from its limit all along
            st.oom = st.pod("oom", OOM_LIMIT, "anon 8")
            yield st
        finally:
            for g in growers:
                g.close()
            stop_all(procs)
            for f in logs:
                f.close()


def need(binary: str) -> str:
    """The tool's path; skipped when missing, failed instead with
    HEADROOM_REQUIRE_ONCALL_TOOLS=1 (as CI should: apt chromium tmux)."""
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("HEADROOM_REQUIRE_ONCALL_TOOLS") == "1":
            pytest.fail(f"HEADROOM_REQUIRE_ONCALL_TOOLS=1 but {binary} is not installed")
        pytest.skip(f"{binary} not installed")
    return path


def artifacts(tmp: Path) -> Path:
    d = Path(os.environ.get("HEADROOM_TEST_ARTIFACTS", tmp))
    d.mkdir(parents=True, exist_ok=True)
    return d


# --- headroom top in tmux --------------------------------------------------------------------
class Tmux:
    """A tmux server of our own (-L): other sessions on the machine cannot resize it."""

    def __init__(self, name: str, command: str, width: int = 170, height: int = 30) -> None:
        self.name = name
        self.tmux = ["tmux", "-L", name]
        subprocess.run([*self.tmux, "new-session", "-d", "-s", name, "-x", str(width), "-y",
                        str(height), command], check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, pattern: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen, re.M):
                return screen
            time.sleep(0.25)
        raise AssertionError(f"{pattern!r} never showed; the screen:\n{screen}")

    def kill(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def test_top_exits_when_its_terminal_goes(tmp_path: Path) -> None:
    """A closed terminal (the tmux server killed: SIGHUP, then a hung-up pty) ends top;
    before, it spun on the dead terminal at most of a core, for ever."""
    need("tmux")
    pid_file = tmp_path / "top.pid"
    cmd = (f"cd {Path.cwd()} && echo $$ > {pid_file} && PYTHONPATH={Path.cwd()} exec "
           f"{sys.executable} -m exporter.cli top --url http://127.0.0.1:9 --interval 5")
    t = Tmux(f"headroom-hup-{os.getpid()}", cmd)
    try:
        t.wait_for("headroom top", timeout=60)
        pid = int(pid_file.read_text())
    finally:
        t.kill()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and \
            Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.2)
    alive = Path(f"/proc/{pid}").exists() and \
        Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    if alive:
        os.kill(pid, 9)
    assert not alive, "top outlived its terminal"


def test_top_in_tmux(stack: Stack) -> None:
    need("tmux")
    slow, flat = stack.pods["slow"], stack.pods["flat"]
    done = stack.tmp / "top.exit"
    cmd = (f"cd {Path.cwd()} && PYTHONPATH={Path.cwd()} {sys.executable} -m "
           f"exporter.cli top --url {stack.exporter} --forecast.scale {SCALE}; "
           f"echo $? > {done}; sleep 30")
    t = Tmux(f"headroom-top-{os.getpid()}", cmd)
    try:
        # The short horizon needs its window and sustain of reads (scaled): then the
        # growing pod sorts first (time to limit).
        screen = t.wait_for(rf"^{slow}.*MiB/s", timeout=60)
        rows = [ln for ln in screen.splitlines() if ln.startswith((slow, flat))]
        assert rows[0].startswith(slow), screen
        assert f"{VICTIM} anon" in rows[0] and "1.0 GiB" in rows[0], screen
        assert "sort: time to limit" in screen.splitlines()[0]
        assert f"local forecast (windows /{SCALE})" in screen.splitlines()[0]
        print("\n" + screen.rstrip())
        t.keys("n")
        t.wait_for("sort: name")
        t.keys("/", *flat[:8], "Enter")
        # The whole frame: curses redraws top to bottom, so a capture can hold the new
        # header over the last frame's rows; the footer (back from typing) comes last.
        screen = t.wait_for(f"(?s)filter: {flat[:8]}.*t u g s n sort")
        assert slow not in screen and flat in screen
        t.keys("Enter")  # the pod's processes
        screen = t.wait_for(r"CONTAINER\s+PROCESS")
        assert re.search(rf"{re.escape(VICTIM)}\s+1\s+3\d\.\d MiB", screen), screen
        t.keys("Escape")
        t.wait_for("NAMESPACE/POD")
        t.keys("q")
        deadline = time.monotonic() + 10
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.read_text().strip() == "0"
        # curses gave the terminal back: the alternate screen is gone.
        assert "NAMESPACE/POD" not in t.screen()
        print("\n" + screen)
    finally:
        t.kill()


# --- the binding cgroup's time to limit before a real kill, and the kill after ----------------
SCALE = 20  # the rules' windows /20: the short horizon counts after 21 s of reads
TTL = re.compile(r"(\d+(?:\.\d+)?) (s|min|h|days)$")
UNITS = {"s": 1, "min": 60, "h": 3600, "days": 86400}


def cell(screen: str, pod: str, title: str) -> str | None:
    """The text of column ``title`` in ``pod``'s row: right-aligned columns end where
    their header does, left-aligned ones start there."""
    from exporter.oncall.top import COLUMNS

    lines = screen.splitlines()
    head = next((ln for ln in lines if ln.startswith("NAMESPACE/POD")), "")
    row = next((ln for ln in lines if ln.startswith(pod[:6])), None)
    col = next(c for c in COLUMNS if c.title == title)
    if row is None or title not in head:
        return None
    at = head.index(title)
    start = at + len(title) - col.width if col.right else at
    return row[start:start + col.width].strip()


def seconds(text: str | None) -> float | None:
    m = TTL.search(text or "")
    return float(m[1]) * UNITS[m[2]] if m else None


def test_top_reads_the_binding_cgroup_before_a_real_kill_and_the_kill_after(
        stack: Stack) -> None:
    """The container's 160 MiB limit is below the pod's 480 MiB: top (80x24 and 160x50)
    forecasts the container's limit, and the time it shows some 10-30 s before the
    kernel kills the grower is the time the kill then takes; afterwards the row carries
    the kill, its age and the /debug/oom/ link."""
    need("tmux")
    uid, pod_rel = stack.tree.pod(limit=480 * MiB)
    _, container = stack.tree.container(pod_rel, limit=160 * MiB)
    g = Grower(stack.tree.hierarchy, container)
    stack.growers.append(g)
    g.send("anon 16")
    cmd = (f"cd {Path.cwd()} && PYTHONPATH={Path.cwd()} {sys.executable} -m exporter.cli "
           f"top --url {stack.exporter} --forecast.scale {SCALE} --interval 0.5; sleep 60")
    terms = {size: Tmux(f"headroom-top-{size[0]}-{os.getpid()}", cmd, *size)
             for size in ((80, 24), (160, 50))}
    try:
        for t in terms.values():
            t.wait_for(rf"^{uid[:6]}", timeout=30)
        g.send("grow 1 400", wait=False)  # 2.5 MiB/s: about 55 s to 160 MiB
        readings: dict[tuple[int, int], list[tuple[float, float]]] = {s: [] for s in terms}
        wide: list[str] = []
        while g.proc.poll() is None:
            for size, t in terms.items():
                screen = t.screen()
                ttl = seconds(cell(screen, uid, "TO LIMIT"))
                if ttl is not None:
                    readings[size].append((time.monotonic(), ttl))
                    if size == (160, 50):
                        wide.append(screen)
            time.sleep(0.25)
        killed_at = time.monotonic()
        assert g.wait(timeout=10) == -9
        for size, rs in readings.items():
            # The reading 10-30 s before the kill: what top said against what happened.
            near = [(t, ttl) for t, ttl in rs if 10 <= killed_at - t <= 30]
            assert near, (size, rs[-5:], killed_at)
            t, ttl = near[-1]
            actual = killed_at - t
            print(f"\n{size}: {actual:.0f} s before the kill top said {ttl:.0f} s")
            # The pod cgroup's limit would say three times as long.
            assert 0.6 * actual - 5 <= ttl <= 1.5 * actual + 5, (size, ttl, actual)
        assert wide and cell(wide[-1], uid, "CGROUP") not in (None, "", "(pod)"), wide[-1]
        print(wide[-1])
        # The kill in the row: its age in the KILL column, the link under the table.
        for size, t in terms.items():
            screen = t.wait_for(rf"^{uid[:6]}.* ago", timeout=30)
            assert f"{stack.exporter}/debug/oom/" in screen, screen  # the link, uncut
            kill = cell(screen, uid, "KILL")
            assert kill is not None and kill.endswith("ago"), (size, screen)
            print(f"\nafter the kill at {size[0]}x{size[1]}:\n{screen}")
            assert all(len(ln) <= size[0] for ln in screen.splitlines())
    finally:
        for t in terms.values():
            t.kill()


# --- headroom explain on a real OOM run ---------------------------------------------------
def explain(stack: Stack, pod: str) -> tuple[int, dict[str, Any]]:
    r = subprocess.run([sys.executable, "-m", "exporter.cli", "explain", pod,
                        f"--prometheus.url={stack.prom}", "--output=json"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_explain_names_the_growing_process_then_the_kill(stack: Stack) -> None:
    assert stack.oom is not None
    uid = stack.pods["oom"]
    stack.wait_scraped("oom")
    time.sleep(3)
    stack.oom.send(f"shm 16 headroom-oncall-{uid[:8]}")
    stack.tree.shm_files.append(Path(f"/dev/shm/headroom-oncall-{uid[:8]}"))
    stack.oom.send("grow 1 400", wait=False)  # 2.5 MiB/s: about a minute to 160 MiB
    # Halfway to the limit (some 25 s before the kill, room for a loaded machine), explain
    # must see it coming and name the process.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = query(stack.prom, f'headroom_memory_unreclaimable_bytes{{pod="{uid}",'
                              f'container!=""}}')["data"]["result"]
        if r and float(r[0]["value"][1]) > 0.55 * OOM_LIMIT:
            break
        time.sleep(0.5)
    rc, doc = explain(stack, uid)
    print(f"\nbefore the kill: exit {rc}: {doc['summary']}")
    assert rc == 1 and doc["verdict"] == "at_risk", doc["summary"]
    assert doc["closeness"]["container"] != ""
    assert [g["name"] for g in doc["growth"] if g["what"] == "kind"][:1] == ["anon"]
    assert [g["name"] for g in doc["growth"] if g["what"] == "process"][:1] == [VICTIM]
    assert doc["causes"][0]["code"] == "anon_leak" and VICTIM in doc["causes"][0]["title"]

    assert stack.oom.wait(timeout=120) == -9, "the kernel's OOM killer ends the grower"
    stack.killed = True
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kills = query(stack.prom, f'headroom_oom_kills_total{{pod="{uid}"}} > 0')
        if kills["data"]["result"]:
            break
        time.sleep(0.5)
    rc, doc = explain(stack, uid)
    print(f"after the kill: exit {rc}: {doc['summary']}")
    assert rc == 1
    assert [(k["process"], k["last_day"]) for k in doc["kills"]] == [(VICTIM, 1)]
    assert doc["kills"][0]["postmortem"] == f"{stack.exporter}/debug/oom/"
    assert f"1 OOM kill in the last day (victim {VICTIM})" in doc["summary"]


# --- the post-mortem page in Chromium ----------------------------------------------------
def _path_points(d: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"[ML]([\d.]+),([\d.]+)", d)]


def test_postmortem_page_in_chromium(stack: Stack) -> None:
    chromium = need("chromium")
    if not stack.killed:
        pytest.skip("needs the kill of the explain test")
    deadline = time.monotonic() + 30
    names: list[str] = []
    uid = stack.pods["oom"]
    while time.monotonic() < deadline and not names:
        # Only this pod's: other tests on the machine may OOM-kill in their own cgroups.
        names = [p.name for p in (stack.tmp / "oom").glob("*.json")
                 if json.loads(p.read_text())["pod"] == uid]
        time.sleep(0.5)
    assert len(names) == 1, names
    url = f"{stack.exporter}/debug/oom/{names[0]}"
    # JSON still served to scripts; HTML to browsers.
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.load(r)["victim"]["process"] == VICTIM
    with urllib.request.urlopen(url + "?format=json", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/json")
    index = urllib.request.Request(f"{stack.exporter}/debug/oom/",
                                   headers={"Accept": "text/html,*/*;q=0.8"})
    with urllib.request.urlopen(index, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        assert f'<a href="{names[0]}">' in r.read().decode()
    out = artifacts(stack.tmp)
    shot = out / "postmortem.png"
    base = [chromium, *CHROMIUM_FLAGS]

    def browse(*args: str) -> str:
        profile = stack.tmp / f"chromium-{time.monotonic_ns()}"
        r = subprocess.run([*base, f"--user-data-dir={profile}", *args, url],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    dom = browse("--dump-dom")
    (out / "postmortem.dom.html").write_text(dom)
    browse(f"--screenshot={shot}", "--window-size=1000,1500")
    assert shot.stat().st_size > 10_000
    phone = out / "postmortem-phone.png"  # the narrow drawing, for a look by eye
    browse(f"--screenshot={phone}", "--window-size=390,1200")
    assert phone.stat().st_size > 10_000
    assert f"<b>{VICTIM}</b>" in dom
    start = dom.index('class="chart chart-memory wide"')
    chart = dom[start:dom.index("</svg>", start)]
    for element in ('class="kind kind-anon"', 'class="kind kind-shmem"', 'class="usage"',
                    'class="unreclaimable"', 'class="limit"', 'class="kill"',
                    f"OOM kill: {VICTIM}"):
        assert element in chart, element
    assert f'data-process="{VICTIM}"' in dom
    # The climb: usage starts low and ends at the limit line (SVG y grows downward).
    limit_y = float(re.search(r'class="limit"[^>]*y1="([\d.]+)"', chart)[1])  # type: ignore[index]
    usage = _path_points(re.search(r'class="usage"[^>]*d="([^"]+)"', chart)[1])  # type: ignore[index]
    assert len(usage) > 20
    ys = [y for _, y in usage]
    assert ys[0] > limit_y + 100, "usage starts far below the limit"
    assert min(ys) < limit_y + 15, "usage reaches the limit"
    print(f"\npost-mortem page {url}\nscreenshot {shot}")
    if os.environ.get("HEADROOM_UPDATE_DOCS"):  # the README's picture
        docs = Path(__file__).parents[2] / "docs"
        docs.mkdir(exist_ok=True)
        shutil.copy(shot, docs / "postmortem.png")
