"""CRC32C (Castagnoli), the one checksum of every durakv file format: the WAL's records and state slot, the
snapshot, the backup format and DUMP payloads' legacy check. One home, so every format uses the same function.

It is the `crc32c` package's compiled function (hardware CRC32 where the CPU has it), loaded without running the
package's `__init__`: that reads the installed distribution's metadata for `__version__` (importlib.metadata,
which scans every sys.path entry) and imports its command-line module, 15-60 ms at the start of every durakv
process that writes or reads a file (a server, a cluster node, the tools), against 2-10 ms for the extension
alone. A layout this does not recognise falls back to the package's public import, which is the same function.

    crc32c(data, value=0) -> int     the CRC of data, continuing from value (crc32c(b, crc32c(a)) == crc32c(a+b))
"""

import importlib.machinery
import importlib.util
import os


def _load():
    spec = importlib.util.find_spec("crc32c")       # finds the package; does not run its __init__
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_crc32c" + suffix)
            if os.path.exists(path):
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                module = importlib.util.module_from_spec(
                    importlib.util.spec_from_file_location("crc32c._crc32c", path, loader=loader))
                loader.exec_module(module)
                return module.crc32c
    from crc32c import crc32c as function
    return function


crc32c = _load()
