"""The slot migrator's waits for its own shard's commits end when the entry cannot be persisted
(replication/migration.py): a round that waited for a failed entry waited forever, and its slots never moved."""

import asyncio
from types import SimpleNamespace

import pytest

from durakv.replication.migration import MigrationError, SlotMigrator

pytestmark = pytest.mark.unit


class Durability:
    """when_committed as durability/release.py offers it: the test decides whether the entry commits or fails."""

    def __init__(self):
        self.waiters = []

    def when_committed(self, index, fn, failed=None):
        self.waiters.append((index, fn, failed))


def test_a_wait_for_an_entry_that_fails_raises_instead_of_hanging():
    async def main():
        durability = Durability()
        migrator = SimpleNamespace(server=SimpleNamespace(loop=asyncio.get_running_loop(), durability=durability))
        committed = SlotMigrator._committed(migrator, 7)
        failing = SlotMigrator._committed(migrator, 8)
        (_i7, commit7, _f7), (_i8, _fn8, fail8) = durability.waiters
        commit7()
        await asyncio.wait_for(committed, 1.0)
        assert fail8 is not None, "the wait gives no way to fail: it waits forever for an entry that failed"
        fail8("the journal is full")
        with pytest.raises(MigrationError, match="entry 8 .*not persisted .*the journal is full"):
            await asyncio.wait_for(failing, 1.0)
    asyncio.run(main())
