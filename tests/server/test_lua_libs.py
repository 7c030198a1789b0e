"""Valkey's Lua libraries besides Lua's own: bit (LuaBitOp), struct and cmsgpack (lua-cmsgpack 0.4.0).

BIT_AND_STRUCT and CMSGPACK are (script, reply) pairs exactly as Valkey 8.0.1 answered EVAL script 0 (errors
as ('ERR', full text)): results of every format and type, C casts at their edges (2^63, 2^64, NaN), the
alignment rules, argument errors named and placed as the C functions raise them, the Lua stack limits that
bound what unpack may return, and cmsgpack maps whose byte order follows Lua's table order. The first
vectors of CMSGPACK are Valkey's own tests/unit/scripting.tcl cases (pack double, negative int64,
circular references). The pure helpers of durakv/scripting/libs.py get unit tests at the end."""

import math

import pytest

from durakv.scripting import libs
from helpers.lua import RawConn, mismatches


@pytest.fixture
def conn(shared_server):
    c = RawConn(shared_server.port)
    yield c
    c.close()


BIT_AND_STRUCT = [
    ('return {bit.tobit(1), bit.tobit(2^32+5), bit.tobit(-1), bit.tobit(2^31), bit.tobit(0.5), bit.tobit(1.5), bit.tobit(2.5), bit.tobit(-0.5), bit.tobit(-1.5)}',
     [1, 5, -1, -2147483648, 0, 2, 2, 0, -2]),
    ('return {bit.tobit(2^51), bit.tobit(2^52), bit.tobit(2^53+2), bit.tobit(-2^51), bit.tobit(-2^52-3), bit.tobit(1e300), bit.tobit(-1e300), bit.tobit(1/0), bit.tobit(-1/0), bit.tobit(0/0)}',
     [0, 0, 1, 0, -12, -2013235812, -2013235812, 0, 0, 0]),
    ('return {bit.tobit(2^51 - 0.5), bit.tobit(2^51 - 1.5), bit.tobit(-2^51 + 0.5), bit.tobit(4503599627370495.5)}',
     [0, -2, 0, 0]),
    ('return {bit.tohex(65535, -8), bit.tohex(65535), bit.tohex(-1), bit.tohex(0x12345678, 4), bit.tohex(0x12345678, -3), bit.tohex(1, 0), bit.tohex(1, 20), bit.tohex(65535, -2147483648), bit.tohex(255, 2147483647)}',
     [b'0000FFFF', b'0000ffff', b'ffffffff', b'5678', b'678', b'', b'00000001', b'0000FFFF', b'000000ff']),
    ('return {bit.bnot(0), bit.bnot(-1), bit.bnot(5), bit.bswap(0x12345678), bit.bswap(-1), bit.bswap(1)}',
     [-1, 0, -6, 2018915346, -1, 16777216]),
    ('return {bit.band(1), bit.bxor(1,2), bit.bor(1,2,4,8,16,32,64,128), bit.band(-1, 0xff, 0x0f), bit.bxor(-1, 1), bit.bor()}',
     ('ERR', "ERR user_script:1: bad argument #1 to 'bor' (number expected, got no value) script: on @user_script:1.")),
    ('return {bit.lshift(1, 31), bit.lshift(1, 32), bit.lshift(1, 33), bit.lshift(1, -1), bit.rshift(-1, 28), bit.rshift(-1, 0), bit.arshift(-16, 2), bit.arshift(-1, 31), bit.arshift(256, 4)}',
     [-2147483648, 1, 2, -2147483648, 15, -1, -4, -1, 16]),
    ('return {bit.rol(0x12345678, 12), bit.ror(0x12345678, 12), bit.rol(1, 0), bit.ror(1, 0), bit.rol(-1, 5), bit.ror(1, 1), bit.rol(1, 32), bit.rol(1, 33)}',
     [1164411171, 1736516421, 1, 1, -1, -2147483648, 1, 2]),
    ("return {bit.tobit('12'), bit.tobit(' 0x10 '), bit.tobit('1e3'), bit.band('3', 5), bit.tohex('255')}",
     [12, 16, 1000, 1, b'000000ff']),
    ("local ok, e = pcall(bit.tobit, 'x') return e",
     b"bad argument #1 to '?' (number expected, got string)"),
    ('local ok, e = pcall(bit.tobit) return e',
     b"bad argument #1 to '?' (number expected, got no value)"),
    ('local x = bit.lshift(1) return x',
     ('ERR', "ERR user_script:1: bad argument #2 to 'lshift' (number expected, got no value) script: on @user_script:1.")),
    ('local x = bit.tobit({}) return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'tobit' (number expected, got table) script: on @user_script:1.")),
    ('local x = bit.band(1, 2, {}) return x',
     ('ERR', "ERR user_script:1: bad argument #3 to 'band' (number expected, got table) script: on @user_script:1.")),
    ("return struct.pack('>I2', 1000) .. struct.pack('<i4', -2) .. struct.pack('b', -1) .. struct.pack('B', 255)",
     b'\x03\xe8\xfe\xff\xff\xff\xff\xff'),
    ("return struct.pack('>i16', -1)",
     b'\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff'),
    ("return struct.pack('<i16', -1)",
     b'\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>I16', 2^64)",
     b'\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>L', 2^64)",
     b'\x00\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>L', 2^63)",
     b'\x80\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>L', 2^70)",
     b'\x00\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>L', 0/0)",
     b'\x80\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>l', 0/0)",
     b'\x80\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>l', -2^63)",
     b'\x80\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>l', -2^64)",
     b'\x80\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('>l', -1.5)",
     b'\xff\xff\xff\xff\xff\xff\xff\xff'),
    ("return struct.pack('>L', 1.5)",
     b'\x00\x00\x00\x00\x00\x00\x00\x01'),
    ("return struct.pack('>I3', -1)",
     b'\xff\xff\xff'),
    ("return struct.pack('>f', 1.5) .. struct.pack('<f', 1e300) .. struct.pack('<f', -1e300) .. struct.pack('<d', 0.1) .. struct.pack('>d', -0.0) .. struct.pack('>f', -0.0)",
     b'?\xc0\x00\x00\x00\x00\x80\x7f\x00\x00\x80\xff\x9a\x99\x99\x99\x99\x99\xb9?\x80\x00\x00\x00\x00\x00\x00\x00\x80\x00\x00\x00'),
    ("return struct.pack('>f', 0/0) .. struct.pack('>d', 0/0) .. struct.pack('>d', 1/0)",
     b'\xff\xc0\x00\x00\xff\xf8\x00\x00\x00\x00\x00\x00\x7f\xf0\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('s', 'abc') .. struct.pack('c0', 'xyz') .. struct.pack('c2', 'xyz') .. struct.pack('c', 'q')",
     b'abc\x00xyzxyq'),
    ("return struct.pack('!4 b i4', 1, 2)",
     b'\x01\x00\x00\x00\x02\x00\x00\x00'),
    ("return struct.pack('!8 b d', 1, 2)",
     b'\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00@'),
    ("return struct.pack('! b h b i b l', 1, 2, 3, 4, 5, 6)",
     b'\x01\x00\x02\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00\x00'),
    ("return struct.pack('!2 b i3 b', 1, 2, 3)",
     b'\x01\x00\x02\x00\x00\x03'),
    ("return struct.pack('<h>h', 1, 1)",
     b'\x01\x00\x00\x01'),
    ("return struct.pack('xxbx', 1)",
     b'\x00\x00\x01\x00'),
    ("return struct.pack('b', '12')",
     b'\x0c'),
    ("return struct.pack('s', 12.5)",
     b'12.5\x00'),
    ('local x = struct.pack(123, 1, 2, 3) return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'pack' (invalid format option '1') script: on @user_script:1.")),
    ("return struct.pack('b\\0b', 1, 2)",
     b'\x01'),
    ("local ok, e = pcall(struct.pack, 'b') return e",
     b"bad argument #2 to '?' (number expected, got nil)"),
    ("local ok, e = pcall(struct.pack, 'z', 1) return e",
     b"bad argument #1 to '?' (invalid format option 'z')"),
    ("local x = struct.pack('z', 1) return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'pack' (invalid format option 'z') script: on @user_script:1.")),
    ("local x = struct.pack('b4', 1) return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'pack' (invalid format option '4') script: on @user_script:1.")),
    ("local x = struct.pack('c5', 'ab') return x",
     ('ERR', "ERR user_script:1: bad argument #3 to 'pack' (string too short) script: on @user_script:1.")),
    ("local x = struct.pack('i33', 1) return x",
     ('ERR', 'ERR user_script:1: integral size 33 is larger than limit of 32 script: on @user_script:1.')),
    ("local x = struct.pack('!3', 1) return x",
     ('ERR', 'ERR user_script:1: alignment 3 is not a power of 2 script: on @user_script:1.')),
    ("local x = struct.pack('!0', 1) return x",
     ('ERR', 'ERR user_script:1: alignment 0 is not a power of 2 script: on @user_script:1.')),
    ("local x = struct.pack('c99999999999', 1) return x",
     ('ERR', 'ERR user_script:1: integral size overflow script: on @user_script:1.')),
    ("local x = struct.pack('b', {}) return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'pack' (number expected, got table) script: on @user_script:1.")),
    ("local x = struct.pack('s', {}) return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'pack' (string expected, got table) script: on @user_script:1.")),
    ('local x = struct.pack() return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'pack' (string expected, got no value) script: on @user_script:1.")),
    ('local x = struct.pack({}) return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'pack' (string expected, got table) script: on @user_script:1.")),
    ("return {struct.unpack('>I2', '\\3\\232')}",
     [1000, 3]),
    ("return {struct.unpack('<i4', '\\254\\255\\255\\255')}",
     [-2, 5]),
    ("return {struct.unpack('b', '\\255')}",
     [-1, 2]),
    ("return {struct.unpack('>i16', string.rep('\\255', 16))}",
     [-1, 17]),
    ("return {struct.unpack('>I16', string.rep('\\255', 16))}",
     [-9223372036854775808, 17]),
    ("return {struct.unpack('<i16', string.rep('\\255', 8) .. string.rep('\\0', 8))}",
     [-1, 17]),
    ("return {struct.unpack('>i0', 'x')}",
     [0, 1]),
    ("return {struct.unpack('>L', string.rep('\\255', 8))}",
     [-9223372036854775808, 9]),
    ("return {struct.unpack('>l', '\\128\\0\\0\\0\\0\\0\\0\\0')}",
     [-9223372036854775808, 9]),
    ("return {struct.unpack('>I3', '\\255\\255\\255')}",
     [16777215, 4]),
    ("return {struct.unpack('>i3', '\\255\\255\\254')}",
     [-2, 4]),
    ("return {tostring(struct.unpack('>f', struct.pack('>f', 1.5))), tostring(struct.unpack('<d', struct.pack('<d', 0.1)))}",
     [b'1.5', b'0.1']),
    ("return {struct.unpack('s', 'abc\\0def\\0')}",
     [b'abc', 5]),
    ("return {struct.unpack('ss', 'abc\\0def\\0')}",
     [b'abc', b'def', 9]),
    ("return {struct.unpack('bc0', '\\3abcd')}",
     [b'abc', 5]),
    ("return {struct.unpack('c3c0', '003abcdef')}",
     [b'abc', 7]),
    ("return {struct.unpack('c2', 'abc', 2)}",
     [b'bc', 4]),
    ("return {struct.unpack('b', 'abc', 3)}",
     [99, 4]),
    ("return {struct.unpack('!4 b i4', '\\1\\0\\0\\0\\2\\0\\0\\0')}",
     [1, 2, 9]),
    ("return {struct.unpack('xb', 'ab')}",
     [98, 3]),
    ("return {struct.unpack('b', 'a', 1.9)}",
     [97, 2]),
    ("return {struct.unpack('b', 'a', '1')}",
     [97, 2]),
    ("local x = struct.unpack('b', 'a', 0) return x",
     ('ERR', "ERR user_script:1: bad argument #3 to 'unpack' (offset must be 1 or greater) script: on @user_script:1.")),
    ("local x = struct.unpack('b', 'a', -1) return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack' (data string too short) script: on @user_script:1.")),
    ("local x = struct.unpack('b', 'a', 2) return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack' (data string too short) script: on @user_script:1.")),
    ("local x = struct.unpack('i4', 'abc') return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack' (data string too short) script: on @user_script:1.")),
    ("local x = struct.unpack('s', 'abc') return x",
     ('ERR', 'ERR user_script:1: unfinished string in data script: on @user_script:1.')),
    ("local x = struct.unpack('c0', 'abc') return x",
     ('ERR', "ERR user_script:1: format 'c0' needs a previous size script: on @user_script:1.")),
    ("local x = struct.unpack('sc0', 'ab\\0cd') return x",
     ('ERR', "ERR user_script:1: format 'c0' needs a previous size script: on @user_script:1.")),
    ("local x = struct.unpack('bc0', '\\9abc') return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack' (data string too short) script: on @user_script:1.")),
    ("local x = struct.unpack('b', 'a', {}) return x",
     ('ERR', "ERR user_script:1: bad argument #3 to 'unpack' (number expected, got table) script: on @user_script:1.")),
    ("local x = struct.unpack('b') return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack' (string expected, got no value) script: on @user_script:1.")),
    ("local x = struct.unpack('z', 'a') return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'unpack' (invalid format option 'z') script: on @user_script:1.")),
    ("return {struct.unpack('<', '')}",
     [1]),
    ("return {struct.size('b'), struct.size('i'), struct.size('!4 b i'), struct.size('!8 b d'), struct.size('c5'), struct.size('l L T h H f d x'), struct.size('zzz'), struct.size('i7')}",
     [1, 4, 8, 16, 5, 41, 0, 7]),
    ("local x = struct.size('s') return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'size' (option 's' has no fixed size) script: on @user_script:1.")),
    ("local x = struct.size('c0') return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'size' (option 'c0' has no fixed size) script: on @user_script:1.")),
    ("local x = struct.size('!3') return x",
     ('ERR', 'ERR user_script:1: alignment 3 is not a power of 2 script: on @user_script:1.')),
    ("local x = struct.size('b$') return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'size' (invalid format option '$') script: on @user_script:1.")),
    ("local t = {} for i = 1, 7996 do t[i] = 'b' end local fmt = table.concat(t) local s = string.rep('a', 7996) return select('#', struct.unpack(fmt, s))",
     7997),
    ("local t = {} for i = 1, 7997 do t[i] = 'b' end local fmt = table.concat(t) local s = string.rep('a', 7997) local ok, e = pcall(struct.unpack, fmt, s) return e",
     97),
]


