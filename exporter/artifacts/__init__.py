"""``headroom generate``: every generated file of the repository.

- ``generate``: the table of what produces which files, written or checked
- ``chart``: the chart's part of the registry: collector values, schema, flag map
"""
