"""A shard member and its shard's settings (cluster/settings.py: durability mode, async buffer, lease TTL) and
the cluster's users (the `auth` document, every shard's): read or seeded at start-up, applied here, changed by
compare-and-set, watched."""

import asyncio
import logging
from dataclasses import replace

from .. import messages
from ..cluster.settings import NONE_REFUSED, AuthSettings, SettingsError, ShardSettings
from ..cluster.store import StaleRevision
from ..protocol.resp import Deferred, ErrorReply
from .retry import retry_transient

log = logging.getLogger("durakv.replication")


class ShardSettingsWatcher:
    """The shard's settings and the cluster's users in the coordination store, as this node runs by them:
    `node.shard_settings`.

    Owns the settings and users as last read (`settings`, `revision`, `auth`, `auth_revision`) and the watches on
    them. Interface: `start(store)`, `change(name, value)` (CONFIG SET of a shard setting), `update(change)`,
    `share_acl(users)` (the server's ACL hands changes to it), `refresh()` (before serving as primary). A new
    lease TTL goes to the node's controller and renewer, read from the node when it arrives."""

    def __init__(self, node):
        self.node = node
        self.server = node.server
        self.shard = node.shard
        self.store = None
        self.settings = None            # the shard's settings as last read from the store (cluster/settings.py)
        self.revision = 0
        self.watch = None
        self.auth = None                # the cluster's users (cluster/settings.py AuthSettings) as last read
        self.auth_revision = 0
        self.auth_watch = None

    async def start(self, store):
        """Reads the shard's settings, storing this node's own flags as them if the shard has none yet (its
        first node), then applies them and watches for changes; then the same for the cluster's users."""
        self.store = store
        cfg = self.server.config
        if cfg["durability"] == "none":
            raise ValueError("durability none on the jetstream journal: " + NONE_REFUSED)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60.0
        while True:
            # Right after a cluster starts, or during an election, the bucket may not answer yet: retry.
            try:
                settings, revision = await self.store.get_shard_settings(self.shard)
                if settings is None:
                    mine = ShardSettings(durability=cfg["durability"],
                                         durability_buffer_ms=cfg["durability-buffer-ms"],
                                         lease_ttl_ms=cfg["lease-ttl-ms"])
                    try:
                        revision = await self.store.put_shard_settings(self.shard, mine, revision)
                        settings = mine
                        log.info("shard %s settings stored from this node's flags: durability %s", self.shard,
                                 mine.durability)
                    except StaleRevision:
                        continue
                break
            except (StaleRevision, SettingsError):
                raise
            except Exception as exc:  # noqa: BLE001 - no responders, timeouts while JetStream elects
                if loop.time() > deadline:
                    raise
                log.debug("reading the shard's settings: %r; retrying", exc)
                await asyncio.sleep(0.2)
        if settings.lease_ttl_ms is None:   # stored before the TTL was a shard setting: this node's flag becomes it
            settings = await self.update(
                lambda current: current if current.lease_ttl_ms is not None
                else replace(current, lease_ttl_ms=cfg["lease-ttl-ms"]))
            revision = self.revision
        self._apply_settings(settings, revision)
        self.watch = await retry_transient(
            "watching the shard's settings", lambda: self.store.watch_shard_settings(self.shard, self._apply_settings))
        await self._load_auth()

    async def _load_auth(self):
        """The cluster's users: read (stored from this node's own if the cluster has none yet, its first node),
        applied over this node's own, then watched; ACL changes on this node are stored there (share_acl)."""
        auth, revision = await retry_transient("reading the cluster's users", self.store.get_auth)
        if auth is None:
            try:
                revision = await self.store.put_auth(AuthSettings(acl=self.server.acl.settings()), 0)
                log.info("the cluster's users stored from this node's")
            except StaleRevision:
                pass
            auth, revision = await retry_transient("reading the cluster's users", self.store.get_auth)
        self._apply_auth(auth, revision)
        self.server.acl.share = self.share_acl
        self.auth_watch = await retry_transient("watching the cluster's users",
                                                lambda: self.store.watch_auth(self._apply_auth))

    def _apply_auth(self, auth, revision):
        if auth is None or revision < self.auth_revision:
            return
        self.auth, self.auth_revision = auth, revision
        acl = self.server.acl
        if auth.acl != acl.settings():
            try:
                acl.apply_settings(auth.acl)
                log.info("the cluster's ACL users applied (revision %d): %d users", revision, len(auth.acl["users"]))
            except ValueError as exc:
                log.error("the cluster's ACL users (revision %d) do not apply here, kept the previous ones: %s",
                          revision, exc)

    def _apply_settings(self, settings, revision):
        """Makes this node run by the shard's settings (a primary switches its journal's mode at once)."""
        if revision < self.revision:
            return
        self.settings, self.revision = settings, revision
        cfg = self.server.config
        for name, value in settings.config_values().items():
            if cfg[name] != value:
                log.info("shard %s setting %s: %s -> %s (revision %d)", self.shard, name, cfg[name], value,
                         revision)
                cfg.set(name, str(value))
        if settings.lease_ttl_ms is not None:
            # The controller's timing and the renewer's leases follow the shard's TTL from their next lease on.
            node = self.node
            if node.controller is not None:
                node.controller.set_ttl(settings.lease_ttl_ms)
            if node.renewer is not None:
                node.renewer.set_ttl(settings.lease_ttl_ms)

    async def change(self, name, value):
        """CONFIG SET of a shard setting on any node of the shard: compare-and-set in the store (retried on
        a concurrent change), then applied here at once, so on the primary the new mode holds for every write
        after the reply; the other nodes apply it from their watch."""
        return await self.update(lambda current: current.with_config(name, value))

    async def update(self, change, attempts=50):
        """Stores change(current settings) by compare-and-set, retried on a concurrent change; applies it here."""
        delay_s = 0.01
        for _ in range(attempts):
            settings, revision = await self.store.get_shard_settings(self.shard)
            wanted = change(settings or ShardSettings())
            try:
                if wanted != settings:
                    revision = await self.store.put_shard_settings(self.shard, wanted, revision)
            except StaleRevision:
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.2)
                continue
            self._apply_settings(wanted, revision)
            return wanted
        raise RuntimeError("the shard's settings kept changing; try again")

    def share_acl(self, users):
        """ServerAcl.share: the cluster's users stored in its `auth` document (compare-and-set, retried), which
        every node of every shard applies; a Deferred resolved with None or an ErrorReply."""
        d = Deferred()

        async def store():
            try:
                for _ in range(50):
                    current, revision = await self.store.get_auth()
                    wanted = replace(current, acl=users) if current is not None else AuthSettings(acl=users)
                    try:
                        revision = await self.store.put_auth(wanted, revision)
                    except StaleRevision:
                        await asyncio.sleep(0.02)
                        continue
                    self._apply_auth(wanted, revision)
                    d.resolve(None)
                    return
                raise RuntimeError("the cluster's users kept changing")
            except Exception as exc:  # noqa: BLE001 - the client is told; its change holds on this node only
                log.warning("the cluster's ACL users could not be stored: %r", exc)
                d.resolve(ErrorReply(messages.ACL_SHARE_FAILED.format(exc or type(exc).__name__)))
        self.server.loop.create_task(store())
        return d

    async def refresh(self):
        """Before serving as primary: the newest settings, in case the watch has not delivered them yet."""
        try:
            settings, revision = await asyncio.wait_for(self.store.get_shard_settings(self.shard), 2.0)
        except Exception as exc:  # noqa: BLE001 - the store may be electing: the watched settings stand
            log.warning("could not re-read the shard's settings before promotion (%r); using revision %d",
                        exc, self.revision)
            return
        if settings is not None:
            self._apply_settings(settings, revision)
