#!/usr/bin/env python3
"""Deduplication, compression, integrity, gc and index rebuild through the
real `cairnd` and `cairn`.

Chunk ids are predicted with a reference implementation of cairn's
content-defined chunking (FastCDC as documented in compress/cdc.h, default
parameters), so tests can name the exact chunk objects a document is made of
(DATA_DIR/objects/chunks/xx/<sha256>) and check the daemon cuts where the
format says, also across its internal 1 MiB segments.
"""

import glob
import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

MiB = ct.MiB
KiB = 1024
CDC_MIN = 16 * KiB
CDC_AVG = 64 * KiB
CDC_MAX = 256 * KiB
HEADER = 16  # "cRnO", version, algorithm, 2 reserved, raw size u64 BE


# --------------------------------------------------------------------------
# reference chunker (compress/cdc.c's documented algorithm)
# --------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _gear_table():
    state = 0x636169726E636463  # "cairncdc"
    table = []
    for _ in range(256):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        table.append(z ^ (z >> 31))
    return table


GEAR = _gear_table()


def _spread_mask(bits):
    m = 0
    for i in range(bits):
        m |= 1 << (63 - 2 * i)
    return m


def ref_cut_lengths(data, mn=CDC_MIN, avg=CDC_AVG, mx=CDC_MAX):
    """Chunk lengths of `data` (FastCDC, normalized level 2, spread masks)."""
    bits = avg.bit_length() - 1
    mask_small, mask_large = _spread_mask(bits + 2), _spread_mask(bits - 2)
    gear = GEAR
    out = []
    off = 0
    total = len(data)
    mv = memoryview(data)
    while off < total:
        n = min(total - off, mx)
        if n <= mn:
            out.append(n)
            break
        cut = n
        fp = 0
        normal = min(avg, n)
        found = False
        i = mn
        for b in mv[off + mn:off + normal]:
            fp = ((fp << 1) + gear[b]) & _M64
            i += 1
            if not fp & mask_small:
                cut = i
                found = True
                break
        if not found:
            for b in mv[off + i:off + n]:
                fp = ((fp << 1) + gear[b]) & _M64
                i += 1
                if not fp & mask_large:
                    cut = i
                    break
        out.append(cut)
        off += cut
    return out


def ref_chunks(data):
    """[(sha256 hex, length)] of the chunks `data` is cut into."""
    out = []
    off = 0
    for n in ref_cut_lengths(data):
        out.append((hashlib.sha256(data[off:off + n]).hexdigest(), n))
        off += n
    return out


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def text_bytes(size, seed):
    words = ("cairn stores chunks by content the daemon keeps manifests zstd compresses "
             "repetitive text very well while random bytes stay as they are").split()
    rnd = random.Random(seed)
    parts = []
    n = 0
    while n < size:
        line = " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 14))) + ".\n"
        parts.append(line)
        n += len(line)
    return "".join(parts).encode()[:size]


def chunk_path(d, hexid):
    return os.path.join(d.data_dir, "objects", "chunks", hexid[:2], hexid)


def chunk_files(d):
    """{hex: file size} of every chunk object on disk."""
    root = os.path.join(d.data_dir, "objects", "chunks")
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if ct.is_hash(f):
                out[f] = os.path.getsize(os.path.join(dirpath, f))
    return out


def read_header(path):
    with open(path, "rb") as f:
        h = f.read(HEADER)
    if len(h) != HEADER:
        raise AssertionError("%s: %d bytes, shorter than the object header" % (path, len(h)))
    magic, version, algo, reserved, raw = struct.unpack(">4sBBHQ", h)
    return magic, version, algo, reserved, raw


def status(d):
    [st] = ct.parse_json_lines(d.cli("--json", "status").stdout)
    return st


def stat(d, ref):
    [st] = ct.parse_json_lines(d.cli("--json", "stat", ref).stdout)
    return st


def add(d, content, *opts):
    p = d.cli("add", *opts, "-", input=content)
    [(h, _)] = ct.parse_add(p.stdout)
    if h != ct.sha256_hex(content):
        raise AssertionError("add returned %s for content hashing to %s" % (h, ct.sha256_hex(content)))
    return h


def add_file(d, path, *opts):
    p = d.cli("add", *opts, path)
    [(h, _)] = ct.parse_add(p.stdout)
    return h


def get_sha(d, ref, tmp):
    out = os.path.join(tmp, "get.out")
    d.cli("get", "-o", out, ref)
    try:
        return ct.sha256_file(out), os.path.getsize(out)
    finally:
        os.unlink(out)


def flip_byte(path, offset):
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def parse_verify_text(stdout):
    """-> ([(chunk, error, [(hash, name)])], (checked, bytes, bad))"""
    bad = []
    summary = None
    for line in stdout.decode().splitlines():
        if line.startswith("bad chunk "):
            rest = line[len("bad chunk "):]
            hexid, _, err = rest.partition(" ")
            if not (ct.is_hash(hexid) and err.startswith("(") and err.endswith(")")):
                raise AssertionError("verify printed %r" % line)
            bad.append((hexid, err[1:-1], []))
        elif line.startswith("  used by "):
            h, sep, name = line[len("  used by "):].partition("  ")
            if not bad or not sep or not ct.is_hash(h):
                raise AssertionError("verify printed %r" % line)
            bad[-1][2].append((h, name))
        elif line.startswith("checked "):
            # checked N chunks (B bytes): K bad
            parts = line.replace("(", " ").replace(")", " ").replace(":", " ").split()
            try:
                summary = (int(parts[1]), int(parts[3]), int(parts[5]))
            except (IndexError, ValueError):
                raise AssertionError("verify printed %r" % line)
            if parts[2] != "chunks" or parts[4] != "bytes" or parts[6] != "bad":
                raise AssertionError("verify printed %r" % line)
        else:
            raise AssertionError("verify printed an unexpected line %r" % line)
    if summary is None:
        raise AssertionError("verify printed no 'checked ...' line: %r" % stdout)
    return bad, summary


