#!/usr/bin/env python3
"""An acknowledged add survives kill -9. Eight threads add documents
concurrently while the daemon is killed; after a restart (stale socket and
lock left behind) every acknowledged document is byte-identical, its name
resolves, and nothing listed is unreadable. And what a client was told
failed stays undone: an add or rm whose records reached a pack but whose
database changes failed (CAIRN_TEST_FAIL_APPLY) is undone after a restart,
a gc and a rebuild from the packs alone."""

import subprocess

import hashlib
import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402


def random_size(rng):
    roll = rng.random()
    if roll < 0.05:
        return 0
    if roll < 0.70:
        return rng.randint(1, 16 * 1024)
    if roll < 0.95:
        return rng.randint(16 * 1024, 400 * 1024)  # streamed over several frames
    return rng.randint(1 * ct.MiB, 3 * ct.MiB)


class KillDuringAdds(unittest.TestCase):
    THREADS = 8
    CYCLES = 3

    def run_cycle(self, d, cycle, acked, names):
        stop = threading.Event()
        lock = threading.Lock()
        counts = [0] * self.THREADS
        errors = []

        def worker(k):
            rng = random.Random(cycle * 1000 + k)
            try:
                conn = d.connect()
            except OSError as e:
                errors.append("thread %d could not connect: %s" % (k, e))
                return
            try:
                n = 0
                while not stop.is_set():
                    content = os.urandom(random_size(rng))
                    name = "c%d-t%d-%d" % (cycle, k, n)
                    n += 1
                    try:
                        r = conn.add(content, name=name, tags=["t%d" % k])
                    except (ct.ConnectionClosed, OSError):
                        return  # the daemon was killed mid-request
                    if r.get("ok") is not True:
                        errors.append("add failed before the kill: %r" % ct.short(r))
                        return
                    if r.get("hash") != hashlib.sha256(content).hexdigest():
                        errors.append("acked hash %r does not match content" % r.get("hash"))
                        return
                    with lock:
                        acked[r["hash"]] = content
                        names[name] = r["hash"]
                        counts[k] += 1
            except Exception as e:  # reported by the main thread
                errors.append("thread %d: %r" % (k, e))
            finally:
                conn.close()

        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(self.THREADS)]
        for t in threads:
            t.start()
        started = time.monotonic()
        deadline = started + 120 * ct.SLOW
        # kill only once every thread has had acks and the adds are in full swing
        while min(counts) < 2 or sum(counts) < 8 * self.THREADS or time.monotonic() < started + 1:
            self.assertLess(time.monotonic(), deadline, "adds too slow: %r acks" % counts)
            self.assertFalse(errors, errors)
            time.sleep(0.05)
        time.sleep(random.Random(cycle).uniform(0, 0.3))
        d.kill9()
        stop.set()
        for t in threads:
            t.join(60)
            self.assertFalse(t.is_alive(), "a client thread hangs after the kill")
        self.assertFalse(errors, errors)
        self.assertTrue(all(counts), "some thread got no add acknowledged: %r" % counts)

    def verify(self, d, acked, names):
        with d.connect() as c:
            for h, content in acked.items():
                frames, got = c.get(h)
                self.assertIsNotNone(got, "acked document %s lost: %r" % (h, ct.short(frames[-1])))
                self.assertEqual(len(got), len(content), h)
                self.assertEqual(hashlib.sha256(got).hexdigest(), h)
                self.assertEqual(got, content)
            for name, h in names.items():
                st = c.call("stat", ref=name)
                self.assertEqual(st.get("hash"), h, "name %s: %r" % (name, ct.short(st)))
        # everything `ls` shows can be read back and matches its hash
        listed = ct.parse_ls(d.cli("ls", "--docs", timeout=300).stdout)
        listed_hashes = {h for h, _, _ in listed}
        self.assertEqual(len(listed_hashes), len(listed), "ls shows a document twice")
        self.assertTrue(set(acked) <= listed_hashes, "ls misses acked documents")
        with d.connect() as c:
            for h, size, _ in listed:
                frames, got = c.get(h)
                self.assertIsNotNone(got, "ls shows %s but get fails: %r" % (h, ct.short(frames[-1])))
                self.assertEqual(len(got), size)
                self.assertEqual(hashlib.sha256(got).hexdigest(), h)
        st = d.status()
        self.assertEqual(st["documents"], len(listed))
        # and the CLI reads a few back byte for byte
        tmp = ct.make_tempdir(self)
        for h in list(acked)[:5]:
            out = os.path.join(tmp, h)
            d.cli("get", "-o", out, h)
            with open(out, "rb") as f:
                self.assertEqual(f.read(), acked[h])

    def test_kill9_during_concurrent_adds(self):
        d = ct.Daemon(self)
        d.start()
        acked = {}
        names = {}
        for cycle in range(self.CYCLES):
            self.run_cycle(d, cycle, acked, names)
            self.assertTrue(os.path.exists(d.socket_path), "expected a stale socket after kill -9")
            d.start()  # over the stale socket and lock
            self.verify(d, acked, names)
        d.stop()


