#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/NAME (the files named
seed-*). Deterministic: run it again after changing it and commit what
changed. corpus/pack/real-unsealed is a pack cairnd wrote (five small adds
and a delete); the sealed and torn packs and the record payloads are made
from it here. Other files (regression inputs, real-*) are never touched."""
import hashlib
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# -- a small msgpack encoder: maps, arrays, str, bin, int, bool, nil, float --
def mp(v):
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if v < 0:
            if v >= -32:
                return bytes([v & 0xFF])
            return b"\xd3" + struct.pack(">q", v)
        if v < 128:
            return bytes([v])
        if v < 256:
            return b"\xcc" + bytes([v])
        if v < 65536:
            return b"\xcd" + struct.pack(">H", v)
        if v < 1 << 32:
            return b"\xce" + struct.pack(">I", v)
        return b"\xcf" + struct.pack(">Q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xa0 | len(b)]) + b
        if len(b) < 256:
            return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, bytes):
        if len(v) < 256:
            return b"\xc4" + bytes([len(v)]) + v
        return b"\xc5" + struct.pack(">H", len(v)) + v
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(type(v))


def frame(v):
    p = mp(v)
    return struct.pack(">I", len(p)) + p


H = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
DOC = {"hash": H, "name": "notes/a.txt", "size": 4, "stored_size": 13, "mime": "text/plain",
       "created": 1764547200, "tags": ["work", "draft"]}


def requests():
    return {
        "hello": frame({"id": 1, "op": "hello", "client": "cairn 0.1.0", "versions": [1]}),
        "add": frame({"id": 2, "op": "add", "name": "a.txt", "tags": ["x"], "meta": {"k": "v"},
                      "mime": "text/plain", "data": b"test", "more": False}),
        "add-stream": frame({"id": 3, "op": "add", "more": True, "size": 8, "data": b"abcd"})
        + frame({"id": 3, "op": "data", "data": b"efgh", "more": False}),
        "get": frame({"id": 4, "op": "get", "ref": H[:12], "offset": 1, "length": 2}),
        "search": frame({"id": 5, "op": "search", "query": "hello -world tag:x", "limit": 10,
                         "offset": 0, "fuzzy": True}),
        "list": frame({"id": 6, "op": "list", "tag": "x", "limit": 500, "after": H}),
        "list-names": frame({"id": 6, "op": "list", "names": True, "prefix": "usr/share/",
                             "after": "usr/share/doc/a", "limit": 10}),
        "list-unnamed": frame({"id": 6, "op": "list", "unnamed": True, "tag": "x"}),
        "delete-dry-run": frame({"id": 7, "op": "delete", "ref": "notes/a.txt", "dry_run": True}),
        "du": frame({"id": 8, "op": "du", "prefix": "usr/share/doc/"}),
        "pipelined": b"".join(frame({"id": i, "op": op}) for i, op in
                              enumerate(["status", "gc", "verify", "stat"], 7)),
        "too-deep": frame({"id": 9, "op": "add", "meta": {"a": [[[[[[[[1]]]]]]]]}}),
        # an empty container at level 8 (accepted), then one at level 9 (refused)
        "too-deep-empty": frame({"id": 9, "op": "add", "meta": {"a": [[[[[{}]]]]]}})
        + frame({"id": 10, "op": "add", "meta": {"a": [[[[[[[]]]]]]]}}),
        "not-a-map": frame([1, 2, 3]),
        "short-length": b"\x00\x00\x00\x09\x81\xa2id\x01",
        "huge-length": b"\xff\xff\xff\xff\x80",
    }


def replies():
    ok = {"id": 1, "ok": True}
    err = {"id": 1, "ok": False, "error": {"code": "not_found", "message": "no such document"}}
    return {
        # first byte: 0 get, 1 range, 2 list, 3 stat, 4 status, 5 delete
        "get": b"\x00" + frame(dict(ok, hash=H, name="a", size=8, mime="text/plain", data=b"abcd",
                                    more=True)) + frame(dict(ok, data=b"efgh", more=False)),
        "get-integrity": b"\x00" + frame(dict(ok, hash=H, name="a", size=8, mime="x", data=b"ab",
                                              more=True))
        + frame({"id": 1, "ok": False, "error": {"code": "integrity", "message": "chunk"}}),
        "range": b"\x01" + frame(dict(ok, hash=H, name="", size=1000, mime="application/octet-stream",
                                      data=b"x" * 100, more=False)),
        "list": b"\x02" + frame(dict(ok, items=[DOC, dict(DOC, name="")], more=True))
        + frame(dict(ok, items=[], more=False)),
        "stat": b"\x03" + frame(dict(ok, names=["notes/a.txt", "b"], chunks=1, meta={"k": "v"}, **DOC)),
        "status": b"\x04" + frame(dict(ok, version="0.1.0", protocol=1, pid=42, uptime=7,
                                       backend="file:///tmp/x", documents=3, connections=1)),
        "delete": b"\x05" + frame(dict(ok, hash=H, name="", names=["a", "b"], names_cut=3,
                                       deleted=[H], dry_run=False)),
        "error": b"\x03" + frame(err),
        "other-id-first": b"\x05" + frame({"id": 9, "ok": True}) + frame(dict(ok, hash=H)),
        "id-zero": b"\x04" + frame({"id": 0, "ok": False, "error": {"code": "bad_frame", "message": ""}}),
    }


QUERIES = {
    "words": b"hello world",
    "phrase-or": b'"exact phrase" OR other -excluded',
    "filters": b"name:notes tag:work prefix* caf\xc3\xa9",
    "snippet": b"quick fox\x00The quick brown fox jumps over the lazy dog. " * 3,
    "unicode": "Stra\u00dfe \u00c9cole na\u00efve \u65e5\u672c".encode(),
    "unbalanced": b'"open phrase OR - * name: tag:',
}

CONFIGS = {
    "full": b"""[daemon]
