"""What the tests share, in one package (tests/conftest.py imports it, so its fixtures reach every tier):

- servers:  free ports, durakv / Valkey 9.1.2 server processes, `durakv_cli`, stopping a process by pid
- clusters: NATS clusters and local durakv clusters (fixtures), asyncio helpers for nats-py
- wire:     raw RESP replies and exact reply bytes
- waiting:  polling with a deadline, and the one time scale every deadline is multiplied by
- clocks:   moving a test server's clock (DEBUG) instead of sleeping
- crash, diskfull, journal_contract, leaks, lua, netns, replay: the helpers of one family of tests each

The modules' old names at tests/ (wire_util, nats_fixtures, ...) stay importable: each is this package's module.
"""
