"""Geospatial commands on sorted sets (Valkey's geo.c, geohash.c, geohash_helper.c).

A geo set is a sorted set whose scores are 52-bit interleaved geohashes (26 steps of latitude and
longitude), so a search is a handful of score ranges: the geohash box around the center and its
eight neighbours, filtered by the exact distance.

Effects: GEOADD propagates `ZADD key [NX|XX] [CH] score member ...` with the computed scores;
GEORADIUS* STORE/STOREDIST and GEOSEARCHSTORE propagate `DEL dst` followed by
`ZADD dst score member ...` of the stored result (just `DEL dst` when the result is empty and dst
existed).
"""

import math

from .. import messages
from ..errors import CommandError
from ..keyspace import ZSet, encoding
from ..keyspace.events import GENERIC, ZSET
from ..protocol.numbers import string2ll
from ..protocol.resp import NullArray, Raw
from .args import ArgCursor
from .base import syntax_error
from .registry import command
from .zsets import _zadd, format_score, parse_score

GEO_STEP_MAX = 26
GEO_LAT_MIN = -85.05112878
GEO_LAT_MAX = 85.05112878
GEO_LONG_MIN = -180.0
GEO_LONG_MAX = 180.0

_D_R = math.pi / 180.0
EARTH_RADIUS_IN_METERS = 6372797.560856
MERCATOR_MAX = 20037726.37

_U64 = (1 << 64) - 1
_GEOALPHABET = b"0123456789bcdefghjkmnpqrstuvwxyz"

_UNITS = {b"M": 1.0, b"KM": 1000.0, b"FT": 0.3048, b"MI": 1609.34}

_CIRCLE, _BOX, _POLYGON = 1, 2, 3


# -- geohash.c -------------------------------------------------------------------------------

def _interleave64(xlo, ylo):
    """Bits of xlo (latitude) at the even positions, ylo (longitude) at the odd ones."""
    x = xlo & 0xFFFFFFFF
    y = ylo & 0xFFFFFFFF
    x = (x | (x << 16)) & 0x0000FFFF0000FFFF
    y = (y | (y << 16)) & 0x0000FFFF0000FFFF
    x = (x | (x << 8)) & 0x00FF00FF00FF00FF
    y = (y | (y << 8)) & 0x00FF00FF00FF00FF
    x = (x | (x << 4)) & 0x0F0F0F0F0F0F0F0F
    y = (y | (y << 4)) & 0x0F0F0F0F0F0F0F0F
    x = (x | (x << 2)) & 0x3333333333333333
    y = (y | (y << 2)) & 0x3333333333333333
    x = (x | (x << 1)) & 0x5555555555555555
    y = (y | (y << 1)) & 0x5555555555555555
    return x | ((y << 1) & _U64)


def _deinterleave64(bits):
    """(even bits, odd bits) of a 64-bit value, each packed into 32 bits."""
    x = bits & 0x5555555555555555
    y = (bits >> 1) & 0x5555555555555555
    x = (x | (x >> 1)) & 0x3333333333333333
    y = (y | (y >> 1)) & 0x3333333333333333
    x = (x | (x >> 2)) & 0x0F0F0F0F0F0F0F0F
    y = (y | (y >> 2)) & 0x0F0F0F0F0F0F0F0F
    x = (x | (x >> 4)) & 0x00FF00FF00FF00FF
    y = (y | (y >> 4)) & 0x00FF00FF00FF00FF
    x = (x | (x >> 8)) & 0x0000FFFF0000FFFF
    y = (y | (y >> 8)) & 0x0000FFFF0000FFFF
    x = (x | (x >> 16)) & 0x00000000FFFFFFFF
    y = (y | (y >> 16)) & 0x00000000FFFFFFFF
    return x, y


def _encode(longitude, latitude, step, lat_min=GEO_LAT_MIN, lat_max=GEO_LAT_MAX):
    """The step-bit geohash of a point (0 when out of range, as geohashEncode leaves it)."""
    if (longitude > GEO_LONG_MAX or longitude < GEO_LONG_MIN
            or latitude > GEO_LAT_MAX or latitude < GEO_LAT_MIN):
        return 0
    if latitude < lat_min or latitude > lat_max:
        return 0
    lat_offset = (latitude - lat_min) / (lat_max - lat_min) * (1 << step)
    long_offset = (longitude - GEO_LONG_MIN) / (GEO_LONG_MAX - GEO_LONG_MIN) * (1 << step)
    return _interleave64(math.trunc(lat_offset), math.trunc(long_offset))


