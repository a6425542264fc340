"""Host readers: where the host's files are, and a hostile host's values read safely.

- ``paths``: the only module that knows where /proc and the cgroup filesystem live
  (``HostPaths``), the memory hierarchy, the file-descriptor budget
- ``workloads``: cgroup path -> pod UID and container ID (a table of real shapes)
- ``labels``: label values from hostile input, bounded and escaped
- ``logs``: log lines a hostile pod cannot forge, split or flood
- ``degraded``: data lost to a missing capability, made visible
"""
