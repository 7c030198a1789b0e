"""FT.CREATE, FT.DROPINDEX, FT.INFO, FT._LIST and FT.SEARCH: valkey-search 1.0's surface, with 1.2's replies and
error texts (the module's own errors carry no "ERR ").

Indexes live beside the keyspace (keyspace/search: `get_search(ctx.keyspace)`), one namespace per database as in
valkey-search 1.1. FT.CREATE and FT.DROPINDEX are writes: their arguments are their effect, so the journal, a
replica and a snapshot make the same indexes; the contents are never journaled (the indexes follow the keyspace,
server/notify.py). FT.SEARCH, FT.INFO and FT._LIST are keyless reads, so in sync mode their replies wait for
every write issued before them (the pipeline's barrier ticket): a search never returns a vector, nor counts a
document, whose write has not committed.
"""

import numpy as np

from .. import messages
from ..errors import CommandError
from ..keyspace.search import get_search
from ..keyspace.search.query import parse_search
from ..keyspace.search.schema import parse_create, text
from ..keyspace.search.vectors import hnswlib
from ..protocol.resp import OK
from .registry import command, lookup


def _name(b: bytes):
    """A name as valkey-search replies it (a simple string), kept as bytes when it cannot be one."""
    if b"\r" in b or b"\n" in b:
        return b
    return b.decode("utf-8", "surrogateescape")


def _json_available():
    return lookup((b"json.set",)) is not None and False   # JSON indexing arrives with the JSON type (issue 30)


# -- FT.CREATE / FT.DROPINDEX ------------------------------------------------------------------------

@command("ft.create")
def ft_create(ctx, args):
    if len(args) < 2:
        raise CommandError(messages.SEARCH_MISSING_ARGUMENT)
    definition = parse_create(args[1:], json_available=_json_available())
    search = get_search(ctx.keyspace)
    db_id = ctx.db.id
    if search.get(db_id, definition.name) is not None:
        raise CommandError(messages.SEARCH_INDEX_EXISTS.format(text(definition.name), db_id))
    if hnswlib is None and any(a.algorithm == "HNSW" for a in definition.attributes):
        raise CommandError("ERR the HNSW algorithm needs the hnswlib package, which is not installed")
    search.add(db_id, definition)
    ctx.propagate_args(args)
    cluster = ctx.port.cluster
    fanout = getattr(cluster, "search_fanout", None)
    if fanout is not None and not ctx.replaying and ctx.may_block and ctx.client is not None \
            and not ctx.client.from_primary:
        # cluster mode: every shard gets the index (valkey-search's coordinator broadcasts its metadata)
        reply = fanout(ctx, args, None)
        if reply is not None:
            return reply
    return OK


@command("ft.dropindex")
def ft_dropindex(ctx, args):
    if len(args) != 2:
        raise CommandError(messages.SEARCH_WRONG_ARITY.format("FT.DROPINDEX"))
    search = get_search(ctx.keyspace)
    db_id = ctx.db.id
    if not search.remove(db_id, args[1]):
        raise CommandError(messages.SEARCH_INDEX_NOT_FOUND.format(text(args[1]), db_id))
    ctx.propagate_args(args)
    cluster = ctx.port.cluster
    fanout = getattr(cluster, "search_fanout", None)
    if fanout is not None and not ctx.replaying and ctx.may_block and ctx.client is not None \
            and not ctx.client.from_primary:
        reply = fanout(ctx, args, None)
        if reply is not None:
            return reply
    return OK


# -- FT._LIST / FT.INFO -------------------------------------------------------------------------------

@command("ft._list")
def ft_list(ctx, args):
    if len(args) > 1:
        raise CommandError(messages.SEARCH_WRONG_ARITY.format("FT._LIST"))
    search = getattr(ctx.keyspace, "search", None)
    if not search:
        return []
    return [_name(n) for n in search.names(ctx.db.id)]


def _index_or_error(ctx, name):
    search = getattr(ctx.keyspace, "search", None)
    idx = search.get(ctx.db.id, name) if search else None
    if idx is None:
        raise CommandError(messages.SEARCH_INDEX_NOT_FOUND.format(text(name), ctx.db.id))
    return idx


def _attribute_info(idx, a):
    s = idx.structures[a.alias]
    out = ["identifier", _name(a.identifier), "attribute", _name(a.alias),
           "user_indexed_memory", idx.memory_bytes(a.alias)]
    if a.type == "VECTOR":
        algo = ["name", a.algorithm]
        if a.algorithm == "HNSW":
            algo += ["m", a.m, "ef_construction", a.ef_construction, "ef_runtime", a.ef_runtime]
        else:
            algo += ["block_size", a.block_size]
        out += ["type", "VECTOR", "index",
                ["capacity", s.capacity, "dimensions", a.dim, "distance_metric", a.metric, "size", b"%d" % len(s),
                 "data_type", a.data_type, "algorithm", algo]]
    elif a.type == "TAG":
        out += ["type", "TAG", "SEPARATOR", _name(a.separator), "CASESENSITIVE", "1" if a.case_sensitive else "0",
                "size", b"%d" % len(s)]
    else:
        out += ["type", "NUMERIC", "size", b"%d" % len(s)]
    return out


