"""Vector search (valkey-search's FT.* commands, issue 30 part 3) on a real durakv process with valkey-py.

Replies and error texts are valkey-search 1.2's; KNN results are checked against exact search in numpy; the
indexes follow writes from every path (commands, HDEL/DEL/RENAME, EXEC, scripts, RESTORE, key and hash-field
expiry, FLUSHALL), survive a restart and a snapshot (definitions journaled, contents rebuilt in the background),
and a search never returns a vector whose write has not committed (sync mode).
"""

import queue
import threading

import numpy as np
import pytest
import valkey

from conftest import ServerProcess, wait_until
from helpers.leaks import StalledWrite

DIM = 8


def vec(values):
    return np.asarray(values, dtype=np.float32).tobytes()


def create(c, name="idx", algo="HNSW", metric="L2", dim=DIM, prefix="doc:", extra=()):
    params = ["DIM", str(dim), "TYPE", "FLOAT32", "DISTANCE_METRIC", metric, *extra]
    return c.execute_command("FT.CREATE", name, "ON", "HASH", "PREFIX", "1", prefix, "SCHEMA",
                             "v", "VECTOR", algo, str(len(params)), *params,
                             "color", "TAG", "price", "NUMERIC")


def knn(c, k, query, filt="*", idx="idx", extra=()):
    return c.execute_command("FT.SEARCH", idx, f"{filt}=>[KNN {k} @v $q]", "PARAMS", "2", "q", query,
                             *extra, "DIALECT", "2")


def keys_of(reply):
    """The keys of an FT.SEARCH reply with content: [total, key, fields, key, fields, ...]."""
    return [reply[i] for i in range(1, len(reply), 2)]


def fields_of(reply):
    return {reply[i]: dict(zip(reply[i + 1][::2], reply[i + 1][1::2])) for i in range(1, len(reply), 2)}


def exact(vectors, query, metric, k):
    """(key, distance) of the k nearest in numpy, as valkey-search defines the distances."""
    q = np.frombuffer(query, dtype=np.float32)
    out = []
    for key, v in vectors.items():
        v = np.frombuffer(v, dtype=np.float32)
        if metric == "L2":
            d = float(((v - q) ** 2).sum())
        elif metric == "IP":
            d = 1.0 - float(v.dot(q))
        else:
            d = 1.0 - float(v.dot(q) / (np.linalg.norm(v) * np.linalg.norm(q)))
        out.append((d, key))
    out.sort()
    return [(k_, d) for d, k_ in out[:k]]


@pytest.fixture
def srv(server_factory):
    return server_factory("--durability", "sync")


