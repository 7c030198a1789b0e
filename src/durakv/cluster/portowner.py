"""Which process holds a TCP socket, found the way `ss -p` finds it: the socket's inode from the kernel's
socket diagnostics (netlink sock_diag, as `ss` asks them; /proc/net/tcp{,6} where netlink is not there), then
the process whose /proc/PID/fd links to `socket:[inode]`. No dependency, no privileges beyond reading /proc
of one's own processes (root reads all of them).

sock_diag answers for the sockets asked for only: the listening ones, or the one connection named by its two
ends. /proc/net/tcp lists every socket of the namespace as text, TIME_WAIT included: on the test machine with
7,275 of them (7,080 in TIME_WAIT) reading it took 23-32 ms, and a cluster's start and stop read it once per
process.

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


# netlink sock_diag (linux/sock_diag.h, linux/inet_diag.h)
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_LISTEN = 10
_NO_COOKIE = 0xFFFFFFFF
_NLMSGHDR = struct.Struct("=IHHII")                  # len, type, flags, seq, pid
_REQ_V2 = struct.Struct("=BBBxI")                    # family, protocol, ext, states (then a sockid)
_SOCKID = struct.Struct(">HH16s16s")                 # sport, dport, src, dst (network order)
_SOCKID_TAIL = struct.Struct("=III")                 # interface, cookie[2]
_MSG_INODE = struct.Struct("=I")                     # inet_diag_msg.idiag_inode, at offset 68
_MAX_REPLY_BYTES = 1 << 20                           # one dump's replies are read in buffers of this size


def _diag(family, states, sockid=None):
    """[(local port, inode)] of the TCP sockets of `family` in `states` (a bit mask of TCP states), asked of the
    kernel over netlink sock_diag: all of them (a dump), or the one socket `sockid` = (src ip, sport, dst ip,
    dport) names. Raises OSError where the kernel has no sock_diag (the caller reads /proc instead)."""
    if sockid is None:
        sid = _SOCKID.pack(0, 0, bytes(16), bytes(16)) + _SOCKID_TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
        flags = _NLM_F_REQUEST | _NLM_F_DUMP
    else:
        src, sport, dst, dport = sockid
        sid = (_SOCKID.pack(sport, dport, socket.inet_pton(family, src).ljust(16, b"\0"),
                            socket.inet_pton(family, dst).ljust(16, b"\0"))
               + _SOCKID_TAIL.pack(0, _NO_COOKIE, _NO_COOKIE))
        flags = _NLM_F_REQUEST
    body = _REQ_V2.pack(family, socket.IPPROTO_TCP, 0, states) + sid
    out = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        nl.sendall(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), _SOCK_DIAG_BY_FAMILY, flags, 1, 0) + body)
        while True:
            data = nl.recv(_MAX_REPLY_BYTES)
            if not data:
                return out
            pos = 0
            while pos + _NLMSGHDR.size <= len(data):
                length, kind = _NLMSGHDR.unpack_from(data, pos)[:2]
                if length < _NLMSGHDR.size or pos + length > len(data):
                    raise OSError("sock_diag: a malformed reply")
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", data, pos + _NLMSGHDR.size)[0]
                    if errno in (0, 2):          # ENOENT: no such socket (an exact lookup)
                        return out
                    raise OSError(errno, "sock_diag: %s" % os.strerror(errno))
                msg = pos + _NLMSGHDR.size
                if length >= _NLMSGHDR.size + 72:
                    sport = struct.unpack_from(">H", data, msg + 4)[0]
                    out.append((sport, _MSG_INODE.unpack_from(data, msg + 68)[0]))
                pos += (length + 3) & ~3
            if sockid is not None:
                return out


def listening_inodes(ports) -> dict:
    """{port: inodes of the sockets listening on it (any local address)} for a port or a list of ports."""
    wanted = {int(p) for p in (ports if isinstance(ports, (list, tuple, set)) else [ports])}
    out = {p: set() for p in wanted}
    try:
        found = _diag(socket.AF_INET, 1 << _TCP_LISTEN) + _diag(socket.AF_INET6, 1 << _TCP_LISTEN)
    except OSError:
        found = [(int(parts[1].rpartition(":")[2], 16), int(parts[9])) for parts in _lines() if parts[3] == LISTEN]
    for port, inode in found:
        if port in wanted and inode:
            out[port].add(inode)
    return out


def connection_inode(local, remote):
    """The inode of the socket whose local end is `local` and remote end `remote` ((ip, port) pairs), or None.
    The proxy asks it for the client's end of a connection it accepted: local = the peer address it saw."""
    for host_local, host_remote in _host_pairs(local[0], remote[0]):
        family = socket.AF_INET6 if ":" in host_local else socket.AF_INET
        try:
            found = _diag(family, 0xFFFFFFFF, (host_local, local[1], host_remote, remote[1]))
        except OSError:
            return _connection_inode_proc(local, remote)
        inodes = [inode for _port, inode in found if inode]
        if inodes:
            return inodes[0]
    return None


def _host_pairs(local_host, remote_host):
    """The (local, remote) addresses a loopback connection may carry: _same_host takes 127.0.0.1 and ::1 for one
    another, and an IPv4 peer of an IPv6 socket shows as ::ffff:a.b.c.d."""
    local_host, remote_host = _unmapped(local_host), _unmapped(remote_host)
    locals_ = ["127.0.0.1", "::1"] if local_host in _LOOPBACK else [local_host]
    remotes = ["127.0.0.1", "::1"] if remote_host in _LOOPBACK else [remote_host]
    pairs = []
    for a in locals_:
        for b in remotes:
            if (":" in a) == (":" in b):
                pairs.append((a, b))
    return pairs


def _unmapped(host):
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def _connection_inode_proc(local, remote):
    lport, rport = ":%04X" % local[1], ":%04X" % remote[1]
    for parts in _lines():
        if not (parts[1].endswith(lport) and parts[2].endswith(rport)) or parts[3] == LISTEN:
            continue
        try:
            loc, rem = _decode_addr(parts[1]), _decode_addr(parts[2])
        except (ValueError, OSError):
            continue
        if (_same_host(loc[0], _unmapped(local[0])) and _same_host(rem[0], _unmapped(remote[0]))
                and parts[9] != "0"):
            return int(parts[9])
    return None


_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})   # one host to _same_host and _host_pairs


def _same_host(a, b):
    return a == b or {a, b} <= _LOOPBACK


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


def ports_owners(ports, expected=()) -> dict:
    """{port: [pids listening on it]} for several ports with one pass over /proc. `expected`: the pids that
    should hold them, whose descriptors are read first; when they hold every listener, no other process is
    looked at (reading every process's descriptors took 26 ms on the test machine), so a process sharing a
    listener with one of them (a forked child) is not listed then."""
    by_port = listening_inodes(list(ports))
    inodes = {i for s in by_port.values() for i in s}
    if not inodes:
        return {p: [] for p in by_port}
    holders = {}

    def read(pids):
        for pid in pids:
            for link in _fd_links(pid):
                if link.startswith("socket:["):
                    inode = int(link[8:-1])
                    if inode in inodes:
                        holders.setdefault(inode, set()).add(pid)
    first = sorted({pid for pid in expected if pid})
    read(first)
    if len(holders) < len(inodes):
        read(pid for pid in _all_pids() if pid not in first)
    return {p: sorted({pid for i in s for pid in holders.get(i, ())}) for p, s in by_port.items()}


def cmdline(pid) -> list:
    """The argv of a process, [] when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a]
