"""The exporter assembled, once: which sources, which settings, one scrape.

- ``registry``: the one list of sources, in scrape order
- ``config``: the exporter's own settings groups and each source's -> one frozen
  ``ExporterConfig``
- ``discovery``: which cgroups to track on a scrape
- ``pipeline``: one scrape: discovery, then each source with a time limit, then the join
- ``factory``: builds all of it once; ``serve`` starts the sampler once
"""
