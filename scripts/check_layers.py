#!/usr/bin/env python3
"""Prints every import of src/durakv that breaks the layer map of docs/design.md; exit 1 when there is one.

The map is read from docs/design.md itself (the ```layers block: a package may import only the packages listed
after it; the ```never block: importer -> packages it must never import), so the map and its check cannot
disagree. tests/unit/test_layers.py runs it in CI.

It also prints every import cycle between modules of src/durakv (`import_cycles`). Every import counts, at module
level, inside a function or under TYPE_CHECKING: a lazy import hides a cycle from Python, not from a reader.
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


def _module_name(path, root):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path, root, modules):
    """The modules of the tree (names in `modules`) one file imports, anywhere in it."""
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for n in node.names:   # `from pkg import mod` imports the module; `from mod import name` the module
                out.add(mod + "." + n.name if mod + "." + n.name in modules else mod)
        elif isinstance(node, ast.Import):
            for n in node.names:
                out.add(n.name if n.name in modules else n.name.rpartition(".")[0])
    return (out & set(modules)) - {here}


def import_cycles(root=ROOT / "src" / "durakv"):
    """Every set of modules that import each other in a circle (strongly connected components of the import
    graph with more than one module), each as a sorted list of module names."""
    modules = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {m: sorted(module_imports(p, root, modules)) for m, p in modules.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    for start in graph:   # Tarjan's algorithm, iterative (a deep import chain must not hit the recursion limit)
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            deps = graph[v]
            if i < len(deps):
                work.append((v, i + 1))
                w = deps[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(cycles)


def main():
    found = problems()
    for p in found:
        print(p)
    print("layers: %s" % ("%d import(s) against docs/design.md's map" % len(found) if found
                           else "every import follows docs/design.md's map"))
    cycles = import_cycles()
    for c in cycles:
        print("import cycle: " + " -> ".join(c))
    print("imports: %s" % ("%d cycle(s)" % len(cycles) if cycles else "no module imports itself through others"))
    return 1 if found or cycles else 0


if __name__ == "__main__":
    sys.exit(main())