socket = /tmp/cairn.sock
log_level = debug
max_connections = 256
threads = 4

[store]
data_dir = /tmp/cairn-data
compression_level = 3
chunk_min = 16384
chunk_avg = 65536
chunk_max = 262144
pack_size = 16777216
cache_size = 67108864
""",
    "s3": b"""[backend]
url = s3://bucket/prefix
endpoint = https://127.0.0.1:9000
region = eu-west-1
path_style = 1
access_key_id = AKIDEXAMPLE
secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY
timeout = 30
connections = 16
""",
    "bad": b"[store\nchunk_min = 9999999999999999999999\n[nope]\nx=1\n",
    "comments": b"; comment\n# another\n[daemon]\n  log_level =   info  ; trailing\n",
}

URLS = {
    "s3": b"s3://my-bucket/some/prefix?endpoint=https://127.0.0.1:9000&region=us-east-1&path_style=1",
    "s3-all": b"s3://b/p%20q?endpoint=http://[::1]:9000&allow_http=1&timeout=10&connect_timeout=2"
              b"&stall_timeout=5&connections=8&storage_class=STANDARD_IA&profile=x",
    "r2": b"r2://bucket/prefix?account=0123456789abcdef0123456789abcdef&api_base=http://127.0.0.1:1/"
          b"&allow_http=1&ttl=900",
    "sftp": b"sftp://user@host.example:2222/~/backups?key=/root/.ssh/id_ed25519&connections=4"
            b"&known_hosts=/tmp/kh&accept_new_host=1&timeout=30&keepalive=10",
    "sftp-v6": b"sftp://u@[::1]/abs/path",
    "bad": b"s3://%zz/\xff?=&&a==b&endpoint",
}

XML = {
    "list": b"""<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix>
<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
<Contents><Key>p/packs/0000000000000001</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
<ETag>&quot;abc&quot;</ETag><Size>1048576</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>p/a&amp;b &#252;&#x41;</Key><Size>0</Size></Contents></ListBucketResult>""",
    "error": b"""<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>
<RequestId>4442587FB7D0A2F9</RequestId></Error>""",
    "cdata": b"<Error><Code><![CDATA[NoSuchKey]]></Code><Message>a <!-- c --> b</Message></Error>",
}

SIGV4 = {
    "get": b"GET\n/examplebucket/test.txt\nexamplebucket.s3.amazonaws.com\n\nrange:bytes=0-9\n\n"
           b"AKIAIOSFODNN7EXAMPLE\nwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n\nus-east-1",
    "list": b"GET\n/bucket\n127.0.0.1:9000\nlist-type=2\nprefix=p/\ncontinuation-token=a+b/c=\n\n\n"
            b"AKID\nsecret\ntoken\neu-central-1",
    "odd": "PUT\n/b/ p\u00fc+:=/x\nhost:1\na=\n=b\n\nX-Amz-Meta-\u00fc: v \n\nk\ns\n\n".encode(),
}