@pytest.fixture(scope="module")
def sync_server(tmp_path_factory):
    """One sync server for this module's tests that read back only what they wrote (error texts, search results
    over their own index): each starts from `flushed`. A server of their own cost these 57 tests as many
    starts, a third of a second of CPU each."""
    server = ServerProcess(tmp_path_factory.mktemp("search"), args=("--durability", "sync"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def flushed(sync_server):
    """The module's sync server with no index and no key."""
    with sync_server.client() as c:
        for name in c.execute_command("FT._LIST"):
            c.execute_command("FT.DROPINDEX", name)
        c.flushall()
        assert c.execute_command("FT._LIST") == [] and c.dbsize() == 0
    return sync_server


def fill(c, n, seed=1, prefix="doc:"):
    rng = np.random.default_rng(seed)
    vectors = {}
    for i in range(n):
        key = f"{prefix}{i}".encode()
        v = rng.random(DIM, dtype=np.float32).tobytes()
        vectors[key] = v
        c.hset(key, mapping={"v": v, "color": ["red", "green", "blue"][i % 3], "price": i})
    return vectors


# -- the command table ---------------------------------------------------------------------------

def test_module_list_command_info_and_acl_category(server_factory):
    srv = server_factory("--enable-module-command", "yes")    # MODULE is off by default, as in Valkey
    with srv.client() as c:
        modules = c.execute_command("MODULE", "LIST")
        assert [b"name", b"search", b"ver", 66048, b"path", b"/usr/lib/valkey/libsearch.so", b"args", []] in modules
        modules_info = c.info("modules")["modules"]   # INFO's `module:` lines, parsed by valkey-py
        assert {"name": "search", "ver": 66048, "api": 1, "filters": 0, "usedby": "[]", "using": "[]",
                "options": "[handle-io-errors|handle-repl-async-load|no-implicit-signal-modified]"} in modules_info
        info = c.execute_command("COMMAND", "INFO", "FT.SEARCH", "FT.CREATE")
        search, create_ = info["ft.search"], info["ft.create"]
        assert search["arity"] == -1 and create_["arity"] == -1
        assert search["first_key_pos"] == 0 and search["key_specifications"] == []
        assert search["flags"] == ["readonly", "denyoom", "module"]
        assert create_["flags"] == ["write", "denyoom", "module", "fast"]
        assert b"search" in c.execute_command("ACL", "CAT")
        assert {b"ft.search", b"ft.create", b"ft.info", b"ft._list", b"ft.dropindex"} <= set(
            c.execute_command("ACL", "CAT", "search"))


# -- FT.CREATE / FT.INFO / FT._LIST / FT.DROPINDEX ----------------------------------------------------

def test_create_info_list_drop(srv):
    with srv.client() as c:
        assert create(c, extra=("M", "24", "EF_CONSTRUCTION", "100", "EF_RUNTIME", "20")) == b"OK"
        fill(c, 10)
        info = c.execute_command("FT.INFO", "idx")
        d = dict(zip(info[::2], info[1::2]))
        assert d[b"index_name"] == b"idx"
        assert d[b"index_definition"] == [b"key_type", b"HASH", b"prefixes", [b"doc:"], b"default_score", b"1"]
        v, color, price = d[b"attributes"]
        assert v[:4] == [b"identifier", b"v", b"attribute", b"v"]
        vi = dict(zip(v[6::2], v[7::2]))
        assert vi[b"type"] == b"VECTOR"
        index = dict(zip(vi[b"index"][::2], vi[b"index"][1::2]))
        assert index[b"dimensions"] == DIM and index[b"distance_metric"] == b"L2" and index[b"size"] == b"10"
        assert index[b"capacity"] == 10240 and index[b"data_type"] == b"FLOAT32"
        assert index[b"algorithm"] == [b"name", b"HNSW", b"m", 24, b"ef_construction", 100, b"ef_runtime", 20]
        assert color[6:] == [b"type", b"TAG", b"SEPARATOR", b",", b"CASESENSITIVE", b"0", b"size", b"10"]
        assert price[6:] == [b"type", b"NUMERIC", b"size", b"10"]
        assert d[b"num_docs"] == 10 and d[b"num_records"] == 30
        assert d[b"hash_indexing_failures"] == b"0"
        assert d[b"backfill_in_progress"] == b"0" and d[b"backfill_complete_percent"] == b"1.000000"
        assert d[b"state"] == b"ready"
        assert c.execute_command("FT._LIST") == [b"idx"]
        # one namespace per database
        c.execute_command("SELECT", "1")
        assert c.execute_command("FT._LIST") == []
        with pytest.raises(valkey.ResponseError, match=r"^Index with name 'idx' not found in database 1$"):
            c.execute_command("FT.INFO", "idx")
        c.execute_command("SELECT", "0")
        with pytest.raises(valkey.ResponseError, match=r"^Index idx in database 0 already exists\.$"):
            create(c)
        assert c.execute_command("FT.DROPINDEX", "idx") == b"OK"
        assert c.execute_command("FT._LIST") == []
        assert c.hlen("doc:1") == 3          # dropping an index keeps the data
        with pytest.raises(valkey.ResponseError, match=r"^Index with name 'idx' not found in database 0$"):
            c.execute_command("FT.DROPINDEX", "idx")


@pytest.mark.parametrize("args, error", [
    (["i"], "Missing argument"),
    (["i", "SCHEMA"], "Index schema must have at least one attribute"),
    (["i", "ON", "XML", "SCHEMA", "a", "TAG"], "Bad arguments for ON: Unknown argument `XML`"),
    (["i", "PREFIX", "9", "a", "SCHEMA", "a", "TAG"], "Bad arguments for PREFIX: `9` is outside acceptable bounds"),
    (["i", "PREFIX", "3", "a", "SCHEMA", "a", "TAG"], "Unexpected parameter `TAG`, expecting `SCHEMA`"),
    (["i", "FILTER", "x", "SCHEMA", "a", "TAG"], "The parameter `FILTER` is not supported"),
    (["i", "NOPE", "SCHEMA", "a", "TAG"], "Unexpected parameter `NOPE`, expecting `SCHEMA`"),
    (["i", "SCHEMA", "a", "BLOB"], "Invalid field type for field `a`: Unknown argument `BLOB`"),
    (["i", "SCHEMA", "a", "TEXT"], "Invalid field type for field `a`: Unknown argument `TEXT`"),   # 1.0's answer
    (["i", "SCHEMA", "a", "TAG", "a", "NUMERIC"], "Duplicate field in schema - a"),
    (["i", "SCHEMA", "a", "AS", "x.y", "TAG"], "Invalid field type for field `a`: Attribute alias `x.y` contains "
                                               "invalid character `.`"),
    (["i", "SCHEMA", "a?", "TAG"], "Invalid field type for field `a?`: Attribute alias `a?` contains invalid "
                                   "character `?`"),
    (["i", "SCHEMA", "a", "TAG", "SEPARATOR", "ab"],
     "Invalid field type for field `a`: The separator must be a single character, but got `ab`"),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "4", "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2"],
     "Invalid field type for field `v`: Missing dimensions parameter."),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "6", "DIM", "32769", "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2"],
     "Invalid field type for field `v`: Invalid range: Value above maximum; The dimensions value must be a "
     "positive integer greater than 0 and less than or equal to 32768."),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "4", "DIM", "4", "DISTANCE_METRIC", "L2"],
     "Invalid field type for field `v`: Missing vector TYPE parameter."),
    (["i", "SCHEMA", "v", "VECTOR", "FLAT", "4", "DIM", "4", "TYPE", "FLOAT32"],
     "Invalid field type for field `v`: Missing DISTANCE_METRIC parameter."),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "6", "DIM", "4", "TYPE", "FLOAT64", "DISTANCE_METRIC", "L2"],
     "Invalid field type for field `v`: Error parsing value for the parameter `TYPE` - Unknown argument `FLOAT64`"),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "6", "DIM", "x", "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2"],
     "Invalid field type for field `v`: Error parsing value for the parameter `DIM` - `x` is not a valid "
     "numeric value"),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "8", "DIM", "4", "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2", "M", "1"],
     "Invalid field type for field `v`: Invalid range: Value below minimum; M must be a positive integer greater "
     "than 2 and cannot exceed 2000000."),
    (["i", "SCHEMA", "v", "VECTOR", "FLAT", "8", "DIM", "4", "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2", "M", "4"],
     "Invalid field type for field `v`: Unexpected argument `M`"),
    (["i", "SCHEMA", "v", "VECTOR", "HNSW", "20", "DIM", "4"],
     "Invalid field type for field `v`: Expected 20 parameters for HNSW but got 2 parameters."),
])
def test_create_errors(flushed, args, error):
    with flushed.client() as c:
        with pytest.raises(valkey.ResponseError) as e:
            c.execute_command("FT.CREATE", *args)
        assert str(e.value) == error
        assert c.execute_command("FT._LIST") == []
        assert c.ping()


