"""Tools for the engineer who gets paged: ``headroom explain`` (a diagnosis from
Prometheus) and ``headroom top`` (a live view of one node). They read Prometheus and
the exporter's /metrics over HTTP, never the exporter's modules (the post-mortem page is
the exporter's own, ``exporter/postmortem/``).

Each tool is a pure core (rules, models, renderers) with its I/O at the edge, so the
core is tested on literal data and the edges against the real thing.
"""
