"""What an OOM kill is, and how many there were: the watcher names kills and counts each
once (``watcher.py``, the one definition of a kill), the tally carries its counts as a
source's result (``tally.py``), the member table knows who is in each tracked cgroup so a
victim can be named without the kernel log (``members.py``). What is kept of each kill
is ``exporter/postmortem/``."""
