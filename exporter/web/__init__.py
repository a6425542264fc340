"""The serving path: what stands between the node network and a rendered scrape.

- ``webconfig``: the ``--web.config.file`` format (exporter-toolkit's), parsed and checked
- ``tls``: TLS settings -> the server's ``ssl.SSLContext``; client certificate SANs
- ``auth``: basic auth against bcrypt hashes (cached verdicts) and the rate limit
- ``security``: the web config in force, reloaded on SIGHUP, certificates swapped by SNI
- ``app``: the aiohttp application, its routes and the security middleware
- ``renders``: one rendering per collection and format, shared by concurrent scrapes
- ``workpool``: bounded thread pools for work a client can ask for (bcrypt, pages)
- ``connections``: the connection budget (cap, header, idle and request timeouts)
- ``listener``: the TCP site whose connections pass that budget from accept, TLS included
"""