CMSGPACK = [
    ('local encoded = cmsgpack.pack(0.1) local h = "" for i = 1, #encoded do h = h .. string.format("%02x",string.byte(encoded,i)) end return h',
     b'cb3fb999999999999a'),
    ('local encoded = cmsgpack.pack(-1099511627776) local h = "" for i = 1, #encoded do h = h .. string.format("%02x",string.byte(encoded,i)) end return h',
     b'd3ffffff0000000000'),
    ('local a = {x=nil,y=5} local b = {x=a} a[\'x\'] = b local encoded = cmsgpack.pack(a) local h = "" for i = 1, #encoded do h = h .. string.format("%02x",string.byte(encoded,i)) end local re = cmsgpack.unpack(encoded) return {h, re.x.x.x.x.x.x.x.x.y == re.y, re.y == 5, re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil}',
     [b'82a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a178c0', 1, 1, 1]),
    ('return cmsgpack.pack(0, 1, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296, 2^53, 2^62, 2^63 - 1024, -1, -32, -33, -128, -129, -32768, -32769, -2^31, -2^31 - 1, -2^53, -2^63)',
     b'\x00\x01\x7f\xcc\x80\xcc\xff\xcd\x01\x00\xcd\xff\xff\xce\x00\x01\x00\x00\xce\xff\xff\xff\xff\xcf\x00\x00\x00\x01\x00\x00\x00\x00\xcf\x00 \x00\x00\x00\x00\x00\x00\xcf@\x00\x00\x00\x00\x00\x00\x00\xcf\x7f\xff\xff\xff\xff\xff\xfc\x00\xff\xe0\xd0\xdf\xd0\x80\xd1\xff\x7f\xd1\x80\x00\xd2\xff\xff\x7f\xff\xd2\x80\x00\x00\x00\xd3\xff\xff\xff\xff\x7f\xff\xff\xff\xd3\xff\xe0\x00\x00\x00\x00\x00\x00\xd3\x80\x00\x00\x00\x00\x00\x00\x00'),
    ('return cmsgpack.pack(2^63, -2^63 - 2048, 1/0, -1/0, 0/0, 1.5, 1e300, 1e-300, 3.4028234663852886e38, 1e-45, -0.0, 0.5, 2^-149)',
     b'\xca_\x00\x00\x00\xcb\xc3\xe0\x00\x00\x00\x00\x00\x01\xca\x7f\x80\x00\x00\xca\xff\x80\x00\x00\xcb\xff\xf8\x00\x00\x00\x00\x00\x00\xca?\xc0\x00\x00\xcb~7\xe4<\x88\x00u\x9c\xcb\x01\xa5n\x1f\xc2\xf8\xf3Y\xca\x7f\x7f\xff\xff\xcb6\x96\xd6\x01\xad7j\xb9\x00\xca?\x00\x00\x00\xca\x00\x00\x00\x01'),
    ("local p = cmsgpack.pack(true, false, nil, 'abc', string.rep('x', 31), string.rep('y', 32), string.rep('z', 255), string.rep('w', 256), string.rep('v', 65535), string.rep('u', 65536)) return {redis.sha1hex(p), #p, string.sub(p, 1, 40)}",
     [b'88ef31c7c1a8c1e5cc269c9247d9c4393ddbee32', 131668, b'\xc3\xc2\xc0\xa3abc\xbfxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\xd9']),
    ('return cmsgpack.pack({}, {1,2,3}, {1,nil,3}, {[1]=1,[2]=2,[4]=4}, {a=1}, {[1.5]=1}, {[0]=1}, {[-1]=1}, {[2^31]=1}, {[2^31-1]=1})',
     b'\x90\x93\x01\x02\x03\x82\x01\x01\x03\x03\x83\x01\x01\x02\x02\x04\x04\x81\xa1a\x01\x81\xca?\xc0\x00\x00\x01\x81\x00\x01\x81\xff\x01\x81\xce\x80\x00\x00\x00\x01\x81\xce\x7f\xff\xff\xff\x01'),
    ('local t = {} for i = 1, 16 do t[i] = i end local u = {} for i = 1, 65536 do u[i] = 1 end local p = cmsgpack.pack(t, u) return {redis.sha1hex(p), #p, string.sub(p, 1, 24)}',
     [b'854e465b58993031194b9f8fe50d4fceb05ecff6', 65560, b'\xdc\x00\x10\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\xdd\x00\x01\x00\x00']),
    ("local t = {} for i = 1, 16 do t['k' .. i] = i end return cmsgpack.pack(t)",
     b'\xde\x00\x10\xa3k12\x0c\xa3k16\x10\xa2k9\t\xa2k8\x08\xa2k1\x01\xa3k15\x0f\xa2k3\x03\xa2k2\x02\xa3k14\x0e\xa3k13\r\xa3k10\n\xa3k11\x0b\xa2k6\x06\xa2k7\x07\xa2k4\x04\xa2k5\x05'),
    ('local m = {} for i = 1, 100 do m[tostring(i)] = i end return cmsgpack.pack(m)',
     b'\xde\x00d\xa2535\xa243+\xa273I\xa263?\xa247/\xa237%\xa267C\xa2579\xa227\x1b\xa217\x11\xa213\r\xa233!\xa223\x17\xa242*\xa2524\xa262>\xa272H\xa236$\xa246.\xa2568\xa266B\xa3100d\xa290Z\xa283S\xa297a\xa296`\xa295_\xa294^\xa293]\xa292\\\xa216\x10\xa226\x1a\xa291[\xa212\x0c\xa222\x16\xa232 \xa271G\xa261=\xa2513\xa241)\xa265A\xa2557\xa245-\xa235#\xa259;\xa2491\xa239\'\xa229\x1d\xa299c\xa289Y\xa279O\xa269E\xa11\x01\xa284T\xa13\x03\xa12\x02\xa219\x13\xa14\x04\xa17\x07\xa16\x06\xa225\x19\xa215\x0f\xa287W\xa286V\xa231\x1f\xa221\x15\xa211\x0b\xa285U\xa260<\xa270F\xa240(\xa2502\xa2546\xa264@\xa234"\xa244,\xa2480\xa258:\xa228\x1c\xa238&\xa288X\xa298b\xa268D\xa278N\xa282R\xa281Q\xa280P\xa277M\xa276L\xa218\x12\xa275K\xa274J\xa214\x0e\xa224\x18\xa15\x05\xa19\t\xa220\x14\xa230\x1e\xa18\x08\xa210\n'),
    ("return cmsgpack.pack({a = {b = {c = {d = {1, 2, {e = 'f'}}}}}, x = true, [10] = 'ten'})",
     b'\x83\xa1a\x81\xa1b\x81\xa1c\x81\xa1d\x93\x01\x02\x81\xa1e\xa1f\xa1x\xc3\n\xa3ten'),
    ('return cmsgpack.pack(redis.call, cjson.null, function() end, coroutine.create(function() end))',
     b'\xc0\xc0\xc0\xc0'),
    ('local t = {} t[1] = t return cmsgpack.pack(t)',
     b'\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\xc0'),
    ('local t = {} for i = 1, 20 do t = {t} end return cmsgpack.pack(t)',
     b'\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\xc0'),
    ('local x = cmsgpack.pack() return x',
     ('ERR', "ERR user_script:1: bad argument #0 to 'pack' (MessagePack pack needs input.) script: on @user_script:1.")),
    ('local ok, e = pcall(cmsgpack.pack) return e',
     b"bad argument #0 to '?' (MessagePack pack needs input.)"),
    ("return {cmsgpack.unpack(cmsgpack.pack(1, 'a', {1, 2}, {k = 'v'}, true, false))}",
     [1, b'a', [1, 2], [], 1, None]),
    ("return {cmsgpack.unpack('\\192\\1')}",
     []),
    ("return {cmsgpack.unpack('')}",
     []),
    ('return {cmsgpack.unpack(5)}',
     [53]),
    ("local t = {cmsgpack.unpack('\\207\\255\\255\\255\\255\\255\\255\\255\\255\\211\\255\\255\\255\\255\\255\\255\\255\\254\\207\\127\\255\\255\\255\\255\\255\\255\\255')} return {tostring(t[1]), tostring(t[2]), tostring(t[3])}",
     [b'-1', b'-2', b'9.2233720368548e+18']),
    ("local t = {cmsgpack.unpack('\\206\\255\\255\\255\\255\\210\\128\\0\\0\\0\\205\\255\\255\\209\\255\\1\\204\\200\\208\\200\\255\\224')} return t",
     [4294967295, -2147483648, 65535, -255, 200, -56, -1, -32]),
    ("local t = {cmsgpack.unpack('\\202\\63\\192\\0\\0\\203\\63\\185\\153\\153\\153\\153\\153\\154\\202\\127\\128\\0\\0')} return {tostring(t[1]), tostring(t[2]), tostring(t[3])}",
     [b'1.5', b'0.1', b'inf']),
    ("return cmsgpack.pack(cmsgpack.unpack('\\203\\127\\248\\0\\0\\0\\0\\0\\1'))",
     b'\xcb\x7f\xf8\x00\x00\x00\x00\x00\x01'),
    ("return cmsgpack.pack(cmsgpack.unpack('\\203\\255\\248\\0\\0\\0\\0\\0\\0'))",
     b'\xcb\xff\xf8\x00\x00\x00\x00\x00\x00'),
    ("return {cmsgpack.unpack('\\217\\3abc\\218\\0\\2de\\219\\0\\0\\0\\1f\\163ghi')}",
     [b'abc', b'de', b'f', b'ghi']),
    ("local t = cmsgpack.unpack('\\131\\161a\\1\\161b\\2\\161c\\3') local out = {} for k, v in pairs(t) do out[#out+1] = k end return out",
     [b'a', b'c', b'b']),
    ("local t = cmsgpack.unpack('\\136\\161a\\1\\161b\\2\\161c\\3\\161d\\4\\161e\\5\\161f\\6\\161g\\7\\161h\\8') local out = {} for k, v in pairs(t) do out[#out+1] = k end return out",
     [b'a', b'h', b'c', b'b', b'e', b'd', b'g', b'f']),
    ("local t = cmsgpack.unpack('\\136\\161a\\1\\161b\\2\\161c\\3\\161d\\4\\161e\\5\\161f\\6\\161g\\7\\161h\\8') return cmsgpack.pack(t)",
     b'\x88\xa1a\x01\xa1h\x08\xa1c\x03\xa1b\x02\xa1e\x05\xa1d\x04\xa1g\x07\xa1f\x06'),
    ("local t = cmsgpack.unpack('\\134\\161a\\192\\161b\\2\\161c\\192\\161d\\4\\1\\5\\2\\6') local out = {} for k, v in pairs(t) do out[#out+1] = tostring(k) end return out",
     [b'1', b'2', b'd', b'b']),
    ("local t = cmsgpack.unpack('\\148\\1\\192\\3\\192') return {#t, t[1], t[3]}",
     [1, 1, 3]),
    ("local t = cmsgpack.unpack('\\220\\0\\3\\1\\2\\3\\222\\0\\1\\1\\2') return t",
     [1, 2, 3]),
    ("local x = cmsgpack.unpack('\\129\\192\\1') return x",
     ('ERR', 'ERR table index is nil script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\129\\203\\127\\248\\0\\0\\0\\0\\0\\0\\1') return x",
     ('ERR', 'ERR table index is NaN script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\146\\1') return x",
     ('ERR', 'ERR user_script:1: Missing bytes in input. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\193') return x",
     ('ERR', 'ERR user_script:1: Bad data format in input. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\1\\196') return x",
     ('ERR', 'ERR user_script:1: Bad data format in input. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\217') return x",
     ('ERR', 'ERR user_script:1: Missing bytes in input. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\217\\5ab') return x",
     ('ERR', 'ERR user_script:1: Missing bytes in input. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\219\\0\\0\\0\\9ab') return x",
     ('ERR', 'ERR user_script:1: Missing bytes in input. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack('\\221\\255\\255\\255\\255') return x",
     ('ERR', 'ERR user_script:1: Missing bytes in input. script: on @user_script:1.')),
    ('local x = cmsgpack.unpack({}) return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'unpack' (string expected, got table) script: on @user_script:1.")),
    ('local x = cmsgpack.unpack() return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'unpack' (string expected, got no value) script: on @user_script:1.")),
    ('return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}',
     [1, 1]),
    ('return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}',
     [2, 2]),
    ('return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}',
     [-1, 3]),
    ('return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 3)}',
     [-1]),
    ('return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}',
     [2, 1, 2]),
    ('return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 1)}',
     [-1, 2, 3]),
    ('return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0, 1)}',
     [1]),
    ('return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0)}',
     [1, 2, 3]),
    ('return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 10, 0)}',
     [-1, 1, 2, 3]),
    ("return {cmsgpack.unpack_one('', 0)}",
     [-1]),
    ("local x = cmsgpack.unpack_one('abc', 5) return x",
     ('ERR', 'ERR user_script:1: Start offset 5 greater than input length 3. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack_one('abc', -1) return x",
     ('ERR', 'ERR user_script:1: Invalid request to unpack with offset of -1 and limit of 3. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack_limit('abc', -1) return x",
     ('ERR', 'ERR user_script:1: Invalid request to unpack with offset of 0 and limit of 3. script: on @user_script:1.')),
    ("local x = cmsgpack.unpack_limit('abc') return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack_limit' (number expected, got no value) script: on @user_script:1.")),
    ("local x = cmsgpack.unpack_limit('abc', 'x') return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack_limit' (number expected, got string) script: on @user_script:1.")),
    ("local x = cmsgpack.unpack_one('abc', 'x') return x",
     ('ERR', "ERR user_script:1: bad argument #2 to 'unpack_one' (number expected, got string) script: on @user_script:1.")),
    ("local x = cmsgpack.unpack_one('abc', 1.7) return x",
     2),
    ("return {cmsgpack.unpack_one('\\1\\2\\3', 1.7)}",
     [2, 2]),
    ("return select('#', cmsgpack.unpack(string.rep('\\1', 7999)))",
     7999),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\1', 8000)) return e",
     b'stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)'),
    ("return select('#', cmsgpack.unpack_limit(string.rep('\\1', 9000), 7998))",
     7999),
    ("local ok, e = pcall(cmsgpack.unpack_limit, string.rep('\\1', 9000), 7999) return e",
     b'stack overflow (in function mp_unpack_full)'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 3998) .. '\\1') return tostring(ok) .. type(e)",
     b'truetable'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 3999) .. '\\1') return tostring(ok) .. type(e)",
     b'truetable'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 5000) .. '\\1') return tostring(ok) .. tostring(e)",
     b'falsestack overflow (in function mp_decode_to_lua_array)'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\1', 3000) .. '\\1') return tostring(ok) .. type(e)",
     b'truetable'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\1', 3999) .. '\\1') return tostring(ok) .. type(e)",
     b'truetable'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\1', 4000) .. '\\1') return tostring(ok) .. tostring(e)",
     b'falsestack overflow (too many return values at once; use unpack_one or unpack_limit instead.)'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129', 2667) .. '\\1\\1') return tostring(ok) .. tostring(e)",
     b'falseMissing bytes in input.'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129', 2666) .. '\\1\\1') return tostring(ok) .. tostring(e)",
     b'falseMissing bytes in input.'),
    ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129', 4000) .. '\\1\\1') return tostring(ok) .. tostring(e)",
     b'falseMissing bytes in input.'),
    ('local t = {} for i = 1, 4000 do t[i] = {} end local ok, e = pcall(cmsgpack.pack, unpack(t)) return tostring(ok) .. tostring(e)',
     b'falsestack overflow (in function table_is_an_array)'),
    ('local t = {} for i = 1, 4001 do t[i] = 1 end local ok, e = pcall(cmsgpack.pack, unpack(t)) return tostring(ok) .. tostring(e)',
     b"falsebad argument #0 to '?' (Too many arguments for MessagePack pack.)"),
    ('local t = {} for i = 1, 3999 do t[i] = {} end local ok, e = pcall(cmsgpack.pack, unpack(t)) return tostring(ok) .. tostring(#e)',
     b'true3999'),
    ('local t = {} for i = 1, 3999 do t[i] = {{}} end local ok, e = pcall(cmsgpack.pack, unpack(t)) return tostring(ok) .. tostring(e)',
     b'falsestack overflow (in function table_is_an_array)'),
    ('local t = {} for i = 1, 3999 do t[i] = {a = {}} end local ok, e = pcall(cmsgpack.pack, unpack(t)) return tostring(ok) .. tostring(e)',
     b'falsestack overflow (in function table_is_an_array)'),
    ('local t = {} for i = 1, 3997 do t[i] = {a = {}} end local ok, e = pcall(cmsgpack.pack, unpack(t)) return tostring(ok) .. tostring(type(e))',
     b'truestring'),
    ('local str_lt_32 = string.rep("x", 30) local str_lt_255 = string.rep("x", 250) local str_lt_65535 = string.rep("x", 65530) local str_long = string.rep("x", 100000) local array_big = {} for i=1, 100000 do array_big[i] = i end local map_big = {} for i=1, 100000 do map_big[tostring(i)] = i end local some_map = {s1=str_lt_32, s2=str_lt_255, s3=str_lt_65535, s4=str_long, d1=0.1, i1=1, i2=250, i3=65530, i4=100000, i5=2^40, i6=-1, i7=-120, i8=-32000, i9=-100000, i10=-3147483648, a3=array_big, m2=map_big, b1=false, b2=true} return redis.sha1hex(cmsgpack.pack(some_map))',
     b'4e057e054d9a9d84dbeb43f513616f043480745b'),
]


