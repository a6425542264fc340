"""Pod names from the Kubernetes API: pure parsing (``parse.py``), the LIST+WATCH loop
(``watch.py``) and the source that serves them and reports the watch's health
(``pods.py``)."""
