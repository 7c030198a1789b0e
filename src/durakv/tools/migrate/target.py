"""A durakv server or cluster as the target of an import: writes routed by slot, pipelined, every reply checked.

The writer finds the target's primaries with CLUSTER SLOTS (a standalone server, or a node with cluster mode
off, is one node that takes every key), keeps one connection per primary and sends each write to the owner of
its key's slot, in batches per node. A write counts as done when its reply arrived: on a durakv primary in
`sync` mode a reply leaves only after the journal committed the write, so "acknowledged" means durable.
MOVED / ASK (a reshard or a failover moved the slot) refresh the map and resend the write; TRYAGAIN, LOADING,
CLUSTERDOWN and MASTERDOWN are retried with a bounded backoff; any other error reply fails the run
(TargetError), naming the key and the error. A Transaction is sent as MULTI ... EXEC to one node and counts
as one write, acknowledged when EXEC's reply holds no error.

A dropped connection leaves the writes in flight on it unknown (run or not). RESTORE REPLACE runs the same
twice, so the importer sends them again (resend_on_drop); a replication stream's INCR or APPEND does not, so
`durakv migrate` asks for TargetLost instead and starts that source over with a full sync.
"""

import time

from ...protocol.client import RespClient, RespError
from ...routing import key_slot
from ..bench.slots import SlotMap, parse_cluster_slots, parse_redirect

RETRYABLE = ("TRYAGAIN", "LOADING", "CLUSTERDOWN", "MASTERDOWN")
RETRY_DEADLINE_S = 60.0        # how long one write may keep meeting retryable errors before the run fails
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
BATCH_WRITES = 256             # writes per node per pipeline round trip
BATCH_BYTES = 4 << 20          # ... or this many bytes of arguments, whichever first


class TargetError(Exception):
    """The target refused a write for good (an error reply that is not a redirect or a retryable state)."""


class TargetUnavailable(TargetError):
    """No slot map to write by (no node answers CLUSTER SLOTS, or some slots have no primary: a failover)."""


class TargetLost(TargetError):
    """A connection to a target node dropped with writes in flight (resend_on_drop off)."""


class Transaction(tuple):
    """The commands of one source transaction (argv tuples), sent as MULTI ... EXEC to the node of its key."""
    __slots__ = ()


