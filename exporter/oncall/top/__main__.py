"""``python -m exporter.oncall.top``: the same command as ``headroom top``."""

import sys

from exporter.oncall.top.command import main

sys.exit(main())
