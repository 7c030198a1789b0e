"""The operator's coordination store sends again a KV request the bucket's stream did not take at all (no
responders: a bucket whose leader is moving, as right after a cluster forms), which failed `cluster create` once
in CI ("nats: no response from stream"); a node's store fails at once (its controller's next tick retries, and a
lease must fail fast). A timeout is never retried here: that request may have been stored."""

import asyncio

import nats.js.errors
import pytest

from durakv.cluster.store import NatsStore


class _FakeKV:
    def __init__(self, failures, error=nats.js.errors.NoStreamResponseError):
        self.failures = failures
        self.error = error
        self.calls = 0

    async def create(self, key, raw):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error()
        return 7


class _FakeNC:
    def jetstream(self, timeout=None):
        return None


def _store(kv, retry_s):
    store = NatsStore(_FakeNC())
    store.kv = kv
    store.unanswered_retry_s = retry_s
    return store


def test_the_operators_store_asks_again_until_the_bucket_answers():
    kv = _FakeKV(failures=2)
    assert asyncio.run(_store(kv, 30.0)._compare_and_set("k", b"v", 0)) == 7
    assert kv.calls == 3


def test_a_nodes_store_fails_at_once():
    kv = _FakeKV(failures=1)
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        asyncio.run(_store(kv, 0.0)._compare_and_set("k", b"v", 0))
    assert kv.calls == 1


def test_a_timeout_is_not_sent_again():
    kv = _FakeKV(failures=1, error=asyncio.TimeoutError)
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(_store(kv, 30.0)._compare_and_set("k", b"v", 0))
    assert kv.calls == 1
