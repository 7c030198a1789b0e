"""Which process holds a TCP socket, found the way `ss -p` finds it: the socket's inode in /proc/net/tcp{,6},
then the process whose /proc/PID/fd links to `socket:[inode]`. No dependency, no privileges beyond reading
/proc of one's own processes (root reads all of them).

Used by the local cluster to stop a node that was restarted by hand (its pid is not the manifest's, its port
is), by `cluster status` to tell that such a node serves, and by the partition proxy to learn which process
(and so which AZ) opened a connection. Linux only: elsewhere every lookup answers "nobody".
"""

import os
import socket
import struct

LISTEN = "0A"
_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _decode_addr(text):
    """'0100007F:1F90' (or the 32-hex-digit IPv6 form) -> ('127.0.0.1', 8080)."""
    host, _, port = text.partition(":")
    if len(host) == 8:
        ip = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(host, 16)))
    else:
        words = struct.pack("<IIII", *(int(host[i:i + 8], 16) for i in range(0, 32, 8)))
        ip = socket.inet_ntop(socket.AF_INET6, words)
        if ip.startswith("::ffff:"):
            ip = ip[7:]
    return ip, int(port, 16)


def _lines():
    """The split lines of /proc/net/tcp and tcp6 (a busy machine has many thousands: callers filter on the raw
    fields before decoding anything)."""
    for table in _TABLES:
        try:
            with open(table, "r") as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) >= 10:
                        yield parts
        except OSError:
            continue


def listening_inodes(ports) -> dict:
    """{port: inodes of the sockets listening on it (any local address)} for a port or a list of ports."""
    wanted = {int(p) for p in (ports if isinstance(ports, (list, tuple, set)) else [ports])}
    out = {p: set() for p in wanted}
    for parts in _lines():
        if parts[3] != LISTEN:
            continue
        port = int(parts[1].rpartition(":")[2], 16)
        if port in wanted and parts[9] != "0":
            out[port].add(int(parts[9]))
    return out


def connection_inode(local, remote):
    """The inode of the socket whose local end is `local` and remote end `remote` ((ip, port) pairs), or None.
    The proxy asks it for the client's end of a connection it accepted: local = the peer address it saw."""
    lport, rport = ":%04X" % local[1], ":%04X" % remote[1]
    for parts in _lines():
        if not (parts[1].endswith(lport) and parts[2].endswith(rport)) or parts[3] == LISTEN:
            continue
        try:
            loc, rem = _decode_addr(parts[1]), _decode_addr(parts[2])
        except (ValueError, OSError):
            continue
        if _same_host(loc[0], local[0]) and _same_host(rem[0], remote[0]) and parts[9] != "0":
            return int(parts[9])
    return None


def _same_host(a, b):
    return a == b or {a, b} <= {"127.0.0.1", "::1", "localhost"}


def _all_pids():
    try:
        return [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []


def _fd_links(pid):
    """The targets of pid's open fds, read one by one (a process that is gone or not ours yields none, an fd
    closed meanwhile is passed over)."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue


def pids_holding(inodes, pids=None) -> list:
    """The pids (of `pids`, default every process) with an open fd on one of the socket inodes."""
    wanted = {f"socket:[{i}]" for i in inodes}
    if not wanted:
        return []
    return [pid for pid in (pids if pids is not None else _all_pids())
            if any(link in wanted for link in _fd_links(pid))]


def port_owners(port) -> list:
    """The pids listening on TCP `port` (usually one; a forked child may share the socket)."""
    return sorted(pids_holding(listening_inodes(port)[int(port)]))


def ports_owners(ports) -> dict:
    """{port: [pids listening on it]} for several ports with one pass over /proc."""
    by_port = listening_inodes(list(ports))
    inodes = {i for s in by_port.values() for i in s}
    if not inodes:
        return {p: [] for p in by_port}
    holders = {}
    for pid in _all_pids():
        for link in _fd_links(pid):
            if link.startswith("socket:["):
                inode = int(link[8:-1])
                if inode in inodes:
                    holders.setdefault(inode, set()).add(pid)
    return {p: sorted({pid for i in s for pid in holders.get(i, ())}) for p, s in by_port.items()}


def cmdline(pid) -> list:
    """The argv of a process, [] when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a]