def _decode_area(bits, step):
    """(lon_min, lon_max, lat_min, lat_max) of a geohash cell."""
    ilato, ilono = _deinterleave64(bits)
    cells = float(1 << step)
    lat_scale = GEO_LAT_MAX - GEO_LAT_MIN
    long_scale = GEO_LONG_MAX - GEO_LONG_MIN
    return (GEO_LONG_MIN + (ilono / cells) * long_scale,
            GEO_LONG_MIN + ((ilono + 1) / cells) * long_scale,
            GEO_LAT_MIN + (ilato / cells) * lat_scale,
            GEO_LAT_MIN + ((ilato + 1) / cells) * lat_scale)


def _score_bits(score):
    """(uint64_t)score as x86-64 computes it."""
    if score != score or score in (math.inf, -math.inf):
        return 1 << 63
    return math.trunc(score) & _U64


def decode_score(score):
    """(longitude, latitude) at the center of the 26-step cell of a geo score (always succeeds)."""
    lon_min, lon_max, lat_min, lat_max = _decode_area(_score_bits(score), GEO_STEP_MAX)
    lon = (lon_min + lon_max) / 2
    if lon > GEO_LONG_MAX:
        lon = GEO_LONG_MAX
    elif lon < GEO_LONG_MIN:
        lon = GEO_LONG_MIN
    lat = (lat_min + lat_max) / 2
    if lat > GEO_LAT_MAX:
        lat = GEO_LAT_MAX
    elif lat < GEO_LAT_MIN:
        lat = GEO_LAT_MIN
    return lon, lat


def _move_x(bits, step, d):
    x = bits & 0xAAAAAAAAAAAAAAAA
    y = bits & 0x5555555555555555
    zz = 0x5555555555555555 >> (64 - step * 2)
    if d > 0:
        x = x + (zz + 1)
    else:
        x = (x | zz) - (zz + 1)
    x &= 0xAAAAAAAAAAAAAAAA >> (64 - step * 2)
    return x | y


def _move_y(bits, step, d):
    x = bits & 0xAAAAAAAAAAAAAAAA
    y = bits & 0x5555555555555555
    zz = 0xAAAAAAAAAAAAAAAA >> (64 - step * 2)
    if d > 0:
        y = y + (zz + 1)
    else:
        y = ((y | zz) - (zz + 1)) & _U64
    y &= 0x5555555555555555 >> (64 - step * 2)
    return x | y


def _neighbors(bits, step):
    """[north, south, east, west, north_east, north_west, south_east, south_west]."""
    east = _move_x(bits, step, 1)
    west = _move_x(bits, step, -1)
    return [_move_y(bits, step, 1), _move_y(bits, step, -1), east, west,
            _move_y(east, step, 1), _move_y(west, step, 1),
            _move_y(east, step, -1), _move_y(west, step, -1)]


# -- geohash_helper.c ------------------------------------------------------------------------

def _estimate_steps(range_meters, lat):
    if range_meters == 0:
        return 26
    step = 1
    while range_meters < MERCATOR_MAX:
        range_meters *= 2
        step += 1
    step -= 2
    if lat > 66 or lat < -66:
        step -= 1
        if lat > 80 or lat < -80:
            step -= 1
    return min(max(step, 1), 26)


def _lat_distance(lat1d, lat2d):
    return EARTH_RADIUS_IN_METERS * abs(lat2d * _D_R - lat1d * _D_R)


def distance(lon1d, lat1d, lon2d, lat2d):
    """Haversine distance in meters (geohashGetDistance)."""
    lon1r = lon1d * _D_R
    lon2r = lon2d * _D_R
    v = math.sin((lon2r - lon1r) / 2)
    if v == 0.0:
        return _lat_distance(lat1d, lat2d)
    lat1r = lat1d * _D_R
    lat2r = lat2d * _D_R
    u = math.sin((lat2r - lat1r) / 2)
    a = u * u + math.cos(lat1r) * math.cos(lat2r) * v * v
    return 2.0 * EARTH_RADIUS_IN_METERS * math.asin(math.sqrt(a))


