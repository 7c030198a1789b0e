"""The network between the AZs of a partitionable local cluster: a TCP proxy that can cut AZs off each other.

`durakv cluster up --partitionable` routes every connection into a NATS node through this proxy (NATS routes,
and durakv's journal/lease connections to NATS), so that `durakv chaos DIR partition --az az1` can cut az1 off
the other AZs both ways with no privileges: no network namespaces, no iptables. Each NATS node has one proxy
listener for its client port and one for its route port; NATS advertises those (client_advertise,
cluster.advertise), so servers and clients learn the proxy's addresses, never the real ones.

A listener knows the AZ of its destination. The AZ of the source is the AZ of the process that opened the
connection: the proxy finds the socket's other end in /proc/net/tcp and the manifest process holding it
(cluster/portowner.py). A connection whose source is no cluster process (a tool, a test) is never cut.

A cut is a black hole, as a dropped packet is: the proxy stops forwarding in both directions on every link
between different groups (bytes already read are held, not dropped), and a new connection across the cut is
accepted but not connected onward until the heal. NATS and the durakv nodes then see what a real partition
shows them: silence, timeouts, pings unanswered. On heal, held bytes flow and waiting connections go through.

Control: one line per request on the control port (127.0.0.1 only):
    CUT az1            az1 alone, every other AZ together      -> OK <groups as JSON>
    CUT az1 az2        az1 alone, az2 alone, the rest together
    CUT az1,az2        az1 and az2 together, the rest together
    HEAL               one network again                        -> OK []
    STATE              -> OK {"groups": ..., "connections": n, "held": n, "cut_since": t}

Run: python -m durakv.cluster.netproxy CONFIG.json   (cluster up writes DIR/netproxy.json and starts it)
"""

import asyncio
import json
import logging
import os
import signal
import sys
import time

from .portowner import cmdline, connection_inode, pids_holding

log = logging.getLogger("durakv.netproxy")

CONFIG_NAME = "netproxy.json"


