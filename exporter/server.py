"""The serving path lives in ``exporter.web``; this name stays for ``exporter.cli`` and
``benchmarks/web_cost.py`` until they import from there."""

from exporter.web.app import make_app
from exporter.web.listener import start_server
from exporter.web.security import Security

__all__ = ["Security", "make_app", "start_server"]
