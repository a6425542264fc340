"""The pod dashboard's sections (``headroom-pod.dashboard.py`` assembles them)."""
