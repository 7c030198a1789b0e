"""A node's identity in a cluster: its 40-hex node id, kept across restarts."""

import os

from ..errors import with_path
from ..routing.topology import node_id_for


def persistent_node_id(data_dir: str, configured: str) -> str:
    """The node id of this server: the configured one if it is 40 hex characters, else the one kept in
    DIR/node-id (made on first start, as Valkey keeps its own in nodes.conf)."""
    if configured and len(configured) == 40 and all(c in "0123456789abcdef" for c in configured):
        return configured
    if configured:
        return node_id_for(configured)
    path = os.path.join(data_dir, "node-id")
    try:
        with open(path) as f:
            existing = f.read().strip()
        if len(existing) == 40:
            return existing
    except FileNotFoundError:
        pass
    new = os.urandom(20).hex()
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(new + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise with_path(exc, tmp) from exc
    return new
