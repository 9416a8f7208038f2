#!/usr/bin/env python3
"""Deduplication, compression, integrity, gc and index rebuild through the
real `cairnd` and `cairn`, checked against the pack files on disk.

Chunk ids are predicted with a reference implementation of cairn's
content-defined chunking (FastCDC as documented in compress/cdc.h, default
parameters), and the packs (DATA_DIR/objects/packs/<writer>-<seq>) are read with the
reference reader packfmt.py, so the tests name the exact block records a
document's chunks live in, check the daemon cuts where the format says
(also across its internal 1 MiB segments), and damage chosen bytes on disk.

Most checks end in DedupCase.check_store(): the packs, the database's rows
(cairn.db, read-only) and `status` agree, every row names an intact record
that holds its chunk, and (where nothing was deleted) every chunk is stored
exactly once.
"""

import glob
import hashlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import packfmt as pf  # noqa: E402

MiB = ct.MiB
KiB = 1024
CDC_MIN = 16 * KiB
CDC_AVG = 64 * KiB
CDC_MAX = 256 * KiB
HEADER = pf.ENVELOPE_HEADER  # "cRnO", version, algorithm, 2 reserved, raw size u64 BE
BLOCK_RAW_MAX = MiB  # daemon/format/record.h RECORD_BLOCK_MAX
# A block record's bytes beyond its chunks': record header, count, envelope header.
BLOCK_OVERHEAD = pf.RECORD_HEADER + 4 + HEADER
# chunks.condemned of another writer's marked pack's rows (daemon/meta/db.h): still counted
CONDEMNED_MARKED = 2**63 - 1


def block_overhead(nchunks):
    return BLOCK_OVERHEAD + pf.BLOCK_ENTRY * nchunks


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


def write_config(directory, store):
    """A cairnd config file with these [store] keys; returns its path."""
    path = os.path.join(directory, "cairn.conf")
    with open(path, "w") as f:
        f.write("[store]\n")
        for k, v in store.items():
            f.write("%s = %s\n" % (k, v))
    return path


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


def gc(d):
    """`cairn gc`, its `key: value` lines as ints."""
    res = ct.parse_kv(d.cli("gc").stdout)
    want = ("packs_rewritten", "packs_deleted", "bytes_reclaimed", "bytes_dead", "chunks_removed")
    missing = [k for k in want if k not in res]
    if missing:
        raise AssertionError("gc printed no %s: %r" % (missing, res))
    return {k: int(res[k]) for k in want}


