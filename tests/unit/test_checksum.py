"""durakv.checksum: the one CRC32C of every file format, loaded without the crc32c package's __init__ (which reads
the distribution's metadata at every process start: tens of milliseconds in each server the suite starts)."""

import os
import random
import subprocess
import sys

import pytest

from durakv.checksum import crc32c

pytestmark = pytest.mark.unit


def test_it_is_the_packages_crc32c():
    import crc32c as package
    rng = random.Random(7)
    assert crc32c(b"123456789") == 0xE3069283          # the CRC-32C check value
    for size in (0, 1, 7, 8, 63, 64, 4096, 65537):
        data = rng.randbytes(size)
        assert crc32c(data) == package.crc32c(data)
        seed = rng.getrandbits(32)
        assert crc32c(data, seed) == package.crc32c(data, seed)
        half = size // 2
        assert crc32c(data[half:], crc32c(data[:half])) == crc32c(data)
    assert crc32c(memoryview(b"abcdef")[1:4]) == crc32c(b"bcd")


def test_a_server_start_does_not_read_package_metadata():
    # every process the server's file formats start in: the journal, the snapshot, the backup format, DUMP
    code = ("import sys\n"
            "import durakv.journal.walformat, durakv.journal.walscan, durakv.snapshot.format\n"
            "import durakv.backup.format, durakv.commands.generic\n"
            "print('importlib.metadata' in sys.modules, 'crc32c' in sys.modules)\n")
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         timeout=60).stdout.split()
    assert out == ["False", "False"], out
