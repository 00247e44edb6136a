"""Times the acceptance coordinate check: pre-LN over depths 2..64 at width 128 under sp, depth_mup and
completep, 10 Adam steps, 3 seeds (the target is under 5 minutes on the 2-core machine).

    python benchmarks/coord_time.py            # the full check, prints its table and the seconds
    python benchmarks/coord_time.py --quick    # depths 2,4 at width 32, 2 steps: a smoke run
    python benchmarks/coord_time.py --out DIR  # also its JSON and figures
"""

from __future__ import annotations

import sys
import time

from common import Parser, pin_threads

FULL = ["--wrap", "pre", "--param", "sp,depth_mup,completep", "--depths", "2,4,8,16,32,64", "--width", "128"]
QUICK = ["--wrap", "pre", "--param", "sp,completep", "--depths", "2,4", "--width", "32", "--steps", "2"]


def main(argv=None) -> int:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke run instead of the acceptance check")
    p.add_argument("--out", metavar="DIR", help="also write the check's JSON and figures into DIR")
    args = p.parse_args(argv)
    threads = pin_threads()
    from depthlab.cli import main as depthlab_main  # after pinning: torch reads the threads at import

    cmd = ["coord", *(QUICK if args.quick else FULL)]
    if args.out:
        cmd += ["--json", f"{args.out}/coord.json", "--plot", args.out]
    start = time.perf_counter()
    rc = depthlab_main(cmd)
    if rc:  # refused (its one line is on stderr) or failed: no time to report
        return rc
    seconds = time.perf_counter() - start
    print(f"\ndepthlab {' '.join(cmd)}: {seconds:.1f} s on {threads} threads (exit {rc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
