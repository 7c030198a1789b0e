"""The local journal's file format: records, segment headers and state slots, segment names and listing.

Layout: `<dir>/journal/<first_index:020d>.seg`, each file a 512-byte segment header, then a run of records:

    record     magic u8 (0xD8) | length u32 | crc u32 | index u64 | epoch u64 | time_ms u64 | payload (length bytes)
    header     magic b"DKVJSEG\\n" | version u16 (3) | flags u16 | reserved u32 | first_index u64 |
               created_ms u64 | crc u32 (CRC32C of the 32 bytes before it)        at offset 0
    state      two slots (at offsets 64 and 128), the newer (higher seq) valid one counts:
               magic b"DKVS" | reserved u32 | seq u64 | end u64 | batch_start u64 | last_index u64 |
               sealed u8 | fsync u8 | 2 pad | crc u32

little-endian; a record's crc is CRC32C over index, epoch, time_ms and payload. The name of a segment is the index
of its first record, so segment names and record indices together must form one contiguous sequence.

Commit time (format version 3): `time_ms` is the wall-clock time (ms since the Unix epoch) at which the writer
queued the record, just before its write and fsync, so it is never later than the acknowledgement of any write
the record carries. Point-in-time restore (durakv/backup) replays a journal up to the last record stamped at or
before an instant. Records of version 2 (magic 0xD7, no time_ms) are still read, in any segment: their time is
0 (unknown). A version-3 segment is refused by a durakv that knows only version 2 ("unsupported segment
version 3"), instead of being misread as damage at its first record.

Why a state slot: only the bytes of the last append can be torn by a crash, but the records alone cannot
tell a torn last append from a cut that took acknowledged entries with it. Every batch writes its records
and then the slot `(end, batch_start = where this batch began, last_index)`, alternating between the two
slots, and one fsync covers both. After a crash the slot is either this batch's or the previous one's, so
in every legitimate case the records reach at least the slot's batch_start: damage that ends the records
before it (zeroed or truncated acknowledged data) is refused, not cut. A segment is *sealed* (its slot
says so) once its successor exists durably, so a missing newest segment is seen too. A segment is created
under a temporary name and renamed once its header is durable, and the journal directory itself the same
way, so an existing segment always has a whole header and an existing journal directory a segment.

The format before it (`<first_index:020d>.wal`, records from offset 0, no header) is still read: such
segments keep their old rules (a damaged tail of the last one is cut), and opening a journal whose current
segment is one starts a new-format segment after it (the old ones are dropped by truncation later).

The writer is journal/local.py (LocalJournal), the readers journal/walscan.py, the start-up check
journal/walcheck.py.
"""

import os
import re
import struct
import time
from typing import NamedTuple, Optional

from ..checksum import crc32c

MAGIC = 0xD8                    # a record with its commit time (format version 3)
HEADER = struct.Struct("<BIIQQQ")
HEADER_SIZE = HEADER.size      # 33: what the writer writes
MAGIC_V2 = 0xD7                 # a record without it (format version 2 and the legacy `.wal` segments)
HEADER_V2 = struct.Struct("<BIIQQ")
HEADER_SIZE_V2 = HEADER_V2.size  # 25
HEADER_BY_MAGIC = {MAGIC: HEADER, MAGIC_V2: HEADER_V2}
_INDEX_EPOCH_TIME = struct.Struct("<QQQ")
CRC_FROM = 9  # offset of index (+epoch, +time) inside either header
U32 = struct.Struct("<I")

SEG_SUFFIX = ".seg"
LEGACY_SUFFIX = ".wal"
SEGMENT_RE = re.compile(r"^(\d{20})\.(seg|wal)$")
TMP_RE = re.compile(r"^(\d{20})\.seg\.tmp$")
# The largest payload one record carries (`max_entry_bytes`; the record's length field would allow 4 GiB). A
# bound keeps one batch's write, and what recovery and readers hold of one record, a few MB: the write tracker
# closes batches before it and carries a larger command in continuation parts (journal/codec.py).
MAX_ENTRY_BYTES = 16 * 1024 * 1024

SEG_MAGIC = b"DKVJSEG\n"
SEG_VERSION = 3                # written; read: SEG_VERSIONS_READ
SEG_VERSIONS_READ = (2, 3)
SEG_HEAD = struct.Struct("<8sHHIQQ")
_SLOT = struct.Struct("<4sIQQQQBB2x")
_SLOT_MAGIC = b"DKVS"
SLOT_OFFSETS = (64, 128)
DATA_START = 512  # records of a segment start here; header and slots share its first sector


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_header(index: int, epoch: int, payload, time_ms: Optional[int] = None) -> bytes:
    """The 33-byte record header for payload (the record is header + payload), stamped with time_ms (now when
    None)."""
    t = now_ms() if time_ms is None else time_ms
    iet = _INDEX_EPOCH_TIME.pack(index, epoch, t)
    return HEADER.pack(MAGIC, len(payload), crc32c(payload, crc32c(iet)), index, epoch, t)