CREDS = {
    "profile": b"[default]\naws_access_key_id = AKID1\naws_secret_access_key = s1\n\n"
               b"[fuzz]\naws_access_key_id=AKID2\naws_secret_access_key=s2\naws_session_token = t\n",
    "half": b"[fuzz]\naws_access_key_id = only\n",
    "broken": b"[fuzz\n; c\n# c\n=\n",
}

MCP = {
    "session": b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}\n'
               b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
               b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search",'
               b'"arguments":{"query":"x"}}}\n\n  \r\n{"jsonrpc":"2.0","id":2,"method":"ping"}',
    "bad": b'[1,2]\n{"a":1,"a":2}\n{"x":"\xc0\xaf"}\n{{{{\n',
}


# -- fuzz-dispatch: segments "kind id body" joined by SEP (fuzz-dispatch.c) --
OPS = ["hello", "add", "data", "get", "delete", "list", "stat", "status", "search", "gc", "verify",
       "du", "refresh"]
RAW_FRAME, RAW_BYTES, HANG_UP = len(OPS), len(OPS) + 1, len(OPS) + 2
# ops added later come after the raw kinds (fuzz-dispatch.c)
KEY, LOG, SHUTDOWN, METRICS, NAME, EDIT = (len(OPS) + 3, len(OPS) + 4, len(OPS) + 5,
                                           len(OPS) + 6, len(OPS) + 7, len(OPS) + 8)
SEP = b"\xc1\xc1\xc1\xc1"


def blob(n):
    """fuzz_blob_byte() of fuzz-dispatch.c."""
    return bytes(((i * 2654435761) & 0xFFFFFFFF) >> 24 for i in range(n))


