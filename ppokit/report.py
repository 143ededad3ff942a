"""``python -m ppokit.report OUTPUT_DIR [--out FILE]``: a self-contained HTML report of a run.

The implementation lives in ``ppokit.tracking.report``.
"""

import sys

from ppokit.tracking.report import ReportError, build_report, main

__all__ = ["ReportError", "build_report", "main"]

if __name__ == "__main__":
    sys.exit(main())
