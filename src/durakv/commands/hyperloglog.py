"""HyperLogLog commands: PFADD PFCOUNT PFMERGE PFDEBUG PFSELFTEST.

HLLs are string values in Valkey's own byte format (keyspace/hll.py). Effects: PFADD and PFMERGE
are deterministic and propagate themselves (PFADD only when a register changed or the key was
created). PFCOUNT of one key whose cached cardinality is stale writes the count into the string's
header and propagates itself, as Valkey does (its bytes are what GET, DUMP and a replica see), so it is
a write then: journaled, and answered once that commits. A replica computes it without writing (its
copy changes only with what it applies); PFCOUNT of several keys never writes.
"""

import math
import random

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding, hll
from ..keyspace.events import STRING
from ..protocol.resp import OK
from .registry import command


def _hll_value(ctx, key, read=False):
    """The HLL string at key, None if missing; WRONGTYPE for other types or non-HLL strings. read: a read's
    lookup (lookupKeyRead) inside a command that writes (PFMERGE's sources)."""
    value = ctx.read_type(key, bytes) if read else ctx.lookup_string(key)
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
    ctx.notify(STRING, b"pfadd", key)
    return 1


def _writer(ctx) -> bool:
    """This node writes its own data (not a replica following a journal or a primary)."""
    gate = ctx.pipeline.gate
    return gate is None or not gate.is_replica()


def _max_registers(registers, value):
    """The register-wise max of registers (None: none read yet) and the HLL value's, as PFCOUNT's and
    PFMERGE's hllMerge; a corrupt value is Valkey's INVALIDOBJ error."""
    try:
        regs = hll.registers(value)
    except hll.Corrupt:
        raise _corrupt() from None
    return regs if registers is None else hll.raw_max(registers, regs)


@command("pfcount")
def pfcount(ctx, args):
    if len(args) == 2:
        key = args[1]
        value = _hll_value(ctx, key)
        if value is None:
            return 0
        try:
            card = hll.count(value)
        except hll.Corrupt:
            raise _corrupt() from None
        if hll.cache_stale(value) and (ctx.replaying or ctx.client.from_primary or _writer(ctx)):
            ctx.store(key, hll.with_cached_count(value, card), keep_ttl=True)
            encoding.string_modified_in_place(ctx.db, key)
            ctx.touch(ctx.db.id, key)          # signalModifiedKey: WATCH and tracking see the write
            ctx.propagate(b"PFCOUNT", key)     # replayed, it writes the same count into the same bytes
        return card
    registers = None
    for key in args[1:]:
        value = _hll_value(ctx, key)
        if value is None:
            continue
        registers = _max_registers(registers, value)
    if registers is None:
        return 0
    return hll.count_raw(registers)


@command("pfmerge")
def pfmerge(ctx, args):
    registers = None
    use_dense = False
    dest_value = None
    for i in range(1, len(args)):  # the destination is also a source, as in Valkey
        value = _hll_value(ctx, args[i], read=True)
        if value is None:
            continue
        if i == 1:
            dest_value = value
        if value[4] == hll.DENSE:
            use_dense = True
        registers = _max_registers(registers, value)
    if registers is None:
        registers = bytes(hll.REGISTERS)
    try:
        new = hll.merge_into(dest_value, registers, use_dense, _sparse_max(ctx))
    except hll.Corrupt:
        raise _corrupt() from None
    ctx.store(args[1], new, keep_ttl=True)
    encoding.string_modified_in_place(ctx.db, args[1])
    ctx.propagate_args(args)
    ctx.notify(STRING, b"pfadd", args[1])   # pfmergeCommand's event
    return OK


# -- PFDEBUG / PFSELFTEST -------------------------------------------------------------------------------

