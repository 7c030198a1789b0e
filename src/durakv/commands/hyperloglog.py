"""HyperLogLog commands: PFADD PFCOUNT PFMERGE (PFDEBUG / PFSELFTEST are not implemented).

HLLs are string values in Valkey's own byte format (keyspace/hll.py). Effects: PFADD and PFMERGE
are deterministic and propagate themselves (PFADD only when a register changed or the key was
created). PFCOUNT never writes: Valkey stores the computed cardinality in the string's header (and
replicates that write); here the count is memoized outside the value, so reads produce no effects.
"""

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding, hll
from ..protocol.resp import OK
from .registry import command


def _hll_value(ctx, key):
    """The HLL string at key, None if missing; WRONGTYPE for other types or non-HLL strings."""
    value = ctx.lookup_string(key)
    if value is not None and not hll.is_hll(value):
        raise CommandError(messages.HLL_WRONGTYPE)
    return value


def _corrupt():
    return CommandError(messages.HLL_INVALID)


def _sparse_max(ctx):
    return ctx.keyspace.encoding_rules.hll_sparse_max_bytes  # hll-sparse-max-bytes


@command("pfadd")
def pfadd(ctx, args):
    key = args[1]
    value = _hll_value(ctx, key)
    try:
        new, updated = hll.add(value, args[2:], _sparse_max(ctx))
    except hll.Corrupt:
        raise _corrupt() from None
    if not updated:
        return 0
    ctx.store(key, new, keep_ttl=True)
    encoding.string_modified_in_place(ctx.db, key)  # an HLL is always a raw string in Valkey
    ctx.propagate_args(args)
    return 1


@command("pfcount")
def pfcount(ctx, args):
    if len(args) == 2:
        value = _hll_value(ctx, args[1])
        if value is None:
            return 0
        try:
            return hll.count(value)
        except hll.Corrupt:
            raise _corrupt() from None
    registers = None
    for key in args[1:]:
        value = _hll_value(ctx, key)
        if value is None:
            continue
        try:
            regs = hll.registers(value)
        except hll.Corrupt:
            raise _corrupt() from None
        registers = regs if registers is None else hll.raw_max(registers, regs)
    if registers is None:
        return 0
    return hll.count_raw(registers)


@command("pfmerge")
def pfmerge(ctx, args):
    registers = None
    use_dense = False
    dest_value = None
    for i in range(1, len(args)):  # the destination is also a source, as in Valkey
        value = _hll_value(ctx, args[i])
        if value is None:
            continue
        if i == 1:
            dest_value = value
        if value[4] == hll.DENSE:
            use_dense = True
        try:
            regs = hll.registers(value)
        except hll.Corrupt:
            raise _corrupt() from None
        registers = regs if registers is None else hll.raw_max(registers, regs)
    if registers is None:
        registers = bytes(hll.REGISTERS)
    try:
        new = hll.merge_into(dest_value, registers, use_dense, _sparse_max(ctx))
    except hll.Corrupt:
        raise _corrupt() from None
    ctx.store(args[1], new, keep_ttl=True)
    encoding.string_modified_in_place(ctx.db, args[1])
    ctx.propagate_args(args)
    return OK
