"""The source contract: what a source declares, what it is given, what it returns.

- ``source``: ``Source.collect(ctx) -> Result`` (its data and its own errors), ``Key``,
  ``Context``, ``SourceSpec``
- ``settings``: a setting = flag + ``HEADROOM_*`` twin + default + help, declared once
"""
