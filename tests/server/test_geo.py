"""GEO commands: GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH GEOSEARCHSTORE GEORADIUS* (Valkey 8)."""

import pytest
import valkey
from helpers.replay import run_and_replay

from helpers.replay import execute, make_pipeline
from helpers.wire import raw
from durakv.commands.geo import decode_score, distance
from durakv.commands.session import Session
from durakv.keyspace import Keyspace

PALERMO = ("13.361389", "38.115556", "Palermo")
CATANIA = ("15.087269", "37.502669", "Catania")
PALERMO_SCORE = 3479099956230698
CATANIA_SCORE = 3479447370796909


def sicily(c, edges=False):
    args = ["GEOADD", "Sicily", *PALERMO, *CATANIA]
    if edges:
        args += ["12.758489", "38.788135", "edge1", "17.241510", "38.788135", "edge2"]
    return raw(c, *args)


def err(c, *args):
    with pytest.raises(valkey.ResponseError) as e:
        raw(c, *args)
    return str(e.value)


# -- GEOADD --------------------------------------------------------------------------------------

def test_geoadd_scores_are_valkey_geohashes(r):
    assert sicily(r) == 2
    assert r.zrange("Sicily", 0, -1, withscores=True) == [
        (b"Palermo", float(PALERMO_SCORE)), (b"Catania", float(CATANIA_SCORE))]
    assert r.type("Sicily") == b"zset"
    assert sicily(r) == 0


def test_geoadd_options(r):
    sicily(r)
    assert raw(r, "GEOADD", "Sicily", "NX", "13", "38", "Palermo", "14", "37", "Agrigento") == 1
    assert r.zscore("Sicily", "Palermo") == PALERMO_SCORE
    assert raw(r, "GEOADD", "Sicily", "XX", "13", "38", "Palermo", "10", "10", "Nowhere") == 0
    assert r.zscore("Sicily", "Palermo") != PALERMO_SCORE
    assert r.zscore("Sicily", "Nowhere") is None
    assert raw(r, "GEOADD", "Sicily", "CH", *PALERMO, "1", "1", "new") == 2
    assert raw(r, "GEOADD", "Sicily", "XX", "CH", *CATANIA) == 0
    assert raw(r, "GEOADD", "nokey", "XX", *CATANIA) == 0
    assert r.exists("nokey") == 0


def test_geoadd_errors(r):
    assert err(r, "GEOADD", "k", "200", "100", "m") == "invalid longitude,latitude pair 200.000000,100.000000"
    assert err(r, "GEOADD", "k", "10", "86", "m") == "invalid longitude,latitude pair 10.000000,86.000000"
    assert err(r, "GEOADD", "k", "abc", "10", "m") == "value is not a valid float"
    assert err(r, "GEOADD", "k", "10", "10", "m", "1") == "syntax error"
    assert err(r, "GEOADD", "k", "NX", "XX", "10", "10", "m") == "syntax error"
    assert err(r, "GEOADD", "k", "GT", "10", "10", "m") == "syntax error"
    assert "wrong number of arguments" in err(r, "GEOADD", "k", "10", "10")
    r.set("str", "v")
    assert err(r, "GEOADD", "str", "10", "10", "m").startswith("WRONGTYPE")
    # A bad pair anywhere means nothing is added.
    assert err(r, "GEOADD", "k", "10", "10", "a", "10", "90", "b") \
        == "invalid longitude,latitude pair 10.000000,90.000000"
    assert r.exists("k") == 0


def test_geoadd_limits_accepted(r):
    assert raw(r, "GEOADD", "k", "180", "85.05112878", "ne", "-180", "-85.05112878", "sw") == 2
    pos = raw(r, "GEOPOS", "k", "ne", "sw")
    assert abs(float(pos[0][0]) - 180) < 1e-5 and abs(float(pos[0][1]) - 85.05112878) < 1e-5
    assert abs(float(pos[1][0]) + 180) < 1e-5 and abs(float(pos[1][1]) + 85.05112878) < 1e-5


# -- GEOPOS / GEOHASH / GEODIST ------------------------------------------------------------------

def test_geopos_resp2(r):
    sicily(r)
    assert raw(r, "GEOPOS", "Sicily", "Palermo", "Catania", "NonExisting") == [
        [b"13.36138933897018433", b"38.11555639549629859"],
        [b"15.08726745843887329", b"37.50266842333162032"],
        None,
    ]
    assert raw(r, "GEOPOS", "missing", "a", "b") == [None, None]
    r.set("str", "v")
    assert err(r, "GEOPOS", "str", "a").startswith("WRONGTYPE")


def test_geopos_resp3_doubles(r3):
    sicily(r3)
    reply = raw(r3, "GEOPOS", "Sicily", "Palermo", "x")
    assert reply[0] == [13.36138933897018433, 38.11555639549629859]
    assert all(isinstance(v, float) for v in reply[0])
    assert reply[1] is None


