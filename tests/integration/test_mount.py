#!/usr/bin/env python3
"""`cairn mount`: the documents of a real cairnd as a read-only FUSE file
system, checked through the kernel with ordinary file operations.

  MountedTree     one tree added with `cairn add -r .` (names ./PATH), a
                  name with a leading '/' and a plain one; mounted once:
                  every file compared byte for byte, os.walk and find,
                  stat (sizes, modes, owner, times), seeking reads at random
                  offsets, by-hash/<hash>, concurrent readers, a file that
                  is also a directory of other names, and SQLite querying
                  a database file through the mount
  MountChanges    a fresh daemon and mount per test: a name added while
                  mounted appears, a name's new version (an open file keeps
                  the old content, a new open sees the new), a read of a
                  few bytes of a large document reads only a few of its
                  chunks (cairnd's cache misses), cairnd restarted under the
                  mount, a document deleted while open (ESTALE), unmounting
                  with fusermount3 -u, -u -z with a reader holding a file
                  open, SIGTERM and SIGINT with a reader, going to the
                  background, and the exit codes of a missing mountpoint
                  and an unreachable cairnd

Skipped, with the reason, when /dev/fuse or fusermount3 is missing or cairn
was built without libfuse3. Every mount is unmounted and its process killed
by pid in the test's cleanup, whatever happened.
"""

import errno
import filecmp
import hashlib
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

MiB = ct.MiB
WAIT = 30 * ct.SLOW  # seconds to wait for something that should happen at once


def fuse_missing():
    """Why this machine cannot mount FUSE file systems, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the fuse kernel module is not available here)"
    if not shutil.which("fusermount3"):
        return "no fusermount3 (Debian: apt-get install fuse3)"
    p = ct.run_cli("mount", "--help", check_exit=None)
    if p.returncode == 2 and b"without FUSE" in p.stderr:
        return "cairn was built without libfuse3 (Debian: apt-get install libfuse3-dev)"
    return None


def wait_for(predicate, what, timeout=WAIT):
    """Polls `predicate` until it is true; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError("%s did not happen within %ds" % (what, timeout))
        time.sleep(0.05)


