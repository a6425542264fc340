"""The connection budget lives in ``exporter.web.connections``; this name stays for
``exporter.cli`` until it imports from there."""

from exporter.web.connections import ConnectionGuard

__all__ = ["ConnectionGuard"]
