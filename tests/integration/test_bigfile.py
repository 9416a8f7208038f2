#!/usr/bin/env python3
"""A 1 GiB document goes through the CLI and the daemon byte for byte while
neither holds it in memory (peak RSS under 100 MiB each), and a small get is
served while a 1 GiB add stream is still in flight. The daemon's cache of
decoded chunks is configured memory on top of a fixed working set: it is set
to 32M here, so the limit checks that working set (the README says cairnd
peaks at about cache_size plus 50 MiB).

CAIRN_SANITIZED=1 skips only the RSS assertions (ASan inflates RSS); the
round trips run regardless, with 256 MiB. CAIRN_BIGFILE_MIB changes the size
for local experiments (default 1024)."""

import hashlib
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

# Under the sanitizers (which skip the RSS checks) 256 MiB go through the same code.
SIZE = int(os.environ.get("CAIRN_BIGFILE_MIB", "256" if ct.SANITIZED else "1024")) * ct.MiB
RSS_LIMIT_KIB = 100 * 1024


class BigFile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = ct.make_tempdir()
        cls.addClassCleanup(shutil.rmtree, cls.base, True)
        conf = os.path.join(cls.base, "cairnd.conf")
        with open(conf, "w") as f:
            f.write("[store]\ncache_size = 32M\n")
        cls.d = ct.Daemon(None, base=cls.base, args=["--config", conf])
        cls.addClassCleanup(cls.d.cleanup)
        cls.d.start()
        src = os.path.join(cls.base, "big.in")
        out = os.path.join(cls.base, "big.out")
        cls.digest = ct.write_random_file(src, SIZE)
        cli = [ct.CAIRN, "--socket", cls.d.socket_path, "--no-autostart"]
        add_out = os.path.join(cls.base, "add.stdout")
        cls.add_rc, cls.add_rss, cls.add_err = ct.spawn_wait(cli + ["add", "-n", "big", src],
                                                             stdout_path=add_out)
        with open(add_out, "rb") as f:
            cls.add_stdout = f.read()
        os.unlink(src)
        cls.get_rc, cls.get_rss, cls.get_err = ct.spawn_wait(cli + ["get", "-o", out, "big"])
        cls.out_size = os.path.getsize(out) if os.path.exists(out) else -1
        cls.out_digest = ct.sha256_file(out) if os.path.exists(out) else None
        if os.path.exists(out):
            os.unlink(out)
        # peak over the daemon's whole life so far: start, 1 GiB in, 1 GiB out
        cls.daemon_hwm = cls.d.vm_hwm_kib()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_1gib_roundtrip_byte_exact(self):
        self.assertEqual(self.add_rc, 0, "cairn add failed: %r" % self.add_err[-2000:])
        self.assertEqual(ct.parse_add(self.add_stdout), [(self.digest, "big")])
        self.assertEqual(self.get_rc, 0, "cairn get failed: %r" % self.get_err[-2000:])
        self.assertEqual(self.out_size, SIZE)
        self.assertEqual(self.out_digest, self.digest)
        with self.d.connect() as c:
            st = c.call("stat", ref="big")
        self.assertEqual(st.get("size"), SIZE)
        self.assertEqual(st.get("hash"), self.digest)

    def test_cli_peak_rss(self):
        if ct.SANITIZED:
            self.skipTest("RSS bound not meaningful under ASan (CAIRN_SANITIZED=1)")
        self.assertEqual((self.add_rc, self.get_rc), (0, 0))
        self.assertLess(self.add_rss, RSS_LIMIT_KIB, "cairn add peaked at %d KiB" % self.add_rss)
        self.assertLess(self.get_rss, RSS_LIMIT_KIB, "cairn get peaked at %d KiB" % self.get_rss)

    def test_daemon_peak_rss(self):
        if ct.SANITIZED:
            self.skipTest("RSS bound not meaningful under ASan (CAIRN_SANITIZED=1)")
        self.assertEqual((self.add_rc, self.get_rc), (0, 0))
        self.assertLess(self.daemon_hwm, RSS_LIMIT_KIB, "cairnd peaked at %d KiB" % self.daemon_hwm)

    def test_small_get_while_big_add_in_flight(self):
        small = os.urandom(8192)
        with self.d.connect() as c:
            small_hash = c.add(small, name="small")["hash"]
        big = self.d.connect(timeout=300 * ct.SLOW)
        self.addCleanup(big.close)
        rid = big.next_id()
        h = hashlib.sha256()
        pieces = SIZE // ct.MAX_DATA
        checkpoints = {1, pieces // 4, pieces // 2, 3 * pieces // 4}
        served = 0
        for i in range(pieces):
            piece = os.urandom(ct.MAX_DATA)
            h.update(piece)
            last = i == pieces - 1
            if i == 0:
                big.send({"id": rid, "op": "add", "name": "big2", "size": SIZE, "data": piece, "more": not last})
            else:
                big.send({"id": rid, "op": "data", "data": piece, "more": not last})
            if i in checkpoints:
                # The big add cannot have finished: its last frame is unsent.
                # A daemon that serializes work behind it hangs here; the
                # timeout only detects that hang, it measures nothing.
                with self.d.connect(timeout=120 * ct.SLOW) as other:
                    _, got = other.get(small_hash)
                    self.assertEqual(got, small)
                    fresh = os.urandom(8192)
                    r = other.add(fresh)
                    self.assertEqual(r.get("hash"), ct.sha256_hex(fresh), ct.short(r))
                    self.assertIs(other.call("status").get("ok"), True)
                served += 1
        self.assertEqual(served, len(checkpoints))
        r = big.recv_for(rid)
        self.assertIs(r.get("ok"), True, ct.short(r))
        self.assertEqual(r["hash"], h.hexdigest())
        self.assertEqual(r["size"], SIZE)


if __name__ == "__main__":
    ct.main()
