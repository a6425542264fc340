"""After an OOM kill the evidence is gone with the container: keep it. The watcher names
kills (``watcher.py``), the recorder keeps the minutes before (``recorder.py``), the store
writes and serves one document per kill (``documents.py``); ``postmortem.py`` wires them
to the sampler and the scrapes."""
