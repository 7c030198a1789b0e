"""What a benchmark run does (BenchConfig) and how its connections are laid out (plan_clients)."""

import dataclasses
from dataclasses import dataclass, field

SET, GET = 0, 1
LATE_SHARE_MAX = 0.01   # the generator kept its schedule: at most 1% of the requests sent more than late_ms late
KIND_NAMES = ("SET", "GET")
# What the two kinds of request are in each workload: a write and a read.
WORKLOADS = {"setget": ("SET", "GET"), "json": ("JSON.SET", "JSON.GET"), "bloom": ("BF.ADD", "BF.EXISTS")}


def json_document(size: int, seed: int = 0) -> bytes:
    """A JSON document of about `size` bytes shaped like an application's record (nested object, array,
    numbers, booleans), its last string padded so that the text is exactly `size` bytes when it can be."""
    import json
    import random
    rng = random.Random(seed)
    doc = {"id": rng.randrange(1 << 40), "name": "user-%06d" % rng.randrange(10 ** 6), "active": True,
           "score": round(rng.random() * 1000, 3), "tags": ["alpha", "beta", "gamma"],
           "address": {"street": "%d Main Street" % rng.randrange(1000), "city": "Springfield", "zip": "01234"},
           "history": [{"ts": 1700000000 + i, "v": i * 1.5} for i in range(3)], "note": ""}
    text = json.dumps(doc, separators=(",", ":"))
    pad = max(0, size - len(text))
    doc["note"] = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(pad))
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass
class BenchConfig:
    host: str = "127.0.0.1"
    port: int = 6379
    rate: float = 0.0              # ops/s over all connections; 0 = closed loop (each connection as fast as it can)
    clients: int = 50              # connections in total (over all processes)
    # worker processes; 0 = automatic: open loop, short probes at the full rate with 1, 2, 4 ... processes (up
    # to the CPUs it may use) until one keeps the schedule; closed loop, 1
    processes: int = 1
    ratio: tuple = (1, 1)          # SET:GET
    data_size: int = 256
    key_maximum: int = 100_000     # keys are <key_prefix>1 .. <key_prefix><key_maximum>, chosen uniformly
    key_prefix: str = "key:"
    prefill: int = 0               # SET keys 1..prefill before the measured run
    pipeline: int = 1              # commands per batch (closed loop: per round trip; open loop: sent together)
    duration: float = 10.0         # seconds of measured load; 0 = prefill only
    separate: bool = True          # SETs and GETs on separate connections
    cluster: bool = False
    tls: bool = False
    tls_cacert: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_skip_verify: bool = False
    sni: str = ""
    user: str = ""
    password: str = ""
    max_outstanding: int = 1000    # open loop: requests in flight per connection before sending waits
    drain: float = 5.0             # seconds to wait for replies after the last send
    connect_timeout: float = 10.0
    cpus: tuple = ()               # pin worker processes to these CPUs (empty: no pinning)
    client_names: bool = True      # CLIENT SETNAME durakv-bench:<role>:<n> on each connection
    seed: int = 0                  # random seed (0: a different one each run)
    # setget: SET key value / GET key; json: JSON.SET key . <doc> / JSON.GET key of data_size-byte documents;
    # bloom: BF.ADD / BF.EXISTS of item <key_prefix>N in filter bf:(N mod bloom_filters), so key_maximum items are
    # spread over that many filters (each scaling out as it fills)
    workload: str = "setget"
    bloom_filters: int = 100
    # open loop: a request sent more than late_ms after its scheduled time is late; the generator kept its
    # schedule when at most LATE_SHARE_MAX of the requests were
    late_ms: float = 1.0
    probe_s: float = 2.0           # processes=0, open loop: seconds of each probe run

    @property
    def auto_processes(self) -> bool:
        return self.processes == 0

    def __post_init__(self):
        if isinstance(self.ratio, str):
            self.ratio = parse_ratio(self.ratio)
        self.ratio = tuple(int(x) for x in self.ratio)
        if len(self.ratio) != 2 or min(self.ratio) < 0 or sum(self.ratio) == 0:
            raise ValueError("ratio must be SET:GET with non-negative integers, not both zero")
        if self.rate < 0:
            raise ValueError("rate must be >= 0")
        if self.clients < 1 or self.processes < 0 or self.pipeline < 1:
            raise ValueError("clients and pipeline must be >= 1, processes >= 1 (or 0: automatic)")
        if not self.late_ms > 0 or not self.probe_s > 0:
            raise ValueError("late-ms and the probe's seconds must be > 0")
        if self.key_maximum < 1 or self.data_size < 0:
            raise ValueError("key-maximum must be >= 1 and data-size >= 0")
        if self.bloom_filters < 1:
            raise ValueError("bloom-filters must be >= 1")
        if self.prefill < 0:
            self.prefill = self.key_maximum
        self.prefill = min(self.prefill, self.key_maximum)
        self.cpus = tuple(self.cpus or ())
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}")

    @property
    def open_loop(self) -> bool:
        return self.rate > 0

    def command_names(self) -> tuple:
        """The names of the write and the read requests of this run's workload."""
        return WORKLOADS[self.workload]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["ratio"] = "%d:%d" % self.ratio
        d.pop("password", None)
        d["cpus"] = list(self.cpus)
        return d