class DedupCase(unittest.TestCase):
    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        self.d = ct.Daemon(self)
        self.d.start()

    def write(self, name, content):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def assert_disk_matches_status(self, st=None):
        """stored_bytes and chunks agree with the chunk objects on disk."""
        st = st or status(self.d)
        files = chunk_files(self.d)
        self.assertEqual(st["chunks"], len(files), "status chunks vs chunk files on disk")
        self.assertEqual(st["stored_bytes"], sum(files.values()),
                         "status stored_bytes vs the size of the chunk files on disk")
        return files


# --------------------------------------------------------------------------
# deduplication and compression
# --------------------------------------------------------------------------


class BigFileDedup(DedupCase):
    """Uses one 100 MiB random file, written once for the class."""

    @classmethod
    def setUpClass(cls):
        cls.cls_tmp = ct.make_tempdir(None, prefix="cairn-dedup-")
        cls.big = os.path.join(cls.cls_tmp, "big.bin")
        cls.big_sha = ct.write_random_file(cls.big, 100 * MiB)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cls_tmp, True)

    def test_same_100mib_file_twice_stored_once(self):
        h1 = add_file(self.d, self.big, "-n", "first.bin")
        self.assertEqual(h1, self.big_sha)
        st1 = status(self.d)
        self.assertGreaterEqual(st1["stored_bytes"], 100 * MiB)  # random: stored raw
        self.assertGreater(st1["chunks"], 100 * MiB // CDC_MAX)
        files1 = self.assert_disk_matches_status(st1)

        h2 = add_file(self.d, self.big, "-n", "second.bin")
        self.assertEqual(h2, h1)
        st2 = status(self.d)
        for key in ("stored_bytes", "unique_bytes", "chunks", "documents", "logical_bytes"):
            self.assertEqual(st2[key], st1[key], "%s changed by adding the same content again" % key)
        self.assertEqual(chunk_files(self.d), files1, "chunk objects changed by the second add")
        # both names work and return the same bytes
        self.assertEqual(get_sha(self.d, "second.bin", self.tmp), (self.big_sha, 100 * MiB))
        self.assertEqual(get_sha(self.d, "first.bin", self.tmp), (self.big_sha, 100 * MiB))
        names = stat(self.d, h1).get("names")
        self.assertEqual(sorted(names or []), ["first.bin", "second.bin"])
        self.d.stop()

    def test_near_duplicate_document_dedup_ratio_about_2(self):
        """Two different documents sharing all but their tail: chunks stored once."""
        h1 = add_file(self.d, self.big, "-n", "orig.bin")
        st1 = status(self.d)
        tail = os.urandom(10)
        copy = os.path.join(self.tmp, "copy.bin")
        shutil.copyfile(self.big, copy)
        with open(copy, "ab") as f:
            f.write(tail)
        h2 = add_file(self.d, copy, "-n", "copy.bin")
        self.assertNotEqual(h1, h2)
        st2 = status(self.d)
        self.assertEqual(st2["documents"], 2)
        self.assertEqual(st2["logical_bytes"], 200 * MiB + 10)
        grown = st2["stored_bytes"] - st1["stored_bytes"]
        # only the last chunk differs (it may split in two)
        self.assertLessEqual(grown, CDC_MAX + 10 + 2 * HEADER,
                             "a 10-byte longer copy stored %d new bytes" % grown)
        self.assertLessEqual(st2["chunks"] - st1["chunks"], 2)
        self.assertTrue(1.95 <= st2["dedup_ratio"] <= 2.05, "dedup_ratio %r" % st2["dedup_ratio"])
        self.assertAlmostEqual(st2["dedup_ratio"], st2["logical_bytes"] / st2["unique_bytes"], places=3)
        self.assert_disk_matches_status(st2)
        digest = ct.sha256_file(copy)
        os.unlink(copy)
        self.assertEqual(get_sha(self.d, "copy.bin", self.tmp), (digest, 100 * MiB + 10))
        self.d.stop()

    def test_1mib_inserted_in_the_middle_stores_little(self):
        add_file(self.d, self.big, "-n", "orig.bin")
        st1 = status(self.d)
        files1 = chunk_files(self.d)
        edited = os.path.join(self.tmp, "edited.bin")
        h = hashlib.sha256()
        with open(self.big, "rb") as src, open(edited, "wb") as dst:
            for piece in (src.read(50 * MiB + 12345), os.urandom(MiB), src.read()):
                h.update(piece)
                dst.write(piece)
        digest = h.hexdigest()
        self.assertEqual(add_file(self.d, edited, "-n", "edited.bin"), digest)
        st2 = status(self.d)
        grown = st2["stored_bytes"] - st1["stored_bytes"]
        self.assertLess(grown, 3 * MiB, "inserting 1 MiB stored %d new bytes" % grown)
        self.assertGreaterEqual(grown, MiB, "the inserted random MiB must be stored")
        files2 = self.assert_disk_matches_status(st2)
        self.assertTrue(set(files1) <= set(files2))
        self.assertEqual(get_sha(self.d, "edited.bin", self.tmp), (digest, 101 * MiB))
        self.assertEqual(get_sha(self.d, "orig.bin", self.tmp), (self.big_sha, 100 * MiB))
        self.d.stop()


class ChunkBoundaries(DedupCase):
    def test_roundtrip_sizes_around_chunk_boundaries(self):
        sizes = [0, 1, CDC_MIN - 1, CDC_MIN, CDC_MIN + 1, CDC_AVG, CDC_MAX - 1, CDC_MAX,
                 CDC_MAX + 1, 2 * CDC_MAX - 1, 2 * CDC_MAX, 2 * CDC_MAX + 1,
                 MiB - 1, MiB, MiB + 1, 3 * MiB + 7]
        docs = [("random-%d" % n, os.urandom(n)) for n in sizes]
        # no content-defined cut points at all: every chunk ends at max, across
        # the daemon's 1 MiB segments; the repeated chunk is stored once
        docs += [("zeros-%d" % n, bytes(n)) for n in (CDC_MAX + 1, MiB + 1, 2 * MiB + CDC_MAX)]
        expected = {}
        for name, content in docs:
            with self.subTest(doc=name):
                h = add(self.d, content, "-n", name)
                got = self.d.cli("get", name).stdout
                self.assertEqual(len(got), len(content))
                self.assertEqual(ct.sha256_hex(got), ct.sha256_hex(content), "content differs")
                ref = ref_chunks(content)
                st = stat(self.d, h)
                self.assertEqual(st.get("size"), len(content))
                self.assertEqual(st.get("chunks"), len(ref),
                                 "chunk count differs from the reference chunker")
                for i, (hexid, n) in enumerate(ref):
                    path = chunk_path(self.d, hexid)
                    self.assertTrue(os.path.exists(path),
                                    "chunk %d (%d bytes at the reference cut) has no object %s"
                                    % (i, n, path))
                    magic, version, algo, reserved, raw = read_header(path)
                    self.assertEqual((magic, version, reserved, raw), (b"cRnO", 1, 0, n))
                    if name.startswith("random"):
                        self.assertEqual(algo, 0, "random data should be stored raw")
                        self.assertEqual(os.path.getsize(path), HEADER + n)
                    expected[hexid] = n
        st = status(self.d)
        files = self.assert_disk_matches_status(st)
        self.assertEqual(set(files), set(expected), "chunk objects differ from the reference chunks")
        self.assertEqual(st["unique_bytes"], sum(expected.values()))
        self.assertEqual(st["logical_bytes"], sum(len(c) for _, c in docs))
        # everything again, by hash, after all the adds
        for name, content in docs:
            self.assertEqual(self.d.cli("get", ct.sha256_hex(content)).stdout, content, name)
        self.d.stop()


class Compression(DedupCase):
    def test_text_compresses_random_stays_raw(self):
        text = text_bytes(8 * MiB, 1)
        ht = add(self.d, text, "-n", "text.txt")
        st = status(self.d)
        self.assertGreater(st["compression_ratio"], 2.0, st)
        self.assertAlmostEqual(st["compression_ratio"], st["unique_bytes"] / st["stored_bytes"], places=3)
        s = stat(self.d, ht)
        self.assertLess(s["stored_size"] * 2, s["size"], s)
        text_files = self.assert_disk_matches_status(st)
        for hexid in text_files:
            self.assertEqual(read_header(chunk_path(self.d, hexid))[2], 1, "text chunk not zstd")

        rnd = os.urandom(8 * MiB)
        hr = add(self.d, rnd, "-n", "random.bin")
        s = stat(self.d, hr)
        self.assertGreaterEqual(s["stored_size"], s["size"])
        self.assertLessEqual(s["stored_size"], s["size"] + HEADER * s["chunks"],
                             "incompressible data should be stored raw: %r" % s)
        files = self.assert_disk_matches_status()
        for hexid in set(files) - set(text_files):
            _, _, algo, _, raw = read_header(chunk_path(self.d, hexid))
            self.assertEqual(algo, 0, "random chunk stored compressed")
            self.assertEqual(files[hexid], HEADER + raw)
        self.assertEqual(self.d.cli("get", "text.txt").stdout, text)
        self.assertEqual(self.d.cli("get", "random.bin").stdout, rnd)
        self.d.stop()


# --------------------------------------------------------------------------
# integrity
# --------------------------------------------------------------------------


class Integrity(DedupCase):
    def raw_get(self, ref):
        with self.d.connect() as c:
            rid = c.send_request("get", ref=ref)
            frames = []
            while True:
                msg = c.recv_for(rid)
                frames.append(msg)
                if msg.get("ok") is False or not msg.get("more"):
                    break
            # the connection stays usable
            self.assertIs(c.call("status").get("ok"), True)
        return frames

    def assert_raw_get_integrity(self, ref, content):
        frames = self.raw_get(ref)
        last = frames[-1]
        self.assertIs(last.get("ok"), False, "get of a corrupted document did not fail: %r"
                      % ct.short(last))
        self.assertEqual(ct.error_code(last), "integrity", ct.short(last))
        received = b"".join(f.get("data", b"") for f in frames[:-1])
        for f in frames[:-1]:
            self.assertIs(f.get("ok"), True)
            self.assertIs(f.get("more"), True)
        self.assertTrue(content.startswith(received),
                        "get sent %d bytes that are not a prefix of the document" % len(received))
        self.assertLess(len(received), len(content))

    def assert_cli_get_integrity(self, ref, content):
        p = self.d.cli("get", ref, check_exit=1)
        self.assertTrue(content.startswith(p.stdout), "get printed bytes that are not the document's")
        self.assertLess(len(p.stdout), len(content))
        ct.assert_cli_error(self, p)
        self.assertIn(b"integrity", p.stderr)
        out = os.path.join(self.tmp, "o.bin")
        self.d.cli("get", "-o", out, ref, check_exit=1)
        self.assertFalse(os.path.exists(out), "a failed get -o left a file")

    def test_flipped_byte_fails_get_and_verify_names_users(self):
        a = os.urandom(MiB + MiB // 2)
        b = a[:700 * KiB] + os.urandom(600 * KiB)
        c = os.urandom(300 * KiB)
        ha = add(self.d, a, "-n", "a.bin")
        hb = add(self.d, b, "-n", "b.bin")
        hc = add(self.d, c, "-n", "c.bin")
        ref_a, ref_b, ref_c = ref_chunks(a), ref_chunks(b), ref_chunks(c)
        # a chunk both use, not the first: a get streams the first chunk, then fails
        bad, bad_len = ref_a[1]
        self.assertIn((bad, bad_len), ref_b, "test setup: a and b should share a's second chunk")
        path = chunk_path(self.d, bad)
        self.assertTrue(os.path.exists(path))
        flip_byte(path, HEADER + bad_len // 2)

        self.assert_cli_get_integrity("a.bin", a)
        self.assert_cli_get_integrity(hb, b)
        self.assert_raw_get_integrity(ha, a)
        self.assert_raw_get_integrity("b.bin", b)
        self.assertEqual(self.d.cli("get", "c.bin").stdout, c)

        st = status(self.d)
        p = self.d.cli("verify", check_exit=1)
        listed, summary = parse_verify_text(p.stdout)
        self.assertEqual([(x[0], x[1]) for x in listed], [(bad, "integrity")])
        self.assertEqual(sorted(listed[0][2]), sorted([(ha, "a.bin"), (hb, "b.bin")]))
        self.assertEqual(summary, (st["chunks"], st["unique_bytes"], 1))
        ct.assert_cli_error(self, p)

        p = self.d.cli("--json", "verify", check_exit=1)
        [js] = ct.parse_json_lines(p.stdout)
        self.assertEqual(js.get("bad_count"), 1)
        self.assertEqual(js.get("chunks_checked"), st["chunks"])
        self.assertEqual(js.get("bytes_checked"), st["unique_bytes"])
        [entry] = js.get("bad")
        self.assertEqual((entry.get("chunk"), entry.get("error")), (bad, "integrity"))
        self.assertEqual(sorted((x.get("hash"), x.get("name")) for x in entry.get("documents")),
                         sorted([(ha, "a.bin"), (hb, "b.bin")]))

        # verify REF: only the chunks of those documents
        p = self.d.cli("verify", "c.bin")
        listed, summary = parse_verify_text(p.stdout)
        self.assertEqual(listed, [])
        self.assertEqual(summary, (len(set(ref_c)), len(c), 0))
        p = self.d.cli("verify", hc[:12], check_exit=0)
        p = self.d.cli("verify", "b.bin", check_exit=1)
        listed, summary = parse_verify_text(p.stdout)
        self.assertEqual([x[0] for x in listed], [bad])
        self.assertEqual(summary[0], len(set(ref_b)))
        self.d.cli("verify", "c.bin", "a.bin", check_exit=1)

        # repaired on disk: everything works again
        flip_byte(path, HEADER + bad_len // 2)
        self.assertEqual(self.d.cli("get", "a.bin").stdout, a)
        self.assertEqual(self.d.cli("get", "b.bin").stdout, b)
        p = self.d.cli("verify")
        self.assertEqual(parse_verify_text(p.stdout)[1][2], 0)
        self.d.assert_healthy()
        self.d.stop()

    def test_missing_truncated_and_bad_header_chunks(self):
        docs = {n: os.urandom(600 * KiB) for n in ("missing", "truncated", "header", "zstd", "swapped")}
        docs["zstd"] = text_bytes(600 * KiB, 7)
        hashes = {n: add(self.d, c, "-n", n) for n, c in docs.items()}
        victims = {n: ref_chunks(c)[1][0] for n, c in docs.items()}
        os.unlink(chunk_path(self.d, victims["missing"]))
        os.truncate(chunk_path(self.d, victims["truncated"]), 10)
        flip_byte(chunk_path(self.d, victims["header"]), 0)  # the magic
        zpath = chunk_path(self.d, victims["zstd"])
        self.assertEqual(read_header(zpath)[2], 1)
        flip_byte(zpath, os.path.getsize(zpath) // 2)  # inside the zstd body
        # a valid object, but of another chunk
        spath = chunk_path(self.d, victims["swapped"])
        os.chmod(spath, 0o644)
        shutil.copyfile(chunk_path(self.d, ref_chunks(docs["swapped"])[0][0]), spath)
        for n, content in docs.items():
            with self.subTest(doc=n):
                self.assert_cli_get_integrity(n, content)
                self.assert_raw_get_integrity(hashes[n], content)
        p = self.d.cli("--json", "verify", check_exit=1)
        [js] = ct.parse_json_lines(p.stdout)
        self.assertEqual(js.get("bad_count"), len(docs))
        got = {e["chunk"]: (e["error"], [(x["hash"], x["name"]) for x in e["documents"]])
               for e in js.get("bad", [])}
        self.assertEqual(got, {victims[n]: ("integrity", [(hashes[n], n)]) for n in docs})
        self.d.assert_healthy()
        self.d.stop()


# --------------------------------------------------------------------------
# gc
# --------------------------------------------------------------------------


class GarbageCollection(DedupCase):
    def gc(self):
        return ct.parse_kv(self.d.cli("gc").stdout)

    def test_delete_and_gc_frees_space_shared_document_survives(self):
        a = os.urandom(3 * MiB)
        b = a[:MiB + MiB // 2] + os.urandom(MiB)
        ha = add(self.d, a, "-n", "a.bin")
        hb = add(self.d, b, "-n", "b.bin")
        ids_a = {h for h, _ in ref_chunks(a)}
        ids_b = {h for h, _ in ref_chunks(b)}
        only_a = ids_a - ids_b
        self.assertTrue(only_a and ids_a & ids_b, "test setup: a and b should share some chunks")
        files = self.assert_disk_matches_status()
        self.assertEqual(set(files), ids_a | ids_b)

        res = self.gc()
        self.assertEqual((res.get("chunks_removed"), res.get("bytes_freed")), ("0", "0"))
        self.d.cli("rm", "a.bin")
        res = self.gc()
        self.assertEqual(int(res["chunks_removed"]), len(only_a))
        self.assertEqual(int(res["bytes_freed"]), sum(files[h] for h in only_a))
        for h in only_a:
            self.assertFalse(os.path.exists(chunk_path(self.d, h)), "chunk %s of a survived gc" % h)
        st = status(self.d)
        files = self.assert_disk_matches_status(st)
        self.assertEqual(set(files), ids_b)
        self.assertEqual(st["documents"], 1)
        self.assertEqual(self.d.cli("get", "b.bin").stdout, b)
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)
        self.d.cli("get", ha, check_exit=1)
        self.assertEqual(int(self.gc()["chunks_removed"]), 0)

        self.d.cli("rm", hb)
        res = self.gc()
        self.assertEqual(int(res["chunks_removed"]), len(ids_b))
        st = status(self.d)
        for key in ("documents", "logical_bytes", "unique_bytes", "stored_bytes", "chunks"):
            self.assertEqual(st[key], 0, "%s after deleting everything and gc: %r" % (key, st))
        self.assertEqual(chunk_files(self.d), {}, "chunk objects left after gc")
        self.d.cli("get", "b.bin", check_exit=1)
        self.d.stop()

    def test_gc_of_document_with_repeated_chunk(self):
        """A chunk that appears several times in one document is freed exactly when it goes."""
        z = bytes(3 * CDC_MAX)  # three identical max-size chunks
        hz = add(self.d, z, "-n", "zeros")
        other = bytes(CDC_MAX) + os.urandom(100 * KiB)  # shares the zero chunk
        ho = add(self.d, other, "-n", "other")
        self.assertEqual(stat(self.d, hz)["chunks"], 3)
        self.assertEqual(status(self.d)["chunks"], len({h for h, _ in ref_chunks(other)}))
        self.d.cli("rm", hz)
        self.assertEqual(int(self.gc()["chunks_removed"]), 0)
        self.assertEqual(self.d.cli("get", "other").stdout, other)
        self.d.cli("rm", ho)
        self.gc()
        self.assertEqual(status(self.d)["chunks"], 0)
        self.assertEqual(chunk_files(self.d), {})
        self.d.stop()

    def test_chunk_readded_while_gc_deletes_survives(self):
        """A document added while gc is deleting the objects of chunks it uses
        must keep them: an acknowledged add never loses data to gc."""
        for attempt, delay in enumerate((0.0, 0.002, 0.005, 0.01, 0.02)):
            big = os.urandom(30 * MiB)
            old = set(chunk_files(self.d))
            with self.d.connect() as c:
                r = c.add(big, name="big-%d" % attempt)
                self.assertIs(r.get("ok"), True, ct.short(r))
            # gc deletes in chunk id order: the largest id of this document goes last
            z = max(set(chunk_files(self.d)) - old)
            with open(chunk_path(self.d, z), "rb") as f:
                obj = f.read()
            self.assertEqual(obj[5], 0, "random chunk not stored raw")
            body = obj[HEADER:]
            self.assertEqual(ct.sha256_hex(body), z)
            with self.d.connect() as c:
                self.assertIs(c.call("delete", ref=r["hash"]).get("ok"), True)
            with self.d.connect() as cg, self.d.connect() as ca:
                gid = cg.send_request("gc")
                time.sleep(delay)
                ra = ca.add(body, name="z-%d" % attempt)  # exactly chunk z
                self.assertIs(ra.get("ok"), True, ct.short(ra))
                rg = cg.recv_for(gid, timeout=120)
                self.assertIs(rg.get("ok"), True, ct.short(rg))
                frames, got = ca.get(ra["hash"])
            self.assertIsNotNone(got, "attempt %d (add %.3f s after gc started): the document added "
                                 "during gc lost its chunk %s: %r"
                                 % (attempt, delay, z, ct.short(frames[-1])))
            self.assertEqual(got, body)
            self.assertTrue(os.path.exists(chunk_path(self.d, z)))
        self.assertEqual(self.d.cli("verify", check_exit=None).returncode, 0)
        self.assert_disk_matches_status()
        self.d.stop()

    def test_verify_during_gc_reports_no_false_corruption(self):
        """Chunks gc removes while a verify runs were collected, not corrupted:
        verify must not report them as bad."""
        keep = os.urandom(4 * MiB)
        hk = add(self.d, keep, "-n", "keep.bin")
        for attempt, delay in enumerate((0.0, 0.002, 0.01)):
            with self.d.connect() as c:
                r = c.add(os.urandom(30 * MiB), name="garbage-%d" % attempt)
                self.assertIs(r.get("ok"), True, ct.short(r))
                self.assertIs(c.call("delete", ref=r["hash"]).get("ok"), True)
            with self.d.connect() as cv, self.d.connect() as cg:
                vid = cv.send_request("verify")
                time.sleep(delay)
                gid = cg.send_request("gc")
                rg = cg.recv_for(gid, timeout=120)
                rv = cv.recv_for(vid, timeout=120)
            self.assertIs(rg.get("ok"), True, ct.short(rg))
            self.assertGreater(rg.get("chunks_removed", 0), 0)
            self.assertIs(rv.get("ok"), True, ct.short(rv))
            bad = rv.get("bad") or []
            self.assertEqual(rv.get("bad_count"), 0,
                             "attempt %d: verify running beside gc reported %d bad chunks in a store "
                             "without any corruption, e.g. %r"
                             % (attempt, rv.get("bad_count"), bad[:3]))
        self.assertEqual(self.d.cli("get", hk).stdout, keep)
        self.d.stop()

    def test_gc_racing_concurrent_adds(self):
        duration = 15.0
        seed = random.randrange(1 << 30)
        sys.stderr.write("gc race seed %d\n" % seed)
        pool = [random.Random(seed + i).randbytes(96 * KiB) for i in range(24)]
        lock = threading.Lock()
        live = {}          # hash -> content: acknowledged, not deleted
        deleted = set()
        errors = []
        stop = threading.Event()
        counts = {"adds": 0, "deletes": 0, "gcs": 0, "removed": 0}
        gc_started = threading.Condition()
        gc_gen = [0]

        def adder(tid):
            r = random.Random(seed * 7 + tid)
            transient = []  # deleted again soon
            n = 0

            def do_add(c, content, keep):
                reply = c.add(content, name="t%d-%d" % (tid, n), chunk=r.choice((65536, 262144)))
                if reply.get("ok") is not True:
                    raise AssertionError("add failed: %r" % ct.short(reply))
                h = reply.get("hash")
                if h != ct.sha256_hex(content):
                    raise AssertionError("add acknowledged hash %r" % h)
                with lock:
                    live[h] = content
                    counts["adds"] += 1
                if not keep:
                    transient.append(h)
                return h

            def do_delete(c, h):
                reply = c.call("delete", ref=h)
                if reply.get("ok") is not True:
                    raise AssertionError("delete failed: %r" % ct.short(reply))
                with lock:
                    del live[h]
                    deleted.add(h)
                    counts["deletes"] += 1

            try:
                with self.d.connect() as c:
                    while not stop.is_set():
                        n += 1
                        if r.random() < 0.5:
                            # fresh chunks that lose their only reference at once,
                            # then a kept document that wants some of them back
                            big = b"T %d/%d\n" % (tid, n) + os.urandom(r.randint(2 * MiB, 5 * MiB))
                            h = do_add(c, big, keep=False)
                            transient.remove(h)
                            do_delete(c, h)
                            # mostly: add it back just as the next gc starts
                            if r.random() < 0.8:
                                with gc_started:
                                    gen = gc_gen[0]
                                    gc_started.wait_for(lambda: gc_gen[0] != gen or stop.is_set(), 0.3)
                                time.sleep(r.uniform(0, 0.004))
                            start = r.randrange(len(big) // 2)
                            part = big[start:start + r.randint(200 * KiB, 800 * KiB)]
                            do_add(c, b"R %d/%d\n" % (tid, n) + part, keep=r.random() < 0.6)
                        else:
                            # documents made of a few shared random blocks
                            blocks = [pool[r.randrange(len(pool))] for _ in range(r.randint(2, 6))]
                            do_add(c, b"P %d/%d\n" % (tid, n) + b"".join(blocks), keep=r.random() < 0.2)
                        # keep few transient documents, so shared chunks keep losing
                        # their last reference and being wanted again
                        while len(transient) > 2 or (transient and r.random() < 0.3):
                            do_delete(c, transient.pop(r.randrange(len(transient))))
            except Exception as e:  # noqa: BLE001
                errors.append("adder %d: %r" % (tid, e))
                stop.set()

        def collector():
            try:
                r = random.Random(seed * 11)
                with self.d.connect() as c:
                    while not stop.is_set():
                        # now and then a pause, so unreferenced chunks pile up
                        # and a gc has many to delete while adds want them back
                        if r.random() < 0.5:
                            time.sleep(r.uniform(0, 0.1))
                        rid = c.send_request("gc")
                        with gc_started:
                            gc_gen[0] += 1
                            gc_started.notify_all()
                        reply = c.recv_for(rid, timeout=60)
                        if reply.get("ok") is not True:
                            raise AssertionError("gc failed: %r" % ct.short(reply))
                        with lock:
                            counts["gcs"] += 1
                            counts["removed"] += reply.get("chunks_removed", 0)
            except Exception as e:  # noqa: BLE001
                errors.append("gc: %r" % (e,))
                stop.set()

        threads = [threading.Thread(target=adder, args=(i,), daemon=True) for i in range(4)]
        threads.append(threading.Thread(target=collector, daemon=True))
        for t in threads:
            t.start()
        stop.wait(duration)
        stop.set()
        with gc_started:
            gc_started.notify_all()
        for t in threads:
            t.join(120)
            self.assertFalse(t.is_alive(), "a worker thread hangs")
        sys.stderr.write("gc race: %r, %d live\n" % (counts, len(live)))
        self.assertEqual(errors, [])
        self.assertGreater(counts["adds"], 50, "too few adds to mean anything: %r" % counts)
        self.assertGreater(counts["gcs"], 20, "too few gc runs: %r" % counts)
        self.assertGreater(counts["removed"], 0, "gc never removed anything: %r" % counts)

        def check_store(when):
            p = self.d.cli("verify", check_exit=None)
            lost = []
            with self.d.connect() as c:
                for h, content in live.items():
                    frames, got = c.get(h)
                    if got is None or ct.sha256_hex(got) != h:
                        lost.append((h, ct.short(frames[-1])))
                for h in list(deleted)[:50]:
                    frames, got = c.get(h)
                    self.assertEqual(ct.error_code(frames[-1]), "not_found",
                                     "%s: deleted document %s: %r" % (when, h, ct.short(frames[-1])))
            if p.returncode != 0 or lost:
                self.fail("%s: verify exited %d; %d of %d acknowledged, not deleted documents do "
                          "not round-trip, e.g. %r; verify said:\n%s"
                          % (when, p.returncode, len(lost), len(live), lost[:3],
                             p.stdout.decode()[-2000:]))

        check_store("right after the race")
        self.assertEqual(status(self.d)["documents"], len(live))
        with self.d.connect() as c:
            self.assertIs(c.call("gc").get("ok"), True)
        check_store("after a quiet gc")
        # with nothing running and every unreferenced chunk collected, the
        # chunk rows (all verified above) and the objects on disk agree
        self.assert_disk_matches_status()
        self.d.stop()


# --------------------------------------------------------------------------
# rebuilding the index from the objects
# --------------------------------------------------------------------------


class RebuildIndex(DedupCase):
    SEARCHES = ["zebraquartz", "tag:red", "tag:blue", "tag:green", "ada", "bob", "notes",
                "obliterated", "vanishingword", "version", "name:flip", "phoenixword", "cairn",
                "rev"]

    def snapshot(self, with_created=False):
        """Everything the index answers. `created` is left out unless asked
        for: test_rebuild_keeps_creation_times checks it on its own."""
        def strip(doc):
            return doc if with_created else {k: v for k, v in doc.items() if k != "created"}
        docs = ct.parse_json_lines(self.d.cli("--json", "ls").stdout)
        stats = {d["hash"]: strip(stat(self.d, d["hash"])) for d in docs}
        searches = {}
        for q in self.SEARCHES:
            hits = ct.parse_json_lines(self.d.cli("--json", "search", "-l", "1000", q).stdout)
            searches[q] = sorted((h.get("hash"), h.get("name")) for h in hits)
        st = status(self.d)
        totals = {k: st[k] for k in ("documents", "logical_bytes", "unique_bytes", "stored_bytes",
                                     "chunks")}
        return {"ls": sorted((strip(d) for d in docs), key=lambda d: d["hash"]), "stat": stats,
                "search": searches, "status": totals}

    def rebuild(self):
        """Stops the daemon, deletes the database, runs --rebuild-index (which
        must exist and succeed) and starts the daemon again."""
        d = self.d
        d.stop()
        dbs = glob.glob(os.path.join(d.data_dir, "cairn.db*"))
        self.assertIn(os.path.join(d.data_dir, "cairn.db"), dbs)
        for f in dbs:
            os.unlink(f)
        cmd = [ct.CAIRND, "--data-dir", d.data_dir, "--socket", d.socket_path, "--rebuild-index"]
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=d.env(), timeout=120 * ct.SLOW)
        except subprocess.TimeoutExpired:
            self.fail("cairnd --rebuild-index did not finish within 120 s")
        self.assertEqual(p.returncode, 0, "cairnd --rebuild-index exited %d (expected 0: rebuild the "
                         "database from the objects):\n%s" % (p.returncode, p.stdout.decode()[-3000:]))
        self.assertTrue(os.path.exists(os.path.join(d.data_dir, "cairn.db")),
                        "--rebuild-index wrote no database")
        d.start()

    def assert_same(self, before, after):
        self.assertEqual(sorted(after["stat"]), sorted(before["stat"]), "documents differ")
        for h in before["stat"]:
            self.assertEqual(after["stat"][h], before["stat"][h], "stat of %s differs" % h)
        self.assertEqual(after["ls"], before["ls"])
        for q in self.SEARCHES:
            self.assertEqual(after["search"][q], before["search"][q], "search %r differs" % q)
        self.assertEqual(after["status"], before["status"])

    def test_rebuild_index_restores_everything(self):
        d = self.d
        contents = {}

        def put(content, *opts):
            h = add(d, content, *opts)
            contents[h] = content
            return h

        v1 = put(b"notes version one\n", "-n", "notes.txt", "-t", "notes")
        v2 = put(b"notes version two\n", "-n", "notes.txt", "-m", "rev=2")
        v3 = put(b"notes version three\n", "-n", "notes.txt")
        big = os.urandom(2 * MiB + 5)
        hbig = put(big, "-n", "big.bin", "-t", "binary")
        zebra_text = b"the zebraquartz document mentions cairn twice: cairn\n" * 100
        zebra = put(zebra_text, "-n", "zebra.txt", "-t", "red", "-t", "blue",
                    "-m", "author=ada", "-m", "project=cairn", "--mime", "text/plain")
        # the same content again: a second name, a merged tag, a new and a changed meta value
        put(zebra_text, "-n", "zebra-alias.txt", "-t", "green", "-m", "reviewer=grace")
        put(zebra_text, "-m", "author=bob")
        # a name pointing at X, then Y, then X again
        x = put(b"flip content x\n", "-n", "flip.txt")
        put(b"flip content y\n", "-n", "flip.txt")
        put(b"flip content x\n", "-n", "flip.txt")
        # sharing chunks with big.bin; across a daemon restart
        d.restart()
        shared = put(big[:MiB] + b"tail", "-n", "shared.bin", "-t", "red")
        # deleted, then gc: chunks gone
        doomed1 = put(b"obliterated forever\n" + os.urandom(100 * KiB), "-n", "doomed1.txt")
        d.cli("rm", "doomed1.txt")
        d.cli("gc")
        # deleted, no gc: its objects are all still there
        doomed2 = put(b"vanishingword\n" + os.urandom(300 * KiB), "-n", "doomed2.txt",
                      "-t", "red", "-m", "author=ada")
        d.cli("rm", doomed2)
        # deleted, then added again
        phoenix = put(b"phoenixword rises\n", "-n", "phoenix.txt", "-t", "bird")
        d.cli("rm", phoenix)
        put(b"phoenixword rises\n", "-n", "phoenix.txt", "-t", "reborn")
        # the newest version of a name deleted: the name falls back
        d.cli("rm", v3)
        for h in (v3, doomed1, doomed2):
            del contents[h]

        self.assertEqual(d.cli("get", "notes.txt").stdout, b"notes version two\n")
        self.assertEqual(d.cli("get", "flip.txt").stdout, b"flip content x\n")
        before = self.snapshot()
        self.assertEqual(set(before["stat"]), set(contents))
        self.assertEqual(before["search"]["zebraquartz"], [(zebra, "zebra-alias.txt")])
        self.assertEqual(before["search"]["obliterated"], [])
        self.assertEqual(before["search"]["vanishingword"], [])
        self.assertEqual(before["stat"][zebra]["meta"],
                         {"author": "bob", "project": "cairn", "reviewer": "grace"})

        self.rebuild()
        after = self.snapshot()
        self.assert_same(before, after)
        # references, names and versions resolve as before
        for ref, want in (("notes.txt", b"notes version two\n"), (v1, b"notes version one\n"),
                          (v2, b"notes version two\n"), ("flip.txt", b"flip content x\n"),
                          ("phoenix.txt", b"phoenixword rises\n"), ("zebra.txt", zebra_text),
                          ("zebra-alias.txt", zebra_text), ("shared.bin", contents[shared]),
                          (hbig[:10], big)):
            self.assertEqual(d.cli("get", ref).stdout, want, ref)
        for ref in (v3, doomed1, doomed2, "doomed1.txt", "doomed2.txt"):
            d.cli("get", ref, check_exit=1)
        self.assertEqual(stat(d, "phoenix.txt").get("tags"), ["reborn"])
        self.assertEqual(stat(d, x).get("name"), "flip.txt")
        self.assertEqual(parse_verify_text(d.cli("verify").stdout)[1][2], 0)

        # the store keeps working: gc frees the deleted document's chunks, an add dedups
        res = ct.parse_kv(d.cli("gc").stdout)
        self.assertGreater(int(res["chunks_removed"]), 0, "doomed2's chunks were not left for gc")
        for h, content in contents.items():
            self.assertEqual(d.cli("get", h).stdout, content)
        st = status(d)
        put(big + b"more", "-n", "big2.bin", "-t", "late")
        self.assertLess(status(d)["stored_bytes"] - st["stored_bytes"], CDC_MAX + 100)
        self.assert_disk_matches_status()

        # and a second rebuild gives the same again
        before = self.snapshot()
        self.rebuild()
        self.assert_same(before, self.snapshot())
        d.stop()

    def test_rebuild_keeps_creation_times(self):
        """Creation times (`created`, Unix seconds) survive a rebuild: adds
        for a few seconds, so some commit close to a second boundary."""
        t0 = time.monotonic()
        n = 0
        with self.d.connect() as c:
            while time.monotonic() - t0 < 3.0:
                n += 1
                r = c.add(b"doc %d\n" % n, name="n%d" % n)
                self.assertIs(r.get("ok"), True, ct.short(r))
            before = {x["hash"]: x["created"] for x in c.list_all()}
        self.assertEqual(len(before), n)
        self.rebuild()
        with self.d.connect() as c:
            after = {x["hash"]: x["created"] for x in c.list_all()}
        self.assertEqual(set(after), set(before))
        moved = sorted((before[h], after[h]) for h in before if after[h] != before[h])
        self.assertEqual(moved, [], "%d of %d documents have another creation time after the "
                         "rebuild (before, after): %r" % (len(moved), n, moved[:10]))
        self.d.stop()


if __name__ == "__main__":
    ct.main()
