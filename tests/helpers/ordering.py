"""Long poles start first: the order pytest-xdist hands tests to its workers (docs/testing.md, "Long poles").

A test marked `@pytest.mark.long_pole(seconds)` takes about that long on the 2-core machine (measured with
`--durations`). Both schedulers this handles start each worker on one consecutive chunk of the collection:
xdist's default `--dist load` sends a quarter of a worker's share and hands out the rest as workers drain;
`--dist worksteal` (what scripts/test.sh runs) sends each worker its whole share, and a worker that runs dry
takes the second half of the longest queue left. A long pole that happens to sit near the end of a chunk starts
late and the run waits on it alone (the operators' guide test on five network namespaces runs 200-270 s: started
last it ends a run minutes after every other worker went idle).

So on each worker (they must all collect the same order, and do: the order depends only on the items) the long
poles are shared out over the workers, heaviest first to the least loaded (longest-processing-time-first), and
each worker's share is put at the front of the chunk the scheduler will hand that worker. Everything else keeps
the order it had (pytest's own, or pytest-randomly's shuffle: this hook runs after it), so module-scoped fixtures
are set up no more often than before. worksteal takes from the end of a queue, so a worker's long poles stay
its own. A run without xdist, or with another `--dist`, keeps its order.
"""

import pytest


def long_pole_seconds(item):
    marker = item.get_closest_marker("long_pole")
    return float(marker.args[0]) if marker is not None and marker.args else 0.0


def first_chunk_size(count, workers, max_chunk=None, dist="load"):
    """How many tests xdist sends each worker before any finishes. `load` (xdist/scheduler/load.py, `schedule`):
    a quarter of a worker's share, at least 2, at most --maxschedchunk; 0 when the collection is smaller than two
    tests a worker (then it deals them out one at a time, round-robin). `worksteal`
    (xdist/scheduler/worksteal.py, `check_schedule`): the whole share, count // workers, the last worker taking
    the remainder; 0 when there are fewer tests than workers."""
    if dist == "worksteal":
        return count // workers
    if count < 2 * workers:
        return 0
    chunk = (count // workers) // 4
    if max_chunk is not None:
        chunk = min(chunk, max_chunk)
    return max(chunk, 2)


def long_poles_first(items, weight, workers, max_chunk=None, dist="load"):
    """items reordered so that each of `workers` workers of xdist's `dist` scheduler starts with its share of the
    items whose weight(item) > 0, heaviest first; the other items keep their relative order."""
    items = list(items)
    heavy = sorted((it for it in items if weight(it) > 0), key=weight, reverse=True)
    if workers < 2 or not heavy:
        return items
    rest = [it for it in items if weight(it) <= 0]
    shares = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for it in heavy:
        least = loads.index(min(loads))
        shares[least].append(it)
        loads[least] += weight(it)
    chunk = first_chunk_size(len(items), workers, max_chunk, dist)
    if chunk == 0 and dist == "worksteal":
        return heavy + rest             # fewer tests than workers: each starts at once anyway
    if chunk == 0:
        # dealt round-robin: position k goes to worker k % workers
        order = []
        rounds = max(len(share) for share in shares)
        for r in range(rounds):
            for share in shares:
                order.append(share[r] if r < len(share) else (rest.pop(0) if rest else None))
        return [it for it in order if it is not None] + rest
    order, overflow = [], []
    for share in shares:
        head, more = share[:chunk], share[chunk:]
        overflow.extend(more)
        fill = chunk - len(head)
        order.extend(head)
        order.extend(rest[:fill])
        rest = rest[fill:]
    return order + overflow + rest


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """On xdist's controller: tells each worker the --dist mode and --maxschedchunk (a worker's own config says
    dist "no": xdist resets it there)."""
    node.workerinput["durakv_dist"] = node.config.getoption("dist")
    node.workerinput["durakv_maxschedchunk"] = node.config.getoption("maxschedchunk")


@pytest.hookimpl(trylast=True)      # after pytest-randomly's shuffle and after -m / -k deselected
def pytest_collection_modifyitems(config, items):
    workerinput = getattr(config, "workerinput", None)
    dist = workerinput.get("durakv_dist") if workerinput is not None else None
    if dist not in ("load", "worksteal"):
        return
    items[:] = long_poles_first(items, long_pole_seconds, int(workerinput["workercount"]),
                                workerinput.get("durakv_maxschedchunk"), dist)
