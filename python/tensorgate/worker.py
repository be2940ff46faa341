"""Entry point: ``python -m tensorgate.worker --arena-in P --arena-out P --out-bytes N``.

The gateway spawns this with the control socket on fd 3; see docs/worker-protocol.md.
"""

import sys

from ._worker import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
