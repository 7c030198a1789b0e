"""MIGRATE's connections to target instances, as Valkey keeps them (cluster.c, migrateGetSocket).

MIGRATE is synchronous in Valkey: the server blocks on the target's replies, up to the command's timeout for each
read and write, and that is what makes it atomic (no other client runs between the DUMP of a key and its DEL).
durakv keeps the atomicity by locking the keys instead (commands/pipeline.py off_loop: writes to them wait)
and runs `MigrateSockets.exchange` on a worker thread, so the loop keeps serving; the keys the target
acknowledged are deleted back on the loop as ordinary effects (DEL). Only MIGRATE inside MULTI/EXEC or a
script, which cannot wait, calls it on the loop thread, blocking it as Valkey does.

Exchanges are serialized by a lock (one cached connection carries one conversation at a time); a
MIGRATE in MULTI on the loop may therefore wait for a worker's exchange, at most that one's timeout per step.

Connections are cached per host:port (at most 64, each closed after 10 s unused) and remember the database
they last SELECTed, so a run of MIGRATEs to one target sends SELECT once. On a socket error the connection is
closed and, unless the error was a timeout or a reply was already read, the exchange is tried once more on a
new connection, as Valkey retries.
"""

import socket
import threading
import time

from .. import messages
from ..protocol.resp import encode_command

MAX_CACHED = 64
IDLE_CLOSE_S = 10.0


class MigrateError(Exception):
    """An IOERR for the client: the text is Valkey's."""


class _Cached:
    __slots__ = ("sock", "last_dbid", "last_use_s", "buf")

    def __init__(self, sock):
        self.sock = sock
        self.last_dbid = -1
        self.last_use_s = time.monotonic()
        self.buf = b""


class MigrateSockets:
    def __init__(self, tls_context=None):
        self.cache = {}                 # "host:port" -> _Cached
        self.lock = threading.Lock()    # held for a whole exchange, which may run on a worker thread
        # () -> ssl.SSLContext, or None: a cluster node that serves TLS migrates over TLS only (Valkey's
        # tls-cluster: migrateGetSocket connects with TLS), verifying the target against the cluster CA
        self.tls_context = tls_context

    def close_idle(self):
        # from the loop's cron: never waits for an exchange in flight (it closes them on the next tick)
        if not self.lock.acquire(blocking=False):
            return
        try:
            now = time.monotonic()
            for name, cs in list(self.cache.items()):
                if now - cs.last_use_s > IDLE_CLOSE_S:
                    self._close(name)
        finally:
            self.lock.release()

    def close_all(self):
        if not self.lock.acquire(blocking=False):
            return      # shutting down with an exchange in flight: its thread ends at its timeout
        try:
            for name in list(self.cache):
                self._close(name)
        finally:
            self.lock.release()

    def _close(self, name):
        cs = self.cache.pop(name, None)
        if cs is not None:
            try:
                cs.sock.close()
            except OSError:
                pass

    def _get(self, host, port, timeout_s):
        name = "%s:%d" % (host, port)
        cs = self.cache.get(name)
        if cs is not None:
            cs.last_use_s = time.monotonic()
            return name, cs
        if len(self.cache) >= MAX_CACHED:
            self._close(next(iter(self.cache)))     # too many: drop one at random (Valkey: dictGetRandomKey)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except ConnectionRefusedError:
            # Valkey's non-blocking connect "succeeds" on a refused port and its first write fails
            raise MigrateError(messages.MIGRATE_IOERR_WRITING) from None
        except (OSError, OverflowError, ValueError):      # unreachable, or no such host or port
            raise MigrateError(messages.MIGRATE_IOERR_CONNECTING) from None
        if self.tls_context is not None:
            try:
                sock = self.tls_context().wrap_socket(sock, server_hostname=host)
            except (OSError, ValueError):   # no TLS there, or a certificate the cluster CA did not sign
                sock.close()
                raise MigrateError(messages.MIGRATE_IOERR_CONNECTING) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cs = self.cache[name] = _Cached(sock)
        return name, cs

    @staticmethod
    def _read_line(cs, timeout_s):
        """One reply line (connSyncReadLine: at most 1024 bytes), without its CRLF."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in cs.buf:
            left = deadline - time.monotonic()
            if left <= 0 or len(cs.buf) > 1024:
                raise TimeoutError
            cs.sock.settimeout(left)
            data = cs.sock.recv(16384)
            if not data:
                raise ConnectionError("closed by the target")
            cs.buf += data
        line, cs.buf = cs.buf.split(b"\n", 1)
        return line.rstrip(b"\r")[:1023]

    def exchange(self, host, port, timeout_ms, dbid, auth, commands):
        """Sends AUTH (auth: the arguments after AUTH, or None), SELECT dbid unless the cached connection has
        it selected, then `commands` (argument lists), and reads one reply line for each.
        Returns (error line of AUTH/SELECT or None, [reply line of each command read], socket_error): the
        command replies stop early on a socket error after the first one (socket_error True). Raises
        MigrateError when nothing could be exchanged."""
        with self.lock:
            return self._exchange(host, port, timeout_ms, dbid, auth, commands)

    def _exchange(self, host, port, timeout_ms, dbid, auth, commands):
        timeout_s = timeout_ms / 1000.0
        retried = False
        while True:
            name, cs = self._get(host, port, timeout_s)
            select = cs.last_dbid != dbid
            out = []
            if auth is not None:
                out.append(encode_command([b"AUTH"] + list(auth)))
            if select:
                out.append(encode_command([b"SELECT", b"%d" % dbid]))
            out.extend(encode_command(c) for c in commands)
            writing = True
            timed_out = False
            replies = []
            try:
                cs.sock.settimeout(timeout_s)
                cs.sock.sendall(b"".join(out))
                writing = False
                first_error = None
                if auth is not None:
                    line = self._read_line(cs, timeout_s)
                    if line[:1] == b"-":
                        first_error = line
                if select:
                    line = self._read_line(cs, timeout_s)
                    if line[:1] == b"-" and first_error is None:
                        first_error = line
                for _ in commands:
                    replies.append(self._read_line(cs, timeout_s))
            except (OSError, TimeoutError, ConnectionError) as exc:
                timed_out = isinstance(exc, (TimeoutError, socket.timeout))
                self._close(name)
                if replies:
                    return first_error, replies, True
                if not retried and not timed_out:
                    retried = True
                    continue
                raise MigrateError(messages.MIGRATE_IOERR_IO
                                   % ("writing" if writing else "reading")) from None
            if first_error is not None or any(r[:1] == b"-" for r in replies):
                cs.last_dbid = -1               # on an error the selected db is no longer known
            else:
                cs.last_dbid = dbid
            cs.last_use_s = time.monotonic()
            return first_error, replies, False
