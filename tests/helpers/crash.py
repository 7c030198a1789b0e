"""Writers that record every acknowledged write, for crash and failover tests (Jepsen-style history)."""

import threading
import time

import valkey


class Writer(threading.Thread):
    """Sets unique keys `w{n}:{i}` and records each acknowledged one with its ack time.

    A write whose reply never arrived (connection dropped) is 'info': it may or may not have happened,
    so it is neither counted as acknowledged nor as lost."""

    def __init__(self, port, n, stop_event, max_ops=1_000_000, max_seconds=60.0, pipeline=1):
        super().__init__(daemon=True)
        self.port = port
        self.n = n
        self.stop_event = stop_event
        self.max_ops = max_ops
        self.max_seconds = max_seconds
        self.pipeline = pipeline
        self.acked = {}        # key -> ack time (monotonic)
        self.errors = []       # error replies (not connection drops)
        self.infos = 0         # writes with unknown outcome
        self.i = 0

    def run(self):
        client = valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=10)
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self.stop_event.is_set() and self.i < self.max_ops and time.monotonic() < deadline:
                keys = [f"w{self.n}:{self.i + j}" for j in range(self.pipeline)]
                self.i += self.pipeline
                try:
                    if self.pipeline == 1:
                        ok = client.set(keys[0], keys[0])
                        results = [ok]
                    else:
                        p = client.pipeline(transaction=False)
                        for k in keys:
                            p.set(k, k)
                        results = p.execute(raise_on_error=False)
                except (valkey.ConnectionError, valkey.TimeoutError):
                    self.infos += len(keys)
                    return
                now = time.monotonic()
                for k, res in zip(keys, results):
                    if res is True:
                        self.acked[k] = now
                    else:
                        self.errors.append(repr(res))
        finally:
            client.close()


def run_writers(port, count, stop_event, **kw):
    writers = [Writer(port, n, stop_event, **kw) for n in range(count)]
    for w in writers:
        w.start()
    return writers


def missing_acked(client, writers):
    """Acknowledged keys that are not in the server: (key, ack_time) pairs."""
    missing = []
    for w in writers:
        keys = list(w.acked)
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            values = client.mget(chunk)
            for k, v in zip(chunk, values):
                if v is None or v.decode() != k:
                    missing.append((k, w.acked[k]))
    return missing
