"""scripting/bytecode.py on chunks compiled by the real Lua 5.1: every tail call becomes a call, results stay."""

import pytest
from lupa import lua51

from durakv.scripting.bytecode import OP_TAILCALL, BytecodeError, _function, _Reader, without_tail_calls

SOURCE = b"""
local function count(n, acc) if n == 0 then return acc end return count(n - 1, acc + 1) end
local function many(...) return select('#', ...), ... end
local function pass(...) return many(...) end
local t = {k = 1.5, s = "str", b = true}
return function(n)
  local a, b, c, d = pass(n, "x", nil)
  return count(n, 0), a, b, c, d, t.k, t.s, t.b
end
"""


def _opcodes(chunk):
    """The tail calls of a chunk (nested functions included), as the rewriter finds them."""
    found = []
    _function(_Reader(chunk), found)
    return found


def test_tail_calls_become_calls_with_the_same_results():
    lua = lua51.LuaRuntime(encoding=None)
    dump = lua.eval("string.dump")
    load = lua.eval("loadstring")
    chunk = dump(load(SOURCE, b"=test"))
    assert len(_opcodes(chunk)) == 2       # count and pass end in tail calls
    patched = without_tail_calls(chunk)
    assert len(patched) == len(chunk) and _opcodes(patched) == []
    original, rewritten = load(chunk)(), load(patched)()
    for n in (0, 5, 300):
        assert tuple(original(n)) == tuple(rewritten(n)) == (n, 3, n, b"x", None, 1.5, b"str", True)
    # the frame stays: deep tail recursion now overflows, as in Valkey a call never replaces its caller
    with pytest.raises(lua51.LuaError, match="stack overflow"):
        rewritten(100000)
    assert original(100000)[0] == 100000


def test_not_a_chunk():
    with pytest.raises(BytecodeError):
        without_tail_calls(b"return 1")
    lua = lua51.LuaRuntime(encoding=None)
    chunk = lua.eval("string.dump")(lua.eval("loadstring")(b"return 1"))
    with pytest.raises(BytecodeError):
        without_tail_calls(chunk[:-3])
    assert OP_TAILCALL == 29
