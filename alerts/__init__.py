"""headroom's Prometheus rules: recording and alerting groups, runbooks and their tests.

``alerts.config.Config`` holds every knob, ``alerts.rules`` builds the groups from it,
``alerts.generate.artifacts`` renders the files that are committed.
"""