class Restart(unittest.TestCase):
    def test_restart_after_kill9_with_stale_socket_and_lock(self):
        d = ct.Daemon(self)
        d.start()
        with d.connect() as c:
            h = c.add(b"survivor", name="s")["hash"]
        for _ in range(3):
            d.kill9()
            self.assertTrue(os.path.exists(d.socket_path), "kill -9 left no stale socket to test with")
            d.start()
            p = d.cli("get", "s")
            self.assertEqual(p.stdout, b"survivor")
        # the restarted daemon holds the lock again
        d2 = ct.Daemon(self, base=d.base, data_dir=d.data_dir,
                       socket_path=os.path.join(d.base, "other", "x.sock"))
        d2.start(wait=False)
        self.assertNotEqual(d2.wait(timeout=30 * ct.SLOW), 0, "second daemon ran beside a restarted one")
        self.assertEqual(d.cli("get", h).stdout, b"survivor")
        d.stop()

    def test_kill9_mid_stream_leaves_no_partial_document(self):
        d = ct.Daemon(self)
        d.start()
        with d.connect() as c:
            keep = c.add(b"acknowledged", name="keep")
            self.assertIs(keep["ok"], True)
            content = os.urandom(8 * ct.MiB)
            c.send({"id": 500, "op": "add", "name": "partial", "size": len(content),
                    "data": content[:ct.MAX_DATA], "more": True})
            for pos in range(ct.MAX_DATA, 5 * ct.MiB, ct.MAX_DATA):
                c.send({"id": 500, "op": "data", "data": content[pos:pos + ct.MAX_DATA], "more": True})
            time.sleep(0.5)
            d.kill9()
        d.start()
        with d.connect() as c:
            self.assertEqual([it["hash"] for it in c.list_all()], [keep["hash"]])
            frames, got = c.get("partial")
            self.assertEqual(frames[-1].get("error", {}).get("code"), "not_found")
            _, got = c.get("keep")
            self.assertEqual(got, b"acknowledged")
            # the same content can be added in full afterwards
            r = c.add(content, name="partial")
            self.assertEqual(r.get("hash"), ct.sha256_hex(content), ct.short(r))
            _, got = c.get("partial")
            self.assertEqual(got, content)
        d.stop()


class FailedCommit(ct.StoreChecks, unittest.TestCase):
    """CAIRN_TEST_FAIL_APPLY=NAME makes the database changes of an add of NAME
    and of `rm NAME` fail after their records (journal entry included) are in
    the open pack. The client is told the operation failed, so it must stay
    undone everywhere the packs are read again: without a void entry after
    it, a rebuild applied the failed add and the failed rm."""

    def rebuild(self, d):
        p = subprocess.run(d.command() + ["--rebuild-index"], env=d.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300 * ct.SLOW)
        self.assertEqual(p.returncode, 0, "--rebuild-index failed:\n%s" % p.stdout.decode()[-3000:])

    def check(self, d, when, kept, doomed_new):
        self.assertEqual(d.cli("get", "victim").stdout, kept["victim"], "%s: the failed rm applied" % when)
        self.assertEqual(d.cli("get", "keep").stdout, kept["keep"], when)
        self.assertEqual(d.cli("get", "after").stdout, kept["after"], when)
        p = d.cli("stat", ct.sha256_hex(doomed_new), check_exit=None)
        self.assertEqual(p.returncode, 1, "%s: the failed add applied: %r" % (when, p.stdout))
        names = [line.split()[-1] for line in d.cli("ls").stdout.decode().splitlines() if line.strip()]
        self.assertEqual(sorted(names), ["after", "keep", "victim"], when)

    def test_failed_add_and_rm_stay_undone(self):
        d = ct.Daemon(self)
        d.start()
        kept = {"victim": os.urandom(3000) + b"victim", "keep": b"kept all along", "after": b""}
        d.cli("add", "-n", "victim", "-", input=kept["victim"])
        d.cli("add", "-n", "keep", "-", input=kept["keep"])
        d.stop()
        d.extra_env["CAIRN_TEST_FAIL_APPLY"] = "victim"
        d.start()
        doomed_new = os.urandom(5000) + b"the new victim"
        p = d.cli("add", "-n", "victim", "-", input=doomed_new, check_exit=None)
        self.assertNotEqual(p.returncode, 0, "the add whose commit failed was reported done")
        p = d.cli("rm", "victim", check_exit=None)
        self.assertNotEqual(p.returncode, 0, "the rm whose commit failed was reported done")
        kept["after"] = os.urandom(2000) + b"added after the failures"
        d.cli("add", "-n", "after", "-", input=kept["after"])
        self.check(d, "live", kept, doomed_new)
        d.stop()
        del d.extra_env["CAIRN_TEST_FAIL_APPLY"]
        d.start()
        self.check(d, "after a restart", kept, doomed_new)
        d.stop()
        self.rebuild(d)
        d.start()
        self.check(d, "after --rebuild-index", kept, doomed_new)
        # gc rewrites the packs (keep's old copy dies with it); the voids go along
        d.cli("rm", "keep")
        kept["keep"] = b"kept, re-added"
        d.cli("add", "-n", "keep", "-", input=kept["keep"])
        with d.connect(timeout=300) as c:
            r = c.call("gc", timeout=300 * ct.SLOW)
        self.assertIs(r.get("ok"), True, ct.short(r))
        d.stop()
        self.rebuild(d)
        d.start()
        self.check(d, "after gc and --rebuild-index", kept, doomed_new)
        self.assert_verify_ok(d)
        d.stop()


if __name__ == "__main__":
    ct.main()
