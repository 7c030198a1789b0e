"""How a node reaches another node of its cluster over RESP (slot migration, a search's fan-out): one rule for
every such link, so that none goes in the clear or unauthenticated where another would not.

- TLS whenever this node serves TLS: the peer's `tls-port` only, even when it has a plain port too (the data must
  not cross the network in the clear whenever the cluster runs TLS), verified against the cluster's CA with its
  name checked against the address it is reached at, this node's certificate presented (cluster/tls.py
  node_client_context). A plain node uses the peer's plain port, or TLS to a TLS-only peer.
- Credentials: the cluster's internal user (the `auth` document every node applies, cluster/settings.py
  AuthSettings, made by `durakv cluster create`); on a node without one, Valkey's primaryuser/primaryauth
  (masterauth) when set, as a replica authenticates to its primary; else this node's own requirepass (the
  default user's password, the same on every node of a cluster with auth on); else none.
"""

from .tls import node_client_context


class PeerError(Exception):
    pass


def peer_address(config, node):
    """(host, port, TLS context or None) of a topology Node, by the rule above."""
    if config["tls-port"] or not node.port:
        if not node.tls_port:
            raise PeerError("node %s has no TLS port, and this node runs TLS: its data is not sent in the clear"
                            % node.id)
        return node.ip, node.tls_port, node_client_context(config)
    return node.ip, node.port, None


def peer_credentials(config, auth=None):
    """AUTH's arguments (bytes) for a peer, or None, by the rule above. auth: the cluster's AuthSettings."""
    if auth is not None and auth.internal_password:
        return [auth.internal_user.encode("utf-8", "surrogateescape"),
                auth.internal_password.encode("utf-8", "surrogateescape")]
    if config["primaryauth"]:
        user = [config["primaryuser"].encode("utf-8", "surrogateescape")] if config["primaryuser"] else []
        return user + [config["primaryauth"].encode("utf-8", "surrogateescape")]
    if config["requirepass"]:
        return [config["requirepass"].encode("utf-8", "surrogateescape")]
    return None
