"""Collectors: one module per source, each a pure parser plus a thin reader."""