def test_bit_and_struct_as_valkey(conn):
    assert mismatches(conn, BIT_AND_STRUCT) == []


def test_cmsgpack_as_valkey(conn):
    assert mismatches(conn, CMSGPACK) == []


def test_valkey_bitop_checks(conn):
    # tests/unit/scripting.tcl: "Verify minimal bitop functionality", "lua bit.tohex bug"
    assert conn.call("EVAL", "assert(bit.tobit(1) == 1); assert(bit.band(1) == 1); assert(bit.bxor(1,2) == 3); "
                     "assert(bit.bor(1,2,4,8,16,32,64,128) == 255)", "0") is None
    assert conn.call("EVAL", "return bit.tohex(65535, -2147483648)", "0") == b"0000FFFF"


def test_cmsgpack_smoke_test_from_valkey(conn):
    # tests/unit/scripting.tcl "EVAL - cmsgpack pack/unpack smoke test"
    script = """
        local str_lt_32 = string.rep("x", 30)
        local str_lt_255 = string.rep("x", 250)
        local str_lt_65535 = string.rep("x", 65530)
        local str_long = string.rep("x", 100000)
        local array_lt_15 = {1, 2, 3, 4, 5}
        local array_lt_65535 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}
        local array_big = {}
        for i=1, 100000 do array_big[i] = i end
        local map_lt_15 = {a=1, b=2}
        local map_big = {}
        for i=1, 100000 do map_big[tostring(i)] = i end
        local some_map = {s1=str_lt_32, s2=str_lt_255, s3=str_lt_65535, s4=str_long, d1=0.1, i1=1, i2=250,
            i3=65530, i4=100000, i5=2^40, i6=-1, i7=-120, i8=-32000, i9=-100000, i10=-3147483648,
            a1=array_lt_15, a2=array_lt_65535, a3=array_big, m1=map_lt_15, m2=map_big, b1=false, b2=true, n=nil}
        local encoded = cmsgpack.pack(some_map)
        local decoded = cmsgpack.unpack(encoded)
        assert(table.concat(some_map) == table.concat(decoded))
        local offset, decoded_one = cmsgpack.unpack_one(encoded, 0)
        assert(table.concat(some_map) == table.concat(decoded_one))
        assert(offset == -1)
        local encoded_multiple = cmsgpack.pack(str_lt_32, str_lt_255, str_lt_65535, str_long)
        local offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, 0)
        assert(obj == str_lt_32)
        offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
        assert(obj == str_lt_255)
        offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
        assert(obj == str_lt_65535)
        offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
        assert(obj == str_long)
        assert(offset == -1)
        return {decoded.m2["77"], #decoded.a3, decoded.s4 == str_long, decoded.i10}"""
    assert conn.call("EVAL", script, "0") == [77, 100000, 1, -3147483648]


