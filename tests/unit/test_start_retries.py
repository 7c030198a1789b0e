"""A node starting while NATS elects (a cluster starting, an AZ back, a node re-executed after it was
replaced) retries what NATS cannot answer yet instead of exiting with `cannot start: nats: timeout`; anything
else still stops it at once."""

import asyncio

import nats.errors
import nats.js.errors
import pytest

from durakv.journal.jetstream import is_transient
from durakv.replication.retry import retry_transient


def _flaky(failures):
    calls = []

    async def fn():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "done"
    return fn, calls


def test_transient_nats_errors_are_retried_until_they_stop():
    slept = []

    async def sleep(s):
        slept.append(s)
    fn, calls = _flaky([nats.errors.TimeoutError(), nats.errors.NoRespondersError(),
                        nats.js.errors.ServiceUnavailableError(), nats.js.errors.NoStreamResponseError()])
    assert asyncio.run(retry_transient("x", fn, sleep=sleep)) == "done"
    assert len(calls) == 5
    assert slept == [0.1, 0.2, 0.4, 0.8]          # backing off


def test_other_errors_are_not_retried():
    async def sleep(s):
        raise AssertionError("no retry for a non-transient error")
    fn, calls = _flaky([nats.js.errors.NotFoundError()])
    with pytest.raises(nats.js.errors.NotFoundError):
        asyncio.run(retry_transient("x", fn, sleep=sleep))
    assert len(calls) == 1
    assert not is_transient(ValueError("bad config"))


def test_the_deadline_bounds_the_retries():
    async def main():
        fn, calls = _flaky([nats.errors.TimeoutError()] * 1000)
        with pytest.raises(nats.errors.TimeoutError):
            await retry_transient("x", fn, timeout_s=0.3, sleep=asyncio.sleep)
        return len(calls)
    assert 2 <= asyncio.run(main()) <= 4
