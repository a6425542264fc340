"""``python -m exporter.oncall.explain``: the same command as ``headroom explain``."""

import sys

from exporter.oncall.explain.command import main

sys.exit(main())
