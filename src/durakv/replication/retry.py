"""Retrying a NATS request while NATS only cannot answer yet (a cluster starting, an election)."""

import asyncio
import logging

from ..journal.jetstream import is_transient

log = logging.getLogger("durakv.replication")


async def retry_transient(what, fn, timeout_s=120.0, sleep=asyncio.sleep):
    """await fn(), again (backing off to 2 s) while NATS only cannot answer yet (is_transient), until
    timeout_s; any other error, or the last transient one, is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    delay_s = 0.1
    failures = 0
    while True:
        try:
            result = await fn()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted by is_transient
            if not is_transient(exc) or loop.time() + delay_s > deadline:
                raise
            failures += 1
            if failures == 1:
                log.warning("%s: %s; retrying while NATS elects", what, type(exc).__name__)
            await sleep(delay_s)
            delay_s = min(delay_s * 2, 2.0)
            continue
        if failures:
            log.info("%s: done after %d retries", what, failures)
        return result
