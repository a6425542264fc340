"""Tools for the engineer who gets paged: ``headroom explain`` (a diagnosis from
Prometheus), ``headroom top`` (a live view of one node) and the post-mortem page.

Each tool is a pure core (rules, models, renderers) with its I/O at the edge, so the
core is tested on literal data and the edges against the real thing.
"""