def send_control(port, line, timeout_s=5.0) -> str:
    """One request to a running proxy's control port; returns the reply line (without 'OK ')."""
    import socket
    with socket.create_connection(("127.0.0.1", int(port)), timeout=timeout_s) as s:
        s.sendall(line.encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    reply = data.decode().strip()
    if not reply.startswith("OK"):
        raise RuntimeError(f"netproxy refused {line!r}: {reply}")
    return reply[2:].strip()


def parse_groups(words, all_azs) -> list:
    """['az1'] -> [['az1'], [the rest]]; ['az1,az2'] -> [['az1','az2'], [the rest]]."""
    groups, named = [], set()
    for w in words:
        g = sorted({a for a in w.split(",") if a})
        unknown = [a for a in g if a not in all_azs]
        if unknown:
            raise ValueError(f"unknown AZ {', '.join(unknown)} (AZs: {', '.join(all_azs)})")
        if named & set(g):
            raise ValueError(f"AZ named twice: {', '.join(sorted(named & set(g)))}")
        named |= set(g)
        groups.append(g)
    rest = sorted(set(all_azs) - named)
    if rest:
        groups.append(rest)
    return groups if len(groups) > 1 else []


class _Conn:
    __slots__ = ("src", "dst", "held", "tasks", "writers")

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.held = 0
        self.tasks = []
        self.writers = []


class NetProxy:
    def __init__(self, config):
        self.config = config
        self.manifest_path = config["manifest"]
        self.azs = list(config["azs"])
        self.groups = []            # [] = no cut
        self.cut_since = None
        self.changed = asyncio.Event()
        self.conns = set()
        self._az_of_pid = {}

    # -- the cut ---------------------------------------------------------------------------------------------
    def group_of(self, az):
        for i, g in enumerate(self.groups):
            if az in g:
                return i
        return None

    def blocked(self, src, dst) -> bool:
        if not self.groups or src is None or dst is None or src == dst:
            return False
        return self.group_of(src) != self.group_of(dst)

    def set_groups(self, groups):
        self.groups = groups
        self.cut_since = time.time() if groups else None
        old, self.changed = self.changed, asyncio.Event()
        old.set()   # every pump waiting at a gate looks again
        log.info("network %s", "cut: " + " | ".join(",".join(g) for g in groups) if groups else "healed")

    async def gate(self, conn):
        while self.blocked(conn.src, conn.dst):
            await self.changed.wait()

    # -- who is calling ----------------------------------------------------------------------------------------
    def _manifest_processes(self):
        try:
            with open(self.manifest_path) as f:
                return json.load(f).get("processes", [])
        except (OSError, ValueError):
            return []

    def az_of_peer(self, peer, sock):
        """The AZ of the cluster process at the other end of an accepted connection, None if it is none."""
        inode = connection_inode((peer[0], peer[1]), (sock[0], sock[1]))
        if inode is None:
            return None
        procs = [e for e in self._manifest_processes() if e.get("kind") in ("nats", "durakv")]
        by_pid = {e["pid"]: e.get("az") for e in procs if e.get("pid")}
        found = pids_holding([inode], list(by_pid))
        if found:
            return by_pid[found[0]]
        # Not a manifest pid: a node restarted by hand, or a child of a node. Look at every process, and at
        # its parents, for one that is a manifest process by its command line.
        for pid in pids_holding([inode]):
            az = self._az_by_identity(pid, procs)
            if az is not None:
                return az
        return None

    def _az_by_identity(self, pid, procs):
        for _ in range(8):
            if pid in self._az_of_pid:
                return self._az_of_pid[pid]
            argv = cmdline(pid)
            for e in procs:
                mark = e.get("config") if e.get("kind") == "nats" else e.get("dir")
                if mark and mark in argv:
                    self._az_of_pid[pid] = e.get("az")
                    return e.get("az")
            pid = _ppid(pid)
            if not pid or pid == 1:
                return None
        return None

    # -- forwarding --------------------------------------------------------------------------------------------
    async def handle(self, reader, writer, link):
        peer = writer.get_extra_info("peername")
        sock = writer.get_extra_info("sockname")
        try:
            src = self.az_of_peer(peer, sock)
        except Exception:  # noqa: BLE001 - an unknown caller is never cut
            src = None
        conn = _Conn(src, link["az"])
        self.conns.add(conn)
        up_writer = None
        try:
            await self.gate(conn)    # a new connection across a cut waits for the heal
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", link["target"])
            except OSError:
                return
            conn.writers = [writer, up_writer]
            a = asyncio.ensure_future(self.pump(reader, up_writer, conn))
            b = asyncio.ensure_future(self.pump(up_reader, writer, conn))
            conn.tasks = [a, b]
            await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in conn.tasks:
                t.cancel()
            for w in (writer, up_writer):
                if w is not None:
                    try:
                        w.close()
                    except Exception:  # noqa: BLE001
                        pass
            self.conns.discard(conn)

    async def pump(self, reader, writer, conn):
        try:
            while True:
                await self.gate(conn)
                data = await reader.read(262144)
                if not data:
                    break
                if self.blocked(conn.src, conn.dst):
                    conn.held += len(data)      # read just as the cut began: held, delivered after the heal
                    await self.gate(conn)
                    conn.held -= len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            try:
                writer.write_eof()
            except (OSError, RuntimeError, AttributeError):
                pass

    # -- control -----------------------------------------------------------------------------------------------
    async def control(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                words = line.decode("utf-8", "replace").split()
                if not words:
                    continue
                cmd = words[0].upper()
                try:
                    if cmd == "CUT":
                        self.set_groups(parse_groups(words[1:], self.azs))
                        reply = "OK " + json.dumps(self.groups)
                    elif cmd == "HEAL":
                        self.set_groups([])
                        reply = "OK []"
                    elif cmd == "STATE":
                        reply = "OK " + json.dumps(self.state())
                    else:
                        reply = f"ERR unknown command {words[0]!r}"
                except ValueError as exc:
                    reply = f"ERR {exc}"
                writer.write(reply.encode() + b"\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def state(self) -> dict:
        return {"groups": self.groups, "cut_since": self.cut_since, "connections": len(self.conns),
                "held_bytes": sum(c.held for c in self.conns),
                "blocked_connections": sum(1 for c in self.conns if self.blocked(c.src, c.dst))}

    async def serve(self):
        servers = [await asyncio.start_server(self.control, "127.0.0.1", self.config["control_port"])]
        for link in self.config["links"]:
            servers.append(await asyncio.start_server(
                lambda r, w, link=link: self.handle(r, w, link), "127.0.0.1", link["listen"]))
        log.info("netproxy serving %d links, control on 127.0.0.1:%d", len(self.config["links"]),
                 self.config["control_port"])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for s in servers:
            s.close()


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
        return int(data[data.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(process)d:P %(asctime)s %(levelname).1s %(message)s",
                        datefmt="%d %b %Y %H:%M:%S")
    with open(argv[0]) as f:
        config = json.load(f)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(NetProxy(config).serve())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
