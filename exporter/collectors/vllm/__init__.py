"""vLLM's own view of its memory: /metrics (``metrics.py``), where each vLLM is reached
(``discovery.py``), its KV cache events (``kv_events.py``) and the source that ties them
together on each scrape (``source.py``)."""