def test_geohash(rr):
    sicily(rr)
    assert raw(rr, "GEOHASH", "Sicily", "Palermo", "Catania", "x") == [b"sqc8b49rny0", b"sqdtr74hyu0", None]
    assert raw(rr, "GEOHASH", "missing", "a") == [None]
    # a plain zset member with an arbitrary score still decodes
    rr.zadd("z", {"m": 0})
    [h] = raw(rr, "GEOHASH", "z", "m")
    assert len(h) == 11 and h.startswith(b"00") and h.endswith(b"0")  # the cell at (-180, -85.05)


def test_geodist(rr):
    sicily(rr)
    assert raw(rr, "GEODIST", "Sicily", "Palermo", "Catania") == b"166274.1516"
    assert raw(rr, "GEODIST", "Sicily", "Palermo", "Catania", "m") == b"166274.1516"
    assert raw(rr, "GEODIST", "Sicily", "Palermo", "Catania", "KM") == b"166.2742"
    assert raw(rr, "GEODIST", "Sicily", "Palermo", "Catania", "mi") == b"103.3182"
    assert raw(rr, "GEODIST", "Sicily", "Palermo", "Catania", "ft") == b"545518.8700"
    assert raw(rr, "GEODIST", "Sicily", "Palermo", "Palermo") == b"0.0000"
    assert raw(rr, "GEODIST", "Sicily", "Foo", "Bar") is None
    assert raw(rr, "GEODIST", "nokey", "Foo", "Bar") is None
    assert err(rr, "GEODIST", "Sicily", "Palermo", "Catania", "yd") \
        == "unsupported unit provided. please use M, KM, FT, MI"
    assert err(rr, "GEODIST", "Sicily", "Palermo", "Catania", "km", "x") == "syntax error"


# -- GEOSEARCH -----------------------------------------------------------------------------------

def test_geosearch_docs_examples(rr):
    sicily(rr, edges=True)
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC") \
        == [b"Catania", b"Palermo"]
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC",
               "WITHDIST") == [[b"Catania", b"56.4413"], [b"Palermo", b"190.4424"]]
    reply = raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "ASC",
                "WITHCOORD", "WITHDIST")
    assert [row[0] for row in reply] == [b"Catania", b"Palermo", b"edge2", b"edge1"]
    assert [row[1] for row in reply] == [b"56.4413", b"190.4424", b"279.7403", b"279.7405"]
    lon, lat = reply[0][2]
    assert float(lon) == 15.08726745843887329 and float(lat) == 37.50266842333162032


def test_geosearch_options(rr):
    sicily(rr, edges=True)
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "200", "km", "DESC") \
        == [b"Catania", b"edge1", b"Palermo"]
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km",
               "COUNT", "2", "DESC") == [b"edge1", b"edge2"]
    # COUNT without ordering sorts ascending
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km",
               "COUNT", "1") == [b"Catania"]
    any_reply = raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km",
                    "COUNT", "3", "ANY")
    assert len(any_reply) == 3 and set(any_reply) <= {b"Catania", b"Palermo", b"edge1", b"edge2"}
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC",
               "WITHHASH") == [[b"Catania", CATANIA_SCORE], [b"Palermo", PALERMO_SCORE]]
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "m") == []
    assert raw(rr, "GEOSEARCH", "nokey", "FROMMEMBER", "x", "BYRADIUS", "200", "m") == []
    # radius 0 around a member finds the member itself
    assert raw(rr, "GEOSEARCH", "Sicily", "FROMMEMBER", "Catania", "BYRADIUS", "0", "m") == [b"Catania"]