def test_wrong_arity_texts(flushed):
    with flushed.client() as c:
        for args, name in ((["FT.DROPINDEX"], "FT.DROPINDEX"), (["FT.DROPINDEX", "a", "b"], "FT.DROPINDEX"),
                           (["FT.INFO"], "FT.INFO"), (["FT._LIST", "x"], "FT._LIST"), (["FT.SEARCH", "i"],
                                                                                     "FT.SEARCH")):
            with pytest.raises(valkey.ResponseError) as e:
                c.execute_command(*args)
            assert str(e.value) == f"wrong number of arguments for '{name}' command"


# -- FT.SEARCH ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ["FLAT", "HNSW"])
@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_knn_matches_exact_search(flushed, algo, metric):
    with flushed.client() as c:
        create(c, algo=algo, metric=metric)
        vectors = fill(c, 200)
        rng = np.random.default_rng(99)
        for _ in range(5):
            q = rng.random(DIM, dtype=np.float32).tobytes()
            reply = knn(c, 5, q)
            want = exact(vectors, q, metric, 5)
            assert reply[0] == 5
            got = fields_of(reply)
            assert keys_of(reply) == [k for k, _ in want]   # 200 points, M=16: HNSW finds the exact top 5 here
            for key, d in want:
                assert float(got[key][b"__v_score"]) == pytest.approx(d, rel=1e-4, abs=1e-5)
                assert got[key][b"v"] == vectors[key] and got[key][b"price"] == key.split(b":")[1]


def test_search_options(flushed):
    with flushed.client() as c:
        create(c, algo="FLAT")
        vectors = fill(c, 30)
        q = vectors[b"doc:7"]
        # the score under its own name, RETURN with AS, LIMIT within the k found, NOCONTENT
        reply = c.execute_command("FT.SEARCH", "idx", "*=>[KNN 4 @v $q AS dist]", "PARAMS", "2", "q", q,
                                  "RETURN", "3", "dist", "price", "AS", "p")
        assert reply[0] == 4 and reply[1] == b"doc:7" and reply[2] == [b"dist", b"0", b"p", b"7"]
        page = knn(c, 4, q, extra=("LIMIT", "1", "2"))
        assert page[0] == 4 and len(keys_of(page)) == 2
        assert keys_of(page) == keys_of(knn(c, 4, q))[1:3]
        assert knn(c, 3, q, extra=("NOCONTENT",))[:2] == [3, b"doc:7"]
        assert len(knn(c, 3, q, extra=("NOCONTENT",))) == 4
        # EF_RUNTIME in the clause and through PARAMS
        r = c.execute_command("FT.SEARCH", "idx", "*=>[KNN $k @v $q EF_RUNTIME $ef]", "PARAMS", "6", "q", q,
                              "k", "2", "ef", "50")
        assert r[0] == 2 and r[1] == b"doc:7"
        # non-vector queries: every match, 10 per page by default
        all_red = c.execute_command("FT.SEARCH", "idx", "@color:{red}", "NOCONTENT")
        assert all_red[0] == 10 and len(all_red) == 11
        cheap = c.execute_command("FT.SEARCH", "idx", "@price:[0 (3]", "RETURN", "1", "price")
        assert cheap[0] == 3 and sorted(cheap[2::2]) == [[b"price", b"0"], [b"price", b"1"], [b"price", b"2"]]
        assert c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 30
        by_price = c.execute_command("FT.SEARCH", "idx", "@price:[10 13]", "SORTBY", "price", "DESC",
                                     "NOCONTENT")
        assert by_price == [4, b"doc:13", b"doc:12", b"doc:11", b"doc:10"]


