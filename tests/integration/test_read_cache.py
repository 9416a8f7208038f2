#!/usr/bin/env python3
"""The read cache of remote backends, on the s3 backend against the real S3
server of s3fixture.py (s3rver behind the signing proxy, which counts every
request it gets):

  SecondRead     a document read once is read again after a restart of
                 cairnd (empty memory caches) without a single request to
                 the server; `status` counts the hits, misses and bytes
                 fetched
  Damage         slice files damaged on disk (a flipped data byte, a broken
                 header, a truncated file) are detected, fetched again and
                 never returned; `status` counts them
  Bound          read_cache_size holds across reads and across a restart
                 with a smaller bound; the slices read last are the ones kept
  ReadAhead      a cold sequential read of a large document keeps several
                 ranged GETs in flight at once (the proxy's in_flight_max)
  Ranges         get --range on the s3 backend, byte-exact at the first and
                 last byte, across chunk and pack boundaries, past the end and
                 at zero length, cold and from the cache
  NoCache        read_cache_size = 0: no directory, no status fields, reads
                 go to the server every time; the local backend has none
  Stale          a pack gc deleted leaves no slices, even when cairnd was
                 killed between the delete and the slices' removal, and its
                 number is never given to a new pack (whose reads would find
                 the old slices)
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import packfmt as pf  # noqa: E402
from test_s3_backend import S3Case  # noqa: E402

MiB = ct.MiB
SLICE = 1024 * 1024
HEADER = 4096


class CacheCase(S3Case):
    def cache_daemon(self, conf="", **kw):
        path = os.path.join(self.base, "cairnd-%d.conf" % (self.ndaemons + 1))
        with open(path, "w") as f:
            # a small pack size puts one document across several packs
            f.write("[store]\npack_size = 4M\n" + conf)
        return self.daemon(args=["--config", path], **kw)

    def cli(self, d, *args, check=True):
        p = subprocess.run([ct.CAIRN, "--socket", d.socket_path, "--no-autostart"] + list(args), capture_output=True, timeout=300)
        if check:
            self.assertEqual(p.returncode, 0, "cairn %s: %r\n%s" % (" ".join(args), p.stderr[-2000:], d.log_tail()))
        return p

    def add_random(self, d, name, size, seed):
        data = random.Random(seed).randbytes(size)
        src = os.path.join(self.base, name)
        with open(src, "wb") as f:
            f.write(data)
        self.cli(d, "add", "-n", name, src)
        return data

    def get(self, d, ref, *args):
        return self.cli(d, "get", *args, ref).stdout

    def status(self, d):
        [s] = ct.parse_json_lines(self.cli(d, "--json", "status").stdout)
        return s

    def cache_dir(self, d):
        return os.path.join(d.data_dir, "read-cache")

    def slice_files(self, d):
        cdir = self.cache_dir(d)
        return sorted(os.path.join(cdir, n) for n in os.listdir(cdir) if not n.endswith(".tmp"))

    def gets(self):
        return self.srv.counters()["requests"].get("GET", 0)


class SecondRead(CacheCase):
    def test_second_read_needs_no_request(self):
        d = self.cache_daemon()
        d.start()
        data = self.add_random(d, "doc", 9 * MiB + 123, 1)
        small = self.add_random(d, "small", 5000, 2)
        self.srv.control(reset_counters=True)
        self.assertEqual(self.get(d, "doc"), data)
        self.assertEqual(self.get(d, "small"), small)
        first = self.gets()
        self.assertGreater(first, 0, "the first read asked the server nothing")
        s = self.status(d)
        self.assertGreaterEqual(s["read_cache_fetched"], len(data))
        self.assertGreater(s["read_cache_misses"], 0)
        self.assertGreater(s["read_cache_bytes"], len(data))
        d.stop()
        # a new cairnd: its memory caches are empty, the slice files are not
        d.start()
        self.srv.control(reset_counters=True)
        self.assertEqual(self.get(d, "doc"), data)
        self.assertEqual(self.get(d, "small"), small)
        self.assertEqual(self.get(d, "doc", "--range", "5000000-5000099"), data[5000000:5000100])
        self.assertEqual(self.gets(), 0, "the second read went to the server: %r" % self.srv.counters()["requests"])
        s = self.status(d)
        self.assertEqual((s["read_cache_misses"], s["read_cache_fetched"]), (0, 0), s)
        self.assertGreaterEqual(s["read_cache_hits"], len(data) // SLICE)
        # the cache is never the store: without it everything is still there
        d.stop()
        shutil.rmtree(self.cache_dir(d))
        d.start()
        self.assertEqual(self.get(d, "doc"), data)
        self.assertGreater(self.gets(), 0)
        d.stop()


class Damage(CacheCase):
    def test_damaged_slices_are_fetched_again(self):
        d = self.cache_daemon()
        d.start()
        data = self.add_random(d, "doc", 6 * MiB, 3)
        self.assertEqual(self.get(d, "doc"), data)
        d.stop()
        files = [f for f in self.slice_files(d) if os.path.getsize(f) > HEADER + 100000]
        self.assertGreaterEqual(len(files), 3, self.slice_files(d))
        # a flipped byte in the data, a flipped byte in the header, a cut tail
        with open(files[0], "r+b") as f:
            f.seek(HEADER + 70000)
            b = f.read(1)
            f.seek(HEADER + 70000)
            f.write(bytes([b[0] ^ 0x40]))
        with open(files[1], "r+b") as f:
            f.seek(9)
            b = f.read(1)
            f.seek(9)
            f.write(bytes([b[0] ^ 1]))
        with open(files[2], "r+b") as f:
            f.truncate(HEADER + 1000)
        d.start()
        self.srv.control(reset_counters=True)
        self.assertEqual(self.get(d, "doc"), data)
        self.assertGreaterEqual(self.gets(), 3, "the damaged slices were not fetched again")
        s = self.status(d)
        self.assertEqual(s["read_cache_damaged"], 3, s)
        self.assertIn("damaged", d.log_text())
        # fetched again and kept: the next read is clean
        d.stop()
        d.start()
        self.srv.control(reset_counters=True)
        self.assertEqual(self.get(d, "doc"), data)
        self.assertEqual(self.gets(), 0)
        self.assertEqual(self.status(d)["read_cache_damaged"], 0)
        d.stop()


class Bound(CacheCase):
    def dir_bytes(self, d):
        """The slice files' bytes; one the daemon removes while they are
        counted (it forgets slices of packs it deletes) counts 0."""
        total = 0
        for f in self.slice_files(d):
            try:
                total += os.path.getsize(f)
            except FileNotFoundError:
                pass
        return total

    def assert_status_matches_dir(self, d):
        """status counts what is on disk, once the daemon is done removing."""
        deadline = time.monotonic() + 10
        while True:
            got, on_disk = self.status(d)["read_cache_bytes"], self.dir_bytes(d)
            if got == on_disk or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(got, on_disk)

    def test_size_bound_and_lru(self):
        d = self.cache_daemon("read_cache_size = 12M\n")
        d.start()
        docs = [self.add_random(d, "doc%d" % i, 5 * MiB, 10 + i) for i in range(4)]
        for i, data in enumerate(docs):
            self.assertEqual(self.get(d, "doc%d" % i), data)
            self.assertLessEqual(self.dir_bytes(d), 12 * MiB)
        s = self.status(d)
        self.assertEqual(s["read_cache_size"], 12 * MiB)
        self.assertLessEqual(s["read_cache_bytes"], 12 * MiB)
        self.assert_status_matches_dir(d)
        # the last document read is the one kept
        self.srv.control(reset_counters=True)
        self.assertEqual(self.get(d, "doc3"), docs[3])
        self.assertEqual(self.gets(), 0)
        d.stop()
        # a smaller bound at the next start: the oldest slices go at once
        conf = os.path.join(self.base, "small.conf")
        with open(conf, "w") as f:
            f.write("[store]\npack_size = 4M\nread_cache_size = 8M\n")
        d.args = [a for a in d.args if not a.endswith(".conf") and a != "--config"] + ["--config", conf]
        d.start()
        self.assert_status_matches_dir(d)
        self.assertLessEqual(self.dir_bytes(d), 8 * MiB)
        self.assertEqual(self.get(d, "doc0"), docs[0])
        self.assertLessEqual(self.dir_bytes(d), 8 * MiB)
        d.stop()


class ReadAhead(CacheCase):
    def test_cold_sequential_read_keeps_gets_in_flight(self):
        d = self.cache_daemon()
        d.start()
        data = self.add_random(d, "doc", 24 * MiB, 4)
        d.stop()
        d.start()
        self.srv.control(reset_counters=True, latency="rtt20")
        self.assertEqual(self.get(d, "doc"), data)
        c = self.srv.counters()
        self.srv.control(latency="clean")
        sys.stderr.write("# cold 24 MiB at rtt20: %d GETs, at most %d in flight\n"
                         % (c["requests"].get("GET", 0), c["in_flight_max"]))
        self.assertGreaterEqual(c["in_flight_max"], 4, "no read-ahead: %r" % c)
        d.stop()


class Ranges(CacheCase):
    def test_range_reads_on_s3(self):
        d = self.cache_daemon("read_cache_size = 0\n" if self._testMethodName.endswith("_uncached") else "")
        d.start()
        n = 9 * MiB + 4321
        data = self.add_random(d, "doc", n, 5)
        rng = random.Random(9)
        cases = [(0, 0), (n - 1, n - 1), (0, n - 1), (SLICE - 1, SLICE), (4 * MiB - 10, 4 * MiB + 10),
                 (1, 65536), (n - 10, n + 100)]
        cases += [(a, a + rng.randrange(1, 300000)) for a in (rng.randrange(n) for _ in range(6))]
        for rnd in ("cold", "cached"):
            for start, end in cases:
                with self.subTest(rnd=rnd, start=start, end=end):
                    self.assertEqual(self.get(d, "doc", "--range", "%d-%d" % (start, end)), data[start:end + 1])
            self.assertEqual(self.get(d, "doc", "--range", "%d-" % (n + 5)), b"")
            d.stop()
            d.start()
        d.stop()

    test_range_reads_on_s3_uncached = test_range_reads_on_s3


class Stale(CacheCase):
    def slice_seqs(self, d):
        return {int(os.path.basename(f).split("-")[0], 16) & ((1 << 48) - 1)
                for f in self.slice_files(d)}

    def remote_seqs(self):
        return {pf.parse_pack_name(k.rsplit("/", 1)[-1])[1] for k in self.remote_packs()}

    def test_deleted_packs_leave_no_slices_and_their_numbers_stay_used(self):
        d = self.cache_daemon()
        d.start()
        a = self.add_random(d, "a", 6 * MiB, 21)
        self.assertEqual(self.get(d, "a"), a)
        old = self.slice_seqs(d)
        self.assertTrue(old, self.slice_files(d))
        self.cli(d, "rm", "a")
        d.stop()
        # Killed after the backend's delete, before the slices go.
        d.extra_env["CAIRN_CRASH_AT"] = "repack-deleted"
        d.start()
        self.cli(d, "gc", check=False)
        self.assertEqual(d.proc.wait(60 * ct.SLOW), -signal.SIGKILL, d.log_tail())
        ct._LIVE.discard(d.proc)
        del d.extra_env["CAIRN_CRASH_AT"]
        d.start()
        self.cli(d, "gc")
        d.stop()
        d.start()
        left = self.slice_seqs(d) - self.remote_seqs()
        self.assertFalse(left, "slices of deleted packs %r stayed" % sorted(left))
        before = self.remote_seqs()
        b = self.add_random(d, "b", 6 * MiB, 22)
        self.assertEqual(self.get(d, "b"), b)
        new = self.remote_seqs() - before
        self.assertTrue(new)
        self.assertGreater(min(new), max(old), "a pack number was used again")
        self.cli(d, "verify")
        d.stop()


class NoCache(CacheCase):
    def test_size_zero_means_none(self):
        d = self.cache_daemon("read_cache_size = 0\n")
        d.start()
        data = self.add_random(d, "doc", 2 * MiB, 6)
        self.assertEqual(self.get(d, "doc"), data)
        s = self.status(d)
        self.assertNotIn("read_cache_hits", s)
        self.assertFalse(os.path.exists(self.cache_dir(d)))
        d.stop()
        d.start()
        self.srv.control(reset_counters=True)
        self.assertEqual(self.get(d, "doc"), data)
        self.assertGreater(self.gets(), 0)
        d.stop()

    def test_local_backend_has_none(self):
        d = ct.Daemon(self)
        d.start()
        p = subprocess.run([ct.CAIRN, "--socket", d.socket_path, "--no-autostart", "--json", "status"], capture_output=True)
        self.assertEqual(p.returncode, 0)
        [s] = ct.parse_json_lines(p.stdout)
        self.assertNotIn("read_cache_size", s)
        self.assertFalse(os.path.exists(os.path.join(d.data_dir, "read-cache")))
        d.stop()


if __name__ == "__main__":
    ct.main()
