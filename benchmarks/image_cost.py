"""Size and start-up of the headroom image (built by `bash scripts/image.sh build`).

    python3 benchmarks/image_cost.py [--image localhost/headroom:0.1.0-amd64] [--runs 5]

Prints, as JSON: the image's size, the project's layer (everything the Dockerfile adds to
its base), the time from `podman run` (the chart's pod, scripts/chart_to_podman.py) to the
first 200 from /healthz, and the time `import exporter.cli` takes inside the image (the
median of --runs each). Figures depend on the machine's load: compare runs made side by
side, not with numbers from another day.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MB = 1_000_000


def _chart_to_podman() -> Any:
    spec = importlib.util.spec_from_file_location(
        "chart_to_podman", REPO / "scripts" / "chart_to_podman.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_to_podman"] = module
    spec.loader.exec_module(module)
    return module


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True,
                          timeout=300).stdout


def sizes(image: str) -> dict[str, float]:
    """Total size and the layers above the base (the first layer, imported from a tar)."""
    total = json.loads(podman("image", "inspect", image))[0]["Size"]
    history = json.loads(podman("history", "--format", "json", image))
    # Newest first; the base is the oldest layer with a size (ADD file:... / imported).
    added = [h["size"] for h in history[:-1]] if len(history) > 1 else []
    base = history[-1]["size"] if history else 0
    return {"image_mb": round(total / MB, 1), "base_layer_mb": round(base / MB, 1),
            "project_layers_mb": round(sum(added) / MB, 1)}


def healthz_after_run(c2p: Any, image: str) -> float:
    """Seconds from `podman run` to the first /healthz 200, the chart's pod spec."""
    with tempfile.TemporaryDirectory(prefix="headroom-image-cost-") as tmp:
        values = {**c2p.image_values(image),
                  "flightRecorder": {"hostPath": {"path": f"{tmp}/fr"}}}
        pod = c2p.render_daemonset(values)
        port = _free_port()
        host = c2p.HostContext(node_name=os.uname().nodename, scratch_dir=Path(tmp),
                               publish_ip="127.0.0.1", host_ports={9847: port})
        name = f"headroom-cost-{os.getpid()}"
        argv = c2p.pod_to_podman(pod, host, name)
        started = time.monotonic()
        podman("run", *argv)
        try:
            deadline = started + 120
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                                timeout=2) as r:
                        if r.status == 200:
                            return time.monotonic() - started
                except OSError:
                    time.sleep(0.05)
            raise RuntimeError("no /healthz in 120 s")
        finally:
            subprocess.run(["podman", "rm", "--force", "--time=1", name],
                           capture_output=True, timeout=120)


def import_seconds(image: str) -> float:
    code = ("import time; t = time.perf_counter(); import exporter.cli; "
            "print(time.perf_counter() - t)")
    out = podman("run", "--rm", "--read-only", "--entrypoint", "python3", image, "-c", code)
    return float(out.strip())


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", default="localhost/headroom:0.1.0-amd64")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    c2p = _chart_to_podman()
    result: dict[str, Any] = {"image": args.image, **sizes(args.image)}
    imports = [import_seconds(args.image) for _ in range(args.runs)]
    starts = [healthz_after_run(c2p, args.image) for _ in range(args.runs)]
    result["import_exporter_cli_s"] = round(statistics.median(imports), 2)
    result["run_to_healthz_s"] = round(statistics.median(starts), 2)
    result["loadavg_1m"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
