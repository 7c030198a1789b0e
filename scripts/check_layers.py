#!/usr/bin/env python3
"""Prints every import of src/durakv that breaks the layer map of docs/design.md; exit 1 when there is one.

The map is read from docs/design.md itself (the ```layers block: a package may import only the packages listed
after it; the ```never block: importer -> packages it must never import), so the map and its check cannot
disagree. tests/test_layers.py runs it in CI.
"""

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def read_map(design_text):
    """(ORDER, NEVER) from the design page's blocks."""
    order_block = re.search(r"```layers\n(.*?)```", design_text, re.S).group(1)
    order = []
    for line in order_block.splitlines():
        word = line.split(" ", 1)[0].strip()
        if word:
            order.append(word)
    never = set()
    never_block = re.search(r"```never\n(.*?)```", design_text, re.S)
    for line in (never_block.group(1) if never_block else "").splitlines():
        if "->" in line:
            src, dsts = line.split("->", 1)
            never |= {(src.strip(), d) for d in dsts.split()}
    return order, never


def _package(path, root):
    parts = path.relative_to(root).with_suffix("").parts
    return parts[0] if parts else ""


def imported(path, root):
    """[(top-level durakv package, line)] imported by one file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = path.relative_to(root).parent.parts
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - (node.level - 1)]) if node.level > 1 else list(here)
                mod = base + (node.module.split(".") if node.module else [])
                if not mod and node.names:
                    mod = [node.names[0].name]
            elif node.module and node.module.startswith("durakv"):
                mod = node.module.split(".")[1:]
                if not mod and node.names:
                    mod = [node.names[0].name]
            else:
                continue
            if mod:
                out.append((mod[0], node.lineno))
        elif isinstance(node, ast.Import):
            for n in node.names:
                if n.name.startswith("durakv."):
                    out.append((n.name.split(".")[1], node.lineno))
    return out


def problems(root=ROOT / "src" / "durakv", design=ROOT / "docs" / "design.md"):
    order, never = read_map(design.read_text(encoding="utf-8"))
    rank = {p: i for i, p in enumerate(order)}
    found = []
    for path in sorted(root.rglob("*.py")):
        src = _package(path, root)
        if src in ("__init__", "__main__"):
            continue
        for dst, line in imported(path, root):
            if dst == src or dst not in rank or src not in rank:
                continue
            rel = path.relative_to(root.parent.parent)
            if (src, dst) in never:
                found.append("%s:%d: %s/ imports %s/ (docs/design.md: never)" % (rel, line, src, dst))
            elif rank[dst] < rank[src]:
                found.append("%s:%d: %s/ imports %s/, which sits above it" % (rel, line, src, dst))
    return found


def main():
    found = problems()
    for p in found:
        print(p)
    print("layers: %s" % ("%d import(s) against docs/design.md's map" % len(found) if found
                           else "every import follows docs/design.md's map"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