def settle(d, timeout=15 * ct.SLOW):
    """Waits until the daemon's background work is done: no pack is still
    being deleted (gc deletes a repacked pack after its reply, once nobody
    reads it), every pack row's size is its file's, nothing waits to be
    indexed, and all of that holds still for 0.1 s (an add whose client went
    away may still be writing). Returns quietly on timeout: the check that
    follows reports what still disagrees."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        rows = pf.db_rows(d.data_dir)["packs"]
        files = {seq: os.path.getsize(p) for seq, p in pf.list_packs(d.data_dir)}
        quiet = (all(state != pf.PACK_DELETING for _, state in rows.values())
                 and {seq: size for seq, (size, _) in rows.items()} == files
                 and status(d)["index_pending"] == 0)
        if quiet and files == last:
            return
        last = files if quiet else None
        if time.monotonic() > deadline:
            return
        time.sleep(0.1 if quiet else 0.05)


def block_records(packs):
    """[(pack seq, offset, record id hex)] of every block record."""
    return [(p.seq, r.offset, r.id_hex) for p in packs for r in p.records if r.type == pf.REC_BLOCK]


def places(sc, hexid):
    """The stored copies of a chunk (a StoreCheck's view), failing when there are none."""
    got = sc.copies.get(hexid)
    if not got:
        raise AssertionError("chunk %s is in no block record on disk" % hexid)
    return got


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



def verify_json(testcase, stdout):
    """verify --json with bad chunks: its result, then the error line with code integrity."""
    [js, err] = ct.parse_json_lines(stdout)
    testcase.assertEqual((err.get("ok"), err.get("error", {}).get("code")), (False, "integrity"),
                         err)
    return js

class DedupCase(unittest.TestCase):
    # [store] keys for a config file; None: cairnd's defaults
    CONFIG = None

    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        args = ["--config", write_config(self.tmp, self.CONFIG)] if self.CONFIG else []
        self.d = ct.Daemon(self, args=args)
        self.d.start()

    def check_store(self, exact=True, check_crc=None):
        """The packs on disk, the database and `status` agree (see
        packfmt.StoreCheck): every row names an intact record holding its
        chunk at its place, every pack file has its row and size, and
        status' packs, pack_bytes, chunks, unique_bytes and stored_bytes are
        what the rows and files add up to (status leaves out the chunk rows
        gc condemned: once nothing runs they are dead). With `exact`, moreover, every
        chunk on disk is stored exactly once and named by its row, and
        every row's chunk is on disk: no chunk copy is dead weight (true
        while nothing was deleted, and after gc rewrote everything that held
        garbage). Manifest segments and journal entries may still be dead
        weight (an add writes its segments even when the same ones are
        stored already); tests that expect none check StoreCheck.dead. CRCs
        are checked unless the packs are large (Python's CRC-32C runs at
        about 10 MB/s). Returns (StoreCheck, status)."""
        settle(self.d)
        if check_crc is None:
            check_crc = pf.pack_bytes(self.d.data_dir) < 32 * MiB
        sc = pf.StoreCheck(self.d.data_dir, check_crc=check_crc)
        st = status(self.d)
        self.assertEqual(sc.problems, [], "the packs and the database disagree")
        files = {p.seq: p.size for p in sc.packs}
        self.assertEqual((st["packs"], st["pack_bytes"]), (len(sc.packs), sc.pack_bytes()),
                         "status packs and pack_bytes vs the pack files on disk {seq: size} %r; the "
                         "pack rows {seq: (size, state)} are %r" % (files, sc.rows["packs"]))
        chunks = sc.rows["chunks"]
        counted = [r for r in chunks.values() if r[6] in (0, CONDEMNED_MARKED)]
        self.assertEqual(st["chunks"], len(counted), "status chunks vs chunk rows not condemned")
        self.assertEqual(st["unique_bytes"], sum(r[4] for r in counted))
        self.assertEqual(st["stored_bytes"], sum(r[5] for r in counted),
                         "status stored_bytes vs the stored shares of the records on disk")
        if exact:
            twice = {h: v for h, v in sc.copies.items() if len(v) > 1}
            self.assertEqual(twice, {}, "chunks stored more than once")
            self.assertEqual(sc.dead_chunks(), [], "chunk copies on disk that no row names")
            self.assertEqual(set(sc.copies), set(chunks), "chunks on disk vs chunk rows")
        return sc, st


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
        sc1, st1 = self.check_store()
        self.assertGreaterEqual(st1["stored_bytes"], 100 * MiB)  # random: stored raw
        self.assertEqual(st1["unique_bytes"], 100 * MiB)
        self.assertGreater(st1["chunks"], 100 * MiB // CDC_MAX)
        blocks1 = block_records(sc1.packs)

        h2 = add_file(self.d, self.big, "-n", "second.bin")
        self.assertEqual(h2, h1)
        sc2, st2 = self.check_store(exact=False)
        for key in ("stored_bytes", "unique_bytes", "chunks", "documents", "logical_bytes"):
            self.assertEqual(st2[key], st1[key], "%s changed by adding the same content again" % key)
        self.assertEqual(block_records(sc2.packs), blocks1, "block records changed by the second add")
        self.assertEqual(sc2.dead_chunks(), [])
        # what the second add wrote: its journal entry (the new name), and at
        # most its manifest segments again; never content
        grown = st2["pack_bytes"] - st1["pack_bytes"]
        self.assertLess(grown, 100 * MiB // 1000,
                        "adding the same 100 MiB again wrote %d bytes to the packs" % grown)
        # both names work and return the same bytes
        self.assertEqual(get_sha(self.d, "second.bin", self.tmp), (self.big_sha, 100 * MiB))
        self.assertEqual(get_sha(self.d, "first.bin", self.tmp), (self.big_sha, 100 * MiB))
        names = stat(self.d, h1).get("names")
        self.assertEqual(sorted(names or []), ["first.bin", "second.bin"])
        self.d.stop()

    def test_near_duplicate_document_dedup_ratio_about_2(self):
        """Two different documents sharing all but their tail: chunks stored once."""
        h1 = add_file(self.d, self.big, "-n", "orig.bin")
        sc1, st1 = self.check_store()
        tail = os.urandom(10)
        copy = os.path.join(self.tmp, "copy.bin")
        shutil.copyfile(self.big, copy)
        with open(copy, "ab") as f:
            f.write(tail)
        h2 = add_file(self.d, copy, "-n", "copy.bin")
        self.assertNotEqual(h1, h2)
        sc2, st2 = self.check_store()
        self.assertEqual(st2["documents"], 2)
        self.assertEqual(st2["logical_bytes"], 200 * MiB + 10)
        # only the last chunk differs (it may split in two): one new block
        new_chunks = set(sc2.copies) - set(sc1.copies)
        self.assertLessEqual(len(new_chunks), 2, "a 10-byte longer copy stored %d new chunks"
                             % len(new_chunks))
        self.assertEqual(st2["chunks"] - st1["chunks"], len(new_chunks))
        grown = st2["stored_bytes"] - st1["stored_bytes"]
        self.assertLessEqual(grown, CDC_MAX + 10 + block_overhead(2),
                             "a 10-byte longer copy stored %d new bytes" % grown)
        new_blocks = set(block_records(sc2.packs)) - set(block_records(sc1.packs))
        self.assertEqual(len(new_blocks), 1, "new block records: %r" % new_blocks)
        self.assertTrue(1.95 <= st2["dedup_ratio"] <= 2.05, "dedup_ratio %r" % st2["dedup_ratio"])
        self.assertAlmostEqual(st2["dedup_ratio"], st2["logical_bytes"] / st2["unique_bytes"], places=3)
        digest = ct.sha256_file(copy)
        os.unlink(copy)
        self.assertEqual(get_sha(self.d, "copy.bin", self.tmp), (digest, 100 * MiB + 10))
        self.d.stop()

    def test_1mib_inserted_in_the_middle_stores_little(self):
        add_file(self.d, self.big, "-n", "orig.bin")
        sc1, st1 = self.check_store()
        edited = os.path.join(self.tmp, "edited.bin")
        h = hashlib.sha256()
        with open(self.big, "rb") as src, open(edited, "wb") as dst:
            for piece in (src.read(50 * MiB + 12345), os.urandom(MiB), src.read()):
                h.update(piece)
                dst.write(piece)
        digest = h.hexdigest()
        self.assertEqual(add_file(self.d, edited, "-n", "edited.bin"), digest)
        sc2, st2 = self.check_store()
        grown = st2["stored_bytes"] - st1["stored_bytes"]
        self.assertLess(grown, 3 * MiB, "inserting 1 MiB stored %d new bytes" % grown)
        self.assertGreaterEqual(grown, MiB, "the inserted random MiB must be stored")
        packs_grown = st2["pack_bytes"] - st1["pack_bytes"]
        self.assertLess(packs_grown, 3 * MiB, "inserting 1 MiB grew the packs by %d bytes" % packs_grown)
        self.assertTrue(set(sc1.copies) <= set(sc2.copies))
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
                sc = pf.StoreCheck(self.d.data_dir)
                for i, (hexid, n) in enumerate(ref):
                    copies = sc.copies.get(hexid, [])
                    self.assertEqual(len(copies), 1, "chunk %d (%d bytes at the reference cut) is "
                                     "stored %d times" % (i, n, len(copies)))
                    [place] = copies
                    self.assertEqual(place.size, n)
                    env = pf.block_envelope(place.rec)
                    table, _ = pf.parse_block(place.rec.payload)
                    raw_size = sum(s for _, s, _ in table)
                    self.assertEqual((env["magic"], env["version"], env["reserved"], env["raw_size"]),
                                     (b"cRnO", 1, 0, raw_size))
                    self.assertLessEqual(raw_size, BLOCK_RAW_MAX, "a block over 1 MiB raw")
                    self.assertEqual(place.rec.id, pf.block_id(place.rec.payload),
                                     "a block record's id is the SHA-256 of its table")
                    if name.startswith("random"):
                        self.assertEqual(env["algo"], pf.ALGO_RAW, "random data should be stored raw")
                        self.assertEqual(len(pf.block_body(place.rec)), HEADER + raw_size)
                    # the chunk's bytes, cut out of the decoded block (zeros: through zstd)
                    raw = pf.block_raw(place.rec)
                    self.assertEqual(hashlib.sha256(raw[place.sub_off:place.sub_off + n]).hexdigest(),
                                     hexid, "chunk %d's bytes in its block do not hash to its id" % i)
                    expected[hexid] = n
        sc, st = self.check_store()
        self.assertEqual(set(sc.copies), set(expected), "chunks on disk differ from the reference chunks")
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
        sc, st = self.check_store()
        self.assertGreater(st["compression_ratio"], 2.0, st)
        self.assertAlmostEqual(st["compression_ratio"], st["unique_bytes"] / st["stored_bytes"], places=3)
        s = stat(self.d, ht)
        self.assertLess(s["stored_size"] * 2, s["size"], s)
        text_blocks = {(p.seq, r.offset) for p in sc.packs for r in p.records if r.type == pf.REC_BLOCK}
        self.assertGreaterEqual(len(text_blocks), 8, "8 MiB in fewer than 8 blocks of at most 1 MiB")
        for p in sc.packs:
            for r in p.records:
                if r.type != pf.REC_BLOCK:
                    continue
                self.assertEqual(pf.block_envelope(r)["algo"], pf.ALGO_ZSTD, "text block not zstd")
                # the zstd frame decodes (zstd -d) to chunks that hash to their ids
                raw = pf.block_raw(r)
                for cid, size, sub in pf.parse_block(r.payload)[0]:
                    self.assertEqual(hashlib.sha256(raw[sub:sub + size]).digest(), cid)

        rnd = os.urandom(8 * MiB)
        hr = add(self.d, rnd, "-n", "random.bin")
        s = stat(self.d, hr)
        sc, st = self.check_store()
        random_blocks = [(p, r) for p in sc.packs for r in p.records
                         if r.type == pf.REC_BLOCK and (p.seq, r.offset) not in text_blocks]
        nchunks = sum(len(pf.parse_block(r.payload)[0]) for _, r in random_blocks)
        self.assertEqual(nchunks, s["chunks"])
        self.assertGreaterEqual(s["stored_size"], s["size"])
        self.assertLessEqual(s["stored_size"], s["size"] + block_overhead(0) * len(random_blocks)
                             + pf.BLOCK_ENTRY * s["chunks"],
                             "incompressible data should be stored raw: %r" % s)
        for _, r in random_blocks:
            env = pf.block_envelope(r)
            self.assertEqual(env["algo"], pf.ALGO_RAW, "random block stored compressed")
            self.assertEqual(len(pf.block_body(r)), HEADER + env["raw_size"])
        self.assertEqual(self.d.cli("get", "text.txt").stdout, text)
        self.assertEqual(self.d.cli("get", "random.bin").stdout, rnd)
        self.d.stop()


# --------------------------------------------------------------------------
# integrity
# --------------------------------------------------------------------------


def users_of(*docs):
    """{chunk hex: {(document hash, name)}} for (hash, name, content) triples."""
    out = {}
    for h, name, content in docs:
        for cid, _ in ref_chunks(content):
            out.setdefault(cid, set()).add((h, name))
    return out


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
        return received

    def assert_cli_get_integrity(self, ref, content):
        p = self.d.cli("get", ref, check_exit=1)
        self.assertTrue(content.startswith(p.stdout), "get printed bytes that are not the document's")
        self.assertLess(len(p.stdout), len(content))
        ct.assert_cli_error(self, p)
        self.assertIn(b"integrity", p.stderr)
        out = os.path.join(self.tmp, "o.bin")
        self.d.cli("get", "-o", out, ref, check_exit=1)
        self.assertFalse(os.path.exists(out), "a failed get -o left a file")

    def assert_verify_lists(self, bad_users, st, args=(), checked=None):
        """`cairn verify ARGS` (text and --json) exits 1 and lists exactly the
        chunks of bad_users ({chunk: {(hash, name)}}), each with error
        `integrity` and the documents that use it. `checked`: the expected
        (chunks_checked, bytes_checked); by default every chunk of the store,
        the bad ones included (they were read and checked too)."""
        checked = checked or (st["chunks"], st["unique_bytes"])
        p = self.d.cli("verify", *args, check_exit=1)
        ct.assert_cli_error(self, p)
        listed, summary = parse_verify_text(p.stdout)
        self.assertEqual(sorted((x[0], x[1]) for x in listed),
                         sorted((h, "integrity") for h in bad_users))
        for chunk, _, docs in listed:
            self.assertEqual(sorted(docs), sorted(bad_users[chunk]), "documents using %s" % chunk)
        self.assertEqual(summary[2], len(bad_users))
        p = self.d.cli("--json", *(("verify",) + tuple(args)), check_exit=1)
        js = verify_json(self, p.stdout)
        self.assertEqual(js.get("bad_count"), len(bad_users))
        # a failure here is reported and the test goes on to its other checks
        with self.subTest(check="verify counts the bad chunks as checked"):
            self.assertEqual((summary[:2], (js.get("chunks_checked"), js.get("bytes_checked"))),
                             (checked, checked), "verify's chunks and bytes checked, text and --json "
                             "(the bad ones are checked too: PROTOCOL.md, each chunk is read, decoded "
                             "and checked)")
        got = {e.get("chunk"): (e.get("error"), sorted((x.get("hash"), x.get("name"))
                                                       for x in e.get("documents")))
               for e in js.get("bad")}
        self.assertEqual(got, {h: ("integrity", sorted(u)) for h, u in bad_users.items()})

    def test_flipped_byte_fails_get_and_verify_names_users(self):
        a = os.urandom(MiB + MiB // 2)
        b = a[:700 * KiB] + os.urandom(600 * KiB)
        c = os.urandom(300 * KiB)
        ha = add(self.d, a, "-n", "a.bin")
        hb = add(self.d, b, "-n", "b.bin")
        hc = add(self.d, c, "-n", "c.bin")
        ref_a, ref_b, ref_c = ref_chunks(a), ref_chunks(b), ref_chunks(c)
        users = users_of((ha, "a.bin", a), (hb, "b.bin", b), (hc, "c.bin", c))
        # a chunk both use, not the first: a get streams the first chunk, then fails
        bad, bad_len = ref_a[1]
        self.assertIn((bad, bad_len), ref_b, "test setup: a and b should share a's second chunk")
        sc, _ = self.check_store()
        [place] = places(sc, bad)
        block = [cid.hex() for cid, _, _ in pf.parse_block(place.rec.payload)[0]]
        self.assertEqual(block[:2], [ref_a[0][0], bad], "a's first block starts with its first chunks")
        self.assertEqual(pf.block_envelope(place.rec)["algo"], pf.ALGO_RAW)
        path = place.pack.path
        flip_at = pf.record_file_offsets(place.rec)["raw"] + place.sub_off + bad_len // 2
        crc_at = pf.record_file_offsets(place.rec)["crc"]
        with open(path, "rb") as f:
            f.seek(crc_at)
            crc = f.read(4)

        # 1. One byte flipped inside the block record's body: its CRC no longer
        # matches, so every chunk of that block is unreadable, and named.
        pf.xor_byte(path, flip_at)
        self.assert_cli_get_integrity("a.bin", a)
        self.assert_cli_get_integrity(hb, b)
        self.assert_raw_get_integrity(ha, a)
        self.assert_raw_get_integrity("b.bin", b)
        self.assertEqual(self.d.cli("get", "c.bin").stdout, c)
        st = status(self.d)
        self.assert_verify_lists({h: users[h] for h in block}, st)
        # verify REF: only the chunks of those documents
        p = self.d.cli("verify", "c.bin")
        listed, summary = parse_verify_text(p.stdout)
        self.assertEqual(listed, [])
        self.assertEqual(summary, (len(set(ref_c)), len(c), 0))
        self.d.cli("verify", hc[:12], check_exit=0)
        ids_b = {h for h, _ in ref_b}
        self.assert_verify_lists({h: users[h] for h in block if h in ids_b}, st, ("b.bin",),
                                 (len(ids_b), sum(dict(ref_b).values())))
        self.d.cli("verify", "c.bin", "a.bin", check_exit=1)
        # a and b share the bad chunks, and a is named twice: each chunk checked,
        # counted and listed once, with both documents
        distinct = dict(ref_a + ref_b)
        self.assert_verify_lists({h: users[h] for h in block}, st, ("a.bin", hb, ha[:12], "b.bin"),
                                 (len(distinct), sum(distinct.values())))
        # repaired on disk: everything works again
        pf.xor_byte(path, flip_at)
        self.assertEqual(self.d.cli("get", "a.bin").stdout, a)
        self.assertEqual(self.d.cli("get", "b.bin").stdout, b)
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)

        # 2. The same byte flipped and the record's CRC made to match: only the
        # SHA-256 of the chunk can tell, and only that chunk is bad. (A restart
        # first: the gets above left a's chunks in the daemon's cache.)
        self.d.restart()
        pf.xor_byte(path, flip_at)
        pf.fix_record_crc(path, place.rec.offset)
        got = self.assert_raw_get_integrity(ha, a)
        self.assertLessEqual(len(got), ref_a[0][1], "get sent bytes of the damaged chunk")
        self.assert_cli_get_integrity("b.bin", b)
        self.assertEqual(self.d.cli("get", "c.bin").stdout, c)
        self.assert_verify_lists({bad: users[bad]}, status(self.d))
        # repaired: the byte and the original CRC back
        pf.xor_byte(path, flip_at)
        pf.write_at(path, crc_at, crc)
        self.assertEqual(self.d.cli("get", "a.bin").stdout, a)
        self.assertEqual(self.d.cli("get", "b.bin").stdout, b)
        p = self.d.cli("verify")
        self.assertEqual(parse_verify_text(p.stdout)[1][2], 0)
        self.check_store()
        self.d.assert_healthy()
        self.d.stop()

    def test_adding_the_original_again_heals_what_verify_found_damaged(self):
        """A chunk whose stored copy verify found damaged is not stored to an
        add: adding the original content again writes a fresh copy, the
        document reads back, verify is clean; the damaged record is dead weight for gc.
        Without the verify first, the add stores nothing (the copy is not
        known to be bad) and the document stays damaged."""
        a = os.urandom(900 * KiB)
        ha = add(self.d, a, "-n", "a.bin")
        bad, bad_len = ref_chunks(a)[1]
        sc, _ = self.check_store()
        [place] = places(sc, bad)
        damaged_row = sc.rows["chunks"][bad]
        self.assertEqual(pf.block_envelope(place.rec)["algo"], pf.ALGO_RAW)
        path = place.pack.path
        pf.xor_byte(path, pf.record_file_offsets(place.rec)["raw"] + place.sub_off + bad_len // 2)
        pf.fix_record_crc(path, place.rec.offset)
        self.d.restart()  # nothing of a in the daemon's cache
        # re-added before any verify: deduplicated, still damaged
        self.assertEqual(add(self.d, a, "-n", "a.bin"), ha)
        self.d.cli("get", "a.bin", check_exit=1)
        p = self.d.cli("--json", "verify", check_exit=1)
        self.assertEqual([e["chunk"] for e in verify_json(self, p.stdout)["bad"]], [bad])
        # after verify: the add writes the damaged chunk again, and only that one
        self.assertEqual(add(self.d, a, "-n", "a.bin"), ha)
        self.assertEqual(self.d.cli("get", "a.bin").stdout, a)
        # the row moved to the new copy; the damaged one stays, dead weight
        sc, _ = self.check_store(exact=False)
        self.assertNotEqual(sc.rows["chunks"][bad][:2], damaged_row[:2])
        self.assertEqual(len(places(sc, bad)), 2)
        self.assertEqual([h for h, v in sc.copies.items() if len(v) > 1], [bad])
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)
        # a gc and a restart later the document is still whole
        self.d.cli("gc")
        self.d.restart()
        self.assertEqual(self.d.cli("get", "a.bin").stdout, a)
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)
        self.check_store(exact=False)
        self.d.assert_healthy()
        self.d.stop()

    def test_add_heal_rewrites_only_the_damaged_chunks(self):
        """`cairn add --heal FILE` from a file that shares the damaged chunk
        (here a later version: the same start, another end) rewrites that
        chunk only: no document, name or journal entry of the file is
        stored, the damaged document reads back and verify is clean. Before
        a verify, and once nothing is damaged, it writes nothing."""
        a = os.urandom(900 * KiB)
        ha = add(self.d, a, "-n", "a.bin")
        bad, bad_len = ref_chunks(a)[0]
        sc, _ = self.check_store()
        [place] = places(sc, bad)
        path = place.pack.path
        pf.xor_byte(path, pf.record_file_offsets(place.rec)["raw"] + place.sub_off + bad_len // 2)
        pf.fix_record_crc(path, place.rec.offset)
        self.d.restart()
        later = os.path.join(self.tmp, "a-later.bin")
        with open(later, "wb") as f:
            f.write(a[:bad_len + 1000] + os.urandom(300 * KiB))
        docs_before = self.d.status()["documents"]
        # not known damaged yet: nothing to rewrite
        self.assertEqual(self.d.cli("add", "--heal", later).stdout.decode(), "0  %s\n" % later)
        self.d.cli("get", "a.bin", check_exit=1)
        self.d.cli("verify", check_exit=1)
        p = self.d.cli("--json", "add", "--heal", later)
        [r] = ct.parse_json_lines(p.stdout)
        self.assertEqual(r.get("written", 0) > 0, True, r)
        self.assertIs(r.get("new"), False, r)
        self.assertEqual(r.get("name"), "", r)
        self.assertEqual(self.d.cli("get", "a.bin").stdout, a)
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)
        st = self.d.status()
        self.assertEqual(st["documents"], docs_before, "--heal stored a document")
        self.assertEqual(self.d.cli("stat", ct.sha256_hex(open(later, "rb").read()),
                                    check_exit=None).returncode, 1)
        # only the damaged chunk got a second copy; nothing new of the later file
        sc, _ = self.check_store(exact=False)
        self.assertEqual([h for h, v in sc.copies.items() if len(v) > 1], [bad])
        self.assertNotIn(ct.sha256_hex(open(later, "rb").read()),
                         [ln.split()[0] for ln in self.d.cli("ls", "--docs").stdout.decode().splitlines()])
        # nothing damaged any more: writes nothing
        self.assertEqual(self.d.cli("add", "--heal", later).stdout.decode(), "0  %s\n" % later)
        # a rebuild from the packs alone finds the same documents
        RebuildHelpers.rebuild(self)
        self.assertEqual(self.d.cli("get", ha).stdout, a)
        self.assertEqual(self.d.status()["documents"], docs_before)
        # and --heal takes nothing that makes a document
        for extra in (["-n", "x"], ["-t", "t"], ["-m", "k=v"], ["--mime", "text/plain"]):
            p = self.d.cli("add", "--heal", *extra, later, check_exit=2)
            self.assertIn(b"--heal stores no document", p.stderr)
        with self.d.connect() as c:
            r = c.add(b"x" * 100, name="n", heal=True)
        self.assertEqual(ct.error_code(r), "bad_request", ct.short(r))
        self.d.stop()

    def test_verify_lists_the_named_documents_of_a_bad_chunk_first(self):
        """A bad chunk with more users than a reply lists (64) still names the
        documents the verify request named."""
        prefix = os.urandom(300 * KiB)
        docs = [(add(self.d, prefix + os.urandom(100 * KiB), "-n", "d%02d" % i), "d%02d" % i)
                for i in range(70)]
        bad, bad_len = ref_chunks(prefix)[0]
        sc, _ = self.check_store()
        [place] = places(sc, bad)
        self.assertEqual(pf.block_envelope(place.rec)["algo"], pf.ALGO_RAW)
        path = place.pack.path
        pf.xor_byte(path, pf.record_file_offsets(place.rec)["raw"] + place.sub_off + bad_len // 2)
        pf.fix_record_crc(path, place.rec.offset)
        for ref, (h, name) in (("d69", docs[69]), (docs[66][0], docs[66]),
                               ("d67", docs[67])):
            with self.subTest(ref=ref):
                p = self.d.cli("--json", "verify", ref, check_exit=1)
                js = verify_json(self, p.stdout)
                self.assertEqual(js.get("bad_count"), 1, js)
                [entry] = js["bad"]
                self.assertEqual(entry["chunk"], bad)
                listed = [(x["hash"], x["name"]) for x in entry["documents"]]
                self.assertEqual(len(listed), 64)
                self.assertEqual(listed[0], (h, name))
        p = self.d.cli("--json", "verify", "d65", "d68", "d65", check_exit=1)
        js = verify_json(self, p.stdout)
        [entry] = js["bad"]
        self.assertEqual(sorted((x["hash"], x["name"]) for x in entry["documents"][:2]),
                         sorted([docs[65], docs[68]]))
        self.d.assert_healthy()
        self.d.stop()

    def test_missing_truncated_and_damaged_records(self):
        """Records damaged on disk under a running daemon, each a different way:
        gets fail with `integrity`, verify names every chunk of each damaged
        block and its document, and the daemon keeps serving."""
        kinds = ("zeroed", "envelope", "zstd", "swapped", "crc", "truncated")
        docs = {n: os.urandom(600 * KiB) for n in kinds}
        docs["zstd"] = text_bytes(600 * KiB, 7)
        hashes = {}
        for n in kinds:  # "truncated" last: its block is the tail of the open pack
            hashes[n] = add(self.d, docs[n], "-n", n)
        sc, _ = self.check_store()
        st = status(self.d)
        recs = {}
        for n in kinds:
            blocks = {(p.pack.path, p.rec.offset) for cid, _ in ref_chunks(docs[n])
                      for p in places(sc, cid)}
            self.assertEqual(len(blocks), 1, "test setup: %s should be one block" % n)
            [place] = places(sc, ref_chunks(docs[n])[0][0])
            recs[n] = place
        for n, place in recs.items():
            path, rec = place.pack.path, place.rec
            offs = pf.record_file_offsets(rec)
            if n == "zeroed":  # the record is gone: zeros where it was
                pf.write_at(path, rec.offset, bytes(rec.total_len))
            elif n == "envelope":  # a bad envelope magic in an intact record
                pf.xor_byte(path, offs["body"])
                pf.fix_record_crc(path, rec.offset)
            elif n == "zstd":  # a damaged zstd frame in an intact record
                self.assertEqual(pf.block_envelope(rec)["algo"], pf.ALGO_ZSTD)
                pf.xor_byte(path, offs["raw"] + (rec.end - offs["raw"]) // 2)
                pf.fix_record_crc(path, rec.offset)
            elif n == "swapped":  # an intact record whose chunks hold other bytes
                pf.write_at(path, offs["raw"], os.urandom(rec.end - offs["raw"]))
                pf.fix_record_crc(path, rec.offset)
            elif n == "crc":  # one byte of the chunk table flipped: the CRC fails
                pf.xor_byte(path, offs["payload"] + 10)
            elif n == "truncated":  # the pack ends inside the record
                os.truncate(path, rec.offset + pf.RECORD_HEADER + 1000)
        for n, content in docs.items():
            with self.subTest(doc=n):
                self.assert_cli_get_integrity(n, content)
                self.assert_raw_get_integrity(hashes[n], content)
        bad = {}
        for n, content in docs.items():
            for cid, _ in ref_chunks(content):
                bad[cid] = {(hashes[n], n)}
        # A flipped byte inside a zstd frame may only change some of the bytes
        # it decodes to: the chunks that still hash right (zstd -d is the
        # judge) are not damaged.
        zrec = pf.read_record_at(recs["zstd"].pack.path, recs["zstd"].rec.offset)
        try:
            raw = pf.block_raw(zrec)
        except pf.PackFormatError:
            raw = None
        if raw is not None:
            for cid, size, sub in pf.parse_block(zrec.payload)[0]:
                if hashlib.sha256(raw[sub:sub + size]).digest() == cid:
                    del bad[cid.hex()]
        self.assertTrue(any(h in bad for h, _ in ref_chunks(docs["zstd"])), "test setup: the "
                        "flipped byte in the zstd frame changed nothing")
        self.assert_verify_lists(bad, st)
        self.d.assert_healthy()
        self.d.stop()

    def test_missing_and_truncated_packs_found_at_restart(self):
        """A sealed pack deleted and another cut short while the daemon was
        down: it starts, serves every document that lost nothing, fails the
        others with `integrity`, and verify names exactly what was lost."""
        self.d.stop()
        self.d.args = ["--config", write_config(self.tmp, {"pack_size": "1M"})]
        self.d.start()
        docs = {"d%d" % i: os.urandom(700 * KiB) for i in range(8)}
        hashes = {n: add(self.d, c, "-n", n) for n, c in docs.items()}
        sc, st = self.check_store()
        sealed = [p for p in sc.packs if p.sealed]
        self.assertGreaterEqual(len(sealed), 3, "test setup: 1M packs, %r" % sc.packs)

        def docs_in(pack, start=0):
            ids = {cid.hex() for r in pack.records if r.type == pf.REC_BLOCK and r.offset >= start
                   for cid, _, _ in pf.parse_block(r.payload)[0]}
            return {n for n, c in docs.items() if ids & {h for h, _ in ref_chunks(c)}}

        lost_pack, cut_pack = sealed[0], sealed[1]
        # cut inside the last block record of the second pack
        cut_rec = [r for r in cut_pack.records if r.type == pf.REC_BLOCK][-1]
        cut_at = cut_rec.offset + cut_rec.total_len // 2
        lost = docs_in(lost_pack) | docs_in(cut_pack, cut_rec.offset)
        self.assertTrue(lost and set(docs) - lost, "test setup: %r" % lost)
        lost_chunks = {cid.hex() for r in lost_pack.records if r.type == pf.REC_BLOCK
                       for cid, _, _ in pf.parse_block(r.payload)[0]}
        lost_chunks |= {cid.hex() for cid, _, _ in pf.parse_block(cut_rec.payload)[0]}
        self.d.stop()
        os.unlink(lost_pack.path)
        os.truncate(cut_pack.path, cut_at)
        self.d.start()
        for n, content in docs.items():
            with self.subTest(doc=n):
                if n in lost:
                    self.assert_cli_get_integrity(n, content)
                else:
                    self.assertEqual(self.d.cli("get", n).stdout, content)
        users = users_of(*((hashes[n], n, docs[n]) for n in docs))
        st = status(self.d)
        self.assert_verify_lists({h: users[h] for h in lost_chunks}, st)
        # the store goes on: a new document, stored and read back
        more = os.urandom(300 * KiB)
        add(self.d, more, "-n", "more")
        self.assertEqual(self.d.cli("get", "more").stdout, more)
        self.d.assert_healthy()
        self.d.stop()


# --------------------------------------------------------------------------
# gc
# --------------------------------------------------------------------------


def assert_counts_only(case, st, *contents):
    """status counts exactly the chunks of these contents (random: stored raw)."""
    ids = {}
    for c in contents:
        ids.update(ref_chunks(c))
    case.assertEqual((st["chunks"], st["unique_bytes"]), (len(ids), sum(ids.values())),
                     "status counts what gc found dead: %r" % st)
    case.assertEqual(st["dedup_ratio"], 1.0, st)


class GarbageCollection(DedupCase):
    def test_delete_and_gc_frees_space_shared_document_survives(self):
        a = os.urandom(6 * MiB)
        b = a[:MiB + MiB // 2] + os.urandom(MiB)
        ha = add(self.d, a, "-n", "a.bin")
        hb = add(self.d, b, "-n", "b.bin")
        ref_a, ref_b = ref_chunks(a), ref_chunks(b)
        ids_a = {h for h, _ in ref_a}
        ids_b = {h for h, _ in ref_b}
        only_a = ids_a - ids_b
        self.assertTrue(only_a and ids_a & ids_b, "test setup: a and b should share some chunks")
        sc, _ = self.check_store()
        self.assertEqual(set(sc.copies), ids_a | ids_b)

        res = gc(self.d)
        self.assertEqual(res, dict.fromkeys(res, 0), "gc with nothing to collect")
        before = self.check_store()[0].pack_bytes()
        self.d.cli("rm", "a.bin")
        res = gc(self.d)
        self.assertEqual(res["chunks_removed"], len(only_a))
        self.assertGreaterEqual(res["packs_rewritten"] + res["packs_deleted"], 1, res)
        # what is left is exactly b's, each chunk once, and nothing dead
        sc, st = self.check_store()
        self.assertEqual(sc.dead, [], "records on disk that no row names after gc rewrote the pack")
        self.assertEqual(set(sc.copies), ids_b, "chunks on disk after a's were collected")
        # the packs shrank by a's own chunks, give or take the records' and
        # the index's overhead (a's blocks, the block b shared with a rebuilt
        # without a's chunks, a's journal entry)
        only_a_bytes = sum(n for h, n in dict(ref_a).items() if h in only_a)
        freed = before - sc.pack_bytes()
        slack = 64 * KiB
        self.assertTrue(only_a_bytes - slack <= freed <= only_a_bytes + slack,
                        "the packs shrank by %d bytes; a's own chunks are %d bytes" % (freed, only_a_bytes))
        # bytes_reclaimed counts the rewritten pack whole (its index too) less what moved out
        self.assertTrue(freed <= res["bytes_reclaimed"] <= freed + slack, (freed, res))
        self.assertEqual(st["documents"], 1)
        self.assertEqual(self.d.cli("get", "b.bin").stdout, b)
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)
        self.d.cli("get", ha, check_exit=1)
        res = gc(self.d)
        self.assertEqual((res["chunks_removed"], res["packs_rewritten"], res["packs_deleted"]), (0, 0, 0))

        self.d.cli("rm", hb)
        res = gc(self.d)
        self.assertEqual(res["chunks_removed"], len(ids_b))
        sc, st = self.check_store()
        for key in ("documents", "logical_bytes", "unique_bytes", "stored_bytes", "chunks"):
            self.assertEqual(st[key], 0, "%s after deleting everything and gc: %r" % (key, st))
        self.assertEqual(sc.copies, {}, "chunks left on disk after gc")
        left = [(p.seq, r) for p in sc.packs for r in p.records]
        self.assertEqual([r for _, r in left if r.type != pf.REC_ENTRY], [], "records left after gc")
        self.assertLess(sc.pack_bytes(), 4 * KiB, "only journal entries may be left: %r" % left)
        # the journal entries of deleted documents go too, at the latest by the next run
        gc(self.d)
        sc, _ = self.check_store()
        self.assertEqual([r for p in sc.packs for r in p.records], [], "records left after two gc runs")
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
        self.assertEqual(gc(self.d)["chunks_removed"], 0)
        self.assertEqual(self.d.cli("get", "other").stdout, other)
        self.assertIn(ref_chunks(z)[0][0], self.check_store()[0].copies)
        self.d.cli("rm", ho)
        gc(self.d)
        sc, st = self.check_store()
        self.assertEqual(st["chunks"], 0)
        self.assertEqual(sc.copies, {})
        self.d.stop()

    def test_gc_counts_dead_bytes_in_the_open_pack(self):
        """A deleted document in the pack still being written (mostly alive,
        so not rewritten) is dead: gc's bytes_dead has it, and status no
        longer counts its chunks (issue #28: bytes_dead 0, dedup_ratio
        0.99995)."""
        keep, gone = os.urandom(MiB), os.urandom(300 * KiB)
        add(self.d, keep, "-n", "keep")
        add(self.d, gone, "-n", "gone")
        self.assertEqual(len(pf.list_packs(self.d.data_dir)), 1, "test setup: one open pack")
        self.d.cli("rm", "gone")
        res = gc(self.d)
        self.assertEqual((res["packs_rewritten"], res["packs_deleted"]), (0, 0), res)
        self.assertTrue(len(gone) <= res["bytes_dead"] <= len(gone) + 4 * KiB, res)
        self.assertEqual(res["chunks_removed"], len(dict(ref_chunks(gone))), res)
        sc, st = self.check_store(exact=False)
        assert_counts_only(self, st, keep)
        self.assertEqual(st["logical_bytes"], len(keep))
        # counted once: a second run finds nothing new, the bytes are still dead
        res2 = gc(self.d)
        self.assertEqual(res2["chunks_removed"], 0, res2)
        self.assertEqual(res2["bytes_dead"], res["bytes_dead"], res2)
        # the content comes back whole when added again
        add(self.d, gone, "-n", "again")
        self.assertEqual(self.d.cli("get", "again").stdout, gone)
        self.assertEqual(self.d.cli("get", "keep").stdout, keep)
        assert_counts_only(self, self.check_store(exact=False)[1], keep, gone)
        self.d.stop()

    def test_chunk_readded_while_gc_deletes_survives(self):
        """A document added while gc is condemning and reclaiming the chunks
        it uses must keep them: an acknowledged add never loses data to gc,
        neither to that run nor to the next ones."""
        kept = {}
        for attempt, delay in enumerate((0.0, 0.002, 0.005, 0.01, 0.02)):
            big = os.urandom(30 * MiB)
            old = set(pf.chunk_records(pf.read_packs(self.d.data_dir, check_crc=False)))
            with self.d.connect() as c:
                r = c.add(big, name="big-%d" % attempt)
                self.assertIs(r.get("ok"), True, ct.short(r))
            # gc condemns in chunk id order: the largest id of this document goes last
            copies = pf.chunk_records(pf.read_packs(self.d.data_dir, check_crc=False))
            z = max(set(copies) - old)
            [place] = copies[z]
            self.assertEqual(pf.block_envelope(place.rec)["algo"], pf.ALGO_RAW,
                             "random chunk not stored raw")
            body = pf.chunk_bytes(place.rec, z)
            self.assertEqual(ct.sha256_hex(body), z)
            with self.d.connect() as c:
                self.assertIs(c.call("delete", ref=r["hash"]).get("ok"), True)
            with self.d.connect() as cg, self.d.connect() as ca:
                gid = cg.send_request("gc")
                time.sleep(delay)
                ra = ca.add(body, name="z-%d" % attempt)  # exactly chunk z
                self.assertIs(ra.get("ok"), True, ct.short(ra))
                rg = cg.recv_for(gid, timeout=120 * ct.SLOW)
                self.assertIs(rg.get("ok"), True, ct.short(rg))
                frames, got = ca.get(ra["hash"])
            self.assertIsNotNone(got, "attempt %d (add %.3f s after gc started): the document added "
                                 "during gc lost its chunk %s: %r"
                                 % (attempt, delay, z, ct.short(frames[-1])))
            self.assertEqual(got, body)
            self.assertTrue(pf.find_chunk(self.d.data_dir, z), "chunk %s is in no record on disk" % z)
            kept[ra["hash"]] = body
        # the next runs (and a restart) keep them too
        for _ in range(2):
            gc(self.d)
        self.d.restart()
        with self.d.connect() as c:
            for h, body in kept.items():
                frames, got = c.get(h)
                self.assertEqual(got, body, "%s after further gc runs: %r" % (h, ct.short(frames[-1])))
        self.assertEqual(self.d.cli("verify", check_exit=None).returncode, 0)
        self.check_store(exact=False)
        self.d.stop()


    def test_verify_during_gc_reports_no_false_corruption(self):
        """Chunks gc removes while a verify runs were collected, not corrupted:
        verify must not report them as bad.

        gc only reclaims what was condemned before every running operation
        started, so the garbage is condemned first by a gc that runs beside a
        get (and must leave the reclaiming to its next run); the next gc then
        rewrites and drops the garbage's packs and rows while the verify,
        which started after the condemnation, reads them."""
        keep = os.urandom(4 * MiB)
        hk = add(self.d, keep, "-n", "keep.bin")
        for attempt, delay in enumerate((0.0, 0.002, 0.01)):
            with self.d.connect() as c:
                r = c.add(os.urandom(30 * MiB), name="garbage-%d" % attempt)
                self.assertIs(r.get("ok"), True, ct.short(r))
                self.assertIs(c.call("delete", ref=r["hash"]).get("ok"), True)
            with self.d.connect() as hold:
                # a get left waiting after its first frame (4 MiB do not fit the socket)
                first = hold.recv_for(hold.send_request("get", ref=hk))
                self.assertIs(first.get("more"), True, ct.short(first))
                rg = gc(self.d)
                # This garbage (30 MiB) stays; what an earlier attempt's gc left condemned
                # before this get started may go (a pack it kept for a delete entry).
                self.assertLess(rg["bytes_reclaimed"], MiB, "gc reclaimed chunks it condemned "
                                "while an older get was still running: %r" % rg)
            deadline = time.monotonic() + 10 * ct.SLOW
            while status(self.d)["connections"] > 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            with self.d.connect() as cv, self.d.connect() as cg:
                vid = cv.send_request("verify")
                time.sleep(delay)
                gid = cg.send_request("gc")
                rg = cg.recv_for(gid, timeout=120 * ct.SLOW)
                rv = cv.recv_for(vid, timeout=120 * ct.SLOW)
            self.assertIs(rg.get("ok"), True, ct.short(rg))
            self.assertGreater(rg.get("chunks_removed", 0), 0, "the second gc reclaimed nothing: %r"
                               % ct.short(rg))
            self.assertIs(rv.get("ok"), True, ct.short(rv))
            bad = rv.get("bad") or []
            self.assertEqual(rv.get("bad_count"), 0,
                             "attempt %d: verify running beside gc reported %d bad chunks in a store "
                             "without any corruption, e.g. %r"
                             % (attempt, rv.get("bad_count"), bad[:3]))
        self.assertEqual(self.d.cli("get", hk).stdout, keep)
        self.check_store(exact=False)
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
                        reply = c.recv_for(rid, timeout=60 * ct.SLOW)
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
                        lost.append((h, content[:12], ct.short(frames[-1])))
                for h in list(deleted)[:50]:
                    frames, got = c.get(h)
                    self.assertEqual(ct.error_code(frames[-1]), "not_found",
                                     "%s: deleted document %s: %r" % (when, h, ct.short(frames[-1])))
            if p.returncode != 0 or lost:
                self.fail("%s: verify exited %d; %d of %d acknowledged, not deleted documents do "
                          "not round-trip, e.g. %r; verify said:\n%s\n%s"
                          % (when, p.returncode, len(lost), len(live), lost[:3],
                             p.stdout.decode()[-2000:], self.d.log_tail(3000)))

        check_store("right after the race")
        self.assertEqual(status(self.d)["documents"], len(live))
        with self.d.connect() as c:
            self.assertIs(c.call("gc").get("ok"), True)
        check_store("after a quiet gc")
        # with nothing running, the rows (all verified above), the packs on
        # disk and status agree
        self.check_store(exact=False)
        self.d.stop()


# --------------------------------------------------------------------------
# rebuilding the index from the objects
# --------------------------------------------------------------------------


class GcSmallPacks(DedupCase):
    CONFIG = {"pack_size": "1M"}

    def test_gc_counts_a_deleted_document_in_a_mostly_alive_pack(self):
        """A deleted 300 KiB document in a sealed pack that stays (mostly
        alive) is counted: bytes_dead has its bytes, chunks_removed its
        chunks, and status leaves them out (issue #28: bytes_dead 103,
        chunks_removed 0, status unchanged)."""
        gone, keep = os.urandom(300 * KiB), os.urandom(3 * MiB)
        add(self.d, gone, "-n", "gone")
        add(self.d, keep, "-n", "keep")
        rows = pf.db_rows(self.d.data_dir)
        first = min(rows["packs"])
        self.assertEqual({rows["chunks"][h][0] for h, _ in ref_chunks(gone)}, {first},
                         "test setup: gone's chunks in the first pack")
        self.assertEqual(rows["packs"][first][1], pf.PACK_SEALED, "test setup: the first pack sealed")
        self.d.cli("rm", "gone")
        res = gc(self.d)
        self.assertEqual((res["packs_rewritten"], res["packs_deleted"]), (0, 0), res)
        self.assertEqual(res["chunks_removed"], len(dict(ref_chunks(gone))), res)
        self.assertTrue(len(gone) <= res["bytes_dead"] <= len(gone) + 4 * KiB, res)
        sc, st = self.check_store(exact=False)
        assert_counts_only(self, st, keep)
        self.assertLess(st["stored_bytes"], len(keep) + 4 * KiB, st)
        res2 = gc(self.d)
        self.assertEqual(res2["chunks_removed"], 0, res2)
        self.assertEqual(self.d.cli("get", "keep").stdout, keep)
        self.assertEqual(parse_verify_text(self.d.cli("verify").stdout)[1][2], 0)
        self.d.stop()


class RebuildHelpers:
    """Snapshots of what the index answers, and `cairnd --rebuild-index`
    (mixed into a DedupCase; test_packs.py uses it too)."""
    SEARCHES = []

    def snapshot(self, with_created=False):
        """Everything the index answers. `created` is left out unless asked
        for: test_rebuild_keeps_creation_times checks it on its own."""
        def strip(doc):
            return doc if with_created else {k: v for k, v in doc.items() if k != "created"}
        docs = ct.parse_json_lines(self.d.cli("--json", "ls", "--docs").stdout)
        stats = {d["hash"]: strip(stat(self.d, d["hash"])) for d in docs}
        searches = {}
        for q in self.SEARCHES:
            hits = ct.parse_json_lines(self.d.cli("--json", "search", "-l", "1000", q).stdout)
            searches[q] = sorted((h.get("hash"), h.get("name")) for h in hits)
        st = status(self.d)
        totals = {k: st[k] for k in ("documents", "logical_bytes", "unique_bytes", "stored_bytes",
                                     "chunks")}
        # status leaves out the chunk rows gc condemned; a rebuild from the
        # packs brings them back (the next gc finds them dead again): the
        # totals compared count them
        dead = [r for r in pf.db_rows(self.d.data_dir)["chunks"].values()
                if r[6] not in (0, CONDEMNED_MARKED)]
        totals["chunks"] += len(dead)
        totals["unique_bytes"] += sum(r[4] for r in dead)
        totals["stored_bytes"] += sum(r[5] for r in dead)
        return {"ls": sorted((strip(d) for d in docs), key=lambda d: d["hash"]), "stat": stats,
                "search": searches, "status": totals}

    def rebuild(self, search_db_too=False):
        """Stops the daemon, deletes the database (and with `search_db_too`
        the search index), runs --rebuild-index (which must exist and
        succeed) and starts the daemon again. Returns what it printed."""
        d = self.d
        d.stop()
        dbs = glob.glob(os.path.join(d.data_dir, "cairn.db*"))
        self.assertIn(os.path.join(d.data_dir, "cairn.db"), dbs)
        if search_db_too:
            search = glob.glob(os.path.join(d.data_dir, "search.db*"))
            self.assertIn(os.path.join(d.data_dir, "search.db"), search)
            dbs += search
        for f in dbs:
            os.unlink(f)
        cmd = [ct.CAIRND, "--data-dir", d.data_dir, "--socket", d.socket_path] + d.args + [
            "--rebuild-index"]
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=d.env(), timeout=120 * ct.SLOW)
        except subprocess.TimeoutExpired:
            self.fail("cairnd --rebuild-index did not finish within %d s" % (120 * ct.SLOW))
        self.assertEqual(p.returncode, 0, "cairnd --rebuild-index exited %d (expected 0: rebuild the "
                         "database from the packs):\n%s" % (p.returncode, p.stdout.decode()[-3000:]))
        self.assertTrue(os.path.exists(os.path.join(d.data_dir, "cairn.db")),
                        "--rebuild-index wrote no database")
        d.start()
        return p.stdout.decode("utf-8", "replace")

    def assert_same(self, before, after):
        self.assertEqual(sorted(after["stat"]), sorted(before["stat"]), "documents differ")
        for h in before["stat"]:
            self.assertEqual(after["stat"][h], before["stat"][h], "stat of %s differs" % h)
        self.assertEqual(after["ls"], before["ls"])
        # each search is its own check, so one that differs does not hide the others
        for q in self.SEARCHES:
            with self.subTest(search=q):
                self.assertEqual(after["search"][q], before["search"][q], "search %r differs" % q)
        self.assertEqual(after["status"], before["status"])


class RebuildIndex(RebuildHelpers, DedupCase):
    # small packs: the documents spread over several sealed packs and an open one
    CONFIG = {"pack_size": "1M"}
    SEARCHES = ["zebraquartz", "tag:red", "tag:blue", "tag:green", "ada", "bob", "notes",
                "obliterated", "vanishingword", "version", "name:flip", "phoenixword", "cairn",
                "rev"]

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
        # deleted, then gc: its packs (it fills several) rewritten or deleted
        doomed1 = put(b"obliterated forever\n" + os.urandom(3 * MiB), "-n", "doomed1.txt")
        d.cli("rm", "doomed1.txt")
        res = gc(d)
        self.assertGreaterEqual(res["packs_deleted"] + res["packs_rewritten"], 2, res)
        self.assertGreater(res["chunks_removed"], 0, res)
        # deleted, no gc: its records are all still there
        doomed2 = put(b"vanishingword\n" + os.urandom(3 * MiB), "-n", "doomed2.txt",
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
        res = gc(d)
        self.assertGreater(res["chunks_removed"], 0, "doomed2's chunks were not left for gc")
        for h, content in contents.items():
            self.assertEqual(d.cli("get", h).stdout, content)
        st = status(d)
        put(big + b"more", "-n", "big2.bin", "-t", "late")
        self.assertLess(status(d)["stored_bytes"] - st["stored_bytes"], CDC_MAX + block_overhead(2))
        self.check_store(exact=False)

        # and a second rebuild gives the same again
        before = self.snapshot()
        self.rebuild()
        self.assert_same(before, self.snapshot())
        d.stop()

    def test_rebuild_shows_progress_on_a_terminal(self):
        """--rebuild-index draws its progress on stderr when it is a terminal
        (packs and MiB read), in place, and clears it; not otherwise."""
        d = self.d
        for i in range(3):
            add(d, os.urandom(1536 * 1024), "-n", "p%d" % i)
        d.stop()
        for f in glob.glob(os.path.join(d.data_dir, "cairn.db*")):
            os.unlink(f)
        cmd = [ct.CAIRND, "--data-dir", d.data_dir, "--socket", d.socket_path] + d.args + [
            "--rebuild-index"]
        rc, out, err = ct.run_stderr_on_tty(cmd, env=d.env(), timeout=120 * ct.SLOW)
        self.assertEqual(rc, 0, err)
        self.assertIn(b"rebuilt", out)
        self.assertRegex(err.decode(errors="replace"), r"\r\x1b\[Krebuild: read [0-9]+ of [0-9]+ MiB of the packs")
        self.assertIn(b"\r\x1b[K", err)
        d.start()
        self.assertEqual(status(d)["documents"], 3)
        # not a terminal: no progress (the rebuild helper captures stderr)
        d.stop()
        for f in glob.glob(os.path.join(d.data_dir, "cairn.db*")):
            os.unlink(f)
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=d.env(),
                           timeout=120 * ct.SLOW)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"rebuild: read", p.stderr)

    def test_rebuild_counts_adds_and_deletes_applied(self):
        """The rebuild's summary counts the adds and the deletes that applied:
        an unname entry is neither, and a delete that waited for a last name
        that stayed did not apply."""
        d = self.d
        add(d, b"two names\n", "-n", "a.txt")
        add(d, b"two names\n", "-n", "b.txt")
        d.cli("rm", "a.txt")
        out = self.rebuild()
        self.assertIn("; 2 adds and 0 deletes applied", out)
        d.cli("rm", "b.txt")
        out = self.rebuild()
        self.assertIn("; 2 adds and 1 deletes applied", out)
        d.stop()

    def test_rebuild_after_names_removed(self):
        """`rm NAME` takes the name off and deletes only what no other name
        points to; gc keeps what a rebuild needs to do the same again (the
        unname entries and the deletes that applied), before and after
        the last name of a document goes."""
        d = self.d
        x = add(d, b"shared text x\n", "-n", "a.txt")
        add(d, b"shared text x\n", "-n", "b.txt")
        y = add(d, b"versioned y\n", "-n", "c.txt")
        z = add(d, b"versioned z\n", "-n", "c.txt")
        add(d, b"versioned y\n", "-n", "d.txt")
        lone = add(d, b"lone\n", "-n", "lone.txt")
        self.assertEqual(d.cli("rm", "a.txt").stdout.decode().split("\n")[:-1], ["removed a.txt"])
        out = d.cli("rm", "c.txt").stdout.decode().split("\n")[:-1]
        self.assertEqual(out, ["removed c.txt", "deleted " + z])
        gc(d)
        want = {x: ["b.txt"], y: ["d.txt"], lone: ["lone.txt"]}
        for rebuilt in (False, True):
            if rebuilt:
                self.rebuild()
            for h, names in want.items():
                self.assertEqual(stat(d, h).get("names"), names, (h, rebuilt))
            for ref in ("a.txt", "c.txt", z):
                d.cli("get", ref, check_exit=1)
            self.assertEqual(status(d)["documents"], 3)
        d.cli("rm", "b.txt")
        d.cli("rm", lone)
        gc(d)
        self.rebuild()
        d.cli("get", x, check_exit=1)
        d.cli("get", lone, check_exit=1)
        self.assertEqual(stat(d, "d.txt").get("hash"), y)
        self.assertEqual(status(d)["documents"], 1)
        self.assertEqual(parse_verify_text(d.cli("verify").stdout)[1][2], 0)
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
