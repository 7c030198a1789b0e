"""ACL and pub/sub: which subscribed clients a change of channel rules revokes (getUpcomingChannelList,
ACLShouldKillPubsubClient).

Pure: the caller disconnects the clients.
"""

from ...keyspace.glob import compile_glob


def upcoming_channels(new, original):
    """None if `new` allows every channel `original` did (no subscriber needs to go), else the list of
    channel patterns `new` allows."""
    if any(s.allchannels for s in new.selectors):
        return None
    upcoming = [c for s in new.selectors for c in s.channels]
    have = set(upcoming)
    for s in original.selectors:
        if s.allchannels or any(c not in have for c in s.channels):
            return upcoming
    return None


def subscriptions_revoked(upcoming, channels, patterns, shard_channels) -> bool:
    """Whether a client subscribed to these must be disconnected under the `upcoming` channel patterns."""
    for p in patterns:
        if p not in upcoming:
            return True
    matchers = [compile_glob(u) for u in upcoming]
    for group in (channels, shard_channels):
        for ch in group:
            if not any(m(ch) for m in matchers):
                return True
    return False