class _Shape:
    __slots__ = ("type", "lon", "lat", "conversion", "radius", "width", "height", "points")

    def __init__(self):
        self.type = 0
        self.lon = self.lat = 0.0
        self.conversion = 1.0
        self.radius = self.width = self.height = 0.0
        self.points = None     # BYPOLYGON: [(lon, lat)] vertices, in order


def _polygon(shape, points):
    """BYPOLYGON (Valkey 9): searched in the box around the vertices' spherical centroid (the mean of their
    unit vectors, which WITHDIST and ASC/DESC measure from) that reaches every vertex's longitude and latitude;
    a member is in the polygon by the even-odd rule on longitude and latitude as plane coordinates. (Checked
    against Valkey 9.1.2: the same members in the same scan order.)"""
    x = y = z = 0.0
    for lon, lat in points:
        la, lo = lat * _D_R, lon * _D_R
        x += math.cos(la) * math.cos(lo)
        y += math.cos(la) * math.sin(lo)
        z += math.sin(la)
    shape.lon = math.atan2(y, x) / _D_R
    shape.lat = math.atan2(z, math.hypot(x, y)) / _D_R
    shape.width = 2 * max(distance(shape.lon, shape.lat, lon, shape.lat) for lon, _lat in points)
    shape.height = 2 * max(_lat_distance(shape.lat, lat) for _lon, lat in points)
    shape.conversion = 1.0
    shape.points = points
    shape.type = _POLYGON


def _in_polygon(points, x, y) -> bool:
    inside = False
    j = len(points) - 1
    for i in range(len(points)):
        xi, yi = points[i]
        xj, yj = points[j]
        if (yi > y) != (yj > y) and x < (xj - xi) * (y - yi) / (yj - yi) + xi:
            inside = not inside
        j = i
    return inside


def _areas(shape):
    """The cells to scan: [(bits, step)] for the center cell and its non-pruned neighbours
    (geohashCalculateAreasByShapeWGS84); pruned ones are None."""
    lon, lat = shape.lon, shape.lat
    if shape.type == _CIRCLE:
        half_h = half_w = shape.conversion * shape.radius
        radius_meters = shape.radius
    else:
        half_h = shape.conversion * (shape.height / 2)
        half_w = shape.conversion * (shape.width / 2)
        radius_meters = math.sqrt((shape.width / 2) * (shape.width / 2)
                                  + (shape.height / 2) * (shape.height / 2))
    radius_meters *= shape.conversion
    lat_delta = half_h / EARTH_RADIUS_IN_METERS / _D_R
    long_delta_top = half_w / EARTH_RADIUS_IN_METERS / math.cos((lat + lat_delta) * _D_R) / _D_R
    long_delta_bottom = half_w / EARTH_RADIUS_IN_METERS / math.cos((lat - lat_delta) * _D_R) / _D_R
    long_delta = long_delta_bottom if lat < 0 else long_delta_top
    min_lon = lon - long_delta
    max_lon = lon + long_delta
    min_lat = lat - lat_delta
    max_lat = lat + lat_delta

    steps = _estimate_steps(radius_meters, lat)
    bits = _encode(lon, lat, steps)
    nb = _neighbors(bits, steps)
    area = _decode_area(bits, steps)
    north, south, east, west = (_decode_area(b, steps) for b in nb[:4])
    if (north[3] < max_lat or south[2] > min_lat
            or east[1] < max_lon or west[0] > min_lon) and steps > 1:
        steps -= 1
        bits = _encode(lon, lat, steps)
        nb = _neighbors(bits, steps)
        area = _decode_area(bits, steps)
    cells = [bits] + nb
    if steps >= 2:
        # indexes in cells: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW
        if area[2] < min_lat:
            cells[2] = cells[8] = cells[7] = None
        if area[3] > max_lat:
            cells[1] = cells[5] = cells[6] = None
        if area[0] < min_lon:
            cells[4] = cells[8] = cells[6] = None
        if area[1] > max_lon:
            cells[3] = cells[7] = cells[5] = None
    return cells, steps


