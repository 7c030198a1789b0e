"""FT.CREATE, FT.DROPINDEX, FT.INFO, FT._LIST and FT.SEARCH: valkey-search 1.0's surface, with 1.2's replies and
error texts (the module's own errors carry no "ERR ").

Indexes live beside the keyspace (keyspace/search: `get_search(ctx.keyspace)`), one namespace per database as in
valkey-search 1.1. FT.CREATE and FT.DROPINDEX are writes: their arguments are their effect, so the journal, a
replica and a snapshot make the same indexes; the contents are never journaled (the indexes follow the keyspace,
server/notify.py). FT.SEARCH, FT.INFO and FT._LIST are keyless reads, so in sync mode their replies wait for
every write issued before them (the pipeline's barrier ticket): a search never returns a vector, nor counts a
document, whose write has not committed.
"""

from .. import messages
from ..errors import CommandError
from ..keyspace.search import get_search
from ..keyspace.search.lazynumpy import np
from ..keyspace.search.query import parse_search
from ..keyspace.search.schema import parse_create, text, to_double
from ..keyspace.search.vectors import hnswlib
from ..protocol.resp import OK
from .acl.keys import READ
from .registry import command, lookup


def _name(b: bytes):
    """A name as valkey-search replies it (a simple string), kept as bytes when it cannot be one."""
    if b"\r" in b or b"\n" in b:
        return b
    return b.decode("utf-8", "surrogateescape")


def acl_prefix_check(ctx, prefixes):
    """valkey-search's AclPrefixCheck: a user may name an index only if it may read every key the index could
    hold, i.e. for each prefix (every key: "" when there is none) a key pattern of its, not write-only, that
    ends in '*' and matches the prefix."""
    client = ctx.client
    if client is None or client.from_primary or ctx.replaying:
        return
    user = client.acl_user
    if user is None:
        acl = ctx.services.acl_users()
        if acl is None:
            return
        user = acl.users.default
    if user.unrestricted:
        return
    for prefix in (prefixes or (b"",)):
        if not any(_selector_covers(sel, prefix) for sel in user.selectors):
            raise CommandError(messages.SEARCH_ACL_PREFIX)


def _selector_covers(sel, prefix):
    if sel.allkeys:
        return True
    return any(p.flags & READ and p.pattern.endswith(b"*") and p.match(prefix) for p in sel.patterns)


def _json_available():
    """valkey-search indexes JSON keys only with the JSON module loaded: here, with the JSON commands served."""
    return lookup((b"json.set",)) is not None


# -- FT.CREATE / FT.DROPINDEX ------------------------------------------------------------------------

def _remote_errors(results, ignore):
    """The first error a shard answered (but `ignore`, the one that means it is already done), as text."""
    for name, reply in results:
        if isinstance(reply, Exception):
            text_ = str(reply)
            if not text_.startswith(ignore):
                return messages.SEARCH_FANOUT_FAILED.format(name, text_)
    return None


def _create_here(ctx, args, definition):
    search = get_search(ctx.keyspace)
    db_id = ctx.db.id
    if search.get(db_id, definition.name) is not None:
        raise CommandError(messages.SEARCH_INDEX_EXISTS.format(text(definition.name), db_id))
    search.add(db_id, definition)
    ctx.propagate_args(args)


@command("ft.create")
def ft_create(ctx, args):
    if len(args) < 2:
        raise CommandError(messages.SEARCH_MISSING_ARGUMENT)
    definition = parse_create(args[1:], json_available=_json_available())
    if hnswlib is None and any(a.algorithm == "HNSW" for a in definition.attributes):
        raise CommandError(messages.SEARCH_NO_HNSWLIB)
    acl_prefix_check(ctx, definition.prefixes)
    search = get_search(ctx.keyspace)
    if search.get(ctx.db.id, definition.name) is not None:
        raise CommandError(messages.SEARCH_INDEX_EXISTS.format(text(definition.name), ctx.db.id))

    def finish(ctx, results):
        # every other shard has it (or said why not): now this one, journaled for its replicas
        if isinstance(results, Exception):
            raise CommandError(messages.SEARCH_FANOUT_FAILED.format("?", results))
        _create_here(ctx, args, parse_create(args[1:], json_available=_json_available()))
        error = _remote_errors(results, "Index ")   # "Index ... already exists."
        if error is not None:
            raise CommandError(error)
        return OK
    deferred = ctx.services.cluster.search_fanout(ctx, args, finish)
    if deferred is not None:
        return deferred
    _create_here(ctx, args, definition)
    return OK


@command("ft.dropindex")
def ft_dropindex(ctx, args):
    if len(args) != 2:
        raise CommandError(messages.SEARCH_WRONG_ARITY.format("FT.DROPINDEX"))
    search = get_search(ctx.keyspace)
    db_id = ctx.db.id
    if search.get(db_id, args[1]) is None:
        raise CommandError(messages.SEARCH_INDEX_NOT_FOUND.format(text(args[1]), db_id))
    acl_prefix_check(ctx, search.get(db_id, args[1]).d.prefixes)

    def drop_here(ctx):
        if not search.remove(ctx.db.id, args[1]):
            raise CommandError(messages.SEARCH_INDEX_NOT_FOUND.format(text(args[1]), ctx.db.id))
        ctx.propagate_args(args)

    def finish(ctx, results):
        if isinstance(results, Exception):
            raise CommandError(messages.SEARCH_FANOUT_FAILED.format("?", results))
        drop_here(ctx)
        error = _remote_errors(results, "Index with name")   # not there: nothing to drop
        if error is not None:
            raise CommandError(error)
        return OK
    deferred = ctx.services.cluster.search_fanout(ctx, args, finish)
    if deferred is not None:
        return deferred
    drop_here(ctx)
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
    acl_prefix_check(ctx, idx.d.prefixes)
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
    """[(key, distance or None, fields or None)] the query selects here, in reply order, and the total to report
    (fields None: read from this node's keyspace when the reply is made)."""
    candidates = idx.evaluate(sq.filter) if sq.filter is not None else None
    if sq.knn is not None:
        attr, k, blob, ef = sq.knn
        if len(blob) != attr.dim * 4:
            raise CommandError(messages.SEARCH_BLOB_SIZE.format(len(blob), attr.dim * 4))
        query = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        neighbors = idx.structures[attr.alias].search(query, k, ef, candidates)
        key_of = idx.key_of
        hits = [(key_of[label], dist, None) for dist, label in neighbors if label in key_of]
        return hits, min(len(hits), k)
    labels = sorted(candidates) if candidates is not None else sorted(idx.key_of)
    key_of = idx.key_of
    hits = [(key_of[label], None, None) for label in labels]
    return hits, len(hits)