def test_geosearch_errors(r):
    sicily(r)
    assert err(r, "GEOSEARCH", "Sicily", "FROMMEMBER", "nope", "BYRADIUS", "1", "km") \
        == "could not decode requested zset member"
    assert err(r, "GEOSEARCH", "Sicily", "BYRADIUS", "1", "km", "ASC", "ASC") \
        == "exactly one of FROMMEMBER or FROMLONLAT can be specified for GEOSEARCH"
    assert err(r, "geosearch", "Sicily", "FROMLONLAT", "1", "1", "ASC", "ASC") \
        == "exactly one of BYRADIUS, BYBOX and BYPOLYGON can be specified for geosearch"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "FROMMEMBER", "Palermo",
               "BYRADIUS", "1", "km") == "syntax error"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km", "BYBOX", "1", "1",
               "km") == "syntax error"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "x", "km") == "need numeric radius"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "-1", "km") \
        == "radius cannot be negative"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "yd") \
        == "unsupported unit provided. please use M, KM, FT, MI"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYBOX", "x", "1", "km") == "need numeric width"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYBOX", "1", "x", "km") == "need numeric height"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYBOX", "1", "-1", "km") \
        == "height or width cannot be negative"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "200", "1", "BYRADIUS", "1", "km") \
        == "invalid longitude,latitude pair 200.000000,1.000000"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km", "COUNT", "0") \
        == "COUNT must be > 0"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km", "COUNT", "x") \
        == "value is not an integer or out of range"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km", "ANY") \
        == "the ANY argument requires COUNT argument"
    assert err(r, "GEOSEARCH", "Sicily", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km", "STORE", "x") \
        == "syntax error"
    r.set("str", "v")
    assert err(r, "GEOSEARCH", "str", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "km").startswith("WRONGTYPE")


# -- GEOSEARCHSTORE ------------------------------------------------------------------------------

def test_geosearchstore(r):
    sicily(r, edges=True)
    assert raw(r, "GEOSEARCHSTORE", "dst", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km",
               "ASC", "COUNT", "3") == 3
    assert r.zrange("dst", 0, -1, withscores=True) == [
        (b"Palermo", float(PALERMO_SCORE)), (b"Catania", float(CATANIA_SCORE)),
        (b"edge2", r.zscore("Sicily", "edge2"))]
    assert raw(r, "GEOSEARCHSTORE", "dst", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km",
               "STOREDIST") == 2
    assert [(m, round(s, 4)) for m, s in r.zrange("dst", 0, -1, withscores=True)] == [
        (b"Catania", 56.4413), (b"Palermo", 190.4424)]
    # an empty result deletes the destination
    r.expire("dst", 1000)
    assert raw(r, "GEOSEARCHSTORE", "dst", "Sicily", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km") == 0
    assert r.exists("dst") == 0
    r.set("dst", "string")
    assert raw(r, "GEOSEARCHSTORE", "dst", "nokey", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km") == 0
    assert r.exists("dst") == 0
    # the destination is overwritten whatever its type, and loses its TTL
    r.set("dst", "string", ex=100)
    assert raw(r, "GEOSEARCHSTORE", "dst", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "km") == 1
    assert r.zrange("dst", 0, -1) == [b"Palermo"] and r.ttl("dst") == -1
    assert err(r, "GEOSEARCHSTORE", "dst", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", "1", "km",
               "WITHDIST") == "GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options"


# -- GEORADIUS family ----------------------------------------------------------------------------

def test_georadius_docs_examples(rr):
    sicily(rr)
    assert raw(rr, "GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST") == [
        [b"Palermo", b"190.4424"], [b"Catania", b"56.4413"]]
    reply = raw(rr, "GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHCOORD")
    assert [row[0] for row in reply] == [b"Palermo", b"Catania"]
    assert [float(v) for v in reply[0][1]] == [13.36138933897018433, 38.11555639549629859]
    assert raw(rr, "GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHDIST", "WITHCOORD")[1][:2] \
        == [b"Catania", b"56.4413"]
    assert raw(rr, "GEORADIUS", "Sicily", "15", "37", "200", "km", "WITHHASH", "ASC") == [
        [b"Catania", CATANIA_SCORE], [b"Palermo", PALERMO_SCORE]]
    assert raw(rr, "GEORADIUS_RO", "Sicily", "15", "37", "200", "km", "DESC") == [b"Palermo", b"Catania"]


def test_georadiusbymember(rr):
    raw(rr, "GEOADD", "Sicily", "13.583333", "37.316667", "Agrigento")
    sicily(rr)
    assert raw(rr, "GEORADIUSBYMEMBER", "Sicily", "Agrigento", "100", "km") == [b"Agrigento", b"Palermo"]
    assert raw(rr, "GEORADIUSBYMEMBER_RO", "Sicily", "Agrigento", "100", "km", "COUNT", "1") == [b"Agrigento"]
    assert raw(rr, "GEORADIUSBYMEMBER", "nokey", "x", "junk", "km") == []
    assert err(rr, "GEORADIUSBYMEMBER", "Sicily", "nope", "100", "km") == "could not decode requested zset member"


def test_georadius_store(r):
    sicily(r)
    assert raw(r, "GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "dst") == 2
    assert r.zrange("dst", 0, -1, withscores=True) == [
        (b"Palermo", float(PALERMO_SCORE)), (b"Catania", float(CATANIA_SCORE))]
    assert raw(r, "GEORADIUSBYMEMBER", "Sicily", "Palermo", "200", "km", "STOREDIST", "dst2") == 2
    assert [(m, round(s, 4)) for m, s in r.zrange("dst2", 0, -1, withscores=True)] == [
        (b"Palermo", 0.0), (b"Catania", 166.2742)]
    assert raw(r, "GEORADIUS", "nokey", "15", "37", "200", "km", "STORE", "dst") == 0
    assert r.exists("dst") == 0
    assert err(r, "GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "dst", "WITHDIST") \
        == "STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
    assert err(r, "GEORADIUS_RO", "Sicily", "15", "37", "200", "km", "STORE", "dst") == "syntax error"
    assert err(r, "GEORADIUSBYMEMBER_RO", "Sicily", "Palermo", "200", "km", "STOREDIST", "d") == "syntax error"
    assert err(r, "GEORADIUS", "Sicily", "15", "37", "200", "km", "FROMLONLAT", "1", "1") == "syntax error"
    assert err(r, "GEORADIUS", "Sicily", "15", "37", "x", "km") == "need numeric radius"


# -- algorithm checks (no server) ----------------------------------------------------------------

def test_search_matches_brute_force():
    """The neighbour-box search finds exactly the points within the radius (400 random points)."""
    import random
    rng = random.Random(7)
    argv = [b"GEOADD", b"pts"]
    for i in range(400):
        argv += [b"%.6f" % rng.uniform(9, 11), b"%.6f" % rng.uniform(44, 46), b"p%d" % i]
    ks = Keyspace(clock_ms=lambda: 0)
    d, s = make_pipeline(ks), Session()
    assert execute(d, s, argv)[0] == 400
    points = []
    z = ks.dbs[0].data[b"pts"]
    for center, radius_km in (((10.0, 45.0), 30), ((9.5, 44.2), 80), ((10.9, 45.9), 5)):
        reply, _, _ = execute(d, s, [b"GEOSEARCH", b"pts", b"FROMLONLAT", str(center[0]).encode(),
                                    str(center[1]).encode(), b"BYRADIUS", str(radius_km).encode(), b"km"])
        expected = set()
        for score, member in z.order:
            x, y = decode_score(score)
            if distance(center[0], center[1], x, y) <= radius_km * 1000:
                expected.add(member)
        assert set(reply) == expected
        points.append(len(expected))
    assert max(points) > 10


# -- determinism ---------------------------------------------------------------------------------

def test_replay_geoadd():
    replies, effects = run_and_replay([
        ["GEOADD", "Sicily", *PALERMO, *CATANIA],
        ["GEOADD", "Sicily", "NX", "CH", "13", "38", "Palermo", "14", "37", "Agrigento"],
        ["GEOADD", "Sicily", "XX", "CH", "13", "38", "Palermo"],
        ["GEOADD", "Sicily", "XX", *CATANIA],
        ["GEOADD", "Sicily", "200", "100", "bad"],
    ])
    assert replies[:4] == [2, 1, 1, 0]
    assert effects[0] == (0, (b"ZADD", b"Sicily", str(PALERMO_SCORE).encode(), b"Palermo",
                              str(CATANIA_SCORE).encode(), b"Catania"))
    assert all(argv[0] == b"ZADD" for _db, argv in effects)
    assert len(effects) == 3  # the XX no-op and the error propagate nothing


def test_replay_geosearchstore_and_georadius_store():
    replies, effects = run_and_replay([
        ["GEOADD", "Sicily", *PALERMO, *CATANIA],
        ["SET", "dst", "x"],
        ["GEOSEARCHSTORE", "dst", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "STOREDIST"],
        ["GEOSEARCHSTORE", "dst2", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", "500", "500", "km"],
        ["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "dst3"],
        ["GEORADIUSBYMEMBER", "Sicily", "Catania", "10", "km", "STOREDIST", "dst4"],
        ["GEOSEARCHSTORE", "dst2", "Sicily", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
        ["GEOSEARCHSTORE", "never", "Sicily", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
        ["GEOSEARCHSTORE", "Sicily", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "100", "km"],
    ])
    assert replies[2:] == [2, 2, 2, 1, 0, 0, 1]
    stored = [argv for _db, argv in effects if argv[:2] == (b"ZADD", b"dst")]
    assert len(stored) == 1 and stored[0][3::2] == (b"Palermo", b"Catania")  # search order
    assert round(float(stored[0][4]), 4) == 56.4413
    assert not any(b"never" in argv for _db, argv in effects)


# -- durability ----------------------------------------------------------------------------------

def test_kill9_restart_keeps_geo_sets(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        assert raw(c, "GEOADD", "Sicily", *PALERMO, *CATANIA) == 2
        assert raw(c, "GEOSEARCHSTORE", "near", "Sicily", "FROMLONLAT", "15", "37", "BYRADIUS", "100", "km",
                   "STOREDIST") == 1
        assert raw(c, "GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "all") == 2
        before = {k: c.zrange(k, 0, -1, withscores=True) for k in ("Sicily", "near", "all")}
    srv.kill()
    srv.start()
    with srv.client() as c:
        after = {k: c.zrange(k, 0, -1, withscores=True) for k in ("Sicily", "near", "all")}
        assert after == before
        assert raw(c, "GEODIST", "Sicily", "Palermo", "Catania") == b"166274.1516"
