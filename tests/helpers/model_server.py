"""A model server that runs vLLM inside its own Python process, as launchers do.

KServe's huggingfaceserver (``python -m huggingfaceserver --model_dir ...``), Ray Serve
deployments and in-house servers import vLLM's OpenAI server and run it with their own
flags: their command line names neither ``vllm serve`` nor vLLM's modules, nor vLLM's
``--port``. This is one of them, for the tests (run it with the python that has vLLM):

    $HEADROOM_VLLM_PYTHON tests/helpers/model_server.py --model_dir DIR --model_name NAME \
        --http_port 8080 [--max_model_len 256] [--kv_blocks 32] [--kv_events 5557:5558]

vLLM still starts its ``VLLM::EngineCore`` and ``VLLM::Worker`` children under it: that,
and the sockets this process listens on, is all an exporter can go by.
"""

from __future__ import annotations

import argparse
import json


def vllm_argv(opts: argparse.Namespace) -> list[str]:
    """The vLLM server flags this launcher's own flags stand for."""
    argv = ["--model", opts.model_dir, "--served-model-name", opts.model_name,
            "--host", opts.http_host, "--port", str(opts.http_port),
            "--max-model-len", str(opts.max_model_len), "--enforce-eager"]
    if opts.kv_blocks:
        argv += ["--num-gpu-blocks-override", str(opts.kv_blocks)]
    if opts.kv_events:
        pub, replay = opts.kv_events.split(":")
        argv += ["--kv-events-config", json.dumps({
            "enable_kv_cache_events": True, "publisher": "zmq",
            "endpoint": f"tcp://*:{pub}", "replay_endpoint": f"tcp://*:{replay}"})]
    return argv


def main() -> None:
    own = argparse.ArgumentParser(description="a KServe-like model server")
    own.add_argument("--model_dir", required=True)
    own.add_argument("--model_name", required=True)
    own.add_argument("--http_host", default="0.0.0.0")
    own.add_argument("--http_port", type=int, default=8080)
    own.add_argument("--max_model_len", type=int, default=256)
    own.add_argument("--kv_blocks", type=int, default=0)
    own.add_argument("--kv_events", default="", help="PUB:REPLAY ports of KV cache events")
    opts = own.parse_args()

    import uvloop
    from vllm.entrypoints.launchers.api_server.entry import run_server
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(vllm_argv(opts))
    validate_parsed_serve_args(args)
    uvloop.run(run_server(args))


if __name__ == "__main__":
    main()
