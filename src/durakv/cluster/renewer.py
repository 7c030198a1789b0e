"""Renewing the primary's lease on a thread of its own, so that a busy event loop does not cost a failover.

docs/design.md "Bounds on the write path": the lease is renewed whether or not the event loop is busy. The loop can
be held for seconds by work that is not a fault: a script inside busy-reply-threshold (the loop waits in the
EVAL handler, scripting/runner.py), a heavy pipelined load, a large export. When the loop renewed the lease
itself (Controller._primary_tick), such a wait longer than the lease let a replica take over and the old primary
re-execute, or left the primary refusing writes with -CLUSTERDOWN while nobody took over. So a LeaseRenewer
thread runs its own asyncio loop with its own NATS connection and does the primary's compare-and-set renewals;
the controller on the server's loop still decides everything else.

What stays with the event loop (cluster/controller.py): step-down, hand-over and promotion. The thread renews
only a lease the loop granted it (`grant`, after a promotion finished) and stops the moment the loop revokes it
(`revoke`: a step-down or a hand-over). It never steps down itself: when a compare-and-set loses and the lease it
reads then is someone else's, it stops renewing and records that in `lost`; the loop's own read of the lease
decides what follows.

What the thread publishes: every renewal that landed calls the grant's `publish(valid_until_ms)` with
`sent + ttl - margin` on the monotonic clock, `sent` being when it sent the renewal, exactly the rule the
controller used (docs/architecture.md "Leases are durations on each node's own clock"). The gate the loop checks
(`LeaseGate.serving_error`, replication/lease.py) reads that value.

A hung process must still fail over. SIGSTOP stops every thread anyway; a main thread stuck in a loop or a
deadlock does not, so the thread renews only while the event loop shows a sign of life: `loop_alive_ms()` (the
monotonic time of the loop's latest heartbeat, server/loopstats.py) no older than `stall_limit_ms()`
(`lease-renew-max-loop-stall-ms`, 30 s by default, and never less than busy-reply-threshold + the TTL, since a
script may hold the loop for busy-reply-threshold by design). Past it the renewals stop, the lease runs out, a
replica takes over one lease later; the loop, if it ever runs again, reads a lease held by someone else and
re-executes.
"""

import asyncio
import logging
import threading
import time

from .controller import margin_ms
from .store import Lease, StaleRevision

log = logging.getLogger("durakv.lease")


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class _Grant:
    """One lease the event loop asked the thread to renew: the holder's fields and the revision to start from."""

    __slots__ = ("holder", "epoch", "addr", "az", "revision", "publish")

    def __init__(self, lease, revision, publish):
        self.holder, self.epoch, self.addr, self.az = lease.holder, lease.epoch, lease.addr, lease.az
        self.revision = revision
        self.publish = publish