@command("pfdebug")
def pfdebug(ctx, args):
    """PFDEBUG GETREG|DECODE|ENCODING|TODENSE key, as hyperloglog.c's pfdebugCommand. A conversion to
    dense (GETREG, TODENSE) changes the value and is journaled as PFDEBUG TODENSE."""
    sub, key = args[1].lower(), args[2]
    value = ctx.lookup(key)
    if value is None:
        raise CommandError(messages.PFDEBUG_NO_KEY)
    if type(value) is not bytes or not hll.is_hll(value):
        raise CommandError(messages.HLL_WRONGTYPE)
    if sub not in (b"getreg", b"decode", b"encoding", b"todense"):
        raise CommandError(messages.PFDEBUG_UNKNOWN % args[1].decode("utf-8", "replace"))
    # dbUnshareStringValue: PFDEBUG leaves the string raw whatever the subcommand.
    encoding.string_modified_in_place(ctx.db, key)
    if sub == b"encoding":
        return "dense" if value[4] == hll.DENSE else "sparse"
    if sub == b"decode":
        if value[4] != hll.SPARSE:
            raise CommandError(messages.PFDEBUG_NOT_SPARSE)
        return hll.sparse_decode(value)
    converted = False
    if value[4] == hll.SPARSE:
        try:
            value = hll.to_dense(value)
        except hll.Corrupt:
            raise _corrupt() from None
        ctx.store(key, value, keep_ttl=True)
        encoding.string_modified_in_place(ctx.db, key)
        ctx.propagate(b"PFDEBUG", b"TODENSE", key)
        converted = True
    if sub == b"todense":
        return 1 if converted else 0
    return list(hll.dense_to_raw(value[hll.HDR_SIZE:]))


# Bounded versions of Valkey's loops (1000 register cycles, 10 million elements): the same checks, sized so
# that the command takes no longer than Valkey's own (half of Valkey 9.1.2's time on the same machine:
# scripts/bench_pfselftest.py, docs/loading.md).
SELFTEST_REGISTER_CYCLES = 3
SELFTEST_MAX_CARDINALITY = 100000


@command("pfselftest")
def pfselftest(ctx, args):
    """PFSELFTEST. Valkey runs it on its event thread; here it runs on a worker thread (pipeline.off_loop: it
    reads no key) while the loop goes on serving other clients, and the caller gets its answer when it ends.
    Its randomness is drawn from the keyspace's generator here, on the loop."""
    rng = random.Random(ctx.keyspace.rng.getrandbits(64))
    sparse_max = _sparse_max(ctx)
    deferred = ctx.pipeline.off_loop(ctx, args, (), lambda: _selftest(rng, sparse_max), _selftest_done)
    if deferred is not None:
        return deferred
    return _selftest_done(ctx, _selftest(rng, sparse_max))   # no worker (MULTI, a script): here and now


def _selftest_done(ctx, result):
    """The reply: OK, or the first failure (an exception the worker raised, raised here in its place)."""
    if isinstance(result, Exception):
        raise result
    return OK


def _selftest(rng, sparse_max):
    """pfselftestCommand's two tests: the dense registers read back as set, then a dense and a sparse HLL fed
    the same elements agree on a count within the expected error at every power of ten."""
    buf = bytearray(hll.DENSE_SIZE)
    for _ in range(SELFTEST_REGISTER_CYCLES):
        expected = [rng.getrandbits(6) for _ in range(hll.REGISTERS)]
        for i, r in enumerate(expected):
            hll.dense_set(buf, i, r)
        for i, r in enumerate(expected):
            got = hll.registers_get(buf, i)
            if got != r:
                raise CommandError(messages.PFSELFTEST_REGISTER % (i, r, got))
    # Approximation error, with a dense and a sparse HLL fed the same elements.
    dense = hll.empty_dense()
    sparse = None
    relerr = 1.04 / (hll.REGISTERS ** 0.5)
    seed = rng.getrandbits(64)
    added = 0
    checkpoint = 1
    while checkpoint <= SELFTEST_MAX_CARDINALITY:
        batch = [((j ^ seed) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little") for j in range(added + 1, checkpoint + 1)]
        added = checkpoint
        # hashed once (PFADD's hash, hll._pat_lens) for both twins: the hashing is most of the test's time
        pats = hll.pat_lens(batch)
        dense = hll.add_pats(dense, pats, sparse_max)[0] or dense
        sparse = hll.add_pats(sparse, pats, sparse_max)[0] or sparse
        if checkpoint < sparse_max // 2 and sparse[4] != hll.SPARSE:
            raise CommandError(messages.PFSELFTEST_NOT_SPARSE)
        # (estimate_value: count()'s estimate without its memo, which the loop's PFCOUNTs share)
        card = hll.estimate_value(dense)
        if card != hll.estimate_value(sparse):
            raise CommandError(messages.PFSELFTEST_DISAGREE)
        maxerr = 1 if checkpoint == 10 else math.ceil(relerr * 6 * checkpoint)
        if abs(checkpoint - card) > maxerr:
            raise CommandError(messages.PFSELFTEST_TOO_BIG % (checkpoint, abs(checkpoint - card)))
        checkpoint *= 10
    return OK
