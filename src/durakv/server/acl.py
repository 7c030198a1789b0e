"""The server's ACL state: its users (commands/acl/store.py), the ACL LOG, the aclfile, and what a change of
users does to connected clients. This object is the one port ACL handlers reach (`ctx.server.acl`), and the
command path asks it to admit every command (plain, queued in MULTI, re-checked at EXEC, called by a script,
re-run after blocking).

Sessions name their user with `session.acl_user` (None: the default user, which is never replaced, only
changed) and `session.user` (its name as CLIENT LIST shows it).
"""

import logging
import os
import shlex

from .. import messages
from ..commands.acl import check as acl_check, log as acl_log, passwords as acl_passwords
from ..commands.acl import pubsub as acl_pubsub, rules as acl_rules, store as acl_store
from ..errors import ConfigError
from ..protocol.resp import Deferred, ErrorReply

log = logging.getLogger("durakv.acl")

_EXEC_REASON = {acl_check.DENIED_CMD: messages.ACL_EXEC_REASON_CMD,
                acl_check.DENIED_KEY: messages.ACL_EXEC_REASON_KEY,
                acl_check.DENIED_CHANNEL: messages.ACL_EXEC_REASON_CHANNEL,
                acl_check.DENIED_DB: messages.ACL_EXEC_REASON_DB}
AUTH_LOG_INTERVAL_MS = 1000  # at most one line per interval about failed AUTH, with the count it stands for


def _denial(user, cmd, args, session, ndbs):
    """acl_check.check's (reason, argument position) for a denied command, or None; a user allowed everything
    (no ACL rules: the common case) is not walked. The db= rules look at `session`'s current database."""
    return None if user.unrestricted else acl_check.check(user, cmd, args, (session.db_id, ndbs))


