"""The one compiled part the package builds: keyspace/_crc64.c. It is optional: where no C compiler is found the
build goes on without it and durakv uses the pure-Python crc64 (keyspace/rdbvalue.py) it mirrors."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("durakv.keyspace._crc64", ["src/durakv/keyspace/_crc64.c"], optional=True,
                             extra_compile_args=["-O3"])])