def _sort(idx, sq, hits):
    field, asc = sq.sortby
    attr = idx.d.attribute(field)
    source, db = idx.source, idx.db

    def value(hit):
        fields = hit[2] if hit[2] is not None else (source.read(db, hit[0]) or {})
        raw = fields.get(attr.identifier)
        if attr.type == "NUMERIC":
            v = to_double(raw) if raw is not None else None
            return (v is None, v if v is not None else 0.0)
        return (raw is None, raw or b"")
    keyed = [(value(h), h) for h in hits]
    present = sorted((kv for kv in keyed if not kv[0][0]), key=lambda kv: kv[0][1], reverse=not asc)
    return [h for _v, h in present] + [h for v, h in keyed if v[0]]   # missing values last in both orders


def search_reply(idx, sq, hits, total):
    """FT.SEARCH's reply: [total, key, [field, value ...], ...] (NOCONTENT: [total, key, ...])."""
    page = hits[sq.offset:sq.offset + sq.limit] if sq.limit else []
    out = [total]
    source, db = idx.source, idx.db
    score_as = sq.score_as
    wanted = [i for i, _a in sq.returns] if sq.returns is not None else None
    for key, dist, remote in page:
        if sq.no_content:
            out.append(key)
            continue
        score = b"%.12g" % dist if dist is not None else None
        if remote is not None:
            content = [(f, v) for f, v in remote.items() if f != score_as]
            if wanted is not None:
                content = [(i, remote[i]) for i in wanted if i in remote]
        else:
            content = source.content(db, key, wanted)
            if content is None:
                continue
        fields = []
        if sq.returns is None:
            if score is not None:
                fields += [score_as, score]
            for f, v in content:
                fields += [f, v]
        else:
            content = dict(content)
            for ident, alias in sq.returns:
                if score is not None and ident == score_as:
                    fields += [score_as, score]
                elif ident in content:
                    fields += [alias, content[ident]]
        out.append(key)
        out.append(fields)
    return out


def _remote_search_args(args, sq):
    """What another shard is asked: the query with its PARAMS and DIALECT, every field and the score of each
    result it could contribute (no NOCONTENT, RETURN, SORTBY or paging), answered for its own keys."""
    out = [b"FT.SEARCH", args[1], args[2]]
    if sq.params:
        out += [b"PARAMS", b"%d" % (2 * len(sq.params))]
        for k, v in sq.params.items():
            out += [k, v]
    want = sq.knn[1] if sq.knn is not None else sq.offset + sq.limit
    out += [b"LIMIT", b"0", b"%d" % want, b"DIALECT", b"%d" % sq.dialect, b"LOCALONLY"]
    return out


def _merge(sq, local_hits, local_total, results):
    hits = list(local_hits)
    total = local_total
    for name, reply in results:
        if isinstance(reply, Exception):
            raise CommandError(messages.SEARCH_FANOUT_FAILED.format(name, reply))
        total += reply[0]
        for i in range(1, len(reply) - 1, 2):
            raw = reply[i + 1]
            fields = dict(zip(raw[::2], raw[1::2]))
            dist = float(fields[sq.score_as]) if sq.knn is not None and sq.score_as in fields else None
            hits.append((reply[i], dist, fields))
    if sq.knn is not None:
        k = sq.knn[1]
        hits.sort(key=lambda h: (h[1], h[0]))
        hits = hits[:k]
        total = min(total, k)
    return hits, total


@command("ft.search")
def ft_search(ctx, args):
    if len(args) < 3:
        raise CommandError(messages.SEARCH_WRONG_ARITY.format("FT.SEARCH"))
    idx = _index_or_error(ctx, args[1])
    acl_prefix_check(ctx, idx.d.prefixes)
    sq = parse_search(idx.d, args[2:])
    if not sq.local_only:
        def finish(ctx, results):
            if isinstance(results, Exception):
                raise CommandError(messages.SEARCH_FANOUT_FAILED.format("?", results))
            here = _index_or_error(ctx, args[1])   # computed now, on the loop: with what committed meanwhile
            hits, total = run_search(here, sq)
            hits, total = _merge(sq, hits, total, results)
            if sq.sortby is not None:
                hits = _sort(here, sq, hits)
            return search_reply(here, sq, hits, total)
        deferred = ctx.services.cluster.search_fanout(ctx, _remote_search_args(args, sq), finish)
        if deferred is not None:
            return deferred
    hits, total = run_search(idx, sq)
    if sq.sortby is not None:
        hits = _sort(idx, sq, hits)
    return search_reply(idx, sq, hits, total)