@command("ft.info")
def ft_info(ctx, args):
    if len(args) < 2:
        raise CommandError(messages.SEARCH_WRONG_ARITY.format("FT.INFO"))
    if len(args) > 3 or (len(args) == 3 and args[2].upper() not in (b"LOCAL", b"PRIMARY", b"CLUSTER")):
        raise CommandError(messages.SEARCH_UNEXPECTED_ARGUMENT.format(text(args[-1])))
    idx = _index_or_error(ctx, args[1])
    d = idx.d
    backfilling = idx.backfilling
    return [
        "index_name", _name(d.name),
        "index_definition", ["key_type", d.on, "prefixes", [_name(p) for p in d.prefixes], "default_score", b"1"],
        "attributes", [_attribute_info(idx, a) for a in d.attributes],
        "num_docs", idx.num_docs(),
        "num_records", idx.num_records(),
        "total_term_occurrences", 0,
        "num_terms", 0,
        "hash_indexing_failures", b"%d" % idx.failures,
        "backfill_in_progress", b"1" if backfilling else b"0",
        "backfill_complete_percent", b"%f" % idx.backfill_percent(),
        "mutation_queue_size", b"0",
        "recent_mutations_queue_delay", b"0 sec",
        "state", "backfill_in_progress" if backfilling else "ready",
        "language", "english",
    ]


# -- FT.SEARCH ---------------------------------------------------------------------------------------

def run_search(idx, sq):
    """[(key, distance or None)] the query selects, in reply order, and the total to report."""
    candidates = idx.evaluate(sq.filter) if sq.filter is not None else None
    if sq.knn is not None:
        attr, k, blob, ef = sq.knn
        if len(blob) != attr.dim * 4:
            raise CommandError(messages.SEARCH_BLOB_SIZE.format(len(blob), attr.dim * 4))
        query = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        neighbors = idx.structures[attr.alias].search(query, k, ef, candidates)
        key_of = idx.key_of
        hits = [(key_of[label], dist) for dist, label in neighbors if label in key_of]
        return hits, min(len(hits), k)
    labels = sorted(candidates) if candidates is not None else sorted(idx.key_of)
    key_of = idx.key_of
    hits = [(key_of[label], None) for label in labels]
    return hits, len(hits)


def _sort(idx, sq, hits):
    field, asc = sq.sortby
    attr = idx.d.attribute(field)
    source, db = idx.source, idx.db

    def value(hit):
        fields = source.read(db, hit[0]) or {}
        raw = fields.get(attr.identifier)
        if attr.type == "NUMERIC":
            from ..keyspace.search.schema import to_double
            v = to_double(raw) if raw is not None else None
            return (v is None, v if v is not None else 0.0)
        return (raw is None, raw or b"")
    ordered = sorted(hits, key=value, reverse=not asc)
    if not asc:   # missing values last in both orders
        ordered = [h for h in ordered if value(h)[0] is False] + [h for h in ordered if value(h)[0] is True]
    return ordered


def search_reply(idx, sq, hits, total):
    """FT.SEARCH's reply: [total, key, [field, value ...], ...] (NOCONTENT: [total, key, ...])."""
    page = hits[sq.offset:sq.offset + sq.limit] if sq.limit else []
    out = [total]
    source, db = idx.source, idx.db
    score_as = sq.score_as
    for key, dist in page:
        if sq.no_content:
            out.append(key)
            continue
        score = b"%.12g" % dist if dist is not None else None
        if sq.returns is None:
            content = source.content(db, key)
            if content is None:
                continue
            fields = []
            if score is not None:
                fields += [score_as, score]
            for f, v in content:
                fields += [f, v]
        else:
            content = dict(source.content(db, key, [i for i, _a in sq.returns]) or ())
            fields = []
            for ident, alias in sq.returns:
                if score is not None and ident == score_as:
                    fields += [score_as, score]
                elif ident in content:
                    fields += [alias, content[ident]]
        out.append(key)
        out.append(fields)
    return out


@command("ft.search")
def ft_search(ctx, args):
    if len(args) < 3:
        raise CommandError(messages.SEARCH_WRONG_ARITY.format("FT.SEARCH"))
    idx = _index_or_error(ctx, args[1])
    sq = parse_search(idx.d, args[2:])
    hits, total = run_search(idx, sq)
    if sq.sortby is not None:
        hits = _sort(idx, sq, hits)
    cluster = ctx.port.cluster
    fanout = getattr(cluster, "search_fanout", None)
    if fanout is not None and not sq.local_only and ctx.may_block and ctx.client is not None \
            and not ctx.replaying:
        # cluster mode: every other shard's primary answers for its keys, merged here (valkey-search's
        # coordinator); the local part is computed now, on the loop
        reply = fanout(ctx, args, (idx, sq, hits, total))
        if reply is not None:
            return reply
    return search_reply(idx, sq, hits, total)