def test_libraries_in_function_libraries(conn):
    conn.call("FUNCTION", "FLUSH")
    lib = ("#!lua name=libs\n"
           "redis.register_function('roundtrip', function(keys, args)\n"
           "  local t = cmsgpack.unpack(cmsgpack.pack({args[1], n = 7}))\n"
           "  return {t[1], t.n, struct.unpack('>I2', struct.pack('>I2', 513)), bit.tohex(bit.lshift(1, 12))}\n"
           "end)")
    assert conn.call("FUNCTION", "LOAD", lib) == b"libs"
    assert conn.call("FCALL", "roundtrip", "0", "abc") == [b"abc", 7, 513, b"00001000"]
    conn.call("FUNCTION", "FLUSH")


# -- the pure helpers (durakv/scripting/libs.py) ------------------------------------------------------

def test_c_casts():
    assert libs.to_int64(1.9) == 1 and libs.to_int64(-1.9) == -1
    assert libs.to_int64(float("nan")) == -(1 << 63) and libs.to_int64(2.0 ** 63) == -(1 << 63)
    assert libs.to_uint64(-1.0) == (1 << 64) - 1
    assert libs.to_uint64(2.0 ** 63) == 1 << 63 and libs.to_uint64(2.0 ** 64 - 2048) == (1 << 64) - 2048
    assert libs.to_uint64(2.0 ** 64) == 0 and libs.to_uint64(1e30) == 0
    assert libs.to_uint64(float("nan")) == 1 << 63


