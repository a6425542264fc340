"""The web config file's parser lives in ``exporter.web.webconfig``; this name stays for
``exporter.cli`` and ``benchmarks/web_cost.py`` until they import from there."""

from exporter.web.webconfig import WebConfigError, load_web_config

__all__ = ["WebConfigError", "load_web_config"]
