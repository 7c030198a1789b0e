"""Measures the linearizability checker on simulated histories (CPython, one core).

For each shape: a history from the simulated correct register (must check `ok`) and from the two buggy ones
with the bug shown near the end (must check `fail`; that time includes shrinking the counterexample).

    python scripts/bench_verify_checker.py [--ops 10000] [--keys 10] [--repeat 3]
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from durakv.tools.verify.linearizable import check_registers  # noqa: E402
from durakv.tools.verify.simulate import simulate  # noqa: E402


def concurrency(history):
    """Mean number of ok operations in flight when an ok operation is invoked."""
    ops = [o for o in history.operations() if o.type == "ok"]
    events = sorted([(o.invoke_ns, 1) for o in ops] + [(o.complete_ns, -1) for o in ops])
    level, total = 0, 0
    for _, d in events:
        level += d
        if d > 0:
            total += level
    return total / max(1, len(ops))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10000)
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=120.0)
    args = ap.parse_args()
    shapes = [(3, 0.01), (5, 0.02), (5, 0.10), (10, 0.05)]
    print(f"{args.ops:,} operations over {args.keys} keys, median of {args.repeat} runs "
          f"(Python {sys.version.split()[0]})")
    print(f"{'clients':>7}  {'info':>5}  {'in flight':>9}  {'history':>8}  {'ok check':>9}  "
          f"{'lost-writes':>11}  {'stale-replica':>13}")
    for processes, p_info in shapes:
        times = {None: [], "lost-writes": [], "stale-replica": []}
        level = 0.0
        for r in range(args.repeat):
            for bug in times:
                h = simulate(args.ops, keys=args.keys, processes=processes, p_info=p_info, seed=100 + r, bug=bug,
                             bug_at=None if bug is None else args.ops - 50)
                if bug is None:
                    level = concurrency(h)
                t = time.perf_counter()
                res = check_registers(h, time_limit_s=args.time_limit)
                times[bug].append(time.perf_counter() - t)
                want = "ok" if bug is None else "fail"
                if res.status != want:
                    print(f"unexpected verdict {res.status} (wanted {want}) for {bug}, seed {100 + r}")
                    return 1
        med = {b: statistics.median(v) for b, v in times.items()}
        print(f"{processes:>7}  {p_info:>5.2f}  {level:>9.1f}  {len(h.ops):>8,}  {med[None]:>8.2f}s  "
              f"{med['lost-writes']:>10.2f}s  {med['stale-replica']:>12.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