def _search(z, shape, limit):
    """[(dist_m, score, member, lon, lat)] in scan order; stops at `limit` results (0 = all)."""
    cells, steps = _areas(shape)
    shift = 52 - steps * 2
    found = []
    order = z.order
    circle = shape.type == _CIRCLE
    polygon = shape.points
    cx, cy = shape.lon, shape.lat
    if circle:
        radius = shape.radius * shape.conversion
    else:
        width = shape.width * shape.conversion
        height = shape.height * shape.conversion
    last = None
    for i, bits in enumerate(cells):
        if bits is None:
            continue
        if last is not None and last != 0 and bits == cells[last]:
            continue
        if found and limit and len(found) >= limit:
            break
        last = i
        lo = float(bits << shift)
        hi = float((bits + 1) << shift)
        start, stop = z.score_bounds(lo, False, hi, True)
        for k in range(start, stop):
            score, member = order[k]
            x, y = decode_score(score)
            if circle:
                d = distance(cx, cy, x, y)
                if d > radius:
                    continue
            elif polygon is not None:
                if not _in_polygon(polygon, x, y):
                    continue
                d = distance(cx, cy, x, y)
            else:
                if _lat_distance(y, cy) > height / 2:
                    continue
                if distance(x, y, cx, y) > width / 2:
                    continue
                d = distance(cx, cy, x, y)
            found.append((d, score, member, x, y))
            if limit and len(found) >= limit:
                break
    return found


# -- replies and parsing ---------------------------------------------------------------------

def _human(ctx, value):
    """addReplyHumanLongDouble: "%.17Lf" minus trailing zeros, a bulk string in RESP2 and the same text as a
    double in RESP3 (",13.36138933897018433", not the shortest form)."""
    text = b"%.17f" % value
    text = text.rstrip(b"0").rstrip(b".")
    if text == b"-0":
        text = b"0"
    return Raw(b",%s\r\n" % text) if ctx.resp3 else text


def _dist_text(d):
    return b"%.4f" % d


def _parse_double(value, message=messages.NOT_FLOAT):
    return parse_score(value, message)


def _lonlat(lon_arg, lat_arg):
    lon = _parse_double(lon_arg)
    lat = _parse_double(lat_arg)
    if lon < GEO_LONG_MIN or lon > GEO_LONG_MAX or lat < GEO_LAT_MIN or lat > GEO_LAT_MAX:
        raise CommandError(messages.GEO_INVALID_PAIR % (lon, lat))
    return lon, lat


def _unit(arg):
    factor = _UNITS.get(arg.upper())
    if factor is None:
        raise CommandError(messages.GEO_UNSUPPORTED_UNIT)
    return factor


def _member_lonlat(z, member):
    score = z.scores.get(member)
    if score is None:
        raise CommandError(messages.GEO_DECODE_MEMBER)
    return decode_score(score)


def _radius(shape, radius_arg, unit_arg):
    r = _parse_double(radius_arg, messages.GEO_NEED_RADIUS)
    if r < 0:
        raise CommandError(messages.GEO_RADIUS_NEGATIVE)
    shape.radius = r
    shape.conversion = _unit(unit_arg)
    shape.type = _CIRCLE


# -- commands --------------------------------------------------------------------------------

@command("geoadd")
def geoadd(ctx, args):
    c = ArgCursor(args, 2)
    nx = xx = False
    while c:   # the options, up to the first longitude
        opt = c.peek().upper()
        if opt == b"NX":
            nx = True
        elif opt == b"XX":
            xx = True
        elif opt != b"CH":
            break
        c.skip()
    if c.left() % 3 or (nx and xx):
        raise syntax_error()
    zargs = [b"ZADD", *args[1:c.pos]]
    for k in range(c.pos, len(args), 3):
        lon, lat = _lonlat(args[k], args[k + 1])
        bits = _encode(lon, lat, GEO_STEP_MAX)
        zargs.append(b"%d" % bits)
        zargs.append(args[k + 2])
    return _zadd(ctx, zargs, False)


@command("geopos")
def geopos(ctx, args):
    z = ctx.lookup_zset(args[1])
    out = []
    for member in args[2:]:
        score = None if z is None else z.scores.get(member)
        if score is None:
            out.append(NullArray)
        else:
            lon, lat = decode_score(score)
            out.append([_human(ctx, lon), _human(ctx, lat)])
    return out


