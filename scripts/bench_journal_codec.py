"""Times the journal codec on the entries a bulk load makes: one 16 MB batch of 4 KB SETs decoded (what every
reader does per entry), and a 70 MB value encoded into 1 MB parts and assembled again.

    PYTHONPATH=src python scripts/bench_journal_codec.py
"""

import random
import time

from durakv.journal.codec import PartAssembler, decode_payload, effect_pieces, encode_effects, encode_parts


def main():
    batch = encode_effects([(0, (b"SET", b"bulk:%05d" % i, b"v" * 4096)) for i in range(4000)])
    started = time.perf_counter()
    effects = decode_payload(batch)
    print("decode one %.1f MB batch of %d SETs: %.3f s" % (len(batch) / 1e6, len(effects),
                                                           time.perf_counter() - started))
    value = random.Random(70).randbytes(70 * 1024 * 1024)
    started = time.perf_counter()
    parts = encode_parts(effect_pieces([(0, (b"SET", b"big", value))]), 1024 * 1024)
    encoded = time.perf_counter() - started
    assembler = PartAssembler()
    started = time.perf_counter()
    for part in parts:
        out = assembler.feed(part)
    assembled = time.perf_counter() - started
    assert out[0][1][2] == value
    print("70 MB value: %d parts encoded in %.3f s, assembled in %.3f s" % (len(parts), encoded, assembled))


if __name__ == "__main__":
    main()