@pytest.mark.parametrize("filt, expect", [
    ("@color:{red}", lambda i: i % 3 == 0),
    ("@color:{red | blue}", lambda i: i % 3 != 1),
    ("@color:{RED}", lambda i: i % 3 == 0),                      # tags are case-insensitive by default
    ("@color:{gr*}", lambda i: i % 3 == 1),                      # prefix
    ("-@color:{red}", lambda i: i % 3 != 0),
    ("@price:[10 20]", lambda i: 10 <= i <= 20),
    ("@price:[(10 (20]", lambda i: 10 < i < 20),
    ("@price:[-inf 5]", lambda i: i <= 5),
    ("@price:[25 +inf]", lambda i: i >= 25),
    ("@color:{red} @price:[0 15]", lambda i: i % 3 == 0 and i <= 15),
    ("@price:[0 2] | @price:[28 29]", lambda i: i <= 2 or i >= 28),
    ("(@color:{blue} | @color:{green}) -@price:[5 25]", lambda i: i % 3 != 0 and not 5 <= i <= 25),
])
def test_prefilters(flushed, filt, expect):
    with flushed.client() as c:
        create(c, algo="HNSW")
        vectors = fill(c, 30)
        q = vectors[b"doc:0"]
        want = {f"doc:{i}".encode() for i in range(30) if expect(i)}
        reply = knn(c, 30, q, filt=filt, extra=("NOCONTENT",))
        assert reply[0] == len(want) and len(reply) == 1 + min(10, len(want))   # LIMIT 0 10 by default
        exact_order = [k for k, _ in exact({k: v for k, v in vectors.items() if k in want}, q, "L2", len(want))]
        page = knn(c, 30, q, filt=filt, extra=("NOCONTENT", "LIMIT", "0", "30"))
        assert page[1:] == exact_order
        plain = c.execute_command("FT.SEARCH", "idx", filt, "NOCONTENT", "LIMIT", "0", "100")
        assert plain[0] == len(want) and set(plain[1:]) == want


@pytest.mark.parametrize("query, params, error", [
    ("@nope:{a}", (), "Invalid filter expression: `@nope:{a}`. `nope` is not indexed as a tag field"),
    ("@price:{a}", (), "Invalid filter expression: `@price:{a}`. `price` is not indexed as a tag field"),
    ("@color:[1 2]", (), "Invalid filter expression: `@color:[1 2]`. `color` is not indexed as a numeric field"),
    ("@price:[5 1]", (), "Invalid filter expression: `@price:[5 1]`. Start and end values of a numeric field "
                         "indicate an empty range. Position: 12"),
    ("@color:{red", (), "Invalid filter expression: `@color:{red`. Missing closing TAG bracket, '}'"),
    ("price:[1 2]", (), "Invalid filter expression: `price:[1 2]`. Unexpected character at position 1: `p`, "
                        "expecting `@`"),
    ("*=>[KNN 3 @v $q]", (), "Error parsing vector similarity parameters: Parameter q not found."),
    ("*=>[KNN 3 @v $q]", ("q", "abc"), "Error parsing vector similarity query: query vector blob size (3) does "
                                       "not match index's expected size (32)."),
    ("*=>[KNN 3 @price $q]", ("q", "x"), "Index field `price` is not a Vector index "),
    ("*=>[KNN 3 @w $q]", ("q", "x"), "Index field `w` does not exist"),
    ("*=>[KNN 0 @v $q]", ("q", "x"), "Invalid range: Value below minimum; KNN parameter must be a positive "
                                     "integer greater than 0 and cannot exceed 10000."),
    ("*=>[KNX 3 @v $q]", ("q", "x"), "Error parsing vector similarity parameters: `[KNX 3 @v $q]`. `KNX`. "
                                     "Expecting `KNN`"),
    ("*=>[KNN 3 v $q]", ("q", "x"), "Error parsing vector similarity parameters: `[KNN 3 v $q]`. Unexpected "
                                    "argument `v`. Expecting a vector field name, starting with '@'"),
    ("*=>[KNN 3 @v]", (), "Error parsing vector similarity parameters: `[KNN 3 @v]`. Blob attribute argument is "
                          "missing"),
    ("*", ("unused", "1"), "Parameter `unused` not used."),
])
def test_search_errors(flushed, query, params, error):
    with flushed.client() as c:
        create(c)
        fill(c, 3)
        args = ["FT.SEARCH", "idx", query]
        if params:
            args += ["PARAMS", str(len(params)), *params]
        with pytest.raises(valkey.ResponseError) as e:
            c.execute_command(*args)
        assert str(e.value) == error
        with pytest.raises(valkey.ResponseError, match=r"^DIALECT requires a non negative integer >=2 and <= 4$"):
            c.execute_command("FT.SEARCH", "idx", "*", "DIALECT", "1")
        with pytest.raises(valkey.ResponseError, match=r"^Unexpected argument `BOGUS`$"):
            c.execute_command("FT.SEARCH", "idx", "*", "BOGUS")
        with pytest.raises(valkey.ResponseError, match=r"^Index with name 'none' not found in database 0$"):
            c.execute_command("FT.SEARCH", "none", "*")
        assert c.ping()


