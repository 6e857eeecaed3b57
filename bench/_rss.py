"""python -m bench._rss CMD ARG...: run CMD as this process's only child, then print its peak RSS.

Prints one JSON line: {"rc", "wall_s", "maxrss_mib"} with maxrss read from
resource.getrusage(RUSAGE_CHILDREN).ru_maxrss (KiB on Linux), which covers CMD and anything
it waited for. One launcher per job keeps each reading to one job.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench._rss CMD [ARG...]", file=sys.stderr)
        return 2
    start = time.perf_counter()
    rc = subprocess.call(argv)
    wall = time.perf_counter() - start
    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"rc": rc, "wall_s": round(wall, 3), "maxrss_mib": round(kib / 1024, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
