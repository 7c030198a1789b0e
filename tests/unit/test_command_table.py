"""The command table is the home of per-command facts the pipeline and the observer decide by: what a command
with neither the readonly nor the write flag reads, and whether a keyless write changes keys."""

from durakv.commands import load_all, registry
from durakv.commands.registry import READS_ALL, READS_EXPORT, lookup

load_all()


def _every_command():
    for cmd in registry.TABLE.values():
        yield cmd
        yield from cmd.subcommands.values()


def test_commands_that_read_data_without_a_read_flag_say_what_they_read():
    assert lookup([b"sync"]).reads_data is READS_EXPORT and lookup([b"psync"]).reads_data is READS_EXPORT
    assert lookup([b"cluster", b"countkeysinslot"]).reads_data is READS_ALL
    assert lookup([b"function", b"dump"]).reads_data is READS_ALL
    info = lookup([b"info"]).reads_data
    assert info([b"info"]) is READS_ALL and info([b"info", b"KEYSPACE"]) is READS_ALL
    assert info([b"info", b"durability"]) is None      # answers while a commit is stalled
    debug = lookup([b"debug"]).reads_data
    assert debug([b"debug", b"digest"]) is READS_ALL and debug([b"debug", b"object", b"k"]) == [b"k"]
    assert debug([b"debug", b"digest-value", b"a", b"b"]) == [b"a", b"b"]
    assert debug([b"debug", b"sleep", b"0"]) is None
    # a command that reads or writes by its flags needs no entry: the pipeline waits on its keys
    assert all(c.reads_data is None for c in _every_command() if c.readonly or c.write)


def test_keyless_writes_say_whether_they_change_keys():
    keyless_writes = {c.fullname: c.changes_keys for c in _every_command()
                      if c.handler is not None and c.keyless and c.write}
    assert {n for n, changes in keyless_writes.items() if changes} == {
        "flushall", "flushdb", "swapdb", "cluster|flushslot"}
    assert keyless_writes["ft.create"] is False and keyless_writes["function|load"] is False
    assert all(c.changes_keys for c in _every_command() if not c.keyless)