# -- the indexes follow every write path -----------------------------------------------------------------

def found(c, q=None, k=50):
    q = q if q is not None else vec([0] * DIM)
    return set(knn(c, k, q, extra=("NOCONTENT", "LIMIT", "0", "100"))[1:])


def test_index_follows_commands_exec_scripts_restore_and_expiry(srv):
    with srv.client() as c:
        create(c, algo="FLAT")
        c.hset("doc:a", mapping={"v": vec([1] * DIM), "color": "red", "price": 1})
        c.hset("other:a", mapping={"v": vec([1] * DIM)})                  # outside the prefix
        assert found(c) == {b"doc:a"}
        # a vector of the wrong size is not indexed, and counted as a failure
        c.hset("doc:bad", mapping={"v": b"short"})
        assert found(c) == {b"doc:a"}
        info = c.execute_command("FT.INFO", "idx")
        assert dict(zip(info[::2], info[1::2]))[b"hash_indexing_failures"] == b"1"
        # EXEC
        with c.pipeline(transaction=True) as p:
            p.hset("doc:b", mapping={"v": vec([2] * DIM), "color": "blue"})
            p.hset("doc:c", mapping={"v": vec([3] * DIM)})
            p.execute()
        assert found(c) == {b"doc:a", b"doc:b", b"doc:c"}
        # a script
        c.eval("redis.call('HSET', KEYS[1], 'v', ARGV[1]); redis.call('DEL', KEYS[2])", 2, "doc:d", "doc:c",
               vec([4] * DIM))
        assert found(c) == {b"doc:a", b"doc:b", b"doc:d"}
        # HDEL of the vector field, a filter on a changed tag
        c.hdel("doc:a", "v")
        assert found(c) == {b"doc:b", b"doc:d"}
        assert c.execute_command("FT.SEARCH", "idx", "@color:{red}", "NOCONTENT") == [1, b"doc:a"]
        c.hset("doc:a", "color", "green")
        assert c.execute_command("FT.SEARCH", "idx", "@color:{red}", "NOCONTENT") == [0]
        # RENAME out of and into the prefix
        c.rename("doc:b", "other:b")
        assert found(c) == {b"doc:d"}
        c.rename("other:b", "doc:b2")
        assert found(c) == {b"doc:d", b"doc:b2"}
        # DUMP / RESTORE
        payload = c.dump("doc:d")
        c.delete("doc:d")
        assert found(c) == {b"doc:b2"}
        c.restore("doc:d", 0, payload)
        assert found(c) == {b"doc:b2", b"doc:d"}
        # key expiry (active) and a hash field's TTL
        c.hset("doc:e", mapping={"v": vec([5] * DIM)})
        c.pexpire("doc:e", 50)
        c.hset("doc:f", mapping={"v": vec([6] * DIM), "color": "red"})
        c.execute_command("HPEXPIRE", "doc:f", "50", "FIELDS", "1", "v")
        wait_until(lambda: found(c) == {b"doc:b2", b"doc:d"}, 10, what="expired key and field out of the index")
        assert c.execute_command("FT.SEARCH", "idx", "@color:{red}", "NOCONTENT") == [1, b"doc:f"]
        # a key that changes type leaves the index
        c.delete("doc:b2")
        c.set("doc:b2", "a string")
        assert found(c) == {b"doc:d"}
        # on a standalone server FLUSHDB drops the indexes of its database, FLUSHALL every index (valkey-search's
        # OnFlushDBEnded; in cluster mode they stay, empty: test_search_cluster.py)
        c.execute_command("SELECT", "1")
        create(c, name="other")
        c.execute_command("SELECT", "0")
        c.flushdb()
        assert c.execute_command("FT._LIST") == []
        c.execute_command("SELECT", "1")
        assert c.execute_command("FT._LIST") == [b"other"]
        c.flushall()
        assert c.execute_command("FT._LIST") == []


