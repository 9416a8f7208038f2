#!/usr/bin/env python3
"""Encryption at rest (README "Encryption at rest"): an encrypted store's
bucket holds nothing of its documents' content, names, tags, metadata or
SHA-256 ids; reads of altered, cut, copied or moved records fail
`integrity` and verify names the document; a wrong passphrase is refused
before anything is written; --rebuild-index restores everything from the
bucket alone; two stores of the same content share no pack bytes.

Runs on the local backend; with CAIRN_TEST_BACKEND=s3 the S3 test server's
objects are read through the fixture's client (S3Leaks)."""

import hashlib
import json
import os
import shutil
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import packfmt as pf  # noqa: E402

KiB = 1024
MiB = ct.MiB
PASS = "correct horse battery staple"
FLAG_SEALED = 1
SEAL_OVERHEAD = 28


def write_secret(path, text):
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)
    return path


def pack_records(path):
    """[(offset, type, flags, length)] of a pack's records, its index excluded."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == pf.PACK_MAGIC, path
    limit = len(data)
    trailer = pf.parse_trailer(data)
    if trailer is not None:
        index_off, count, index_crc, _ = trailer
        if pf.crc32c(memoryview(data)[index_off:index_off + count * pf.INDEX_ENTRY]) == index_crc:
            limit = index_off
    out, off = [], pf.HEADER_SIZE
    while off + pf.RECORD_HEADER <= limit:
        rtype, flags, _, length, _ = struct.unpack_from(">BBHII", data, off)
        if off + pf.RECORD_HEADER + length > limit:
            break
        out.append((off, rtype, flags, length))
        off += pf.RECORD_HEADER + length
    return out, data


def fix_crc(path, off):
    """Recomputes the CRC-32C of the record at `off` (so only the AEAD can catch a change)."""
    with open(path, "r+b") as f:
        f.seek(off)
        hdr = f.read(pf.RECORD_HEADER)
        length = struct.unpack_from(">I", hdr, 4)[0]
        payload = f.read(length)
        crc = pf.record_crc(hdr[:8], hdr[12:44], payload)
        f.seek(off + 8)
        f.write(struct.pack(">I", crc))


def all_files(root):
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            out.append(os.path.join(dirpath, name))
    return sorted(out)


def snapshot(root):
    """{path: (size, sha256)} of every file under root."""
    out = {}
    for p in all_files(root):
        with open(p, "rb") as f:
            data = f.read()
        out[p] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def secret_docs():
    """Documents whose content, names, tags and metadata carry distinctive strings."""
    return [
        (b"the quick brown fox CONTENTMARKER-one jumps " * 200,
         {"name": "NAMEMARKER-one.txt", "tags": ["TAGMARKER-one"],
          "meta": {"author": "METAMARKER-one"}}),
        (os.urandom(150 * KiB).hex().encode() + b" CONTENTMARKER-two",
         {"name": "NAMEMARKER-two.bin", "tags": ["TAGMARKER-two", "TAGMARKER-shared"],
          "meta": {"METAKEYMARKER": "METAMARKER-two"}}),
        # more than 1,024 chunks: its manifest is a tree of segments in the packs
        (b"".join(b"CONTENTMARKER-three line %08d of a long manifest\n" % i
                  for i in range(60000)),
         {"name": "NAMEMARKER-three.log", "tags": ["TAGMARKER-three"]}),
        # more than a pack_size of 1M: a sealed pack, with its index
        (os.urandom(1200 * KiB) + b"CONTENTMARKER-five",
         {"name": "NAMEMARKER-five", "meta": {"note": "METAMARKER-five"}}),
    ]


def needles(docs):
    out = [b"CONTENTMARKER", b"NAMEMARKER", b"TAGMARKER", b"METAMARKER", b"METAKEYMARKER",
           b"quick brown fox"]
    for content, _ in docs:
        h = hashlib.sha256(content)
        out += [h.hexdigest().encode(), h.digest(), h.hexdigest()[:16].encode()]
    return out


class EncryptedBase(unittest.TestCase, ct.StoreChecks):
    """One encrypted store on the local backend (no tests of its own)."""

    def setUp(self):
        if ct.REMOTE:
            self.skipTest("reads the local backend's files")
        self.base = ct.make_tempdir(self)
        self.pw = write_secret(os.path.join(self.base, "pw"), PASS)
        self.d = self.daemon(self.base, ["--encryption", "on"], conf=self.WHOLE_CHUNKS)

    # documents up to 256 KiB are one chunk each, so equal sizes make equal block records
    WHOLE_CHUNKS = "[store]\nchunk_min = 256K\nchunk_avg = 512K\nchunk_max = 1M\n"

    def daemon(self, base, args, pw=None, conf=None):
        args = list(args)
        if conf:
            path = os.path.join(base, "cairn.conf")
            with open(path, "w") as f:
                f.write(conf)
            os.chmod(path, 0o600)
            args += ["--config", path]
        env = {"CAIRN_PASSWORD_FILE": pw or self.pw} if (pw or self.pw) else {}
        return ct.Daemon(self, base=base, args=args, env=env)

    def objects(self, d=None):
        return os.path.join((d or self.d).data_dir, "objects")

    def packs(self, d=None):
        return [p for p in all_files(os.path.join(self.objects(d), "packs"))]

    def add(self, d, content, **fields):
        with d.connect() as c:
            r = c.add(content, **fields)
        self.assertIs(r.get("ok"), True, "add: %r\n%s" % (ct.short(r), d.log_tail()))
        self.assertEqual(r["hash"], ct.sha256_hex(content))
        return r["hash"]

    def get(self, d, ref):
        with d.connect() as c:
            frames, got = c.get(ref)
        return frames, got

    def assert_integrity(self, d, ref, hashes):
        """get of ref fails `integrity`; verify names exactly the documents `hashes`."""
        frames, got = self.get(d, ref)
        self.assertIsNone(got, "a damaged document was read back")
        self.assertEqual(ct.error_code(frames[-1]), "integrity", ct.short(frames[-1]))
        p = d.cli("--json", "verify", check_exit=1, timeout=300 * ct.SLOW)
        # its result, then the error line
        [js, err] = ct.parse_json_lines(p.stdout)
        self.assertEqual(err["error"]["code"], "integrity", err)
        named = {x["hash"] for e in js.get("bad", []) for x in e["documents"]}
        self.assertEqual(named, set(hashes), js)



class EncryptedStore(EncryptedBase):
    """What the bucket holds, damage, rebuilding, and two stores."""

    # ---- what the bucket holds ----

    def assert_nothing_leaks(self, root, needles):
        files = all_files(root)
        self.assertTrue(files)
        for p in files:
            with open(p, "rb") as f:
                data = f.read()
            for n in needles:
                self.assertNotIn(n, data, "%s holds %r" % (p, n[:40]))

    def small_chunks_conf(self):
        return "[store]\nchunk_min = 256\nchunk_avg = 1K\nchunk_max = 4K\npack_size = 1M\n"

    def test_bucket_reveals_nothing(self):
        self.d = self.daemon(self.base, ["--encryption", "on"], conf=self.small_chunks_conf())
        self.d.start()
        docs = secret_docs()
        hashes = [self.add(self.d, c, **f) for c, f in docs]
        # the same content again: dedup still works inside an encrypted store
        before = sum(os.path.getsize(p) for p in self.packs())
        self.assertEqual(self.add(self.d, docs[1][0], name="again"), hashes[1])
        after = sum(os.path.getsize(p) for p in self.packs())
        # its journal entry (with its chunk list) only, not its 300 KiB again
        self.assertLess(after - before, 40 * KiB, "a second copy of a document was stored again")
        for (content, f), h in zip(docs, hashes):
            self.assertEqual(self.get(self.d, f["name"])[1], content)
            st = json.loads(self.d.cli("--json", "stat", h).stdout)
            self.assertEqual(st["size"], len(content))
        out = self.d.cli("search", "CONTENTMARKER-one").stdout
        self.assertIn(hashes[0].encode(), out)
        out = self.d.cli("search", "-t", "TAGMARKER-shared", "CONTENTMARKER-two").stdout
        self.assertIn(hashes[1].encode(), out)
        self.assert_verify_ok(self.d)
        self.d.stop()  # the open pack is sealed: its index is in the bucket too
        sealed = [p for p in self.packs() if pf.parse_trailer(open(p, "rb").read())]
        self.assertTrue(sealed, "no sealed pack to look at")
        for p in self.packs():
            recs, _ = pack_records(p)
            self.assertTrue(recs)
            self.assertEqual({flags for _, _, flags, _ in recs}, {FLAG_SEALED}, p)
        self.assert_nothing_leaks(self.objects(), needles(docs))
        keys = all_files(os.path.join(self.objects(), "keys"))
        self.assertEqual(len(keys), 1)
        for p in all_files(self.objects()):
            self.assertEqual(os.stat(p).st_mode & 0o777, 0o600, p)
        with open(keys[0], "rb") as f:
            self.assertNotIn(PASS.encode(), f.read())
        # the mode is the store's: a start without --encryption still encrypts
        self.d = self.daemon(self.base, [])
        self.d.start()
        h4 = self.add(self.d, b"CONTENTMARKER-four after a restart " * 50, name="NAMEMARKER-four")
        self.assertIn(h4.encode(), self.d.cli("search", "CONTENTMARKER-four").stdout)
        self.d.stop()
        self.assert_nothing_leaks(self.objects(), needles(docs) + [b"CONTENTMARKER-four"])
        for p in (self.d.log_path,):
            with open(p, "rb") as f:
                self.assertNotIn(PASS.encode(), f.read())

    def test_passphrase_never_shown(self):
        self.d.start()
        self.add(self.d, b"x" * 1000, name="a")
        st = self.d.cli("--json", "status").stdout
        self.assertNotIn(PASS.encode(), st)
        self.assertEqual(json.loads(st)["encryption"], "aes-256-gcm")
        self.d.stop()
        p = ct.subprocess.run(self.d.command() + ["--print-config"], env=self.d.env(),
                              capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(PASS.encode(), p.stdout + p.stderr)
        self.assertIn(b"encryption = aes-256-gcm", p.stdout)
        with open(self.d.log_path, "rb") as f:
            self.assertNotIn(PASS.encode(), f.read())

    def test_wrong_passphrase_refused(self):
        self.d.start()
        self.add(self.d, b"CONTENTMARKER " * 100, name="a")
        self.d.stop()
        before = snapshot(self.objects())
        wrong = write_secret(os.path.join(self.base, "wrong"), "not the passphrase")
        self.d.extra_env["CAIRN_PASSWORD_FILE"] = wrong
        text = self.assert_start_refused(self.d, "wrong passphrase")
        self.assertEqual(self.d.proc.returncode, 1)
        self.assertNotIn(b"not the passphrase", text.encode())
        self.assertEqual(snapshot(self.objects()), before, "a refused start wrote to the bucket")
        # the same through --rebuild-index
        args = self.d.args
        self.d.args = args + ["--rebuild-index"]
        self.assert_start_refused(self.d, "wrong passphrase")
        self.d.args = args
        self.assertEqual(snapshot(self.objects()), before)
        # password_command: its output is the passphrase; a failing one refuses the start
        del self.d.extra_env["CAIRN_PASSWORD_FILE"]
        conf = os.path.join(self.base, "cmd.conf")
        with open(conf, "w") as f:
            f.write("[store]\npassword_command = cat %s\n" % self.pw)
        os.chmod(conf, 0o600)
        self.d.args = args + ["--config", conf]
        self.d.start()
        self.assertEqual(self.get(self.d, "a")[1], b"CONTENTMARKER " * 100)
        self.d.stop()
        with open(conf, "w") as f:
            f.write("[store]\npassword_command = false\n")
        self.assert_start_refused(self.d, "password_command failed")
        self.assertEqual(self.d.proc.returncode, 1)
        # a password file others may read is refused
        os.chmod(self.pw, 0o644)
        self.d.args = args
        self.d.extra_env["CAIRN_PASSWORD_FILE"] = self.pw
        self.assert_start_refused(self.d, "chmod 600")

    def test_plain_store_not_converted(self):
        d = self.daemon(self.base, [])
        d.start()
        self.add(d, b"plain " * 100, name="p")
        d.stop()
        d.args = ["--encryption", "on"]
        self.assert_start_refused(d, "not converted")
        self.assertFalse(os.path.exists(os.path.join(self.objects(d), "keys")))
        d.args = []
        d.start()
        self.assertEqual(self.get(d, "p")[1], b"plain " * 100)
        d.stop()

    def test_config_lost_refused(self):
        """Key objects without a config saying encrypted: no plain record is written."""
        self.d.start()
        self.add(self.d, b"y" * 100, name="a")
        self.d.stop()
        os.unlink(os.path.join(self.objects(), "store", "config"))
        self.d.args = []
        self.assert_start_refused(self.d, "does not say the store is encrypted")

    def test_mount_reads_an_encrypted_store(self):
        import test_mount as tm  # helpers only: its test classes are not collected here
        why = tm.fuse_missing()
        if why:
            self.skipTest(why)
        self.d.start()
        content = os.urandom(700 * KiB) + b"CONTENTMARKER mounted"
        self.add(self.d, content, name="docs/NAMEMARKER.bin")
        mnt = os.path.join(self.base, "mnt")
        m = tm.Mount(self.d, mnt, self).start()
        found = [os.path.join(dp, f) for dp, _, fs in os.walk(mnt) for f in fs
                 if f == "NAMEMARKER.bin"]
        self.assertTrue(found, "the document's name is not in the mount")
        with open(found[0], "rb") as f:
            self.assertEqual(f.read(), content)
        ct.subprocess.run(["fusermount3", "-u", mnt], check=True, timeout=tm.WAIT)
        m.wait()
        self.d.stop()

    # ---- damage ----

    def two_docs_in_one_pack(self):
        """a and b, random, of one size (so their block records are of one length)."""
        self.d.start()
        docs = {n: os.urandom(100 * KiB) for n in ("a", "b")}
        hashes = {n: self.add(self.d, c, name=n) for n, c in docs.items()}
        self.d.stop()
        [pack] = self.packs()
        recs, _ = pack_records(pack)
        blocks = [r for r in recs if r[1] == pf.REC_BLOCK]
        self.assertEqual(len(blocks), 2, recs)
        self.assertEqual(blocks[0][3], blocks[1][3])
        return docs, hashes, pack, blocks

    def test_flipped_byte_fails_integrity(self):
        docs, hashes, pack, blocks = self.two_docs_in_one_pack()
        off = blocks[0][0]
        # a byte of the ciphertext, its CRC made right again: only the AEAD tag can tell
        pf.xor_byte(pack, off + pf.RECORD_HEADER + 5000)
        fix_crc(pack, off)
        self.d.start()
        self.assertEqual(self.get(self.d, "b")[1], docs["b"])
        self.assert_integrity(self.d, "a", [hashes["a"]])
        self.d.stop()

    def test_header_and_id_bound(self):
        """The header's type and keyed id are associated data: changing them fails."""
        docs, hashes, pack, blocks = self.two_docs_in_one_pack()
        pf.xor_byte(pack, blocks[1][0] + 20)  # a byte of b's keyed id
        fix_crc(pack, blocks[1][0])
        self.d.start()
        self.assertEqual(self.get(self.d, "a")[1], docs["a"])
        self.assert_integrity(self.d, "b", [hashes["b"]])
        self.d.stop()

    def test_truncated_record_fails_integrity(self):
        docs, hashes, pack, blocks = self.two_docs_in_one_pack()
        # b's block cut short, its CRC made right for the shorter payload and length
        off, _, _, length = blocks[1]
        with open(pack, "r+b") as f:
            f.seek(off)
            rec = bytearray(f.read(pf.RECORD_HEADER + length))
        cut = length - 100
        struct.pack_into(">I", rec, 4, cut)
        short = rec[:pf.RECORD_HEADER + cut] + b"\0" * 100
        with open(pack, "r+b") as f:
            f.seek(off)
            f.write(short)
        fix_crc_len = pf.record_crc(bytes(short[:8]), bytes(short[12:44]),
                                    bytes(short[pf.RECORD_HEADER:pf.RECORD_HEADER + cut]))
        with open(pack, "r+b") as f:
            f.seek(off + 8)
            f.write(struct.pack(">I", fix_crc_len))
        self.d.start()
        self.assertEqual(self.get(self.d, "a")[1], docs["a"])
        self.assert_integrity(self.d, "b", [hashes["b"]])
        self.d.stop()

    def test_block_moved_fails_integrity(self):
        """a's and b's blocks trade places in their pack: both reads fail."""
        docs, hashes, pack, blocks = self.two_docs_in_one_pack()
        (oa, _, _, ln), (ob, _, _, _) = blocks
        with open(pack, "r+b") as f:
            f.seek(oa)
            ra = f.read(pf.RECORD_HEADER + ln)
            f.seek(ob)
            rb = f.read(pf.RECORD_HEADER + ln)
            f.seek(oa)
            f.write(rb)
            f.seek(ob)
            f.write(ra)
        self.d.start()
        frames, got = self.get(self.d, "a")
        self.assertIsNone(got)
        self.assertEqual(ct.error_code(frames[-1]), "integrity")
        self.assert_integrity(self.d, "b", [hashes["a"], hashes["b"]])
        self.d.stop()

    def test_record_copied_from_another_pack(self):
        """A block of another pack of the store, of the same length, put in b's place."""
        self.d = self.daemon(self.base, ["--encryption", "on"], conf=self.WHOLE_CHUNKS + "pack_size = 1M\n")
        docs, hashes, pack, blocks = self.two_docs_in_one_pack()
        self.d.start()
        self.add(self.d, os.urandom(1100 * KiB), name="big")  # fills the first pack
        self.add(self.d, os.urandom(100 * KiB), name="c")  # so c goes to the next
        self.d.stop()
        other = [p for p in self.packs() if p != pack]
        src = None
        for p in self.packs():
            recs, data = pack_records(p)
            for off, rtype, _, length in recs:
                if rtype == pf.REC_BLOCK and length == blocks[1][3] and (p, off) != (pack, blocks[1][0]) \
                        and (p != pack):
                    src = data[off:off + pf.RECORD_HEADER + length]
        self.assertTrue(other and src is not None, "no block of another pack to copy")
        with open(pack, "r+b") as f:
            f.seek(blocks[1][0])
            f.write(src)
        self.d.start()
        self.assertEqual(self.get(self.d, "a")[1], docs["a"])
        self.assert_integrity(self.d, "b", [hashes["b"]])
        self.d.stop()

    def test_many_small_documents_at_once(self):
        """A bulk load of small documents: their blocks are merged into shared blocks,
        opened and sealed again in memory; every one reads back, none shows."""
        import threading
        self.d = self.daemon(self.base, ["--encryption", "on"])
        self.d.start()
        docs = {"small-%03d" % i: b"SMALLMARKER %d " % i + os.urandom(1500) for i in range(160)}
        errors = []

        def worker(names):
            try:
                with self.d.connect() as c:
                    # all in flight at once: one batch of many small blocks
                    rids = []
                    for n in names:
                        rid = c.next_id()
                        c.send({"id": rid, "op": "add", "data": docs[n], "name": n})
                        rids.append(rid)
                    for rid in rids:
                        r = c.recv_for(rid)
                        if r.get("ok") is not True:
                            errors.append(r)
            except Exception as e:  # reported below
                errors.append(e)

        names = sorted(docs)
        threads = [threading.Thread(target=worker, args=(names[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertFalse(errors, errors[:3])
        blocks = sum(1 for p in self.packs() for r in pack_records(p)[0] if r[1] == pf.REC_BLOCK)
        self.assertLess(blocks, len(docs), "no shared block was made: the test tests less")
        for n, content in docs.items():
            self.assertEqual(self.get(self.d, n)[1], content, n)
        self.assert_verify_ok(self.d)
        self.d.stop()
        self.assert_nothing_leaks(self.objects(), [b"SMALLMARKER"] + [
            hashlib.sha256(c).digest() for c in docs.values()])

    def test_gc_repacks_sealed_records(self):
        """gc copies live sealed records into new packs (as they are) and rebuilds
        blocks with dead chunks (sealed anew): everything left reads back."""
        self.d = self.daemon(self.base, ["--encryption", "on"],
                             conf="[store]\npack_size = 1M\nrepack_threshold = 90\n")
        self.d.start()
        docs = {"keep-%d" % i: os.urandom(200 * KiB) + b"CONTENTMARKER-%d" % i for i in range(8)}
        hashes = {n: self.add(self.d, c, name=n) for n, c in docs.items()}
        with self.d.connect() as c:
            for i in range(0, 8, 2):
                r = c.call("delete", ref="keep-%d" % i)
                self.assertIs(r.get("ok"), True, r)
        before = set(self.packs())
        [js] = ct.parse_json_lines(self.d.cli("--json", "gc", timeout=300 * ct.SLOW).stdout)
        self.assertGreater(js["packs_rewritten"] + js["packs_deleted"], 0, js)
        self.assertNotEqual(set(self.packs()), before)
        for i in range(1, 8, 2):
            self.assertEqual(self.get(self.d, "keep-%d" % i)[1], docs["keep-%d" % i])
        self.assert_verify_ok(self.d)
        self.d.stop()
        for p in self.packs():
            recs, _ = pack_records(p)
            self.assertEqual({flags for _, _, flags, _ in recs}, {FLAG_SEALED}, p)
        self.assert_nothing_leaks(self.objects(), [b"CONTENTMARKER"] + [
            bytes.fromhex(h) for h in hashes.values()])
        # and from the packs alone, after the gc
        for name in os.listdir(self.d.data_dir):
            if name.startswith(("cairn.db", "search.db")):
                os.unlink(os.path.join(self.d.data_dir, name))
        self.d.args += ["--rebuild-index"]
        self.d.start(wait=False)
        self.assertEqual(self.d.wait(120 * ct.SLOW), 0, self.d.log_tail())
        self.d.args.remove("--rebuild-index")
        self.d.start()
        for i in range(8):
            got = self.get(self.d, "keep-%d" % i)[1]
            self.assertEqual(got, docs["keep-%d" % i] if i % 2 else None, i)
        self.d.stop()

    # ---- rebuilding, and two stores ----

    def test_rebuild_index_from_bucket(self):
        self.d = self.daemon(self.base, ["--encryption", "on"], conf=self.small_chunks_conf())
        self.d.start()
        docs = secret_docs()
        hashes = [self.add(self.d, c, **f) for c, f in docs]
        with self.d.connect() as c:
            r = c.call("delete", ref="NAMEMARKER-two.bin")
            self.assertIs(r.get("ok"), True, r)
        hashes2 = self.add(self.d, docs[1][0], name="NAMEMARKER-two-again", tags=["TAGMARKER-x"])
        self.d.stop()
        # the database and search index lost: the bucket alone (the local backend's packs
        # are its own data directory's; a new directory on a shared bucket is S3Leaks's)
        for name in os.listdir(self.d.data_dir):
            if name.startswith(("cairn.db", "search.db")):
                os.unlink(os.path.join(self.d.data_dir, name))
        d2 = self.d
        d2.args += ["--rebuild-index"]
        d2.start(wait=False)
        self.assertEqual(d2.wait(120 * ct.SLOW), 0, d2.log_tail())
        d2.args.remove("--rebuild-index")
        d2.start()
        with d2.connect() as c:
            listed = {e["name"] if "name" in e else e.get("names", [None])[0]: e["hash"]
                      for e in c.list_all()}
        self.assertEqual(self.get(d2, "NAMEMARKER-one.txt")[1], docs[0][0], d2.log_tail())
        self.assertEqual(self.get(d2, "NAMEMARKER-three.log")[1], docs[2][0])
        self.assertEqual(self.get(d2, "NAMEMARKER-two-again")[1], docs[1][0])
        self.assertIsNone(self.get(d2, "NAMEMARKER-two.bin")[1], "a deleted name came back")
        st = json.loads(d2.cli("--json", "stat", hashes[0]).stdout)
        self.assertIn("TAGMARKER-one", st.get("tags", []))
        self.assertEqual(st.get("meta", {}).get("author"), "METAMARKER-one")
        self.assertIn(hashes[0].encode(), d2.cli("search", "CONTENTMARKER-one").stdout)
        self.assertIn(hashes2.encode(), d2.cli("search", "-t", "TAGMARKER-x", "CONTENTMARKER-two").stdout)
        self.assertIn(hashes[2].encode(), d2.cli("search", "-t", "TAGMARKER-three", "manifest").stdout)
        self.assertTrue(listed)
        self.assert_verify_ok(d2)
        d2.stop()

    def test_two_stores_differ(self):
        content = os.urandom(64 * KiB) + b"same in both"
        stores = []
        for i in range(2):
            base = ct.make_tempdir(self)
            d = self.daemon(base, ["--encryption", "on"])
            d.start()
            self.add(d, content, name="same")
            d.stop()
            stores.append(d)
        [p1], [p2] = self.packs(stores[0]), self.packs(stores[1])
        r1, b1 = pack_records(p1)
        r2, b2 = pack_records(p2)
        self.assertEqual([r[1:] for r in r1][:1], [r[1:] for r in r2][:1])  # same shapes
        for (o1, _, _, n1), (o2, _, _, n2) in zip(r1, r2):
            x, y = b1[o1 + 12:o1 + pf.RECORD_HEADER + n1], b2[o2 + 12:o2 + pf.RECORD_HEADER + n2]
            self.assertNotEqual(x[:32], y[:32], "the same keyed id in two stores")
            self.assertNotEqual(x[32:32 + 12], y[32:32 + 12], "one nonce in two stores")
            # no 32-byte run of one record's ciphertext in the other's
            self.assertNotIn(bytes(x[100:132]), bytes(y))
        k1 = all_files(os.path.join(self.objects(stores[0]), "keys"))
        k2 = all_files(os.path.join(self.objects(stores[1]), "keys"))
        j1, j2 = (json.load(open(k[0])) for k in (k1, k2))
        self.assertNotEqual(j1["salt"], j2["salt"])
        self.assertNotEqual(j1["data"], j2["data"])
        self.assertEqual((j1["kdf"], j1["N"], j1["r"], j1["p"]), ("scrypt", 32768, 8, 1))


class Keys(EncryptedBase):
    """cairn key list / add / remove / passwd."""

    def keys(self, d):
        [js] = ct.parse_json_lines(d.cli("--json", "key", "list").stdout)
        return js["keys"]

    def restart_with(self, d, pw):
        d.stop()
        d.extra_env["CAIRN_PASSWORD_FILE"] = pw
        d.start()

    def test_add_remove_passwd(self):
        d = self.d
        d.start()
        content = b"CONTENTMARKER kept across key changes " * 100
        self.add(d, content, name="doc")
        [first] = self.keys(d)
        self.assertTrue(first["current"])
        self.assertEqual((first["scrypt_n"], first["scrypt_r"], first["scrypt_p"]), (32768, 8, 1))
        # the last key cannot be removed, nor the one in use
        p = d.cli("key", "remove", first["id"], check_exit=1)
        self.assertIn(b"last", p.stderr)
        # add: the new passphrase opens the store
        pw2 = write_secret(os.path.join(self.base, "pw2"), "a second passphrase")
        p = d.cli("key", "add", "--new-password-file", pw2)
        second = p.stdout.split()[-1].decode()
        self.assertEqual(sorted(k["id"] for k in self.keys(d)), sorted([first["id"], second]))
        p = d.cli("key", "remove", first["id"], check_exit=1)
        self.assertIn(b"passwd", p.stderr, "removing the key in use was not refused")
        self.restart_with(d, pw2)
        self.assertEqual(self.get(d, "doc")[1], content)
        cur = [k["id"] for k in self.keys(d) if k["current"]]
        self.assertEqual(cur, [second])
        # remove the first: its passphrase no longer opens the store
        d.cli("key", "remove", first["id"])
        self.assertEqual([k["id"] for k in self.keys(d)], [second])
        p = d.cli("key", "remove", "0" * 32, check_exit=1)
        self.assertIn(b"no key", p.stderr)
        d.stop()
        d.extra_env["CAIRN_PASSWORD_FILE"] = self.pw
        self.assert_start_refused(d, "wrong passphrase")
        # passwd: a third passphrase replaces the one in use
        d.extra_env["CAIRN_PASSWORD_FILE"] = pw2
        d.start()
        pw3 = write_secret(os.path.join(self.base, "pw3"), "the third one")
        env = {"CAIRN_NEW_PASSWORD_FILE": pw3}
        p = ct.run_cli("key", "passwd", socket=d.socket_path, env=env)
        third = p.stdout.split()[-1].decode()
        keys = self.keys(d)
        self.assertEqual([(k["id"], k["current"]) for k in keys], [(third, True)])
        d.stop()
        self.assert_start_refused(d, "wrong passphrase")
        d.extra_env["CAIRN_PASSWORD_FILE"] = pw3
        d.start()
        self.assertEqual(self.get(d, "doc")[1], content)
        # no passphrase reached the bucket, the log or a reply
        for p in all_files(self.objects()) + [d.log_path]:
            with open(p, "rb") as f:
                data = f.read()
            for secret in (PASS, "a second passphrase", "the third one"):
                self.assertNotIn(secret.encode(), data, p)
        d.stop()

    def test_plain_store_has_no_keys(self):
        d = self.daemon(self.base, [])
        d.start()
        p = d.cli("key", "list", check_exit=1)
        self.assertIn(b"not encrypted", p.stderr)
        self.assertEqual(json.loads(d.cli("--json", "status").stdout)["encryption"], "off")
        d.stop()

    def test_new_passphrase_never_on_command_line(self):
        self.d.start()
        p = self.d.cli("key", "add", "secret-on-the-command-line", check_exit=2)
        self.assertIn(b"too many arguments", p.stderr)
        self.d.stop()


class S3Leaks(unittest.TestCase):
    """The same on the S3 test server: nothing of the documents in any of the
    bucket's objects; a second daemon with a data directory of its own reads
    them (a shared bucket), and --rebuild-index of a new data directory from
    the bucket alone restores every document, name, tag and search hit."""

    def setUp(self):
        self.srv = ct.s3_server()  # skips without node and tests/s3/node_modules
        self.prefix = "enc-%s" % os.path.basename(ct.make_tempdir(self))
        self.pw = write_secret(os.path.join(ct.make_tempdir(self), "pw"), PASS)

    def daemon(self, args=()):
        url, env = ct.s3_backend(self.prefix)
        env = dict(env, CAIRN_PASSWORD_FILE=self.pw)
        return ct.Daemon(self, args=["--backend", url] + list(args), env=env)

    def bucket_files(self):
        root = os.path.join(self.srv.store_dir, ct.S3_BUCKET, self.prefix)
        return all_files(root)

    def test_s3_bucket_reveals_nothing_and_rebuilds(self):
        d1 = self.daemon(["--encryption", "on"])
        d1.start()
        docs = secret_docs()[:3]
        hashes = []
        with d1.connect() as c:
            for content, f in docs:
                r = c.add(content, **f)
                self.assertIs(r.get("ok"), True, r)
                hashes.append(r["hash"])
        d1.stop()
        keys = self.srv.list_keys(ct.S3_BUCKET, self.prefix + "/")
        self.assertTrue(any("/keys/" in k for k in keys), keys)
        self.assertTrue(any(k.endswith("/store/config") for k in keys), keys)
        files = self.bucket_files()
        self.assertTrue(files)
        for p in files:
            with open(p, "rb") as f:
                data = f.read()
            for n in needles(docs):
                self.assertNotIn(n, data, "%s holds %r" % (p, n[:40]))
        # a new data directory, from the bucket alone
        d2 = self.daemon(["--rebuild-index"])
        d2.start(wait=False)
        self.assertEqual(d2.wait(120 * ct.SLOW), 0, d2.log_tail())
        d2.args.remove("--rebuild-index")
        d2.start()
        with d2.connect() as c:
            for (content, f), h in zip(docs, hashes):
                frames, got = c.get(f["name"])
                self.assertEqual(got, content, "%s: %r\n%s" % (f["name"], ct.short(frames[-1]),
                                                                 d2.log_tail()))
        st = json.loads(d2.cli("--json", "stat", hashes[0]).stdout)
        self.assertIn("TAGMARKER-one", st.get("tags", []))
        self.assertEqual(st.get("meta", {}).get("author"), "METAMARKER-one")
        self.assertIn(hashes[1].encode(), d2.cli("search", "-t", "TAGMARKER-shared",
                                                 "CONTENTMARKER-two").stdout)
        # a wrong passphrase is refused there too, and writes nothing
        before = {p: os.path.getsize(p) for p in self.bucket_files()}
        d2.stop()
        wrong = write_secret(os.path.join(ct.make_tempdir(self), "wrong"), "wrong")
        d3 = self.daemon()
        d3.extra_env["CAIRN_PASSWORD_FILE"] = wrong
        d3.start(wait=False)
        self.assertEqual(d3.wait(60 * ct.SLOW), 1, d3.log_tail())
        self.assertIn("wrong passphrase", d3.log_text())
        self.assertEqual({p: os.path.getsize(p) for p in self.bucket_files()}, before)

    def test_s3_two_daemons_share_an_encrypted_bucket(self):
        d1 = self.daemon(["--encryption", "on"])
        d1.start()
        d2 = self.daemon()  # no flag: the bucket says it is encrypted
        d2.start()
        one = b"CONTENTMARKER written by the first daemon " * 50
        two = b"CONTENTMARKER written by the second daemon " * 50
        with d1.connect() as c:
            self.assertIs(c.add(one, name="NAMEMARKER-one", tags=["TAGMARKER"]).get("ok"), True)
        d2.cli("refresh")
        with d2.connect() as c:
            self.assertEqual(c.get("NAMEMARKER-one")[1], one, d2.log_tail())
            self.assertIs(c.add(two, name="NAMEMARKER-two").get("ok"), True)
        d1.cli("refresh")
        with d1.connect() as c:
            self.assertEqual(c.get("NAMEMARKER-two")[1], two, d1.log_tail())
        self.assertIn(ct.sha256_hex(two).encode(), d1.cli("search", "second").stdout)
        d1.stop()
        d2.stop()
        for p in self.bucket_files():
            with open(p, "rb") as f:
                data = f.read()
            for n in (b"CONTENTMARKER", b"NAMEMARKER", b"TAGMARKER",
                      ct.sha256_hex(one).encode(), hashlib.sha256(two).digest()):
                self.assertNotIn(n, data, p)


if __name__ == "__main__":
    ct.main()
