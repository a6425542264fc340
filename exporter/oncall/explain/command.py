"""The ``headroom explain`` command: its flags (each with its HEADROOM_* twin), and its
exit codes: 0 healthy, 1 at risk, 2 bad usage, 3 no data (no series for the pod, or
Prometheus could not answer)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TextIO

from exporter.oncall.diagnosis import RUNBOOK_BASE
from exporter.oncall.diagnosis.text import ansi, plain, to_json, to_text
from exporter.oncall.explain.fetch import UsageError, explain
from exporter.oncall.prom_client import PromAuth, PromError, url_problem

USAGE, NO_DATA_EXIT = 2, 3


def add_arguments(p: argparse.ArgumentParser, env: Mapping[str, str] = os.environ) -> None:
    def e(name: str, default: str | None = None) -> str | None:
        return env.get(name, default)

    p.add_argument("target", metavar="NAMESPACE/POD", help="the pod (or POD alone)")
    p.add_argument("--prometheus.url", dest="prometheus_url",
                   default=e("HEADROOM_PROMETHEUS_URL"),
                   help="Prometheus base URL, e.g. http://prometheus:9090 "
                        "(env HEADROOM_PROMETHEUS_URL)")
    p.add_argument("--prometheus.ca-file", dest="ca_file",
                   default=e("HEADROOM_PROMETHEUS_CA_FILE"), help="CA bundle for TLS")
    p.add_argument("--prometheus.cert-file", dest="cert_file",
                   default=e("HEADROOM_PROMETHEUS_CERT_FILE"), help="client certificate")
    p.add_argument("--prometheus.key-file", dest="key_file",
                   default=e("HEADROOM_PROMETHEUS_KEY_FILE"), help="client key")
    p.add_argument("--prometheus.username", dest="username",
                   default=e("HEADROOM_PROMETHEUS_USERNAME"), help="basic auth user")
    p.add_argument("--prometheus.password-file", dest="password_file",
                   default=e("HEADROOM_PROMETHEUS_PASSWORD_FILE"),
                   help="file holding the basic auth password")
    p.add_argument("--prometheus.insecure-skip-verify", dest="insecure",
                   action="store_true",
                   default=e("HEADROOM_PROMETHEUS_INSECURE_SKIP_VERIFY", "") in ("1", "true"),
                   help="do not verify the server's certificate")
    p.add_argument("--prometheus.timeout", dest="timeout", type=float, default=30.0,
                   help="seconds for each query (default 30)")
    p.add_argument("--selector", default=e("HEADROOM_EXPLAIN_SELECTOR", ""),
                   help='extra label matchers for headroom\'s series, e.g. job="headroom"')
    p.add_argument("--time", dest="at", default=None,
                   help="judge as of this moment (RFC 3339 or Unix seconds; default now)")
    p.add_argument("--runbook.base-url", dest="runbook_base", default=RUNBOOK_BASE)
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")


def parse_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UsageError(f"--time: not RFC 3339 or Unix seconds: {text!r}") from None


def auth_from(args: argparse.Namespace) -> PromAuth:
    def path(v: str | None) -> Path | None:
        return Path(v) if v else None

    if args.password_file and not args.username:
        raise UsageError("--prometheus.password-file needs --prometheus.username")
    if args.key_file and not args.cert_file:
        raise UsageError("--prometheus.key-file needs --prometheus.cert-file")
    return PromAuth(path(args.ca_file), path(args.cert_file), path(args.key_file),
                    args.username, path(args.password_file), bool(args.insecure))


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        if not args.prometheus_url:
            raise UsageError("--prometheus.url is required (or HEADROOM_PROMETHEUS_URL)")
        problem = url_problem(args.prometheus_url)
        if problem:
            raise UsageError(f"--prometheus.url: {problem}")
        at = parse_time(args.at) if args.at else None
        auth = auth_from(args)
        d = asyncio.run(explain(args.prometheus_url, args.target, auth, args.selector, at,
                                args.runbook_base, args.timeout))
    except UsageError as exc:
        print(f"headroom explain: {exc}", file=err)
        return USAGE
    except (PromError, OSError) as exc:
        print(f"headroom explain: no data: {exc}", file=err)
        return NO_DATA_EXIT
    if args.output == "json":
        out.write(to_json(d) + "\n")
    else:
        tty = args.color == "always" or (args.color == "auto" and out.isatty()
                                          and "NO_COLOR" not in os.environ)
        out.write(to_text(d, ansi if tty else plain))
    return d.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="headroom explain",
                                description="Why is this pod close to an OOM kill?")
    add_arguments(p)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    return run(args)