def test_backfill_of_existing_keys_and_swapdb(srv):
    with srv.client() as c:
        vectors = fill(c, 300)
        create(c, algo="HNSW")
        wait_until(lambda: dict(zip(*[iter(c.execute_command("FT.INFO", "idx"))] * 2))[b"state"] == b"ready",
                   20, what="backfill done")
        q = vectors[b"doc:5"]
        assert keys_of(knn(c, 3, q)) == [k for k, _ in exact(vectors, q, "L2", 3)]
        info = dict(zip(*[iter(c.execute_command("FT.INFO", "idx"))] * 2))
        assert info[b"num_docs"] == 300 and info[b"backfill_complete_percent"] == b"1.000000"
        # SKIPINITIALSCAN: only later writes
        c.execute_command("FT.CREATE", "later", "PREFIX", "1", "doc:", "SKIPINITIALSCAN", "SCHEMA", "price",
                          "NUMERIC")
        assert c.execute_command("FT.SEARCH", "later", "@price:[0 1000]", "NOCONTENT")[0] == 0
        c.hset("doc:1", "price", "1")
        assert c.execute_command("FT.SEARCH", "later", "@price:[0 1000]", "NOCONTENT") == [1, b"doc:1"]
        # SWAPDB moves the data under the index: it rebuilds from what its database now holds
        c.execute_command("SWAPDB", "0", "1")
        wait_until(lambda: c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 0, 20,
                   what="index of db 0 empty after SWAPDB")
        c.execute_command("SWAPDB", "0", "1")
        wait_until(lambda: c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 300, 20,
                   what="index of db 0 full again")


def test_indexes_survive_restart_and_snapshot(srv):
    with srv.client() as c:
        create(c, algo="HNSW", metric="COSINE")
        vectors = fill(c, 120)
        c.execute_command("FT.CREATE", "tags", "SCHEMA", "label", "TAG", "SEPARATOR", "|", "CASESENSITIVE")
        c.hset("doc:0", "label", "Red|Blue")
    srv.stop()
    srv.start()
    with srv.client() as c:
        assert sorted(c.execute_command("FT._LIST")) == [b"idx", b"tags"]
        wait_until(lambda: c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 120, 20,
                   what="index rebuilt after restart")
        q = vectors[b"doc:9"]
        assert keys_of(knn(c, 3, q)) == [k for k, _ in exact(vectors, q, "COSINE", 3)]
        assert c.execute_command("FT.SEARCH", "tags", "@label:{Red}", "NOCONTENT") == [1, b"doc:0"]
        assert c.execute_command("FT.SEARCH", "tags", "@label:{red}", "NOCONTENT") == [0]
        assert c.save()   # a snapshot: definitions in it, the journal before it dropped
        c.execute_command("FT.DROPINDEX", "tags")
    srv.stop()
    srv.start()
    with srv.client() as c:
        assert c.execute_command("FT._LIST") == [b"idx"]
        wait_until(lambda: c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 120, 20,
                   what="index rebuilt from the snapshot")
        q = vectors[b"doc:100"]
        assert keys_of(knn(c, 1, q)) == [b"doc:100"]


# -- nothing uncommitted leaves ----------------------------------------------------------------------------

def test_search_waits_for_the_commit_of_what_it_returns(srv):
    """FT.SEARCH (and FT.INFO's counts) sent while a vector's HSET is uncommitted answer only once it
    committed."""
    with srv.client() as probe, srv.client() as reader:
        create(probe, algo="FLAT")
        probe.hset("doc:old", mapping={"v": vec([9] * DIM)})
        w = StalledWrite(srv, probe, "HSET", "doc:new", "v", vec([0] * DIM))
        got = queue.Queue()
        threading.Thread(target=lambda: got.put(knn(reader, 1, vec([0] * DIM), extra=("NOCONTENT",))),
                         daemon=True).start()
        reply = got.get(timeout=30)
        w.assert_committed_now("an FT.SEARCH result")
        assert reply == [1, b"doc:new"]
        assert w.finish() == 1
        w = StalledWrite(srv, probe, "HSET", "doc:newer", "v", vec([1] * DIM))
        info = reader.execute_command("FT.INFO", "idx")
        w.assert_committed_now("FT.INFO's num_docs")
        assert dict(zip(info[::2], info[1::2]))[b"num_docs"] == 3
        w.finish()


