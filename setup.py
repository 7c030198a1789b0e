"""The compiled parts the package builds, both optional: where no C compiler is found the build goes on without
them (pip prints the compiler's failure as a warning) and durakv runs their pure-Python references.

- keyspace/_crc64.c: the CRC-64 of DUMP payloads and RDB files (keyspace/rdbvalue.py's crc64 is the reference)
- keyspace/_bloom.c: a Bloom filter's SipHash-1-3 and bit operations (keyspace/bloom.py's are the reference)
- keyspace/_keytable.c: a database's table of keys, one allocation per key (keyspace/keytable.py's PyKeyTable is
  the reference; the compiled core reads it through keyspace/keytable.h)
- journal/_walwriter.c: the local journal's writer thread, record headers and CRC32C (journal/local.py's Python
  writer and journal/walformat.py are the reference)
- fastpath/_core.c: the request parser's fast path, the per-read batch loop of the commands on plain strings,
  reply and effect encoding (commands/pipeline.py, server/connection.py and journal/codec.py are the reference;
  docs/architecture.md, "The compiled core")
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("durakv.keyspace._crc64", ["src/durakv/keyspace/_crc64.c"], optional=True, extra_compile_args=["-O3"]),
    Extension("durakv.keyspace._bloom", ["src/durakv/keyspace/_bloom.c"], optional=True,
              extra_compile_args=["-O3", "-Wall"]),
    Extension("durakv.keyspace._keytable", ["src/durakv/keyspace/_keytable.c"], optional=True,
              depends=["src/durakv/keyspace/keytable.h"], extra_compile_args=["-O2", "-Wall"]),
    Extension("durakv.journal._walwriter", ["src/durakv/journal/_walwriter.c"], optional=True,
              extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"]),
    # -Werror=...: a CPython private API the core uses (listed in _core.c) that is gone or changed fails the
    # build instead of compiling against a guess (scripts/test.sh then fails: the core must be there)
    Extension("durakv.fastpath._core", ["src/durakv/fastpath/_core.c"], optional=True,
              depends=["src/durakv/keyspace/keytable.h"],
              extra_compile_args=["-O2", "-Wall", "-Wno-unused-function", "-Werror=implicit-function-declaration",
                                  "-Werror=incompatible-pointer-types"]),
])