class LeaseRenewer:
    """The renewal thread of one shard member. Called from the event loop: grant, revoke, quiesce, set_ttl,
    close, and the read-only status fields. Everything else runs on the thread.

    open_store: `async () -> CoordinationStore`, called on the thread's loop (its own NATS connection);
    publish(valid_until_ms): what a landed renewal tells the node (called on the thread)."""

    RETRY_STALE = 3          # compare-and-set retries in a row after re-reading a lease that is still ours

    def __init__(self, open_store, shard, ttl_ms, publish, loop_alive_ms, stall_limit_ms, clock_ms=None,
                 mono_ms=None, name="durakv-lease"):
        self._open_store = open_store
        self.shard = shard
        self.ttl_ms = ttl_ms
        self._publish = publish
        self.loop_alive_ms = loop_alive_ms
        self.stall_limit_ms = stall_limit_ms
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.mono_ms = mono_ms or _monotonic_ms
        self._lock = threading.Lock()      # grant/revoke against publishing a renewal
        self._grant = None
        self._in_flight = False            # a compare-and-set has been sent and not answered
        self._closed = False
        self._wake = None                  # asyncio.Event on the thread's loop
        self._loop = None
        # status, read by the event loop (single assignments: the GIL makes each one atomic)
        self.renewals = 0                  # renewals that landed
        self.failures = 0                  # renewals in a row that failed (store unreachable, timeouts)
        self.last_error = ""
        self.lost = None                   # why the thread stopped renewing the current grant (someone else's lease)
        self.renewed_until_ms = 0          # wall clock: the expires_ms of its last landed renewal
        self.stalled_ms = 0                # >0 while it does not renew because the event loop shows no life
        self.stall_pauses = 0              # times it stopped renewing for that reason
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- called from the event loop -------------------------------------------------------------------
    def start(self):
        self._thread.start()
        return self

    def grant(self, lease, revision):
        """Renew `lease` (holder, epoch, addr, az; this node's) from now on; the store holds it at `revision`."""
        with self._lock:
            self._grant = _Grant(lease, revision, self._publish)
            self.lost = None
            self.failures = 0
        self._poke()

    def revoke(self):
        """Stop renewing: nothing is published after this returns (a renewal in flight may still land in the store;
        `quiesce` waits for its answer)."""
        with self._lock:
            self._grant = None

    async def quiesce(self, timeout_s=3.0):
        """Waits (on the event loop) until no renewal is in flight, so that a read of the lease after it sees the
        renewer's last write. The store's lease requests time out after 1 s, so this normally ends within it."""
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return not self._in_flight

    def set_ttl(self, ttl_ms):
        self.ttl_ms = ttl_ms

    @property
    def granted(self) -> bool:
        return self._grant is not None

    def close(self):
        self._closed = True
        self.revoke()
        self._poke()

    def _poke(self):
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass            # its loop has ended (close)

    # -- the thread ---------------------------------------------------------------------------------
    def _run(self):
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main(loop))
        except Exception:  # noqa: BLE001 - logged: without this thread the lease runs out and a replica takes over
            log.exception("the lease renewer thread failed; this node's lease will run out")
        finally:
            loop.close()

    async def _main(self, loop):
        self._wake = asyncio.Event()
        self._loop = loop
        store = None
        delay_s = 0.1
        while not self._closed:
            interval_s = max(0.02, self.ttl_ms / 10000.0)     # the controller's tick: ten renewals a lease
            grant = self._grant
            # The connection is opened before any grant, so that a replica just promoted renews at once.
            if store is None:
                try:
                    store = await self._open_store()
                    delay_s = 0.1
                except Exception as exc:  # noqa: BLE001 - NATS unreachable: the lease clock decides
                    self._failed(exc)
                    await self._sleep(delay_s)
                    delay_s = min(delay_s * 2, 1.0)
                    continue
            if grant is None or self.lost is not None:
                await self._sleep(1.0)
                continue
            if not self._loop_alive():
                await self._sleep(interval_s)
                continue
            await self._renew(store, grant)
            await self._sleep(interval_s)
        if store is not None:
            try:
                await store.nc.close()
            except Exception:  # noqa: BLE001 - closing at exit
                pass

    async def _sleep(self, seconds):
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _loop_alive(self) -> bool:
        """Whether the event loop beat recently enough for this thread to renew for it."""
        silent_ms = self.mono_ms() - self.loop_alive_ms()
        limit_ms = self.stall_limit_ms()
        if silent_ms <= limit_ms:
            if self.stalled_ms:
                log.warning("the event loop runs again after %d ms without a sign of life; renewing the lease again",
                            silent_ms)
                self.stalled_ms = 0
            return True
        if not self.stalled_ms:
            self.stall_pauses += 1
            log.error("the event loop has shown no sign of life for %d ms (limit %d ms, "
                      "lease-renew-max-loop-stall-ms): not renewing the lease, so that a replica takes over "
                      "from this hung process", silent_ms, limit_ms)
        self.stalled_ms = silent_ms
        return False

    def _failed(self, exc):
        self.failures += 1
        self.last_error = "%s: %s" % (type(exc).__name__, exc)

    async def _renew(self, store, grant):
        for _attempt in range(self.RETRY_STALE):
            ttl_ms = self.ttl_ms
            sent, sent_mono = self.clock_ms(), self.mono_ms()
            lease = Lease(grant.holder, grant.epoch, grant.addr, grant.az, sent + ttl_ms, ttl_ms=ttl_ms)
            with self._lock:
                # Checked and marked together: once revoke() returned, no renewal of that grant starts, and
                # quiesce() waits for the one already sent (a hand-over then reads the revision it left).
                if self._grant is not grant:
                    return
                self._in_flight = True
            try:
                revision = await store.put_lease(self.shard, lease, grant.revision)
            except StaleRevision:
                self._in_flight = False
                if not await self._still_ours(store, grant):
                    return
                continue          # a renewal whose answer was lost had landed: again from its revision
            except Exception as exc:  # noqa: BLE001 - a timeout or a lost connection: the write may have landed
                self._in_flight = False
                self._failed(exc)
                return
            self._in_flight = False
            with self._lock:
                if self._grant is not grant:
                    return        # revoked meanwhile: nothing is published after revoke()
                grant.revision = revision
                grant.publish(sent_mono + ttl_ms - margin_ms(ttl_ms))
                self.renewed_until_ms = sent + ttl_ms
                self.renewals += 1
                if self.failures:
                    log.info("lease renewed again after %d failed attempts (%s)", self.failures, self.last_error)
                self.failures = 0
            return

    async def _still_ours(self, store, grant) -> bool:
        """After a lost compare-and-set: whether the stored lease is still this holder's (then its revision is
        adopted); if not, renewals of this grant stop and `lost` says why."""
        try:
            current, revision = await store.get_lease(self.shard)
        except Exception as exc:  # noqa: BLE001 - retried at the next interval
            self._failed(exc)
            return False
        if current is not None and current.holder == grant.holder and current.epoch == grant.epoch \
                and not current.handover_to:
            grant.revision = revision
            return True
        holder = "no lease" if current is None else "the lease of %s (epoch %d)" % (current.holder, current.epoch)
        with self._lock:
            if self._grant is grant:
                self.lost = holder
        log.warning("lease renewal lost a compare-and-set to %s; renewals stop, the event loop decides", holder)
        return False