def encode_frame(index: int, epoch: int, payload: bytes, time_ms: Optional[int] = None) -> bytes:
    """One whole record (used by tests and tools; the writer joins header and payload itself)."""
    return encode_header(index, epoch, payload, time_ms) + bytes(payload)


def encode_frame_v2(index: int, epoch: int, payload: bytes) -> bytes:
    """A record of format version 2 (no commit time), as durakv before it wrote them (tests of the reader)."""
    ie = struct.pack("<QQ", index, epoch)
    return HEADER_V2.pack(MAGIC_V2, len(payload), crc32c(payload, crc32c(ie)), index, epoch) + bytes(payload)


def unpack_record_header(buf, pos):
    """(header size, length, crc, index, epoch, time_ms) of the record at pos, or None when the byte there is
    no record magic (or fewer bytes than its header remain)."""
    st = HEADER_BY_MAGIC.get(buf[pos])
    if st is None or len(buf) - pos < st.size:
        return None
    if st is HEADER:
        _m, length, crc, index, epoch, t = st.unpack_from(buf, pos)
        return st.size, length, crc, index, epoch, t
    _m, length, crc, index, epoch = st.unpack_from(buf, pos)
    return st.size, length, crc, index, epoch, 0


class SegmentState(NamedTuple):
    seq: int
    end: int          # file offset after the last record written with this state
    batch_start: int  # file offset where the batch that wrote this state began
    last_index: int   # index of the record ending at `end` (first_index - 1 when none)
    sealed: int       # 1: closed for good, its successor exists
    fsync: int        # 1: the writer fsynced every batch


def encode_slot(state: SegmentState) -> bytes:
    body = _SLOT.pack(_SLOT_MAGIC, 0, *state)
    return body + U32.pack(crc32c(body))


def decode_slot(buf, offset) -> Optional[SegmentState]:
    end = offset + _SLOT.size + 4
    if len(buf) < end:
        return None
    body = bytes(buf[offset:offset + _SLOT.size])
    (crc,) = U32.unpack_from(buf, offset + _SLOT.size)
    if crc32c(body) != crc:
        return None
    magic, _r, *fields = _SLOT.unpack(body)
    if magic != _SLOT_MAGIC:
        return None
    return SegmentState(*fields)


def slot_offset(seq: int) -> int:
    return SLOT_OFFSETS[seq % 2]


def encode_segment_head(first_index: int, state: SegmentState, created_ms: Optional[int] = None) -> bytes:
    """The first DATA_START bytes of a new segment: header, the initial state slot, zero padding."""
    created = int(time.time() * 1000) if created_ms is None else created_ms
    head = SEG_HEAD.pack(SEG_MAGIC, SEG_VERSION, 0, 0, first_index, created)
    out = bytearray(DATA_START)
    out[0:len(head)] = head
    out[len(head):len(head) + 4] = U32.pack(crc32c(head))
    slot = encode_slot(state)
    off = slot_offset(state.seq)
    out[off:off + len(slot)] = slot
    return bytes(out)


def segment_name(first_index: int) -> str:
    return "%020d%s" % (first_index, SEG_SUFFIX)


def legacy_segment_name(first_index: int) -> str:
    return "%020d%s" % (first_index, LEGACY_SUFFIX)


def journal_dir(data_dir) -> str:
    return os.path.join(os.fspath(data_dir), "journal")


def list_segments(jdir):
    """[(first_index, path)] of the segment files in a journal directory, in index order (an old-format
    `.wal` before a new-format `.seg` of the same index). An empty `.wal` next to a `.seg` of the same index
    is what a crash in the middle of the format migration leaves; it is not listed."""
    try:
        names = os.listdir(jdir)
    except FileNotFoundError:
        return []
    found = {}
    for name in names:
        m = SEGMENT_RE.match(name)
        if m:
            found.setdefault(int(m.group(1)), []).append((m.group(2) == "seg", os.path.join(jdir, name)))
    out = []
    for first in sorted(found):
        kinds = sorted(found[first])
        if len(kinds) == 2 and _is_empty(kinds[0][1]):
            kinds = kinds[1:]
        out.extend((first, path) for _new, path in kinds)
    return out


def _is_empty(path) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return False


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()
