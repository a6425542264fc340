"""Everything headroom knows about vLLM, in one package.

``identity`` decides which processes are vLLM's and what role each plays (API server,
EngineCore, Worker, DPCoordinator) from the facts procfs and procfacts read; ``locate``
finds where each API server listens (its sockets, its pod's network); ``metrics`` parses
what its /metrics says and ``reading`` reads that body within budgets; ``kv_endpoints``
finds where it publishes KV cache events, ``kv_wire``, ``zmtp``, ``kv_events`` and
``kv_subscriber`` follow them; ``offload`` measures the CPU tier's real host bytes; and
``source`` ties them together on each scrape.
"""
