"""From the sources' results to the exposition, on each scrape.

- ``join``: pure: the results -> one typed ``Snapshot``, a field per source
- ``render``: ``Snapshot`` -> metric families, one table in exposition order
- ``encode``: metric families -> Prometheus text 0.0.4 or OpenMetrics 1.0
- ``selfmetrics``: the exporter's own ``process_*`` families
"""
