"""How long a Bloom filter's hashing takes per item, compiled (keyspace/_bloom.c) and pure Python (the reference):
add and check of N unique items in one filter sized for them, at the module's default error rate (0.01: 7 hash
functions) and at 0.001 (10). The in-process cost BF.ADD / BF.EXISTS pay per item, without the server around it.

    PYTHONPATH=src python scripts/measure_bloom_hash.py --items 100000
"""

import argparse
import time

from durakv.keyspace import bloom as B


def run(contains, add, items, fp):
    f = B.SubFilter.new(len(items), fp, bytes(range(32)))
    t0 = time.perf_counter()
    for item in items:
        add(f.data, item)
    t1 = time.perf_counter()
    hits = sum(contains([f.data], item) for item in items)
    t2 = time.perf_counter()
    assert hits == len(items)
    n = len(items)
    return (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9, f.hash_functions


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--python-items", type=int, default=10_000, help="items for the (slow) pure-Python reference")
    args = p.parse_args()
    print(f"compiled twin built: {B.HASH_COMPILED}")
    print(f"{'implementation':<16}{'fp':>8}{'k':>4}{'items':>10}{'add ns/item':>14}{'check ns/item':>15}")
    impls = [("python", B.contains_py, B.add_py, args.python_items)]
    if B.HASH_COMPILED:
        impls.insert(0, ("compiled", B._contains, B._add, args.items))
    results = {}
    for name, contains, add, n in impls:
        items = [b"item:%d" % i for i in range(n)]
        for fp in (0.01, 0.001):
            add_ns, check_ns, k = run(contains, add, items, fp)
            results[(name, fp)] = add_ns
            print(f"{name:<16}{fp:>8}{k:>4}{n:>10,}{add_ns:>14,.0f}{check_ns:>15,.0f}")
    if B.HASH_COMPILED:
        for fp in (0.01, 0.001):
            print(f"pure Python / compiled at fp {fp}: {results[('python', fp)] / results[('compiled', fp)]:.0f}x")


if __name__ == "__main__":
    main()
