"""A vLLM API server as the vLLM tiers start it (tests/e2e/test_vllm_real.py,
tests/e2e/test_vllm_e2e.py): the tiny model it serves, its ports, log and health, and
the prompts the tests send it."""

from __future__ import annotations

import random
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.helpers.vllm_model import WORDS

MODEL = "tiny-model"  # the name the model is served under


def build_model(python: str, out: Path) -> None:
    """The tiny model (tests/helpers/vllm_model.py), built by ``python`` (the one with vLLM)."""
    subprocess.run([python, str(Path(__file__).with_name("vllm_model.py")), str(out)],
                   check=True, capture_output=True)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def prompt(seed: int, n: int) -> str:
    """``n`` tokens (one per word of the tiny model's tokenizer); the same seed gives the
    same first tokens."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def complete(s: aiohttp.ClientSession, base: str, text: str) -> None:
    body = {"model": MODEL, "prompt": text, "max_tokens": 1, "temperature": 0}
    async with s.post(f"{base}/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()


@dataclass
class VllmServer:
    """A vLLM API server: its model, its ports (HTTP, KV events and their replay), its log
    and, once started, its process."""

    model: Path
    port: int
    kv_port: int
    replay_port: int
    log: Path
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/health", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def tail(self) -> str:
        return log_tail(self.log)