def parse_ratio(text: str) -> tuple:
    parts = str(text).split(":")
    if len(parts) != 2:
        raise ValueError(f"ratio {text!r}: expected SET:GET, e.g. 1:1 or 1:10")
    return int(parts[0]), int(parts[1])


@dataclass
class ClientSpec:
    """One logical client (one connection, or one per cluster node)."""
    index: int           # global index
    name: str            # CLIENT SETNAME value
    pattern: tuple       # kinds it sends in turn: (SET,), (GET,) or a mixed SET/GET cycle
    rate: float          # ops/s of this client (0: closed loop)
    phase: float = 0.0   # open loop: offset of its first send from the start, spreading sends evenly
    role: str = field(default="")


def plan_clients(cfg: BenchConfig) -> list:
    """The run's clients, grouped per worker process: a list (one per process) of lists of ClientSpec.

    With separate connections, SET and GET clients are split in proportion to the ratio (at least one each when
    both are non-zero), and the rate is split the same way, so each role's share of the ops is exact whatever the
    other role's latency. Without, every client sends the ratio's deterministic SET/GET cycle (like memtier).
    """
    sets, gets = cfg.ratio
    both = sets > 0 and gets > 0
    groups = []  # (role, pattern, n_clients, group_rate)
    if cfg.separate and both:
        n = max(cfg.clients, 2)
        n_set = min(n - 1, max(1, round(n * sets / (sets + gets))))
        groups.append(("SET", (SET,), n_set, cfg.rate * sets / (sets + gets)))
        groups.append(("GET", (GET,), n - n_set, cfg.rate * gets / (sets + gets)))
    elif not both:
        role, pattern = ("SET", (SET,)) if sets else ("GET", (GET,))
        groups.append((role, pattern, cfg.clients, cfg.rate))
    else:
        groups.append(("MIXED", (SET,) * sets + (GET,) * gets, cfg.clients, cfg.rate))

    # Deal each role's clients round-robin over the processes, so that every process gets its share of each.
    total = sum(g[2] for g in groups)
    nproc = max(1, min(cfg.processes or 1, total))
    plan = [[] for _ in range(nproc)]
    index = 0
    for role, pattern, n, group_rate in groups:
        per_client = group_rate / n if group_rate else 0.0
        for j in range(n):
            phase = (j / group_rate) if group_rate else 0.0
            plan[index % nproc].append(ClientSpec(index=index, name=f"durakv-bench:{role}:{j}", pattern=pattern,
                                                  rate=per_client, phase=phase, role=role))
            index += 1
    return plan


def client_count(cfg: BenchConfig) -> int:
    """Connections (logical clients) the run has: at least one per role with separate connections."""
    sets, gets = cfg.ratio
    return max(cfg.clients, 2) if cfg.separate and sets > 0 and gets > 0 else cfg.clients


def auto_process_cap(cfg: BenchConfig) -> int:
    """The most processes automatic splitting tries: one per CPU the generator may use (--cpus, else this
    process's affinity), and no more than there are clients to deal out."""
    import os
    if cfg.cpus:
        cpus = len(cfg.cpus)
    else:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
    return max(1, min(cpus, client_count(cfg)))