def pid_gone(pid):
    """The process has exited (gone, or a zombie nobody reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def unmount(path):
    subprocess.run(["fusermount3", "-u", "-z", path], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


class Mount:
    """`cairn mount -f` of daemon `d` on `mountpoint`, as a child process;
    cleanup unmounts and kills it by pid."""

    def __init__(self, d, mountpoint, testcase=None, extra=()):
        self.d = d
        self.mountpoint = mountpoint
        self.log_path = mountpoint.rstrip("/") + ".log"
        self.extra = list(extra)
        self.proc = None
        if testcase is not None:
            testcase.addCleanup(self.cleanup)

    def start(self):
        os.makedirs(self.mountpoint, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [ct.CAIRN, "--socket", self.d.socket_path, "--no-autostart", "mount", "-f"]
                + self.extra + [self.mountpoint],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + WAIT
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None:
                raise AssertionError("cairn mount exited with %d before mounting:\n%s"
                                     % (self.proc.returncode, self.log_text()))
            if time.monotonic() > deadline:
                raise AssertionError("%s not mounted within %ds:\n%s"
                                     % (self.mountpoint, WAIT, self.log_text()))
            time.sleep(0.02)
        return self

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def wait(self, timeout=WAIT):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("cairn mount (pid %d) did not exit within %ds:\n%s"
                                 % (self.proc.pid, timeout, self.log_text()))

    def cleanup(self):
        if os.path.ismount(self.mountpoint):
            unmount(self.mountpoint)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cli_in(d, cwd, *args):
    """cairn ARGS in the directory `cwd` (for names relative to it)."""
    p = subprocess.run([ct.CAIRN, "--socket", d.socket_path, "--no-autostart"] + list(args),
                       cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300 * ct.SLOW)
    if p.returncode != 0:
        raise AssertionError("cairn %s exited with %d: %s" % (" ".join(args), p.returncode,
                                                              p.stderr.decode(errors="replace")))
    return p


def make_sqlite(path):
    db = sqlite3.connect(path)
    db.execute("PRAGMA page_size = 4096")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, grp INTEGER, word TEXT, payload BLOB)")
    rnd = random.Random(7)
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                   [(i, i % 17, "w%06d" % rnd.randrange(10 ** 6), rnd.randbytes(200))
                    for i in range(6000)])
    db.execute("CREATE INDEX t_word ON t (word)")
    db.commit()
    db.close()


SQL_QUERIES = [
    "SELECT COUNT(*), SUM(id), SUM(LENGTH(payload)) FROM t",
    "SELECT grp, COUNT(*), MIN(word), MAX(word) FROM t GROUP BY grp ORDER BY grp",
    "SELECT id, word, HEX(payload) FROM t WHERE word BETWEEN 'w100000' AND 'w130000' ORDER BY word",
    "SELECT id, HEX(payload) FROM t WHERE id IN (1, 999, 3000, 5999)",
]


def query_all(path):
    db = sqlite3.connect("file:%s?mode=ro&immutable=1" % path, uri=True)
    try:
        return [db.execute(q).fetchall() for q in SQL_QUERIES]
    finally:
        db.close()


def write_sparse(path, size):
    """Zeros with a few random islands, the holes left unwritten."""
    rnd = random.Random(11)
    with open(path, "wb") as f:
        f.truncate(size)
        for _ in range(6):
            f.seek(rnd.randrange(size - 5000))
            f.write(os.urandom(rnd.randrange(1, 5000)))


class MountedTree(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = fuse_missing()
        if why:
            raise unittest.SkipTest(why)
        cls.base = ct.make_tempdir()
        cls.addClassCleanup(shutil.rmtree, cls.base, True)
        cls.d = ct.Daemon(base=cls.base)
        cls.addClassCleanup(cls.d.cleanup)
        cls.d.start()
        src = cls.src = os.path.join(cls.base, "src")
        for sub in ("docs/nested/deep", "data", "db"):
            os.makedirs(os.path.join(src, sub))
        with open(os.path.join(src, "top.txt"), "w") as f:
            f.write("at the top\n")
        with open(os.path.join(src, "docs", "readme.md"), "w") as f:
            f.write("# readme\n" * 100)
        with open(os.path.join(src, "docs", "nested", "deep", "leaf.txt"), "w") as f:
            f.write("leaf\n")
        open(os.path.join(src, "empty"), "wb").close()
        ct.write_random_file(os.path.join(src, "data", "random.bin"), 3 * MiB)
        write_sparse(os.path.join(src, "data", "sparse.bin"), 5 * MiB + 123)
        make_sqlite(os.path.join(src, "db", "test.sqlite"))
        # names ./top.txt, ./docs/readme.md, ...
        cli_in(cls.d, src, "add", "-r", ".")
        cls.extra = {
            "abs/dir/file": b"named with a leading slash\n",
            "plain/one.txt": b"a plain name\n",
            "clash": b"a file that is also the directory of another name\n",
        }
        for name, content in cls.extra.items():
            raw = "/" + name if name.startswith("abs/") else name
            ct.run_cli("add", "-n", raw, "-", socket=cls.d.socket_path, input=content)
        ct.run_cli("add", "-n", "clash/inner", "-", socket=cls.d.socket_path, input=b"hidden\n")
        ct.run_cli("add", "-", socket=cls.d.socket_path, input=b"a document without a name\n")
        cls.mnt = os.path.join(cls.base, "mnt")
        cls.mount = Mount(cls.d, cls.mnt)
        cls.addClassCleanup(cls.mount.cleanup)
        cls.mount.start()
        with cls.d.connect() as c:
            cls.names = {i["name"]: i for i in c.list_all(names=True)}
            cls.docs = {i["hash"]: i for i in c.list_all()}

    def src_files(self):
        out = []
        for root, _, files in os.walk(self.src):
            for f in files:
                out.append(os.path.relpath(os.path.join(root, f), self.src))
        return sorted(out)

    def test_every_file_equals_its_source(self):
        files = self.src_files()
        self.assertGreaterEqual(len(files), 7)
        for rel in files:
            self.assertTrue(filecmp.cmp(os.path.join(self.src, rel), os.path.join(self.mnt, rel),
                                        shallow=False), rel)
        for rel, content in self.extra.items():
            with open(os.path.join(self.mnt, rel), "rb") as f:
                self.assertEqual(f.read(), content, rel)
        # cmp(1) as well: a real program reading through the mount
        big = os.path.join("data", "random.bin")
        subprocess.run(["cmp", os.path.join(self.src, big), os.path.join(self.mnt, big)],
                       check=True, timeout=120 * ct.SLOW)

    def test_walk_and_find_show_the_tree(self):
        want = set(self.src_files()) | set(self.extra)
        got = set()
        for root, dirs, files in os.walk(self.mnt):
            if root == self.mnt:
                self.assertIn("by-hash", dirs)
                dirs.remove("by-hash")
            for f in files:
                got.add(os.path.relpath(os.path.join(root, f), self.mnt))
        self.assertEqual(got, want)
        p = subprocess.run(["find", self.mnt, "-path", os.path.join(self.mnt, "by-hash"),
                            "-prune", "-o", "-type", "f", "-print"],
                           stdout=subprocess.PIPE, check=True, timeout=60 * ct.SLOW)
        found = {os.path.relpath(l, self.mnt) for l in p.stdout.decode().splitlines()}
        self.assertEqual(found, want)
        dirs = {os.path.relpath(r, self.mnt) for r, _, _ in os.walk(self.mnt)}
        for d in ("docs", "docs/nested", "docs/nested/deep", "data", "db", "abs", "abs/dir",
                  "plain"):
            self.assertIn(d, dirs)
        self.assertEqual(sorted(os.listdir(os.path.join(self.mnt, "docs"))),
                         ["nested", "readme.md"])

    def test_stat_sizes_modes_owner_times(self):
        for rel in self.src_files():
            st = os.stat(os.path.join(self.mnt, rel))
            self.assertEqual(st.st_size, os.path.getsize(os.path.join(self.src, rel)), rel)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o444, rel)
            self.assertTrue(stat.S_ISREG(st.st_mode), rel)
            self.assertEqual((st.st_uid, st.st_gid), (os.getuid(), os.getgid()), rel)
            # add -r keeps each file's mtime: the mount shows it, not the time it was named
            want = int(os.stat(os.path.join(self.src, rel)).st_mtime)
            self.assertEqual(int(st.st_mtime), want, rel)
            self.assertEqual(int(st.st_ctime), want, rel)
        for d in ("", "docs", "docs/nested", "by-hash", "abs"):
            st = os.stat(os.path.join(self.mnt, d))
            self.assertTrue(stat.S_ISDIR(st.st_mode), d)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o555, d)
        with self.assertRaises(FileNotFoundError):
            os.stat(os.path.join(self.mnt, "docs", "missing"))
        with self.assertRaises(OSError):
            open(os.path.join(self.mnt, "top.txt"), "ab")

    def test_inode_numbers_are_stable(self):
        paths = [os.path.join(self.mnt, p) for p in ("top.txt", "docs", "data/random.bin")]
        first = [os.stat(p).st_ino for p in paths]
        self.assertEqual(len(set(first)), len(first))
        time.sleep(1.5)  # past the attribute timeout: the kernel asks again
        self.assertEqual([os.stat(p).st_ino for p in paths], first)

    def test_seeking_reads(self):
        rnd = random.Random(3)
        for rel in ("data/random.bin", "data/sparse.bin", "docs/readme.md", "db/test.sqlite"):
            with open(os.path.join(self.src, rel), "rb") as f:
                want = f.read()
            fd = os.open(os.path.join(self.mnt, rel), os.O_RDONLY)
            try:
                cases = [(0, 1), (len(want) - 1, 1), (len(want), 10), (len(want) + 4096, 1),
                         (len(want) - 3, 100)]
                cases += [(rnd.randrange(len(want)), rnd.randrange(1, 300000)) for _ in range(60)]
                for off, n in cases:
                    self.assertEqual(os.pread(fd, n, off), want[off:off + n], (rel, off, n))
            finally:
                os.close(fd)

    def test_by_hash(self):
        listed = set(os.listdir(os.path.join(self.mnt, "by-hash")))
        self.assertEqual(listed, set(self.docs))
        for h, doc in self.docs.items():
            p = os.path.join(self.mnt, "by-hash", h)
            self.assertEqual(ct.sha256_file(p), h)
            st = os.stat(p)
            self.assertEqual(st.st_size, doc["size"])
            self.assertEqual(int(st.st_mtime), doc["created"])
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o444)
        h = ct.sha256_file(os.path.join(self.src, "data", "random.bin"))
        self.assertTrue(filecmp.cmp(os.path.join(self.src, "data", "random.bin"),
                                    os.path.join(self.mnt, "by-hash", h), shallow=False))
        for bad in ("0" * 64, "f" * 63, h.upper(), h[:12], "not-a-hash"):
            self.assertFalse(os.path.exists(os.path.join(self.mnt, "by-hash", bad)), bad)

    def test_a_file_wins_over_a_directory_of_the_same_name(self):
        p = os.path.join(self.mnt, "clash")
        self.assertTrue(os.path.isfile(p))
        with open(p, "rb") as f:
            self.assertEqual(f.read(), self.extra["clash"])
        self.assertFalse(os.path.exists(os.path.join(p, "inner")))
        self.assertEqual(os.listdir(self.mnt).count("clash"), 1)

    def test_concurrent_readers(self):
        rels = ["data/random.bin", "data/sparse.bin", "db/test.sqlite", "docs/readme.md"]
        want = {}
        for rel in rels:
            with open(os.path.join(self.src, rel), "rb") as f:
                want[rel] = f.read()
        errors = []

        def reader(seed):
            rnd = random.Random(seed)
            try:
                for _ in range(40):
                    # half the threads on the same file, the others spread
                    rel = rels[0] if seed % 2 else rnd.choice(rels)
                    with open(os.path.join(self.mnt, rel), "rb") as f:
                        if rnd.random() < 0.2:
                            got, off = f.read(), 0
                        else:
                            off = rnd.randrange(len(want[rel]))
                            f.seek(off)
                            got = f.read(rnd.randrange(1, 200000))
                    if got != want[rel][off:off + len(got)] or not got:
                        errors.append((rel, off, len(got)))
            except Exception as e:  # reported below, in the test's thread
                errors.append(repr(e))

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300 * ct.SLOW)
        self.assertFalse(any(t.is_alive() for t in threads), "a reader hangs")
        self.assertEqual(errors, [])

    def test_sqlite_queries_through_the_mount(self):
        original = os.path.join(self.src, "db", "test.sqlite")
        mounted = os.path.join(self.mnt, "db", "test.sqlite")
        want = query_all(original)
        self.assertEqual(want[0][0][0], 6000)
        self.assertEqual(query_all(mounted), want)


class MountCase(unittest.TestCase):
    """A daemon of its own and a mount of it (not yet started) per test."""

    def setUp(self):
        why = fuse_missing()
        if why:
            self.skipTest(why)
        self.d = ct.Daemon(self)
        self.d.start()
        self.mnt = os.path.join(self.d.base, "mnt")
        self.m = Mount(self.d, self.mnt, self)


class MountChanges(MountCase):
    def add(self, name, content):
        ct.run_cli("add", "-n", name, "-", socket=self.d.socket_path, input=content)

    def read(self, rel):
        with open(os.path.join(self.mnt, rel), "rb") as f:
            return f.read()

    def test_a_name_added_while_mounted_appears(self):
        self.add("first.txt", b"one\n")
        self.m.start()
        self.assertEqual(sorted(os.listdir(self.mnt)), ["by-hash", "first.txt"])
        self.assertFalse(os.path.exists(os.path.join(self.mnt, "later", "second.txt")))
        self.add("later/second.txt", b"two\n")
        wait_for(lambda: os.path.exists(os.path.join(self.mnt, "later", "second.txt")),
                 "later/second.txt appearing")
        self.assertEqual(self.read("later/second.txt"), b"two\n")
        wait_for(lambda: "later" in os.listdir(self.mnt), "later in the root's listing")
        h = ct.sha256_hex(b"two\n")
        self.assertEqual(self.read(os.path.join("by-hash", h)), b"two\n")

    def test_a_new_version_is_a_new_file(self):
        old = os.urandom(300000)
        new = os.urandom(200000)
        self.add("v.bin", old)
        self.m.start()
        path = os.path.join(self.mnt, "v.bin")
        with open(path, "rb") as held:
            self.assertEqual(held.read(1000), old[:1000])
            self.add("v.bin", new)
            # the open file keeps its content, read after the change
            self.assertEqual(held.read(), old[1000:])
            self.assertEqual(os.pread(held.fileno(), 500, 100000), old[100000:100500])
            wait_for(lambda: self.read("v.bin") == new, "a new open seeing the new version")
            self.assertEqual(os.path.getsize(path), len(new))
            self.assertEqual(os.pread(held.fileno(), len(old), 0), old)

    def test_a_few_bytes_read_only_their_chunks_and_cairnd_may_restart(self):
        content = os.urandom(16 * MiB)
        self.add("big", content)
        self.m.start()
        chunks = int(ct.parse_kv(ct.run_cli("stat", "big", socket=self.d.socket_path).stdout)
                     ["chunks"])
        self.assertGreater(chunks, 100)
        # a restart empties cairnd's cache, and the mount's connection breaks
        self.d.restart()
        before = self.d.status()["cache_misses"]
        with open(os.path.join(self.mnt, "big"), "rb") as f:
            self.assertEqual(os.pread(f.fileno(), 100, 9 * MiB + 5), content[9 * MiB + 5:][:100])
        misses = self.d.status()["cache_misses"] - before
        # the chunks under the kernel's read-ahead window, not the document's
        self.assertGreater(misses, 0)
        self.assertLess(misses, chunks // 4, "%d of %d chunks read for 100 bytes" % (misses, chunks))
        self.assertEqual(ct.sha256_file(os.path.join(self.mnt, "big")), ct.sha256_hex(content))

    def test_a_document_deleted_while_open(self):
        content = os.urandom(4 * MiB)
        self.add("doomed", content)
        self.m.start()
        fd = os.open(os.path.join(self.mnt, "doomed"), os.O_RDONLY)
        try:
            self.assertEqual(os.read(fd, 4096), content[:4096])
            ct.run_cli("rm", ct.sha256_hex(content), socket=self.d.socket_path)
            with self.assertRaises(OSError) as cm:
                os.pread(fd, 4096, 3 * MiB)
            self.assertEqual(cm.exception.errno, errno.ESTALE)
        finally:
            os.close(fd)
        wait_for(lambda: not os.path.exists(os.path.join(self.mnt, "doomed")),
                 "the deleted name disappearing")

    def test_fusermount_unmount_ends_it(self):
        self.add("a", b"a\n")
        self.m.start()
        self.assertEqual(self.read("a"), b"a\n")
        subprocess.run(["fusermount3", "-u", self.mnt], check=True, timeout=WAIT)
        self.assertEqual(self.m.wait(), 0, self.m.log_text())
        self.assertFalse(os.path.ismount(self.mnt))

    def test_lazy_unmount_with_a_reader(self):
        self.add("big", os.urandom(2 * MiB))
        self.m.start()
        with open(os.path.join(self.mnt, "big"), "rb") as held:
            self.assertEqual(len(held.read(4096)), 4096)
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], check=True, timeout=WAIT)
            self.assertFalse(os.path.ismount(self.mnt))
            # still served until the last file is closed
            self.assertEqual(len(held.read(MiB)), MiB)
        self.assertEqual(self.m.wait(), 0, self.m.log_text())

    def signal_with_reader(self, sig):
        self.add("big", os.urandom(2 * MiB))
        self.m.start()
        fd = os.open(os.path.join(self.mnt, "big"), os.O_RDONLY)
        try:
            self.assertEqual(len(os.read(fd, 4096)), 4096)
            self.m.proc.send_signal(sig)
            self.assertEqual(self.m.wait(), 0, self.m.log_text())
            self.assertFalse(os.path.ismount(self.mnt))
            try:
                os.read(fd, MiB)  # the file system is gone: an error, or what the cache had
            except OSError:
                pass
        finally:
            try:
                os.close(fd)  # ENOTCONN, the connection being gone
            except OSError:
                pass

    def test_sigterm_with_a_reader(self):
        self.signal_with_reader(signal.SIGTERM)

    def test_sigint_with_a_reader(self):
        self.signal_with_reader(signal.SIGINT)

    def test_background(self):
        self.add("a", b"a\n")
        os.makedirs(self.mnt)
        p = ct.run_cli("mount", self.mnt, socket=self.d.socket_path, timeout=WAIT)
        self.assertEqual(p.stdout, b"")
        pids = []

        def cleanup():
            if os.path.ismount(self.mnt):
                unmount(self.mnt)
            for pid in pids:
                if not pid_gone(pid):
                    os.kill(pid, signal.SIGKILL)

        self.addCleanup(cleanup)
        # mounted by the time the command returned
        self.assertTrue(os.path.ismount(self.mnt))
        for entry in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    argv = f.read().split(b"\0")
            except (OSError, ValueError):
                continue
            if b"mount" in argv and self.mnt.encode() in argv and entry.isdigit():
                pids.append(int(entry))
        self.assertEqual(len(pids), 1, "the background cairn mount: %r" % pids)
        self.assertEqual(self.read("a"), b"a\n")
        subprocess.run(["fusermount3", "-u", self.mnt], check=True, timeout=WAIT)
        wait_for(lambda: pid_gone(pids[0]), "the background cairn mount exiting")

    def test_exit_codes(self):
        missing = os.path.join(self.d.base, "no-such-dir")
        p = ct.run_cli("mount", "-f", missing, socket=self.d.socket_path, check_exit=1)
        self.assertIn(b"no-such-dir", p.stderr)
        self.assertIn(b"No such file or directory", p.stderr)
        afile = os.path.join(self.d.base, "afile")
        open(afile, "w").close()
        p = ct.run_cli("mount", "-f", afile, socket=self.d.socket_path, check_exit=1)
        self.assertIn(b"not a directory", p.stderr)
        os.makedirs(self.mnt)
        nobody = os.path.join(self.d.base, "nobody.sock")
        ct.run_cli("mount", "-f", self.mnt, socket=nobody, check_exit=3, timeout=WAIT)
        self.assertFalse(os.path.ismount(self.mnt))
        ct.run_cli("mount", socket=self.d.socket_path, check_exit=2)


class MountEdges(MountCase):
    def add(self, name, content):
        ct.run_cli("add", "-n", name, "-", socket=self.d.socket_path, input=content)

    def test_a_name_too_long_for_any_file_system_hides_nothing_else(self):
        """One name of 1,500 bytes made its whole directory unlistable
        (Input/output error); it is left out, the others are listed."""
        self.add("d/ok.txt", b"ok\n")
        self.add("d/" + "x" * 1500, b"long\n")
        self.add("d/" + "y" * 1500 + "/under.txt", b"under\n")
        self.add("d/zz.txt", b"zz\n")
        self.m.start()
        self.assertEqual(sorted(os.listdir(os.path.join(self.mnt, "d"))), ["ok.txt", "zz.txt"])
        with open(os.path.join(self.mnt, "d", "zz.txt"), "rb") as f:
            self.assertEqual(f.read(), b"zz\n")
        ls = ct.run_cli("ls", "d", socket=self.d.socket_path).stdout
        self.assertIn(b"x" * 1500, ls)

    def test_a_second_mount_on_the_same_directory_is_refused(self):
        self.add("a.txt", b"a\n")
        self.m.start()
        p = ct.run_cli("mount", "-f", self.mnt, socket=self.d.socket_path, check_exit=1,
                       timeout=WAIT)
        self.assertIn(b"mounted there already", p.stderr)
        self.assertEqual(sorted(os.listdir(self.mnt)), ["a.txt", "by-hash"])
        with open("/proc/self/mountinfo") as f:
            self.assertEqual(sum(" %s " % self.mnt in line for line in f), 1)

    def test_mounting_over_files_says_they_are_hidden(self):
        os.makedirs(self.mnt)
        with open(os.path.join(self.mnt, "mine.txt"), "w") as f:
            f.write("mine\n")
        self.m.start()
        self.assertIn("is not empty: what is in it is hidden while mounted", self.m.log_text())
        self.assertNotIn("mine.txt", os.listdir(self.mnt))


class WideTree(MountCase):
    """Directories of hundreds of names, listed in pages, with
    subdirectories skipped over, names that sort between a file and its
    namesake directory, the three leaders of a name (PATH, /PATH, ./PATH)
    merged, names that are not paths left out, and by-hash read in pages
    as readdir goes."""


    def test_listing(self):
        names = {}
        for i in range(300):
            names["w/f%03d" % i] = b"f%d" % i
        for n in ("w/a.txt", "w/a-b", "w/a!", "w/a0"):
            names[n] = n.encode()
        for i in range(200):
            names["w/a/x%03d" % i] = b"x%d" % i
        for j in range(5):
            for i in range(150):
                names["w/s%d/deep/n%03d" % (j, i)] = b"n%d.%d" % (j, i)
        for i in range(10):
            names["/w/slashed%d" % i] = b"slashed"
            names["./w/dotted%d" % i] = b"dotted"
        names["w/dup"] = b"the plain name wins"
        names["/w/dup"] = b"the slashed name loses"
        names["/w/a/fromslash"] = b"merged"
        names["/rootslash"] = b"r1"
        names["./rootdot"] = b"r2"
        left_out = ["w//double", "w/./dot", "w/../up", "w/trailing/", "w/x/../y"]
        for n in left_out:
            names[n] = b"not a path"
        with self.d.connect() as c:
            for n, content in names.items():
                r = c.add(content, name=n)
                self.assertIs(r.get("ok"), True, ct.short(r))
        self.m.start()
        w = os.path.join(self.mnt, "w")
        want = ["f%03d" % i for i in range(300)] + ["a.txt", "a-b", "a!", "a0", "a", "dup"]
        want += ["s%d" % j for j in range(5)] + ["slashed%d" % i for i in range(10)]
        want += ["dotted%d" % i for i in range(10)]
        self.assertEqual(sorted(os.listdir(w)), sorted(want))
        self.assertTrue(os.path.isdir(os.path.join(w, "a")))
        self.assertEqual(sorted(os.listdir(os.path.join(w, "a"))),
                         sorted(["x%03d" % i for i in range(200)] + ["fromslash"]))
        self.assertEqual(sorted(os.listdir(os.path.join(w, "s3", "deep"))),
                         ["n%03d" % i for i in range(150)])
        with open(os.path.join(w, "dup"), "rb") as f:
            self.assertEqual(f.read(), b"the plain name wins")
        for rel, content in (("w/a/fromslash", b"merged"), ("w/slashed3", b"slashed"),
                             ("w/dotted7", b"dotted"), ("w/a!", b"w/a!"), ("rootslash", b"r1"),
                             ("rootdot", b"r2"), ("w/s4/deep/n149", b"n4.149")):
            with open(os.path.join(self.mnt, rel), "rb") as f:
                self.assertEqual(f.read(), content, rel)
        self.assertEqual(sorted(os.listdir(self.mnt)), ["by-hash", "rootdot", "rootslash", "w"])
        for rel in ("w/double", "w/dot", "up", "w/trailing", "w/x", "w/y"):
            self.assertFalse(os.path.exists(os.path.join(self.mnt, rel)), rel)
        count = sum(len(files) for _, _, files in os.walk(w))
        self.assertEqual(count, len(want) - 6 + 200 + 1 + 5 * 150)
        # by-hash is listed a page (500) at a time
        with self.d.connect() as c:
            hashes = {i["hash"] for i in c.list_all()}
        self.assertGreater(len(hashes), 1200)
        listed = os.listdir(os.path.join(self.mnt, "by-hash"))
        self.assertEqual(len(listed), len(hashes))
        self.assertEqual(set(listed), hashes)


if __name__ == "__main__":
    ct.main()