@command("geohash")
def geohash(ctx, args):
    z = ctx.lookup_zset(args[1])
    out = []
    for member in args[2:]:
        score = None if z is None else z.scores.get(member)
        if score is None:
            out.append(None)
            continue
        lon, lat = decode_score(score)
        bits = _encode(lon, lat, 26, -90.0, 90.0)
        buf = bytearray(11)
        for i in range(10):
            buf[i] = _GEOALPHABET[(bits >> (52 - (i + 1) * 5)) & 0x1F]
        buf[10] = 48  # '0'
        out.append(bytes(buf))
    return out


@command("geodist")
def geodist(ctx, args):
    to_meter = 1.0
    if len(args) == 5:
        to_meter = _unit(args[4])
    elif len(args) > 5:
        raise syntax_error()
    z = ctx.lookup_zset(args[1])
    if z is None:
        return None
    s1 = z.scores.get(args[2])
    s2 = z.scores.get(args[3])
    if s1 is None or s2 is None:
        return None
    x1, y1 = decode_score(s1)
    x2, y2 = decode_score(s2)
    return _dist_text(distance(x1, y1, x2, y2) / to_meter)


_RADIUS_COORDS, _RADIUS_MEMBER, _NOSTORE, _GEOSEARCH, _GEOSEARCHSTORE = 1, 2, 4, 8, 16
_SORT_NONE, _SORT_ASC, _SORT_DESC = 0, 1, 2