# The contents of fuzz_docs in fuzz-dispatch.c: the hashes the seeds refer to.
A1 = hashlib.sha256(b"hello world, the quick brown fox\n").hexdigest()
A2 = hashlib.sha256(b"second version of a\n").hexdigest()
README = hashlib.sha256(b"read me first\n").hexdigest()
NAMELESS = hashlib.sha256(b"nameless\n").hexdigest()
BLOB = hashlib.sha256(blob(20000)).hexdigest()
BIG_SIZE = 1280 * 1024
BIG = hashlib.sha256((blob(20000) * (BIG_SIZE // 20000 + 1))[:BIG_SIZE]).hexdigest()
# pair/a and pair/b: their hashes share the first 8 hex digits
PAIR = hashlib.sha256(b"collide 186454\n").hexdigest()[:8]
assert hashlib.sha256(b"collide 190114\n").hexdigest()[:8] == PAIR


def seg(op, rid, body=None):
    later = {"key": KEY, "log": LOG, "shutdown": SHUTDOWN, "metrics": METRICS, "name": NAME,
             "edit": EDIT}
    kind = (OPS.index(op) if op in OPS else later[op]) if isinstance(op, str) else op
    raw = body if isinstance(body, bytes) else mp(body if body is not None else {})
    return bytes([kind, rid]) + raw


def dispatch():
    seeds = {
        "hello": [seg("hello", 1, {"client": "cairn 0.1.0", "versions": [1, 2]})],
        "add": [seg("add", 2, {"name": "new/doc.txt", "tags": ["t1", "t2"], "meta": {"k": "v"},
                               "mime": "text/plain", "size": 11, "data": b"fresh words"})],
        "add-stream": [seg("add", 3, {"more": True, "size": 8, "data": b"abcd"}),
                       seg("data", 3, {"data": b"efgh", "more": False})],
        "add-existing": [seg("add", 4, {"name": "again", "tags": ["more"], "data": blob(20000)})],
        "get": [seg("get", 5, {"ref": "notes/a.txt"})],
        "get-range": [seg("get", 6, {"ref": BLOB[:12], "offset": 5000, "length": 7000})],
        "delete": [seg("delete", 7, {"ref": "notes/a.txt"})],
        "delete-hash": [seg("delete", 7, {"ref": README.upper(), "dry_run": False})],
        "delete-dry-run": [seg("delete", 7, {"ref": NAMELESS, "dry_run": True})],
        "list": [seg("list", 8, {"tag": "work", "limit": 2, "after": A1[:10]})],
        "list-names": [seg("list", 8, {"names": True, "prefix": "notes", "path": True,
                                       "after": "a", "limit": 10})],
        "list-unnamed": [seg("list", 8, {"unnamed": True, "tag": "x"})],
        "stat": [seg("stat", 9, {"ref": A2[:16]})],
        "stat-unnamed": [seg("stat", 9, {"ref": NAMELESS})],
        "status": [seg("status", 10)],
        "search": [seg("search", 11, {"query": "quick fox OR dog -slow name:notes tag:work",
                                      "limit": 5, "offset": 0, "tags": ["work"],
                                      "name": "notes/*", "mime": "text/plain", "after": 0,
                                      "before": 4102444800, "fuzzy": True})],
        "search-filters": [seg("search", 11, {"query": "tag:x"})],
        "gc": [seg("gc", 12, {"progress": True})],
        "verify": [seg("verify", 13, {"refs": ["bin/blob", README], "progress": True})],
        "verify-all": [seg("verify", 13)],
        "du": [seg("du", 14, {"prefix": "usr/share/", "path": True})],
        "refresh": [seg("refresh", 17)],
        "key": [seg(KEY, 18, {"action": "list"}), seg(KEY, 19, {"action": "add", "passphrase": "x"}),
                seg(KEY, 20, {"action": "remove", "key": "0" * 32}),
                seg(KEY, 21, {"action": "passwd", "passphrase": "y", "key": "z"})],
        "log": [seg(LOG, 22, {"name": "notes/a.txt", "limit": 2, "offset": 1}),
                seg("get", 23, {"ref": "notes/a.txt@{1}"})],
        # the harness's server has no shutdown: bad_request, and the daemon goes on
        "shutdown": [seg(SHUTDOWN, 24), seg("status", 25)],
        "metrics": [seg(METRICS, 26), seg(METRICS, 27, {"extra": [1, 2]})],
        "name": [seg(NAME, 28, {"ref": "alias", "name": "copied"}), seg("get", 29, {"ref": "copied"}),
                 seg(NAME, 30, {"ref": "copied", "name": "moved", "rename": True}),
                 seg("stat", 31, {"ref": "moved"}), seg("stat", 32, {"ref": "copied"})],
        "edit": [seg(EDIT, 33, {"ref": "alias", "tags": ["new"], "meta": {"k": "v"}}),
                 seg(EDIT, 34, {"ref": "alias", "untags": ["new", "x"], "unmeta": ["k"]}),
                 seg("stat", 35, {"ref": "alias"})],
        "raw-frame": [seg(RAW_FRAME, 0, mp({"id": 15, "op": "no_such_op"}))],
        "raw-bytes": [seg(RAW_BYTES, 0, b"\x00\x10\x00\x01" + mp({"id": 16, "op": "status"}))],
        # an add, then reads of it, its deletion and a gc, pipelined
        "lifecycle": [seg("add", 1, {"name": "tmp/x", "data": b"short lived"}),
                      seg("delete", 2, {"ref": "bin/blob"}),
                      seg("gc", 3),
                      seg("stat", 4, {"ref": "tmp/x"}),
                      seg("verify", 5),
                      seg("list", 6, {"names": True})],
        # more than the 1 MiB a get may queue: the stream waits for the client
        "get-big": [seg("get", 1, {"ref": "big/periodic"}), seg("get", 2, {"ref": BIG[:8]}),
                    seg("get", 3, {"ref": "big/periodic", "offset": 1 << 20, "length": 300000})],
        "verify-big": [seg("verify", 1, {"refs": ["big/periodic"]})],
        "ambiguous": [seg("get", 1, {"ref": PAIR}), seg("stat", 2, {"ref": PAIR.upper()}),
                      seg("delete", 3, {"ref": PAIR, "dry_run": True}),
                      seg("verify", 4, {"refs": [PAIR]})],
        # more requests than the daemon takes in flight: it stops reading for a while
        "inflight": [seg("status", i) for i in range(1, 71)],
        # frames the daemon answers with id 0 or without looking at the op, then an empty one
        "bad-frames": [seg(RAW_FRAME, 0, mp({"id": 1})), seg(RAW_FRAME, 0, mp({"id": 2, "op": 5})),
                       seg(RAW_FRAME, 0, mp({"op": "status"})),
                       seg(RAW_FRAME, 0, mp({"id": "x", "op": "status"})),
                       seg(RAW_FRAME, 0, mp([1, 2])), seg(RAW_FRAME, 0, b"\x81\x01\x02"),
                       seg(RAW_BYTES, 0, b"\x00\x00\x00\x00")],
        "bad-msgpack": [seg(RAW_FRAME, 0, b"\x82\xa2id\x01\xa2op\xc1")],
        # the client goes away in the middle of an add stream, a get stream, a gc and a verify
        "hang-up-add": [seg("add", 1, {"name": "x", "more": True, "data": b"part one"}),
                        seg("data", 1, {"more": True, "data": b"part two"}), seg(HANG_UP, 0)],
        "hang-up-get": [seg("get", 1, {"ref": "big/periodic"}), seg(HANG_UP, 0)],
        "hang-up-jobs": [seg("gc", 1, {"progress": True}), seg("verify", 2, {"progress": True}),
                         seg("search", 3, {"query": "first"}), seg("list", 4, {"names": True}),
                         seg(HANG_UP, 0)],
        # a reused id, data for no stream, an id of 0, a mistyped field
        "mistakes": [seg("add", 1, {"more": True}),
                     seg("get", 1, {"ref": "alias"}),
                     seg("data", 2, {"data": b"x"}),
                     seg("status", 0),
                     seg("data", 1, {"data": "not bin", "more": False}),
                     seg("get", 3, {"ref": 7})],
        # a mistyped last data frame ends its add, and the id is used again at once
        "mistyped-last-data": [seg("add", 1, {"more": True, "data": b"part one"}),
                               seg("data", 1, {"data": 5}),
                               seg("add", 1, {"name": "again/x", "data": b"reused id"}),
                               seg("get", 1, {"ref": "again/x"})],
    }
    # one mistake a request, for each field of each op
    bad = {
        "hello": [{"versions": "1"}, {"versions": ["x"]}, {"versions": []}, {"versions": [0, 99]},
                  {"client": 5}, {"client": "c" * 4097}],
        "add": [{"name": 5}, {"name": "n\x00"}, {"mime": ""}, {"mime": "m" * 256}, {"tags": "x"},
                {"tags": [1]}, {"tags": [""]}, {"tags": ["t"] * 65}, {"meta": ["k"]},
                {"meta": {"k": 1}}, {"meta": {"": "v"}}, {"meta": {"k": "v\x00"}}, {"size": "1"},
                {"size": 3, "data": b"four"}, {"data": "str"}, {"more": "yes"}, {"heal": 1},
                {"heal": True, "name": "n"}, {"name": "n", "mode": 0o20644, "mtime": 0},
                {"name": "n", "mode": 0o100644}, {"name": "n", "mode": "644", "mtime": 0},
                {"mode": 0o100644, "mtime": 0}, {"name": "n", "mode": 0o100644, "mtime": 1.5},
                {"name": "n", "mode": 0o120777, "mtime": -1, "data": b"target"}],
        "data": [{"data": b"no stream"}],
        "get": [{"ref": 7}, {"ref": ""}, {"ref": "r" * 4097}, {"ref": "alias", "offset": "1"},
                {"ref": "alias", "length": -1}, {"ref": BLOB[:6]}, {"ref": "ffffffff"}],
        "delete": [{"ref": None}, {"ref": "alias", "dry_run": 1}, {"ref": "nothing"}],
        "list": [{"tag": 7}, {"tag": ""}, {"limit": "3"}, {"names": 1}, {"unnamed": "x"},
                 {"names": True, "unnamed": True}, {"prefix": "a"}, {"path": True}, {"after": "zz"},
                 {"after": "a" * 65}, {"names": True, "prefix": 5}, {"names": True, "after": 5},
                 {"names": True, "path": "x"}],
        "stat": [{"ref": b"bin"}, {}],
        "search": [{"query": 5}, {}, {"query": "x", "limit": 0}, {"query": "x", "limit": 1001},
                   {"query": "x", "offset": "1"}, {"query": "x", "tags": "t"}, {"query": "x", "tags": [""]},
                   {"query": "x", "name": ""}, {"query": "x", "mime": 5}, {"query": "x", "after": "1"},
                   {"query": "x", "before": 1.5}, {"query": "x", "fuzzy": 1}, {"query": '"open'},
                   {"query": "-only"}, {"query": "a\x00b"}],
        "gc": [{"progress": "x"}],
        "verify": [{"refs": "x"}, {"refs": [1]}, {"refs": [""]}, {"refs": ["r"] * 65},
                   {"refs": ["nothing"]}, {"progress": 2}],
        "du": [{"prefix": 5}, {"prefix": "p" * 4097}, {"path": "x"}],
        "name": [{"ref": "alias"}, {"ref": "alias", "name": ""}, {"ref": "alias", "name": 5},
                 {"ref": "alias", "name": "n", "rename": 1}, {"ref": BLOB, "name": "n", "rename": True},
                 {"ref": "alias", "name": "alias", "rename": True}, {"ref": "nothing", "name": "n"}],
        "edit": [{"ref": "alias"}, {"ref": "alias", "tags": "t"}, {"ref": "alias", "tags": [""]},
                 {"ref": "alias", "untags": [5]}, {"ref": "alias", "meta": {"k": 1}},
                 {"ref": "alias", "unmeta": ["k" * 257]}, {"ref": "nothing", "tags": ["t"]},
                 {"ref": "alias", "tags": ["t"] * 65}],
    }
    for op, fields in bad.items():
        seeds["bad-" + op] = [seg(op, i + 1, f) for i, f in enumerate(fields)]
    return {k: SEP.join(v) for k, v in seeds.items()}


def dispatch_dict():
    """tests/fuzz/fuzz-dispatch.dict: the field names and values the ops read, as msgpack."""
    keys = ["id", "op", "ref", "name", "mime", "tags", "meta", "size", "data", "more", "offset",
            "length", "dry_run", "tag", "limit", "after", "before", "names", "unnamed", "prefix",
            "path", "query", "fuzzy", "progress", "refs", "versions", "client", "heal", "mode",
            "mtime", "rename", "untags", "unmeta"]
    values = [mp(k) for k in keys] + [mp(op) for op in OPS + ["key", "log", "metrics", "name", "edit"]]
    values += [mp(v) for v in ("notes/a.txt", "alias", "bin/blob", "big/periodic", "usr/share/",
                               A1[:8], README[:12], BIG, PAIR, "tag:x", "OR", "NOT", '"', "*",
                               True, False, None, 0, 1, 1000, 1001, 1 << 20, (1 << 64) - 1,
                               b"", [], {})]
    values += [b"\xd0\xff", b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", SEP]
    lines = ["# fuzz-dispatch's dictionary, written by make-seeds.py: msgpack of the fields",
             "# and values the ops read, and the segment separator."]
    for v in values:
        lines.append('"%s"' % "".join("\\x%02x" % b for b in v))
    return "\n".join(lines) + "\n"


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def records(pack):
    """(offset, type, id, payload) of each record of an unsealed pack."""
    off = 16
    while off + 44 <= len(pack):
        rtype = pack[off]
        (length,) = struct.unpack(">I", pack[off + 4:off + 8])
        yield off, rtype, pack[off + 12:off + 44], pack[off + 44:off + 44 + length]
        off += 44 + length


def packs():
    with open(os.path.join(HERE, "corpus", "pack", "real-unsealed"), "rb") as f:
        pack = f.read()
    index = b"".join(struct.pack(">BBHIQII", rtype, 0, 0, 44 + len(payload), off, 0, len(payload)) + rid
                     for off, rtype, rid, payload in records(pack))
    count = len(index) // 56
    trailer = struct.pack(">QII", len(pack), count, crc32c(index)) + pack[8:16] + b"cRnPIDX1"
    return {"sealed": pack + index + trailer, "torn": pack[:len(pack) - 50],
            "header-only": pack[:16]}


def record_payloads():
    with open(os.path.join(HERE, "corpus", "pack", "real-unsealed"), "rb") as f:
        pack = f.read()
    seeds = {}
    for off, rtype, _, payload in records(pack):
        # the harness's first byte picks the type: 0 block, 1 manifest, 2 entry
        seeds["%d-type%d" % (off, rtype)] = bytes([rtype - 1]) + payload
    return seeds


# -- fuzz-gcmark: the shared bucket's gc objects (daemon/format/gcmark.h) --
W, X = "00a1b2c3d4e5f607", "1122334455667788"
GCMARK = {
    "mark": ("cairn gc mark 1\nwriter %s\ngen 0000000000000003\n"
             "pack packs/%s-0000000000000001\npack packs/%s-0000000000000002\n"
             "copy packs/%s-0000000000000009\n" % (W, W, W, W)).encode(),
    "mark-legacy": ("cairn gc mark 1\nwriter %s\ngen 0000000000000001\n"
                    "pack packs/0000000000000004\n" % W).encode(),
    "done": ("cairn gc done 1\nwriter %s\ngen 0000000000000003\n"
             "copy packs/%s-000000000000000a\n" % (W, W)).encode(),
    "empty-mark": ("cairn gc mark 1\nwriter %s\ngen 0000000000000002\n" % W).encode(),
    "bad-key": ("cairn gc mark 1\nwriter %s\ngen 0000000000000002\npack chunks/ab\n" % W).encode(),
    "key-mark": ("gc/%s-0000000000000003" % W).encode(),
    "key-done": ("gc/%s-0000000000000003.done" % W).encode(),
    "key-ack": ("gc/%s-0000000000000003.ack-%s" % (W, X)).encode(),
    "key-lock": ("locks/gc-%s" % W).encode(),
}


# -- fuzz-keys: an encrypted store's key and config objects (daemon/crypto/keys.h) --
SALT = "5a" * 32
DATA = "c3" * 92  # nonce, sealed 64-byte master key, tag: not a wrapping of anything


def key_object(n=1024, r=1, p=1, salt=SALT, data=DATA, extra=""):
    return ('{"cairn_key":1,"kdf":"scrypt","N":%d,"r":%d,"p":%d,"salt":"%s","aead":"aes-256-gcm",'
            '"data":"%s","created":1700000000%s}' % (n, r, p, salt, data, extra)).encode()


KEYS = {
    "key": key_object(),
    "key-default-cost": key_object(n=32768, r=8),
    "key-huge-n": key_object(n=1 << 30),
    "key-n-not-power": key_object(n=1000),
    "key-short-salt": key_object(salt="5a" * 31),
    "key-upper-hex": key_object(data="C3" * 92),
    "key-duplicate": key_object(extra=',"N":2048'),
    "key-other-kdf": key_object().replace(b"scrypt", b"argon2"),
    "config": b'{"cairn_store":1,"encryption":"aes-256-gcm"}',
    "config-off": b'{"cairn_store":1,"encryption":"off"}',
    "config-bad": b'{"cairn_store":2,"encryption":"rot13"}',
    "key-name": b"keys/0123456789abcdef0123456789abcdef",
    "key-name-short": b"keys/0123456789abcdef",
}


# -- fuzz-metrics-http: request heads the metrics listener reads --
METRICS_HTTP = {
    "get": b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: */*\r\n\r\n",
    "head": b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n",
    "post": b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    "path": b"GET /metrics/../x HTTP/1.1\n\n",
    "http09": b"GET /metrics\r\n\r\n",
    "spaces": b"GET  /metrics  HTTP/1.1\r\n\r\n",
    "empty": b"\r\n\r\n",
}


def write(name, seeds):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.unlink(os.path.join(d, f))
    for k, v in seeds.items():
        with open(os.path.join(d, "seed-" + k), "wb") as f:
            f.write(v)


def main():
    write("frame", requests())
    write("reply", replies())
    write("query", QUERIES)
    write("config", CONFIGS)
    write("url", URLS)
    write("s3-xml", XML)
    write("sigv4", SIGV4)
    write("s3-creds", CREDS)
    write("mcp-input", MCP)
    write("pack", packs())
    write("record", record_payloads())
    write("gcmark", GCMARK)
    write("keys", KEYS)
    write("dispatch", dispatch())
    write("metrics-http", METRICS_HTTP)
    with open(os.path.join(HERE, "fuzz-dispatch.dict"), "w") as f:
        f.write(dispatch_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
