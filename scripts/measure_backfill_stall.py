"""How long the event loop stalls while a search index backfills: N vectors are written first, then FT.CREATE
starts the backfill, and a second connection sends PING in a loop until FT.INFO says `ready`. Prints the backfill
time and the PING latencies (p50, p99, max); the longest PING is the longest the loop went without answering.

    PYTHONPATH=src python scripts/measure_backfill_stall.py --vectors 100000 --dim 128

It starts its own durakv (durability none: the load is not what is measured) and stops it by pid.
"""

import argparse
import sys
import threading
import time

import numpy as np
import valkey

sys.path.insert(0, "src")
from durakv.cluster.processes import free_port  # noqa: E402
from durakv.tools.bench.vector import Spawned  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vectors", type=int, default=100000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--algorithm", default="HNSW", choices=("HNSW", "FLAT"))
    args = ap.parse_args(argv)
    port = free_port()
    srv = Spawned(port, "none")
    try:
        c = valkey.Valkey(port=port, socket_timeout=120)
        data = np.random.default_rng(3).random((args.vectors, args.dim), dtype=np.float32)
        for s in range(0, args.vectors, 1000):
            p = c.pipeline(transaction=False)
            for i in range(s, min(args.vectors, s + 1000)):
                p.hset(f"vec:{i}", "v", data[i].tobytes())
            p.execute()
        lat, stop = [], threading.Event()

        def pinger():
            with valkey.Valkey(port=port, socket_timeout=120) as pc:
                while not stop.is_set():
                    t = time.perf_counter()
                    pc.ping()
                    lat.append(time.perf_counter() - t)
        t = threading.Thread(target=pinger, daemon=True)
        t.start()
        time.sleep(0.5)
        t0 = time.perf_counter()
        c.execute_command("FT.CREATE", "idx", "PREFIX", "1", "vec:", "SCHEMA", "v", "VECTOR", args.algorithm, "6",
                          "DIM", str(args.dim), "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2")
        while True:
            raw = c.execute_command("FT.INFO", "idx")
            info = dict(zip(raw[::2], raw[1::2]))
            if info[b"state"] == b"ready":
                break
            time.sleep(0.2)
        took = time.perf_counter() - t0
        stop.set()
        t.join(30)
        s = sorted(lat)
        print(f"backfill of {args.vectors} x {args.dim}-dim ({args.algorithm}): {took:.1f} s "
              f"({args.vectors / took:.0f} vectors/s); {len(s)} PINGs meanwhile: p50 {s[len(s) // 2] * 1000:.2f} ms, "
              f"p99 {s[int(len(s) * 0.99)] * 1000:.2f} ms, max {s[-1] * 1000:.2f} ms")
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
