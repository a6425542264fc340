"""``python -m exporter.oncall.top``: the same command as ``headroom top``."""

import sys

from exporter.oncall.top.terminal import main

sys.exit(main())
