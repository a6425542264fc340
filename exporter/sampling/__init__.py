"""The background peak sampler: what happens between two scrapes.

- ``sampler``: the sampler thread: each tracked cgroup's peak in a trailing window, the
  cgroups that appear between scrapes, the kill counters the OOM watcher follows
- ``cadence``: how often each cgroup is read (every tick only near its limit or rising)
- ``cgroup_watch``: cgroups found between scrapes
- ``kill_notify``: the kernel's kill notifications (v2 ``memory.events`` inotify, v1
  ``oom_control`` eventfds)
- ``inotify``: the non-blocking inotify instance both open
- ``usage_events``: v1 ``cgroup.event_control`` eventfds (OOM wake-up, usage thresholds)
- ``peaks``: each cgroup's peak over the trailing window, and the bursts between readings
- ``kill_domains``: the cgroups whose kill counters the OOM watcher follows
- ``wakeups``: the one epoll set the sampler sleeps on (new cgroups, kill counters,
  thresholds)
"""
