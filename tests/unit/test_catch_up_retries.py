"""replication/follow.py Follower.catch_up: its read of the journal's end is retried while NATS cannot answer.

A killed primary restarted (`durakv chaos kill --restart-after 1.5`) while the shard's new primary moved the
stream's leader to its own server; the restarted node's read of the stream's end timed out after 2 s and the node
exited with "cannot start: nats: timeout" (a CI run of tests/faults/test_verify_scenarios.py, 2026-12-07)."""

import asyncio
from types import SimpleNamespace

import nats.errors
import pytest

from durakv.replication.follow import Follower

pytestmark = pytest.mark.unit


class Journal:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    async def last_index(self):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _follower(journal, applied):
    node = SimpleNamespace(server=SimpleNamespace(), journal=journal, applied_index=applied)
    return Follower(node, members=None, snapshotter=None)


def test_a_timeout_while_nats_elects_is_retried():
    journal = Journal([nats.errors.TimeoutError(), nats.errors.NoRespondersError(), 7])
    follower = _follower(journal, applied=7)
    assert asyncio.run(follower.catch_up(timeout_s=10)) == 7
    assert journal.calls == 3 and follower.stream_last == 7


def test_an_error_that_is_not_an_election_is_raised_at_once():
    journal = Journal([ValueError("a wrong stream name"), 7])
    with pytest.raises(ValueError, match="wrong stream"):
        asyncio.run(_follower(journal, applied=7).catch_up(timeout_s=10))
    assert journal.calls == 1
