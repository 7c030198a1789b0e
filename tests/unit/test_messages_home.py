"""messages.py is the one home of error reply texts: no module of the server spells one itself.

A reply text is a string constant that starts with one of Valkey's error codes ("ERR ...", "NOPERM ...") or the
first argument of CommandError / ErrorReply / MigrateError / a script's error table. Allowed elsewhere: a bare
code ("ERR ", "MOVED") that prefixes a text from messages.py or from an exception, and "CODE %s". Not the
server's replies, so not checked: tools/ (clients that read replies) and cluster/netproxy.py (the fault proxy's
own control channel). Config values' problems live with their rules in config.py (config.c's texts after
"CONFIG SET failed ... - ")."""

import ast
import os
import re

from conftest import ROOT

SRC = os.path.join(ROOT, "src", "durakv")
CODES = ("ERR|WRONGTYPE|NOSCRIPT|BUSY|NOAUTH|NOPERM|EXECABORT|LOADING|MASTERDOWN|READONLY|CLUSTERDOWN|MOVED|ASK|"
         "TRYAGAIN|CROSSSLOT|OOM|NOGROUP|BUSYGROUP|UNBLOCKED|NOREPLICAS|MISCONF|NOTBUSY|UNKILLABLE|WRONGPASS|"
         "NOPROTO|IOERR|DENIED|NOTREADY|INVALIDOBJ|INPROGRESS|EXECABORT")
TEXT = re.compile(r"^(%s) \S" % CODES)
BARE = re.compile(r"^(%s)( |( %%s))?$" % CODES)
CALLS = {"CommandError", "ErrorReply", "MigrateError", "err_table", "raise_lua", "_raise_text"}
NOT_REPLIES = ("messages.py", os.sep + "tools" + os.sep, "netproxy.py")


def _docstrings(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _text(node):
    if isinstance(node, ast.BinOp):
        node = node.left
    if isinstance(node, ast.JoinedStr) and node.values:
        node = node.values[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        v = node.value
        return v.decode("latin-1") if isinstance(v, bytes) else v
    return None


def reply_texts_outside_messages():
    found = []
    for dirpath, _dirs, files in os.walk(SRC):
        for name in files:
            path = os.path.join(dirpath, name)
            if not name.endswith(".py") or any(part in path for part in NOT_REPLIES):
                continue
            tree = ast.parse(open(path).read(), path)
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                text = None
                if isinstance(node, ast.Constant) and id(node) not in docs:
                    text = _text(node)
                    if text is not None and not TEXT.match(text):
                        text = None
                elif isinstance(node, ast.Call) and node.args:
                    func = node.func
                    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                    if called in CALLS:
                        text = _text(node.args[0])
                if text is not None and not BARE.match(text):
                    found.append("%s:%d: %r" % (os.path.relpath(path, SRC), node.lineno, text))
    return sorted(set(found))


def test_every_error_reply_text_lives_in_messages_py():
    assert reply_texts_outside_messages() == []


def test_the_check_finds_a_text_spelled_elsewhere(tmp_path, monkeypatch):
    """The check itself: a handler that spells its own error is caught; one that names messages.X is not."""
    pkg = tmp_path / "durakv"
    pkg.mkdir()
    (pkg / "handler.py").write_text(
        'from . import messages\n'
        'def h(args):\n'
        '    if not args:\n'
        '        raise CommandError("ERR my own words")\n'
        '    raise CommandError(messages.SYNTAX)\n'
        'X = b"NOPERM no"\n'
        'Y = "ERR %s"\n')
    monkeypatch.setattr(__import__(__name__), "SRC", str(pkg))
    assert reply_texts_outside_messages() == ["handler.py:4: 'ERR my own words'", "handler.py:6: 'NOPERM no'"]