def test_acl_category_and_prefix_permissions(srv):
    """@search in ACL rules, and valkey-search's prefix check: naming an index needs read access to every key
    it may hold."""
    with srv.client() as c:
        c.execute_command("FT.CREATE", "two", "PREFIX", "2", "vec:", "vector:", "SCHEMA", "n", "NUMERIC")
        c.execute_command("ACL", "SETUSER", "part", "on", ">pw", "~vector:*", "&*", "+@all")
        c.execute_command("ACL", "SETUSER", "nosearch", "on", ">pw", "~*", "&*", "+@all", "-@search")
        c.execute_command("ACL", "SETUSER", "onlysearch", "on", ">pw", "~*", "-@all", "+@search")
        c.hset("vector:1", "n", "1")
    with srv.client(username="part", password="pw") as u:
        for args in (["FT.SEARCH", "two", "*"], ["FT.INFO", "two"], ["FT.DROPINDEX", "two"],
                     ["FT.CREATE", "mine", "PREFIX", "1", "vec:", "SCHEMA", "n", "NUMERIC"],
                     ["FT.CREATE", "all", "SCHEMA", "n", "NUMERIC"]):
            with pytest.raises(valkey.ResponseError, match=r"^The user does not have permission to access the key "
                                                           r"prefix$"):
                u.execute_command(*args)
        assert u.execute_command("FT.CREATE", "mine", "PREFIX", "1", "vector:", "SCHEMA", "n", "NUMERIC") == b"OK"
        assert u.execute_command("FT.SEARCH", "mine", "*", "NOCONTENT") == [1, b"vector:1"]
    with srv.client(username="nosearch", password="pw") as u:
        with pytest.raises(valkey.exceptions.NoPermissionError, match="has no permissions to run the 'ft.search'"):
            u.execute_command("FT.SEARCH", "two", "*")
    with srv.client(username="onlysearch", password="pw") as u:
        assert u.execute_command("FT.SEARCH", "two", "*", "NOCONTENT") == [1, b"vector:1"]
        with pytest.raises(valkey.exceptions.NoPermissionError):
            u.execute_command("HSET", "vector:2", "n", "2")


def test_index_follows_eviction(srv):
    """Keys evicted under maxmemory leave the index (the server's own deletion reaches it as expiry does)."""
    with srv.client() as c:
        create(c, algo="FLAT")
        used = c.info("memory")["used_memory"]
        c.config_set("maxmemory-policy", "allkeys-random")
        c.config_set("maxmemory", str(used + 200_000))
        blob = vec([1] * DIM)
        for i in range(3000):
            c.hset(f"doc:{i}", mapping={"v": blob, "pad": "x" * 200})
        assert c.info("stats")["evicted_keys"] > 0
        total = c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0]
        assert total == c.dbsize() < 3000
        c.config_set("maxmemory", "0")


def test_writes_pipelined_after_ft_create_are_indexed(srv):
    """FT.CREATE and HSETs in one read: the compiled core must hand the HSETs to the observed path."""
    with srv.client() as c:
        p = c.pipeline(transaction=False)
        p.execute_command("FT.CREATE", "idx", "PREFIX", "1", "doc:", "SCHEMA", "v", "VECTOR", "FLAT", "6", "DIM",
                          str(DIM), "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2")
        for i in range(20):
            p.hset(f"doc:{i}", "v", vec([i] * DIM))
        p.execute()
        assert found(c) == {f"doc:{i}".encode() for i in range(20)}


def test_replicaof_replica_gets_definitions_and_follows(server_factory):
    """A REPLICAOF replica (Valkey's protocol) of a durakv primary: the definitions come after the RDB, the
    contents are built from the synced keys, and later writes, a later FT.CREATE and DEL reach its index."""
    primary = server_factory("--durability", "sync")
    with primary.client() as p:
        create(p, algo="HNSW")
        vectors = fill(p, 40)
    replica = server_factory("--durability", "sync")
    with replica.client() as r, primary.client() as p:
        assert r.execute_command("REPLICAOF", "127.0.0.1", primary.port) == b"OK"
        wait_until(lambda: r.execute_command("ROLE")[3] == b"connected", 30, what="the link")
        wait_until(lambda: r.execute_command("FT._LIST") == [b"idx"], 30, what="the definition on the replica")
        wait_until(lambda: r.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 40, 30,
                   what="the replica's index built")
        q = vectors[b"doc:3"]
        assert keys_of(knn(r, 3, q)) == [k for k, _ in exact(vectors, q, "L2", 3)]
        p.hset("doc:new", mapping={"v": q, "price": 1000})
        p.delete("doc:3")
        p.execute_command("FT.CREATE", "cheap", "PREFIX", "1", "doc:", "SCHEMA", "price", "NUMERIC")
        wait_until(lambda: r.execute_command("FT.SEARCH", "cheap", "@price:[1000 1000]", "NOCONTENT")
                   == [1, b"doc:new"], 30, what="a later FT.CREATE and write on the replica")
        assert knn(r, 1, q, extra=("NOCONTENT",)) == [1, b"doc:new"]


def test_index_memory_counts_in_used_memory(srv):
    """What the indexes hold counts in used_memory (as a module's allocations do in Valkey), so maxmemory sees
    it; dropping the index gives it back."""
    with srv.client() as c:
        for i in range(500):
            c.hset(f"doc:{i}", mapping={"v": vec([i] * DIM), "color": "red,blue", "price": i})
        before = c.info("memory")["used_memory"]
        create(c, algo="HNSW")
        wait_until(lambda: c.execute_command("FT.SEARCH", "idx", "*", "LIMIT", "0", "0")[0] == 500, 20,
                   what="backfill")
        grown = c.info("memory")["used_memory"] - before
        assert grown >= 500 * (DIM * 4 + 2 * 16 * 4)     # at least each vector and its level-0 links
        c.execute_command("FT.DROPINDEX", "idx")
        assert abs(c.info("memory")["used_memory"] - before) < 1000