def _georadius_generic(ctx, args, src_idx, flags):
    z = ctx.read_type(args[src_idx], ZSet)   # lookupKeyRead, in the commands that may store too
    shape = _Shape()
    storekey = None
    storedist = False
    if flags & _RADIUS_COORDS:
        base = 6
        shape.lon, shape.lat = _lonlat(args[2], args[3])
        _radius(shape, args[4], args[5])
    elif flags & _RADIUS_MEMBER:
        base = 5
        if z is not None:
            shape.lon, shape.lat = _member_lonlat(z, args[2])
            _radius(shape, args[3], args[4])
    else:
        base = 2
        if flags & _GEOSEARCHSTORE:
            base = 3
            storekey = args[1]

    withdist = withhash = withcoord = False
    frommember = fromloc = byradius = bybox = bypolygon = False
    sort = _SORT_NONE
    any_ = False
    count = 0
    c = ArgCursor(args, base)
    search = flags & _GEOSEARCH
    can_store = not (flags & _NOSTORE) and not search
    while c:
        arg = c.next_upper()
        left = c.left()  # arguments after this one
        if arg == b"WITHDIST":
            withdist = True
        elif arg == b"WITHHASH":
            withhash = True
        elif arg == b"WITHCOORD":
            withcoord = True
        elif arg == b"ANY":
            any_ = True
        elif arg == b"ASC":
            sort = _SORT_ASC
        elif arg == b"DESC":
            sort = _SORT_DESC
        elif arg == b"COUNT" and left >= 1:
            count = c.int()
            if count <= 0:
                raise CommandError(messages.GEO_COUNT_POSITIVE)
        elif arg == b"STORE" and left >= 1 and can_store:
            storekey = c.next()
            storedist = False
        elif arg == b"STOREDIST" and left >= 1 and can_store:
            storekey = c.next()
            storedist = True
        elif arg == b"STOREDIST" and search and flags & _GEOSEARCHSTORE:
            storedist = True
        elif arg == b"FROMMEMBER" and left >= 1 and search and not fromloc and not bypolygon:
            member = c.next()
            if z is not None:
                shape.lon, shape.lat = _member_lonlat(z, member)
            frommember = True
        elif arg == b"FROMLONLAT" and left >= 2 and search and not frommember and not bypolygon:
            shape.lon, shape.lat = _lonlat(*c.take(2))
            fromloc = True
        elif arg == b"BYRADIUS" and left >= 2 and search and not bybox and not bypolygon:
            _radius(shape, *c.take(2))
            byradius = True
        elif arg == b"BYBOX" and left >= 3 and search and not byradius and not bypolygon:
            raw_w, raw_h, unit = c.take(3)
            w = _parse_double(raw_w, messages.GEO_NEED_WIDTH)
            h = _parse_double(raw_h, messages.GEO_NEED_HEIGHT)
            if h < 0 or w < 0:
                raise CommandError(messages.GEO_BOX_NEGATIVE)
            shape.width, shape.height = w, h
            shape.conversion = _unit(unit)
            shape.type = _BOX
            bybox = True
        elif (arg == b"BYPOLYGON" and left >= 2 and search and not byradius and not bybox and not frommember
              and not fromloc):
            n = string2ll(c.next())
            if n is None or not -2 ** 31 <= n < 2 ** 31:
                raise CommandError(messages.GEO_POLYGON_BAD_COUNT)
            if n < 3 or c.left() // 2 < n:
                raise CommandError(messages.GEO_POLYGON_VERTICES)
            _polygon(shape, [_lonlat(*c.take(2)) for _ in range(n)])
            bypolygon = True
        else:
            raise syntax_error()

    if storekey is not None and (withdist or withhash or withcoord):
        raise CommandError(messages.GEO_STORE_WITH.format(
            "GEOSEARCHSTORE" if flags & _GEOSEARCHSTORE else "STORE option in GEORADIUS"))
    if search and not (frommember or fromloc or bypolygon):
        raise CommandError(messages.GEO_FROM_ONE.format(args[0].decode("utf-8", "replace")))
    if search and not (byradius or bybox or bypolygon):
        raise CommandError(messages.GEO_BY_ONE.format(args[0].decode("utf-8", "replace")))
    if any_ and not count:
        raise CommandError(messages.GEO_ANY_NEEDS_COUNT)

    if z is None:
        if storekey is not None:
            if ctx.delete(storekey):
                ctx.propagate(b"DEL", storekey)
                ctx.notify(GENERIC, b"del", storekey)
            return 0
        return []

    if count and sort == _SORT_NONE and not any_:
        sort = _SORT_ASC

    found = _search(z, shape, count if any_ else 0)
    if not found and storekey is None:
        return []
    if sort == _SORT_ASC:
        found.sort(key=_by_dist)
    elif sort == _SORT_DESC:
        found.sort(key=_by_dist, reverse=True)
    if count and count < len(found):
        del found[count:]

    conversion = shape.conversion
    if storekey is None:
        if not (withdist or withhash or withcoord):
            return [item[2] for item in found]
        out = []
        for d, score, member, x, y in found:
            row = [member]
            if withdist:
                row.append(_dist_text(d / conversion))
            if withhash:
                row.append(math.trunc(score))
            if withcoord:
                row.append([_human(ctx, x), _human(ctx, y)])
            out.append(row)
        return out

    if not found:
        if ctx.delete(storekey):
            ctx.propagate(b"DEL", storekey)
            ctx.notify(GENERIC, b"del", storekey)
        return 0
    if storedist:
        scores = {member: d / conversion for d, _score, member, _x, _y in found}
    else:
        scores = {member: score for _d, score, member, _x, _y in found}
    z = ZSet.from_scores(scores)
    ctx.store(storekey, z)
    encoding.zset_stored(ctx.keyspace.encoding_rules, ctx.db, storekey, z)
    zargs = [b"ZADD", storekey]
    for member, s in scores.items():
        zargs.append(format_score(s))
        zargs.append(member)
    ctx.propagate(b"DEL", storekey)
    ctx.propagate(*zargs)
    ctx.notify(ZSET, b"geosearchstore" if flags & _GEOSEARCH else b"georadiusstore", storekey)
    return len(found)


def _by_dist(item):
    return item[0]


@command("georadius")
def georadius(ctx, args):
    return _georadius_generic(ctx, args, 1, _RADIUS_COORDS)


@command("georadiusbymember")
def georadiusbymember(ctx, args):
    return _georadius_generic(ctx, args, 1, _RADIUS_MEMBER)


@command("georadius_ro")
def georadius_ro(ctx, args):
    return _georadius_generic(ctx, args, 1, _RADIUS_COORDS | _NOSTORE)


@command("georadiusbymember_ro")
def georadiusbymember_ro(ctx, args):
    return _georadius_generic(ctx, args, 1, _RADIUS_MEMBER | _NOSTORE)


@command("geosearch")
def geosearch(ctx, args):
    return _georadius_generic(ctx, args, 1, _GEOSEARCH)


@command("geosearchstore")
def geosearchstore(ctx, args):
    return _georadius_generic(ctx, args, 2, _GEOSEARCHSTORE | _GEOSEARCH)