class Target:
    """Connections to every primary of the target; write(db, args) queues, flush() sends and checks."""

    def __init__(self, host, port, ssl_context=None, user=None, password=None, timeout_s=30.0,
                 batch_writes=BATCH_WRITES, batch_bytes=BATCH_BYTES, resend_on_drop=True, seeds=()):
        self.host, self.port = host, port
        self.ssl_context = ssl_context
        self.user, self.password = user, password
        self.timeout_s = timeout_s
        self.batch_writes, self.batch_bytes = batch_writes, batch_bytes
        self.resend_on_drop = resend_on_drop
        self.conns = {}                      # (host, port) -> RespClient
        self.db_of = {}                      # (host, port) -> the database its connection has selected
        self.pending = {}                    # (host, port) -> [(db, args)], not sent yet
        self.pending_bytes = {}
        self.acknowledged = 0                # writes whose reply was not an error
        self.redirects = 0
        self.retries = 0
        self.last_retry = None               # the last retryable refusal, for the report
        self._retry_streak = 0               # backoffs since the last batch that went through: the delay grows
        self._retry_until = None             # the deadline of the writes being retried (monotonic s)
        seed, last = None, None
        for addr in [(host, port)] + [a for a in seeds if a != (host, port)]:
            try:
                seed = self._connect(addr)
            except OSError as exc:        # the given node is down (a failover): another one known before
                last = exc
                continue
            self.host, self.port = addr
            break
        if seed is None:
            raise last
        info = seed.execute("INFO", "cluster").decode("utf-8", "replace")
        self.cluster = "cluster_enabled:1" in info
        self.databases = 16
        if self.cluster:
            self.refresh()
            try:
                reply = seed.execute("CONFIG", "GET", "cluster-databases")
                self.databases = int(reply[1]) if reply else 1
            except RespError:
                self.databases = 1       # a server without numbered databases in cluster mode
        else:
            self.slots = SlotMap(default=(host, port))

    # -- connections -------------------------------------------------------------------------------------
    def _connect(self, addr):
        conn = self.conns.get(addr)
        if conn is None:
            conn = RespClient(addr[0], addr[1], timeout_s=self.timeout_s, ssl_context=self.ssl_context)
            if self.password is not None:
                if self.user:
                    conn.execute("AUTH", self.user, self.password)
                else:
                    conn.execute("AUTH", self.password)
            self.conns[addr] = conn
            self.db_of[addr] = 0
        return conn

    def refresh(self):
        """Reloads the slot map from any node that answers CLUSTER SLOTS (the seed first)."""
        last = None
        for addr in [(self.host, self.port)] + [a for a in self.conns if a != (self.host, self.port)]:
            try:
                reply = self._connect(addr).execute("CLUSTER", "SLOTS")
            except (OSError, RespError) as exc:
                last = exc
                self._drop(addr)
                continue
            self.slots = SlotMap(parse_cluster_slots(reply, addr[0]))
            if not self.slots.covered():
                raise TargetUnavailable("the target cluster does not cover every slot (CLUSTER SLOTS)")
            return
        raise TargetUnavailable(f"no node of the target answers CLUSTER SLOTS: {last}")

    def _drop(self, addr):
        conn = self.conns.pop(addr, None)
        if conn is not None:
            conn.close()

    def primaries(self):
        return self.slots.addresses() if self.cluster else [(self.host, self.port)]

    def close(self):
        for addr in list(self.conns):
            self._drop(addr)

    # -- writes ------------------------------------------------------------------------------------------
    def check_db(self, db):
        if db >= self.databases:
            raise TargetError(f"the source has keys in database {db}; the target has {self.databases} "
                              f"database(s) (cluster-databases)")

    def write(self, db, args, key=None):
        """Queues args (a write of `key`, or of no key: sent to every primary) in database db."""
        if key is None:
            for addr in self.primaries():
                self._queue(addr, db, args, None)
            return
        self._queue(self.slots.node_for(key_slot(key)), db, args, key)

    def _queue(self, addr, db, args, key, send=True):
        batch = self.pending.setdefault(addr, [])
        batch.append((db, args, key))
        if isinstance(args, Transaction):
            size = self.pending_bytes.get(addr, 0) + sum(len(a) for argv in args for a in argv)
        else:
            size = self.pending_bytes.get(addr, 0) + sum(len(a) for a in args)
        self.pending_bytes[addr] = size
        if send and (len(batch) >= self.batch_writes or size >= self.batch_bytes):
            self._send(addr)

    def flush(self):
        """Sends every queued write and waits for all their replies."""
        while self.pending:
            addr = next(iter(self.pending))
            self._send(addr)

    def _send(self, addr):
        batch = self.pending.pop(addr, [])
        self.pending_bytes.pop(addr, None)
        if not batch:
            return
        redo = []
        try:
            conn = self._connect(addr)
            commands, owners = [], []          # owners: (what the reply answers, index in batch)
            current = self.db_of[addr]
            for i, (db, args, _key) in enumerate(batch):
                if db != current:
                    commands.append(("SELECT", str(db)))
                    owners.append(("select", None))
                    current = db
                if isinstance(args, Transaction):
                    commands.append(("MULTI",))
                    owners.append(("queued", i))
                    commands.extend(args)
                    owners.extend(("queued", i) for _ in args)
                    commands.append(("EXEC",))
                    owners.append(("exec", i))
                else:
                    commands.append(args)
                    owners.append(("write", i))
            replies = conn.pipeline(commands)
            self.db_of[addr] = current
        except OSError as exc:
            self._drop(addr)
            if not self.resend_on_drop:
                self.retries += 1             # the caller's full sync retries these writes
                raise TargetLost(f"the connection to {addr[0]}:{addr[1]} failed with {len(batch)} write(s) in "
                                 f"flight: {exc}") from exc
            # each write goes again to its slot's owner then (one that had run before the drop runs twice)
            self._backoff([(db, args, key, addr) for db, args, key in batch],
                          "the connection to %s:%d failed" % addr)
            return
        queued_error = {}                      # batch index of a transaction -> its first refusal
        for reply, (what, owner) in zip(replies, owners):
            if what == "select":
                if isinstance(reply, RespError):
                    raise TargetError(f"SELECT on {addr[0]}:{addr[1]}: {reply}")
                continue
            db, args, key = batch[owner]
            if what == "queued":
                if isinstance(reply, RespError):
                    queued_error.setdefault(owner, str(reply))
                continue
            if what == "exec":
                # a queued command's MOVED makes EXEC answer EXECABORT: the refusal that counts is the first
                text = queued_error.get(owner) or (str(reply) if isinstance(reply, RespError) else None)
                if text is None:
                    failed = [r for r in reply if isinstance(r, RespError)] if isinstance(reply, list) else []
                    if failed:
                        raise TargetError(f"MULTI/EXEC of {len(args)} command(s) ({args[0][0]} {key or b''!r} "
                                          f"...) on {addr[0]}:{addr[1]}: {failed[0]}")
                    self.acknowledged += 1
                    continue
            elif not isinstance(reply, RespError):
                self.acknowledged += 1
                continue
            else:
                text = str(reply)
            name = "MULTI/EXEC" if what == "exec" else args[0]
            redirect = parse_redirect(text, addr[0])
            if redirect is not None and key is not None:
                self.redirects += 1
                redo.append((db, args, key, addr))
            elif text.split(" ", 1)[0] in RETRYABLE:
                self.last_retry = f"{name} on {addr[0]}:{addr[1]}: {text}"
                redo.append((db, args, key, addr))
            else:
                raise TargetError(f"{name} {key or b''!r} on {addr[0]}:{addr[1]}: {text}")
        if redo:
            self._backoff(redo, "redirected or retryable replies")
        else:
            self._retry_until = None
            self._retry_streak = 0

    def _backoff(self, writes, why):
        """Writes that must go again (after a redirect, a failover or a retryable error): the slot map is
        reloaded and each is queued to its owner, within RETRY_DEADLINE_S. Only queued: flush() (or the next
        full batch) sends them, so a run of refusals is a loop there and never a recursion here."""
        if self._retry_until is None:
            self._retry_until = time.monotonic() + RETRY_DEADLINE_S
        deadline = self._retry_until
        delay_s = min(RETRY_FIRST_S * (2 ** min(self._retry_streak, 16)), RETRY_MAX_S)
        self._retry_streak += 1
        while True:
            self.retries += 1
            if time.monotonic() > deadline:
                raise TargetError(f"{why}: still failing after {RETRY_DEADLINE_S:g} s"
                                  + (f"; last: {self.last_retry}" if self.last_retry else ""))
            time.sleep(delay_s)
            try:
                if self.cluster:
                    self.refresh()
                else:
                    self._connect((self.host, self.port))
                break
            except (OSError, TargetError) as exc:
                if time.monotonic() > deadline:
                    raise TargetError(f"{why}, and the target did not recover in {RETRY_DEADLINE_S:g} s: {exc}")
                delay_s = min(delay_s * 2, RETRY_MAX_S)
        for db, args, key, addr in writes:
            if key is None:
                self._queue(addr, db, args, None, send=False)   # keyless: again to the node it was meant for
            else:
                self._queue(self.slots.node_for(key_slot(key)), db, args, key, send=False)