def test_bit_helpers():
    # past 2^51 the biased sum loses low bits: 2^52 + 5 rounds to even, the mantissa keeps 2
    assert libs.bit_arg(2.0 ** 52) == 0 and libs.bit_arg(2.0 ** 52 + 5) == 2
    assert libs.bit_arg(float("inf")) == 0 and libs.bit_arg(-(2.0 ** 53) - 2) == 4
    assert libs.bit_op(b"tohex", 0xFFFF, 0xFFFFFFF8) == b"0000FFFF"
    assert libs.bit_op(b"bor", 1, 2, 4) == 7 and libs.bit_op(b"bnot", 0) == -1
    assert libs.bit_op(b"arshift", 0xFFFFFFF0, 2) == -4 and libs.bit_op(b"ror", 1, 1) == -(1 << 31)


def test_msgpack_double_choice():
    assert libs.mp_double(0.1) == bytes.fromhex("cb3fb999999999999a")
    assert libs.mp_double(1.5) == bytes.fromhex("ca3fc00000")
    assert libs.mp_double(math.inf) == bytes.fromhex("ca7f800000")
    assert libs.mp_double(1e300)[:1] == b"\xcb"            # (float)1e300 overflows: never equal
    assert libs.mp_float_value(bytes.fromhex("3fc00000")) == 1.5
