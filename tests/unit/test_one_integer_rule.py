"""One integer rule, one way to walk options: the command families parse integers from clients only through
intstring.py's rules (string2ll, string2ull, strtol_whole, through parse_int / ArgCursor.int) and walk their
options with commands/args.py's ArgCursor. Python's int() takes b" 5", b"+5" and b"1_0", which Valkey's
string2ll does not; a hand-written `while i < n: ... args[i]` loop is where such a parse hides."""

import ast
import os

import pytest

from durakv.intstring import string2ll, string2ull, strtol_whole

from conftest import ROOT

COMMANDS = os.path.join(ROOT, "src", "durakv", "commands")
TEXT_METHODS = {"decode", "strip", "lstrip", "rstrip", "lower", "upper", "split", "partition"}


def _calls_int_on_text(tree):
    """int(x) where x is a value read as it is (a name, an item, an attribute, a string method's result): the
    shapes an argument from a client takes. Arithmetic and clock readings are not parses."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and node.args:
            arg = node.args[0]
            text_call = (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
                         and arg.func.attr in TEXT_METHODS)
            if isinstance(arg, (ast.Name, ast.Subscript, ast.Attribute)) or text_call:
                yield node.lineno, ast.unparse(node)


def _option_loops(tree):
    """`while i < n:` loops that read args[i ...]: an option loop written by hand. (Key-spec keyword searches,
    which may walk right to left, `while i != end`, are not option walks.)"""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.While) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and isinstance(node.test.ops[0], (ast.Lt, ast.LtE))):
            continue
        index = node.test.left.id
        for inner in ast.walk(node):
            if (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name)
                    and inner.value.id in ("args", "argv")
                    and any(isinstance(n, ast.Name) and n.id == index for n in ast.walk(inner.slice))):
                yield node.lineno, "while %s: ... %s" % (ast.unparse(node.test), ast.unparse(inner))
                break


def _scan(finder):
    found = []
    for name in sorted(os.listdir(COMMANDS)):
        if name.endswith(".py"):
            path = os.path.join(COMMANDS, name)
            for line, text in finder(ast.parse(open(path).read(), path)):
                found.append("commands/%s:%d: %s" % (name, line, text))
    return found


def test_no_int_of_client_text_in_the_command_families():
    assert _scan(_calls_int_on_text) == []


def test_every_option_loop_walks_an_arg_cursor():
    assert _scan(_option_loops) == []


def test_the_checks_find_what_they_look_for():
    tree = ast.parse("def h(args):\n    i, n = 2, len(args)\n    while i < n:\n        x = int(args[i + 1])\n"
                     "        i += 2\n    y = int(time.time())\n")
    assert [line for line, _ in _calls_int_on_text(tree)] == [4]
    assert [line for line, _ in _option_loops(tree)] == [3]


@pytest.mark.parametrize("text,ll,ull,strtol", [
    (b"5", 5, 5, 5), (b"-5", -5, None, -5), (b"0", 0, 0, 0), (b"-0", None, 0, 0), (b"+5", None, 5, 5),
    (b" 5", None, 5, 5), (b"05", None, 5, 5), (b"5 ", None, None, None), (b"1_0", None, None, None),
    (b"", None, None, None), (b"-", None, None, None), (b"\xd9\xa5", None, None, None),   # Arabic-Indic 5
    (b"9223372036854775807", (1 << 63) - 1, (1 << 63) - 1, (1 << 63) - 1),
    (b"9223372036854775808", None, 1 << 63, 1 << 63),
    (b"18446744073709551616", None, None, 1 << 64), (b" -1", None, (1 << 64) - 1, -1),
])
def test_the_integer_rules(text, ll, ull, strtol):
    """util.c's string2ll and string2ull, and C's strtol read whole, on the inputs that tell them apart."""
    assert (string2ll(text), string2ull(text), strtol_whole(text)) == (ll, ull, strtol)