# -- JSON documents ---------------------------------------------------------------------------------------

def json_create(c, name="jidx", algo="HNSW"):
    return c.execute_command("FT.CREATE", name, "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA",
                             "$.v", "AS", "v", "VECTOR", algo, "6", "DIM", str(DIM), "TYPE", "FLOAT32",
                             "DISTANCE_METRIC", "L2", "$.color", "AS", "color", "TAG", "$.price", "AS", "price",
                             "NUMERIC")


def test_json_index_search_and_writes(srv):
    import json
    with srv.client() as c:
        assert json_create(c) == b"OK"
        rng = np.random.default_rng(5)
        vectors = {}
        for i in range(60):
            v = rng.random(DIM, dtype=np.float32)
            vectors[f"j:{i}".encode()] = v.tobytes()
            c.execute_command("JSON.SET", f"j:{i}", "$", json.dumps(
                {"v": [float(x) for x in v], "color": ["red", "green", "blue"][i % 3], "price": i, "name": f"n{i}"}))
        info = dict(zip(*[iter(c.execute_command("FT.INFO", "jidx"))] * 2))
        assert info[b"index_definition"][:2] == [b"key_type", b"JSON"] and info[b"num_docs"] == 60
        q = vectors[b"j:7"]
        reply = c.execute_command("FT.SEARCH", "jidx", "*=>[KNN 3 @v $q]", "PARAMS", "2", "q", q, "DIALECT", "2")
        assert keys_of(reply) == [k for k, _ in exact(vectors, q, "L2", 3)]
        first = fields_of(reply)[b"j:7"]
        assert float(first[b"__v_score"]) == 0.0
        assert json.loads(first[b"$"])["name"] == "n7"                 # the whole document as `$`
        # filters, and RETURN of a path and an alias
        reply = c.execute_command("FT.SEARCH", "jidx", "@color:{red} @price:[0 10]", "RETURN", "2", "price",
                                  "$.name", "SORTBY", "price")
        assert reply == [4, b"j:0", [b"price", b"0", b"$.name", b"n0"], b"j:3", [b"price", b"3", b"$.name", b"n3"],
                         b"j:6", [b"price", b"6", b"$.name", b"n6"], b"j:9", [b"price", b"9", b"$.name", b"n9"]]
        # JSON.SET of a path, JSON.DEL of the vector, DEL, a vector that is not numbers
        c.execute_command("JSON.SET", "j:7", "$.v", json.dumps([100.0] * DIM))
        assert knn(c, 1, q, idx="jidx", extra=("NOCONTENT",))[1] != b"j:7"
        c.execute_command("JSON.SET", "j:7", "$.color", '"violet"')
        assert c.execute_command("FT.SEARCH", "jidx", "@color:{violet}", "NOCONTENT") == [1, b"j:7"]
        c.execute_command("JSON.DEL", "j:8", "$.v")
        c.delete("j:9")
        assert not {b"j:8", b"j:9"} & set(knn(c, 60, q, idx="jidx", extra=("NOCONTENT", "LIMIT", "0", "60"))[1:])
        assert c.execute_command("FT.SEARCH", "jidx", "@price:[8 9]", "NOCONTENT") == [1, b"j:8"]
        c.execute_command("JSON.SET", "j:bad", "$", json.dumps({"v": [1, "x"] + [0] * (DIM - 2)}))
        info = dict(zip(*[iter(c.execute_command("FT.INFO", "jidx"))] * 2))
        assert info[b"hash_indexing_failures"] == b"1"
        # a hash under the same prefix is not a document of a JSON index, nor a JSON key of a HASH index
        c.hset("j:h", mapping={"v": vec([0] * DIM)})
        assert b"j:h" not in set(knn(c, 70, q, idx="jidx", extra=("NOCONTENT", "LIMIT", "0", "70"))[1:])
        # an alias is required where a path has punctuation (valkey-search's alias rule)
        with pytest.raises(valkey.ResponseError, match=r"Attribute alias `\$\.v` contains invalid character `\$`"):
            c.execute_command("FT.CREATE", "bad", "ON", "JSON", "SCHEMA", "$.v", "VECTOR", "FLAT", "6", "DIM", "3",
                              "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2")
    srv.stop()
    srv.start()
    with srv.client() as c:
        wait_until(lambda: c.execute_command("FT.SEARCH", "jidx", "*", "LIMIT", "0", "0")[0] == 59, 20,
                   what="the JSON index rebuilt after a restart")
        assert c.execute_command("FT.SEARCH", "jidx", "@color:{violet}", "NOCONTENT") == [1, b"j:7"]
