#!/usr/bin/env python3
"""Starting and stopping the real `cairnd`:

  CleanShutdown   SIGTERM after a plain start, and after adds, gets,
                  deletes, gc, verify and a search, and the exit of
                  --rebuild-index: the daemon exits 0 with a heap that turns
                  any use of freed memory into a crash (see POISON_ENV)
  ClockStepsBack  a clock a day ahead, then set right across a restart: the
                  journal keeps its order (a newer name version and a
                  delete still win at --rebuild-index)
  StartSync       a restart after kill -9 makes everything under the object
                  tree durable (one syncfs) before it listens
  RelativeDataDir --data-dir and CAIRN_DATA_DIR relative to the daemon's
                  working directory, as in format 1: the data lands there,
                  and the same directory named absolutely finds it again
"""

import glob
import os
import shutil
import signal
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


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@ct.skip_if_remote("a faked clock skews a remote backend's request signatures")
@unittest.skipUnless(os.path.exists(FAKETIME_LIB), "libfaketime is not installed")
class ClockStepsBack(unittest.TestCase):
    def test_journal_order_survives_a_clock_set_back(self):
        """The journal orders adds and deletes by time. A clock a day ahead
        (libfaketime) and then set right across a restart must not reorder
        them: entries after the restart still sort after those before it, so
        a rebuild from the packs alone keeps the newer version of a name and
        does not bring a deleted document back."""
        ahead = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": "+1d", "DONT_FAKE_MONOTONIC": "1",
                 # the sanitizer build's runtime must otherwise come first
                 "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        d = ct.Daemon(self, env=ahead)
        d.start()
        d.cli("add", "-n", "n", "-", input=b"version one, written with the clock ahead")
        doomed = ct.parse_add(d.cli("add", "-n", "c", "-", input=b"deleted later").stdout)[0][0]
        d.stop()
        d.extra_env = {}
        d.start()  # the clock is a day behind the journal now
        newer = b"version two, written after the clock was set back"
        d.cli("add", "-n", "n", "-", input=newer)
        d.cli("rm", doomed)
        self.assertEqual(d.cli("get", "n").stdout, newer)
        d.stop()
        for f in glob.glob(os.path.join(d.data_dir, "cairn.db*")) + \
                glob.glob(os.path.join(d.data_dir, "search.db*")):
            os.unlink(f)
        p = subprocess.run(d.command() + ["--rebuild-index"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=d.env(),
                           timeout=120 * ct.SLOW)
        self.assertEqual(p.returncode, 0, p.stdout.decode("utf-8", "replace"))
        d.start()
        self.assertEqual(d.cli("get", "n").stdout, newer, "the rebuild put the older version first")
        self.assertEqual(d.cli("get", doomed, check_exit=None).returncode, 1,
                         "the rebuild brought a deleted document back")
        d.stop()


@ct.skip_if_remote("the local backend's start")
@unittest.skipUnless(shutil.which("strace"), "strace is not installed")
class StartSync(unittest.TestCase):
    def test_restart_after_kill9_syncs_the_tree_before_listening(self):
        """A run killed with -9 may leave pack entries, directories and
        appended records only in the page cache; the restart builds on what
        it finds, so it must make all of it durable (syncfs on the object
        tree's file system) before it listens. strace shows the calls."""
        d = ct.Daemon(self)
        d.start()
        d.cli("add", "-n", "a", "-", input=b"before the kill")
        d.kill9()
        trace = os.path.join(d.base, "strace.out")
        command = d.command
        d.command = lambda: ["strace", "-f", "-qq", "-e", "trace=syncfs,listen", "-o", trace] + command()
        # LeakSanitizer cannot run under ptrace (the sanitizer build would abort at exit)
        d.extra_env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        d.start()
        pid = d.status()["pid"]
        os.kill(pid, signal.SIGTERM)
        self.assertEqual(d.proc.wait(ct.STOP_TIMEOUT), 0)
        with open(trace) as f:
            calls = [line.split(None, 1)[1] for line in f if "(" in line]
        syncs = [i for i, c in enumerate(calls) if c.startswith("syncfs(") and c.rstrip().endswith("= 0")]
        listens = [i for i, c in enumerate(calls) if c.startswith("listen(")]
        self.assertTrue(syncs, "no syncfs at the restart: %r" % calls)
        self.assertTrue(listens, calls)
        self.assertLess(syncs[0], listens[0], "syncfs after listen: %r" % calls)


@ct.skip_if_remote("checks the local backend's DATA_DIR/objects")
class RelativeDataDir(unittest.TestCase):
    def setUp(self):
        self.base = ct.make_tempdir(self)
        self.real_base = os.path.realpath(self.base)  # what getcwd() says in there

    def check_data_dir(self, d, absolute):
        """The daemon serves, and keeps its data in `absolute`."""
        content = b"stored below a relative data dir"
        h = ct.parse_add(d.cli("add", "-", input=content).stdout)[0][0]
        self.assertEqual(d.cli("get", h).stdout, content)
        st = d.status()
        self.assertEqual(st["backend"], "local:" + os.path.join(absolute, "objects"))
        self.assertIn("data in %s," % absolute, d.log_text())
        for name in ("cairn.db", "cairnd.lock", "objects/packs"):
            self.assertTrue(os.path.exists(os.path.join(absolute, name)), name)
        return h, content

    def test_relative_data_dir_flag(self):
        d = ct.Daemon(self, base=self.base, data_dir="rel/data", cwd=self.base)
        d.start()
        h, content = self.check_data_dir(d, os.path.join(self.real_base, "rel", "data"))
        d.stop()
        # the same directory, named absolutely from elsewhere: the document is there
        again = ct.Daemon(self, base=self.base, data_dir=os.path.join(self.base, "rel", "data"))
        again.start()
        self.assertEqual(again.cli("get", h).stdout, content)
        again.stop()

    def test_relative_data_dir_from_the_environment(self):
        d = ct.Daemon(self, base=self.base, cwd=self.base)
        d.command = lambda: [ct.CAIRND, "--socket", d.socket_path, "--config", os.devnull]
        d.data_dir = "./env-data"  # exported as CAIRN_DATA_DIR
        d.start()
        self.check_data_dir(d, os.path.join(self.real_base, "env-data"))
        d.stop()


if __name__ == "__main__":
    ct.main()