class ServerAcl:
    def __init__(self, server, random_bytes=os.urandom):
        self.server = server
        self.random_bytes = random_bytes
        cfg = server.config
        self.users = acl_store.Users(pubsub_all=cfg["acl-pubsub-default"] == "allchannels")
        self.log = acl_log.AclLog(cfg["acllog-max-len"])
        self.filename = cfg["aclfile"]
        self._auth_log_next_ms = 0
        self._auth_suppressed = 0
        # Start-up order as Valkey's: requirepass sets default's password, then `user` lines or the aclfile.
        self.users.set_default_password(cfg["requirepass"].encode("utf-8", "surrogateescape"))
        if self.filename and cfg.user_lines:
            raise ConfigError("Configuring durakv with users defined in the config file and at the same setting "
                              "an ACL file path is invalid. This setup is very likely to lead to configuration "
                              "errors and security holes, please define either an ACL file or declare users "
                              "directly in the config file, but not both.")
        try:
            self.users.load_config_users(cfg.user_lines)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for u in self.users.sorted_users():
            if not u.enabled:
                log.info("The user '%s' is disabled (there is no 'on' modifier in the user description). Make "
                         "sure this is not a configuration error.", u.name.decode("utf-8", "replace"))
        if self.filename:
            try:
                self.users.replace_all(self.users.parse_file(self._read_file(), self.filename))
            except (OSError, ValueError) as exc:
                raise ConfigError("Aborting durakv startup because of ACL errors: %s" % exc) from None
        cfg.listeners.append(self._on_config_set)
        cfg.rewrite_extra_lines = self._rewrite_lines
        # A shard member sets this (replication/shard_settings.py): share(settings) -> Deferred resolved with None once
        # the users are stored for the whole shard, or with an ErrorReply.
        self.share = None
        self._applying = False
        self.refresh()

    # -- configuration ------------------------------------------------------------------------------------
    def _on_config_set(self, name, value):
        if name == "requirepass":
            self.users.set_default_password(value.encode("utf-8", "surrogateescape"))
            if self.share is not None and not self._applying:
                self.share(self.settings())   # the default user changed: the shard's users follow
        elif name == "acllog-max-len":
            self.log.max_len = value
        elif name == "acl-pubsub-default":
            self.users.pubsub_all = value == "allchannels"

    def _rewrite_lines(self):
        """CONFIG REWRITE keeps the users in the config file unless an aclfile holds them (rewriteConfigUserOption)."""
        if self.filename:
            return []
        out = []
        for u in self.users.sorted_users():
            tokens = [b"user", u.name] + u.describe().split(b" ")
            out.append(" ".join(shlex.quote(t.decode("utf-8", "surrogateescape")) for t in tokens))
        return out

    def _path(self):
        return self.filename if os.path.isabs(self.filename) else os.path.join(self.server.dir, self.filename)

    def _read_file(self) -> bytes:
        try:
            with open(self._path(), "rb") as f:
                return f.read()
        except OSError as exc:
            raise OSError(messages.ACL_FILE_OPEN.format(self.filename, exc.strerror)) from None

    # -- whose commands -----------------------------------------------------------------------------------
    def user_of(self, session):
        u = session.acl_user
        return self.users.default if u is None else u

    def auth_required(self) -> bool:
        """Whether a new connection starts unauthenticated (Valkey's clientSetDefaultAuth)."""
        return self.users.default_requires_auth()

    def _set_default(self, session):
        session.acl_user = None
        session.user = "default"

    def reset_session(self, session):
        """RESET: back to the default user, authenticated only if default needs no password."""
        self._set_default(session)
        session.authenticated = not self.users.default_requires_auth()

    def refresh(self):
        """The pipeline checks ACLs only while some user is restricted (the default user too): with none,
        no command can be denied and the check is skipped altogether. Called after every change of users."""
        restricted = any(not u.unrestricted for u in self.users.sorted_users())
        self.server.pipeline.acl = self if restricted else None

    # -- admission (the one check, from every path) --------------------------------------------------------
    def check(self, session, cmd, args, context, run=None):
        """The pipeline's ACL step, for every path: a client's command (context 'toplevel'/'multi', a blocked
        retry included), EXEC's re-check of a queued one ('exec') and a script's command ('lua', run is the
        ScriptRun). None or the -NOPERM text (the denial is logged and counted)."""
        if context == "exec":
            return self.exec_denied(session, cmd, args)
        if context == "lua":
            return self.script_denied(run.session, run.caller, run.command, cmd, args)
        return self.admit(session, cmd, args)

    def admit(self, session, cmd, args):
        """processCommand's ACL step: None or the -NOPERM reply text (the denial is logged and counted)."""
        user = session.acl_user or self.users.default
        denied = _denial(user, cmd, args, session, self._ndbs())
        if denied is None:
            return None
        reason, pos = denied
        context = acl_log.CTX_MULTI if session.in_multi else acl_log.CTX_TOPLEVEL
        self._log_denial(session, user, cmd, args, reason, pos, context, cmd.fullname)
        return "NOPERM " + acl_check.denial_message(reason, user, cmd, args[pos])

    def exec_denied(self, session, cmd, args):
        """execCommand's re-check of a queued command (the rules may have changed since it was queued)."""
        user = session.acl_user or self.users.default
        denied = _denial(user, cmd, args, session, self._ndbs())
        if denied is None:
            return None
        reason, pos = denied
        self._log_denial(session, user, cmd, args, reason, pos, acl_log.CTX_MULTI, "exec")
        return messages.NOPERM_EXEC.format(_EXEC_REASON[reason])

    def script_denied(self, script_session, caller, caller_args, cmd, args):
        """scriptVerifyACL for server.call: the script's client runs as the caller's user."""
        if caller is None:
            return None  # no client behind it (recovery, internal runs)
        user = caller.acl_user or self.users.default
        script_session.acl_user = caller.acl_user
        denied = _denial(user, cmd, args, script_session, self._ndbs())
        if denied is None:
            return None
        reason, pos = denied
        top = caller_args[0].lower().decode("utf-8", "replace") if caller_args else "eval"
        self._log_denial(caller, user, cmd, args, reason, pos, acl_log.CTX_LUA, top)
        return messages.NOPERM_SCRIPT.format(acl_check.denial_message(reason, user, cmd, args[pos]))

    def allowed(self, caller, cmd, args) -> bool:
        """server.acl_check_cmd: the check alone, nothing logged."""
        user = self.users.default if caller is None or caller.acl_user is None else caller.acl_user
        db = (caller.db_id, self._ndbs()) if caller is not None else None
        return acl_check.check(user, cmd, args, db) is None

    def _ndbs(self) -> int:
        return len(self.server.keyspace.dbs)

    def _log_denial(self, session, user, cmd, args, reason, pos, context, current):
        # the command's name for a denied command or current database (Valkey logs its full name), else the
        # argument: the key, the channel, the database number
        obj = cmd.fullname.encode() if reason == acl_check.DENIED_CMD or (
            reason == acl_check.DENIED_DB and pos == 0) else args[pos]
        self.log.add(reason, context, obj, user.name, self.client_info(session, current), self.server.clock_ms())

    def client_info(self, session, current) -> bytes:
        """CLIENT INFO of the session with `current` as its command (Valkey logs the command being refused)."""
        conn = self.server.clients.get(session.id)
        if conn is None:
            return b""
        from .services import client_line
        return client_line(conn, self.server.clock_ms(), current).encode("utf-8", "replace")

    # -- AUTH ---------------------------------------------------------------------------------------------
    def authenticate(self, session, username: bytes, password: bytes, argv0: bytes) -> bool:
        """AUTH / HELLO AUTH. On success the session runs as that user; a failure is logged (ACL LOG, INFO
        acl_access_denied_auth, a rate-limited log line) and changes nothing."""
        user = self.users.get(username)
        ok = user is not None and user.check_password(password)
        if user is None:
            acl_passwords.hash_password(password)  # the same work whether or not the user exists
        if ok:
            session.acl_user = None if user is self.users.default else user
            session.user = username.decode("utf-8", "replace")
            session.authenticated = True
            return True
        context = acl_log.CTX_MULTI if session.in_multi else acl_log.CTX_TOPLEVEL
        now = self.server.clock_ms()
        self.log.add(acl_check.DENIED_AUTH, context, argv0, username,
                     self.client_info(session, argv0.lower().decode("utf-8", "replace")), now)
        if now >= self._auth_log_next_ms:
            suppressed = self._auth_suppressed
            log.warning("AUTH failed for user '%s' from client id=%d addr=%s%s",
                        username[:128].decode("utf-8", "replace"), session.id, session.addr,
                        " (%d more failed attempts since the last line)" % suppressed if suppressed else "")
            self._auth_suppressed = 0
            self._auth_log_next_ms = now + AUTH_LOG_INTERVAL_MS
        else:
            self._auth_suppressed += 1
        return False

    # -- changes of users and what they do to clients ------------------------------------------------------
    def setuser(self, name: bytes, ops, current):
        """ACL SETUSER: None or the error text. Subscribers of that user whose channels are no longer allowed
        are disconnected."""
        if acl_rules.has_spaces(name):
            return messages.ACL_USERNAME_SPACES
        try:
            staged = self.users.stage(name, ops)
        except acl_store.SetUserError as exc:
            return "ERR " + exc.text
        existing = self.users.get(name)
        if existing is not None:
            upcoming = acl_pubsub.upcoming_channels(staged, existing)
            if upcoming is not None:
                for conn in self._connections_of(existing):
                    if self._revoked(conn, upcoming):
                        self._drop(conn, current)
        self.users.commit(name, staged)
        self.refresh()
        return None

    def deluser(self, names, current):
        """ACL DELUSER: how many were removed. Clients of a removed user are disconnected (the one that asked
        after its reply)."""
        deleted = 0
        for name in names:
            if name == b"default":
                continue
            u = self.users.get(name)
            if u is None:
                continue
            conns = self._connections_of(u)
            self.users.delete(name)
            deleted += 1
            for conn in conns:
                self._set_default(conn.session)
                conn.session.authenticated = False
                self._drop(conn, current)
        self.refresh()
        return deleted

    def _connections_of(self, user):
        default = self.users.default
        return [c for c in self.server.client_connections()
                if (c.session.acl_user or default) is user]

    @staticmethod
    def _revoked(conn, upcoming) -> bool:
        subs = conn.subs
        if subs is None or not subs.total():
            return False
        return acl_pubsub.subscriptions_revoked(upcoming, subs.channels, subs.patterns, subs.shard)

    def _drop(self, conn, current):
        if conn.session is current:
            current.close_after_reply = True  # it still gets the reply to the command that dropped it
        else:
            self.server.kill_client(conn)

    # -- the aclfile --------------------------------------------------------------------------------------
    def load(self, current):
        """ACL LOAD: None or the error text (then nothing changed)."""
        if not self.filename:
            return messages.ACL_NO_ACLFILE
        try:
            users = self.users.parse_file(self._read_file(), self.filename)
        except (OSError, ValueError) as exc:
            return "ERR " + str(exc)
        self._install(users, current)
        return None

    def _install(self, users, current=None):
        """Replaces every user; clients of a user that is gone, or whose subscriptions lost their channels, are
        disconnected, the others run as the new definition of their user (by name)."""
        old_default = self.users.default.copy()
        self.users.replace_all(users)
        self.refresh()
        upcoming_by_name = {}
        for conn in self.server.client_connections():
            s = conn.session
            old = s.acl_user or old_default
            new = self.users.get(old.name)
            if new is None:
                self._drop(conn, current)
                continue
            if conn.subs is not None and conn.subs.total():
                if old.name not in upcoming_by_name:
                    upcoming_by_name[old.name] = acl_pubsub.upcoming_channels(new, old)
                upcoming = upcoming_by_name[old.name]
                if upcoming is not None and self._revoked(conn, upcoming):
                    self._drop(conn, current)
                    continue
            s.acl_user = None if new is self.users.default else new

    # -- a shard's settings -------------------------------------------------------------------------------
    def after_change(self, reply):
        """The reply to ACL SETUSER/DELUSER/LOAD: at once on a single server; on a shard member once the users
        are stored in the shard's settings (a failover keeps them), or the error that prevented it."""
        if self.share is None:
            return reply
        stored = self.share(self.settings())
        d = Deferred()
        stored.listen(lambda: d.resolve(stored.reply if isinstance(stored.reply, ErrorReply) else reply))
        return d

    def settings(self) -> dict:
        """The users as a JSON-able dict, for the coordination store (so that a failover keeps them)."""
        return self.users.to_dict()

    def apply_settings(self, data: dict):
        """Installs users read from the coordination store, as ACL LOAD installs a file. Raises ValueError
        (nothing changes) if a rule does not apply."""
        staged = acl_store.Users(self.users.pubsub_all)
        staged.load_dict(data)
        self._applying = True
        try:
            self._install(dict(staged.by_name))
        finally:
            self._applying = False

    def save(self):
        """ACL SAVE: None or the error text. Written to a temporary file, fsynced, renamed, directory fsynced."""
        if not self.filename:
            return messages.ACL_NO_ACLFILE
        path = self._path()
        tmp = "%s.tmp-%d-%d" % (path, os.getpid(), self.server.clock_ms())
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                data = memoryview(self.users.file_text())
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            log.warning("Writing ACL file for ACL SAVE: %s", exc.strerror)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return messages.ACL_SAVE_FAILED
        return None

    # -- stats ----------------------------------------------------------------------------------------------
    def info_fields(self):
        return self.log.info_fields()
