"""The layer map of docs/design.md holds: scripts/check_layers.py reads it from the page and finds no import
against it (the map and its check cannot disagree), and the page lists every package of src/durakv."""

import os
import sys

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import check_layers  # noqa: E402


def test_no_import_breaks_the_map():
    assert check_layers.problems() == []


def test_the_map_names_every_package():
    with open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8") as f:
        order, never = check_layers.read_map(f.read())
    src = os.path.join(ROOT, "src", "durakv")
    packages = {n for n in os.listdir(src) if os.path.isdir(os.path.join(src, n)) and not n.startswith("__")}
    assert packages <= set(order), sorted(packages - set(order))
    assert {a for a, _b in never} <= set(order) and {b for _a, b in never} <= set(order)


def test_a_break_is_found(tmp_path):
    """The check is not vacuous: an import of server/ from keyspace/ is reported."""
    root = tmp_path / "durakv"
    (root / "keyspace").mkdir(parents=True)
    (root / "server").mkdir()
    (root / "keyspace" / "x.py").write_text("from ..server import y\n")
    (root / "server" / "y.py").write_text("")
    found = check_layers.problems(root=root, design=__import__("pathlib").Path(ROOT, "docs", "design.md"))
    assert len(found) == 1 and "keyspace/ imports server/" in found[0], found


def test_no_import_cycle():
    """No module of src/durakv imports itself through others, lazily or not (the cluster/ circles
    bootstrap -> local -> shards -> bootstrap and nats_procs -> secrets -> nats_procs were the last ones)."""
    assert check_layers.import_cycles() == []


def test_a_cycle_is_found(tmp_path):
    """The cycle check is not vacuous: a circle through a function-level import and a TYPE_CHECKING import is
    reported, and a chain that only goes down is not."""
    root = tmp_path / "durakv"
    (root / "cluster").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "cluster" / "__init__.py").write_text("")
    (root / "cluster" / "a.py").write_text("from .b import x\n")
    (root / "cluster" / "b.py").write_text("def f():\n    from . import c\n")
    (root / "cluster" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from durakv.cluster.a import y\n")
    (root / "cluster" / "d.py").write_text("from ..cluster import a\nfrom . import e\n")
    (root / "cluster" / "e.py").write_text("")
    assert check_layers.import_cycles(root) == [["durakv.cluster.a", "durakv.cluster.b", "durakv.cluster.c"]]
