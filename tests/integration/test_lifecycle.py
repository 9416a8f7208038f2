#!/usr/bin/env python3
"""Starting and stopping the real `cairnd`:

  CleanShutdown   SIGTERM after a plain start, and after adds, gets,
                  deletes, gc, verify and a search, and the exit of
                  --rebuild-index: the daemon exits 0 with a heap that turns
                  any use of freed memory into a crash (see POISON_ENV)
"""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

MiB = ct.MiB

# glibc without its per-thread cache, so that every free() fills the block
# with the MALLOC_PERTURB_ byte: memory used after it was freed then holds
# garbage, and a libuv handle closed inside a freed struct makes the last
# loop run crash instead of going unnoticed (it did: the store freed the
# handle of its worker bridge while libuv still had it on its closing list).
# Other C libraries ignore both variables; ASan builds (scripts/check) catch
# a use after free by themselves.
POISON_ENV = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "MALLOC_PERTURB_": "165"}


class CleanShutdown(unittest.TestCase):
    def setUp(self):
        self.d = ct.Daemon(self, env=POISON_ENV)

    def test_sigterm_after_a_plain_start(self):
        self.d.start()
        self.d.assert_healthy()
        self.d.stop()
        self.assertIn("stopped", self.d.log_text())

    def test_sigterm_after_add_get_delete_gc(self):
        d = self.d
        d.start()
        small = [b"small document %d\n" % i for i in range(20)]
        big = os.urandom(3 * MiB)
        with d.connect() as c:
            hashes = []
            for x in small + [big]:
                r = c.add(x)
                self.assertIs(r.get("ok"), True, ct.short(r))
                hashes.append(r["hash"])
            for h, x in zip(hashes, small + [big]):
                _, got = c.get(h)
                self.assertEqual(got, x)
            for h in hashes[:10] + hashes[-1:]:
                r = c.call("delete", ref=h)
                self.assertIs(r.get("ok"), True, ct.short(r))
            for _ in range(2):
                r = c.call("gc", timeout=120 * ct.SLOW)
                self.assertIs(r.get("ok"), True, ct.short(r))
            r = c.call("verify", timeout=120 * ct.SLOW)
            self.assertIs(r.get("ok"), True, ct.short(r))
            r = c.call("search", query="small")
            self.assertIs(r.get("ok"), True, ct.short(r))
        d.stop()
        # what is left is all there after the poisoned run
        d.extra_env = {}
        d.start()
        with d.connect() as c:
            for h, x in zip(hashes[10:-1], small[10:]):
                _, got = c.get(h)
                self.assertEqual(got, x)
        d.stop()

    def test_rebuild_index_exits_cleanly(self):
        d = self.d
        d.extra_env = {}  # only the rebuild runs poisoned
        d.start()
        with d.connect() as c:
            r = c.add(b"to be rebuilt")
            self.assertIs(r.get("ok"), True, ct.short(r))
        d.stop()
        env = dict(d.env(), **POISON_ENV)
        p = subprocess.run(d.command() + ["--rebuild-index"], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=ct.STOP_TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stdout.decode("utf-8", "replace")[-3000:])
        self.assertIn(b"rebuilt", p.stdout)


if __name__ == "__main__":
    ct.main()
