"""JSON documents through `durakv import` (an RDB file holding valkey-json's module type, written as a Valkey
with valkey-json writes it: the document as one LZF-compressed string) and `durakv migrate` (a durakv source's
full sync, then its stream of JSON writes), compared document by document. Real processes, real sockets."""

import struct

import valkey

from conftest import durakv_cli
from test_import_migrate import finish, held_cutover, replica_online, start_migrate, wait_while_migrating
from durakv.keyspace import rdbvalue

MODULE_ID = rdbvalue.module_type_id("ReJSON-RL", 3)

DOCS = {
    b"doc:small": b'{"a":1}',
    b"doc:store": (b'{"store":{"book":[{"title":"Moby Dick","price":8.99,"isbn":"0-553-21311-3"},'
                   b'{"title":"Sword of Honour","price":12.99}],"bicycle":{"color":"red","price":19.95}},'
                   b'"n":12345678901234567890,"e":1E3,"u":"\xc3\xa9"}'),
    b"doc:int": b"42",
}


def _lzf_literals(data: bytes) -> bytes:
    """An LZF stream of literal runs only (what lzf_decompress reads, as lzf_compress writes incompressible
    input): a control byte run-1 (< 32) before each run of at most 32 bytes."""
    out = bytearray()
    for i in range(0, len(data), 32):
        chunk = data[i:i + 32]
        out.append(len(chunk) - 1)
        out += chunk
    return bytes(out)


def _module_value(text: bytes, compressed: bool) -> bytes:
    """RDB_TYPE_MODULE_2's body for a ReJSON-RL document (encver 3): the module id, OPCODE_STRING and the JSON
    (rdbSaveRawString: an integer when it is one, LZF when rdbcompression found it worth it), OPCODE_EOF."""
    if compressed:
        packed = _lzf_literals(text)
        string = b"\xc3" + rdbvalue._len(len(packed)) + rdbvalue._len(len(text)) + packed
    else:
        string = rdbvalue._string(text)
    return b"\x81" + MODULE_ID.to_bytes(8, "big") + b"\x05" + string + b"\x00"


def valkey_bundle_rdb(path):
    """An RDB file with the documents (one with a TTL) in db 0 and one in db 2."""
    out = [b"REDIS0011", b"\xfe\x00\xfb" + rdbvalue._len(len(DOCS)) + rdbvalue._len(1)]
    for i, (key, text) in enumerate(DOCS.items()):
        if i == 0:
            out.append(b"\xfc" + struct.pack("<q", 4_000_000_000_000))
        out.append(b"\x07" + rdbvalue._string(key) + _module_value(text, compressed=len(text) > 20))
    out.append(b"\xfe\x02\xfb\x01\x00\x07" + rdbvalue._string(b"other") + _module_value(b"[true,null]", False))
    data = b"".join(out) + b"\xff"
    data += rdbvalue.crc64(data).to_bytes(8, "little")
    with open(path, "wb") as f:
        f.write(data)


def test_import_reads_valkey_json_documents_from_an_rdb_file(server_factory, tmp_path):
    path = tmp_path / "bundle.rdb"
    valkey_bundle_rdb(path)
    srv = server_factory("--durability", "sync")
    r = durakv_cli("import", str(path), "--target", f"127.0.0.1:{srv.port}", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "imported 4 keys in 2 database(s)" in r.stdout, r.stdout
    c = srv.client()
    for key, text in DOCS.items():
        assert c.type(key) == b"ReJSON-RL"
        assert c.execute_command("JSON.GET", key) == text
    assert c.pttl(b"doc:small") > 0
    assert srv.client(db=2).execute_command("JSON.GET", "other") == b"[true,null]"
    # acknowledged in sync mode: a kill -9 and a restart keep the documents
    srv.kill()
    srv.start()
    assert srv.client().execute_command("JSON.GET", "doc:store") == DOCS[b"doc:store"]


def test_migrate_carries_documents_and_their_writes(server_factory, tmp_path):
    source = server_factory("--durability", "none")
    src = source.client()
    for key, text in DOCS.items():
        src.execute_command("JSON.SET", key, ".", text)
    target = server_factory("--durability", "sync")
    hold = tmp_path / "hold-cutover"
    proc = start_migrate("--source", f"127.0.0.1:{source.port}", "--target", f"127.0.0.1:{target.port}",
                         *held_cutover(hold), "--verify")
    try:
        wait_while_migrating(proc, lambda: replica_online(src, 1), 60, what="the migration streaming")
        src.execute_command("JSON.ARRAPPEND", "doc:store", "$.store.book", '{"title":"new"}')
        src.execute_command("JSON.NUMINCRBY", "doc:store", "$..price", "1")
        src.execute_command("JSON.SET", "doc:late", "$", '{"late":true}')
        src.execute_command("JSON.DEL", "doc:small")
        hold.unlink()
        rc, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, err + out
    assert "verify: per-slot key counts equal, every key equal" in out, out
    dst = target.client()
    for key in (b"doc:store", b"doc:late", b"doc:int"):
        assert dst.execute_command("JSON.GET", key) == src.execute_command("JSON.GET", key)
    assert dst.exists("doc:small") == 0
    assert dst.type("doc:late") == b"ReJSON-RL"
