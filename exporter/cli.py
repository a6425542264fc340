"""The ``headroom`` command: ``serve``, ``generate``, and the on-call tools ``explain`` and
``top`` (``exporter/oncall/``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from aiohttp import web

from exporter import __version__, launch
from exporter.assembly import factory
from exporter.assembly.config import ConfigError, ExporterConfig, add_flags, build_config
from exporter.host.logs import setup_logging
from exporter.web.app import make_app
from exporter.web.connections import ConnectionGuard
from exporter.web.listener import start_server
from exporter.web.security import Security
from exporter.web.webconfig import WebConfigError

log = logging.getLogger("exporter")

USAGE_ERROR = 2


def build_parser(oncall: bool = True) -> argparse.ArgumentParser:
    """Every command's parser. ``oncall=False`` leaves out the on-call tools' own flags, and
    so their modules: about a tenth of the exporter's start-up, which `serve` never uses."""
    parser = argparse.ArgumentParser(
        prog="headroom",
        description="See which memory will OOMKill a vLLM pod, before the kernel does.",
    )
    parser.add_argument("--version", action="version", version=f"headroom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the exporter")
    add_flags(serve)
    gen = sub.add_parser("generate", help="write the dashboards JSON and rules YAML")
    gen.add_argument("--check", action="store_true",
                     help="fail (exit 1) when a committed generated file is stale")
    gen.add_argument("--root", default=".", help="repository root (default: .)")
    ex = sub.add_parser("explain", help="why is this pod close to an OOM kill (from Prometheus)",
                        description="A diagnosis of one pod from Prometheus. Exit codes: 0 "
                        "healthy, 1 at risk, 2 bad usage, 3 no data.")
    tp = sub.add_parser("top", help="a live terminal view of this node's pods",
                        description="A live view of this node from the local exporter.")
    if oncall:
        from exporter.oncall import explain, top

        explain.add_arguments(ex)
        top.add_arguments(tp)
    return parser


async def serve(config: ExporterConfig, security: Security | None = None) -> None:
    """Runs until SIGINT or SIGTERM (a graceful stop); SIGHUP re-reads the web config
    file and changes nothing else (the kernel's default for SIGHUP would kill the exporter
    with no cleanup)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    security = security or Security.load(config.web.config_file)
    loop.add_signal_handler(signal.SIGHUP, security.request_reload)
    exporter = factory.build(config)
    # Started before the site accepts scrapes: the sampler runs from the start, once.
    exporter.start()
    guard = ConnectionGuard(config.web.max_connections or None, config.web.header_timeout,
                            config.web.idle_timeout)
    app = make_app(exporter, security, guard)
    runner: web.AppRunner | None = None
    try:
        runner, _ = await start_server(app, config.web.listen[0] or None, config.web.listen[1])
        log.info("listening on %s:%d (%s; collectors: %s)", config.web.listen[0] or "*",
                 config.web.listen[1], "TLS" if security.listener_ssl else "plain HTTP",
                 ", ".join(s.name for s in exporter.sources))
        await stop.wait()
        log.info("shutting down")
    finally:
        if runner is not None:
            await runner.cleanup()
        await exporter.aclose()


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    # Before reading any config (docs/threats.md: early-sighup); the console script
    # (exporter.launch) did already.
    launch.hold_sighup()
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(oncall=not words or words[0] not in ("serve", "generate"))
    args, unknown = parser.parse_known_args(words)
    env = os.environ if env is None else env
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    if args.command == "generate":
        if unknown:
            print(f"headroom generate: unknown arguments: {' '.join(unknown)}",
                  file=sys.stderr)
            return USAGE_ERROR
        from exporter.artifacts.generate import run_generate

        return int(run_generate(args.root, check=args.check))
    if args.command in ("explain", "top"):
        if unknown:
            print(f"headroom {args.command}: unknown arguments: {' '.join(unknown)}",
                  file=sys.stderr)
            return USAGE_ERROR
        from exporter.oncall import explain, top

        return explain.run(args) if args.command == "explain" else top.run(args)
    problems = [f"unknown flag {u}" for u in unknown]
    config: ExporterConfig | None = None
    security: Security | None = None
    try:
        config = build_config(args, env)
        security = Security.load(config.web.config_file)
    except (ConfigError, WebConfigError) as exc:
        problems.extend(f"--web.config.file: {p}" if isinstance(exc, WebConfigError) else p
                        for p in exc.problems)
    if problems or config is None:
        print("headroom serve: bad configuration:\n  " + "\n  ".join(problems),
              file=sys.stderr)
        return USAGE_ERROR
    setup_logging(config.log.level, config.log.format)
    if launch.early_sighups:
        log.info("SIGHUP before serving (%d): the web config is read at start",
                 launch.early_sighups)
    try:
        asyncio.run(serve(config, security))
    except OSError as exc:  # the port is taken, most often
        log.error("cannot serve: %s", exc)
        return 1
    finally:
        launch.hold_sighup()  # the closed loop left SIGHUP to the kernel's default
    return 0


if __name__ == "__main__":
    sys.exit(main())
