"""Exits 1, saying why, when the compiled core (durakv/fastpath/_core.c) or the local journal's compiled writer
(durakv/journal/_walwriter.c) did not build or does not load, unless
DURAKV_PURE_PYTHON=1 asks for the pure-Python core on purpose. scripts/test.sh runs it before the suite: the core
is optional for users without a C compiler (setup.py builds it with optional=True), never for CI, where a core
that failed to build would leave the whole suite passing on the pure-Python one.

    python scripts/check_core.py
"""

import sys


def main():
    import durakv.fastpath as fastpath
    if fastpath.core is None and fastpath.REASON != "DURAKV_PURE_PYTHON=1":
        sys.exit("check_core: the compiled core is missing: %s\ncheck_core: `pip install -v -e .` shows the "
                 "compiler's error; DURAKV_PURE_PYTHON=1 runs the pure-Python core on purpose" % fastpath.REASON)
    from durakv.journal import local
    if local.CWriter is None and fastpath.REASON != "DURAKV_PURE_PYTHON=1":
        try:
            import durakv.journal._walwriter  # noqa: F401 - for the ImportError's text only
            why = "it loads, but journal/local.py did not take it"
        except ImportError as exc:
            why = str(exc)
        sys.exit("check_core: the journal's compiled writer (durakv/journal/_walwriter.c) is missing: %s\n"
                 "check_core: `pip install -v -e .` shows the compiler's error" % why)
    if local.CWriter is not None:
        import durakv.journal._walwriter as walwriter
        print("check_core: the journal's compiled writer (%s, CRC32C by %s)" % (walwriter.__file__, walwriter.CRC32C))
    print("check_core: the %s core (%s)" % (fastpath.NAME, fastpath.core.__file__ if fastpath.core else
                                             "DURAKV_PURE_PYTHON=1"))


if __name__ == "__main__":
    main()
