"""After an OOM kill the evidence is gone with the container: keep it, and show it.

- ``wiring``: ties the OOM watcher, the flight recorder, the kernel log and the document
  store to the sampler thread and to each scrape
- ``recorder``: the flight recorder, the minutes before a kill
- ``documents``: one document per kill, in memory and in ``--flight-recorder.dir``
- ``docdir``: that directory, written as root on a node full of hostile pods
- ``index``: the ``/debug/oom/`` index, from a cache
- ``page`` (``page_data``, ``page_chart``): a document as an HTML page, charts as SVG
"""
