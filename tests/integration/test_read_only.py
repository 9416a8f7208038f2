#!/usr/bin/env python3
"""cairnd --read-only: serves what a data directory holds - on a writable
disk or a read-only one - and writes nothing to it: every op that would
change the store is answered `read_only`, the directory's files are the
same bytes afterwards, no -shm or -wal file is made beside the databases.
A read-only daemon shares cairnd.lock with other read-only ones and keeps
writers out, as a writer keeps it out."""

import json
import os
import shutil
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import test_mount  # noqa: E402


def tree_state(root):
    """{relative path: (mode, size, mtime_ns, content or None)} of everything under root."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            content = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    content = f.read()
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    return out


def can_bind_mount():
    return os.geteuid() == 0 and shutil.which("mount") and shutil.which("umount")


class Base(unittest.TestCase):
    def make_store(self, env=None, args=()):
        """A stopped writer's store: documents with names, versions, tags and text."""
        self.d = ct.Daemon(self, args=list(args), env=env).start()
        cli = self.d.cli
        self.fox = b"the quick brown fox jumps over the lazy dog, epoll and all\n"
        cli("add", "-", "-n", "notes/fox.txt", "-t", "animal", input=self.fox)
        cli("add", "-", "-n", "notes/fox.txt", input=self.fox + b"version two\n")
        cli("add", "-", "-n", "blob.bin", input=os.urandom(300 * 1024))
        cli("cp", "notes/fox.txt", "copy.txt")
        self.d.stop()
        self.before = tree_state(self.d.data_dir)

    def read_only(self, data_dir=None, env=None, socket_name="ro.sock", start=True):
        d = ct.Daemon(self, base=self.d.base, data_dir=data_dir or self.d.data_dir,
                      socket_path=os.path.join(self.d.base, "run", socket_name),
                      args=["--read-only"], env=env)
        return d.start() if start else d

    def assert_reads(self, ro):
        cli = ro.cli
        ls = cli("ls").stdout.decode()
        for name in ("notes/fox.txt", "blob.bin", "copy.txt"):
            self.assertIn(name, ls)
        self.assertEqual(cli("get", "notes/fox.txt@{1}").stdout, self.fox)
        self.assertEqual(cli("get", "copy.txt").stdout, self.fox + b"version two\n")
        hits = cli("--json", "search", "epoll").stdout.decode()
        self.assertIn("notes/fox.txt", hits)
        st = json.loads(cli("--json", "stat", "notes/fox.txt@{1}").stdout)
        self.assertEqual(st["tags"], ["animal"])
        self.assertIn("notes/fox.txt@{1}", cli("log", "notes/fox.txt").stdout.decode())
        v = json.loads(cli("--json", "verify").stdout)
        self.assertEqual(v["bad_count"], 0, v)
        self.assertGreater(v["chunks_checked"], 0, v)
        self.assertIs(json.loads(cli("--json", "status").stdout)["read_only"], True)

    def assert_writes_refused(self, ro):
        cli = ro.cli
        f = os.path.join(self.d.base, "new.txt")
        with open(f, "wb") as out:
            out.write(b"new content\n")
        for args in (["add", f], ["rm", "blob.bin"], ["rm", "-n", "blob.bin"], ["cp", "blob.bin", "other"],
                     ["mv", "blob.bin", "other"], ["tag", "blob.bin", "x"],
                     ["meta", "blob.bin", "k=v"], ["gc"], ["refresh"], ["key", "list"]):
            p = cli("--json", *args, check_exit=1)
            errs = [line for line in ct.parse_json_lines(p.stdout) if "error" in line]
            self.assertTrue(errs, (args, p.stdout, p.stderr))
            self.assertEqual(errs[0]["error"]["code"], "read_only", (args, errs))
            self.assertIn("read-only", errs[0]["error"]["message"], (args, errs))
        # as text: the op, and why
        p = cli("tag", "blob.bin", "x", check_exit=1)
        self.assertIn(b"this daemon is read-only (cairnd --read-only)", p.stderr)


@ct.skip_if_remote("looks at the data directory's files itself")
class ReadOnly(Base):
    def test_serves_a_data_directory_and_changes_nothing_in_it(self):
        self.make_store()
        ro = self.read_only()
        self.assert_reads(ro)
        self.assert_writes_refused(ro)
        ro.stop()
        self.assertEqual(tree_state(self.d.data_dir), self.before,
                         "the read-only daemon changed the data directory")
        self.assertIn("(read-only)", ro.log_text())
        # and the store is as it was for the next writer
        self.d.start()
        self.assertEqual(self.d.cli("get", "copy.txt").stdout, self.fox + b"version two\n")

    def test_a_read_only_file_system(self):
        if not can_bind_mount():
            self.skipTest("needs root and mount(8) for a read-only bind mount")
        self.make_store()
        mnt = os.path.join(self.d.base, "ro-mount")
        os.mkdir(mnt, 0o700)
        subprocess.run(["mount", "--bind", "-o", "ro", self.d.data_dir, mnt], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", mnt])
        with self.assertRaises(OSError):
            open(os.path.join(mnt, "probe"), "wb")
        ro = self.read_only(data_dir=mnt)
        self.assert_reads(ro)
        self.assert_writes_refused(ro)
        ro.stop()
        self.assertEqual(tree_state(self.d.data_dir), self.before)

    def test_commits_left_in_the_wal_by_a_crash(self):
        """A writer killed with -9 leaves its last commits in cairn.db-wal:
        a read-only daemon reads them; on a read-only file system without
        the -shm file SQLite needs for them, it refuses and says why."""
        self.d = ct.Daemon(self).start()
        self.d.cli("add", "-", "-n", "first.txt", input=b"first\n")
        self.d.kill9()
        wal = os.path.join(self.d.data_dir, "cairn.db-wal")
        self.assertGreater(os.path.getsize(wal), 0, "the kill left no commits in the wal")
        ro = self.read_only()
        self.assertEqual(ro.cli("get", "first.txt").stdout, b"first\n")
        ro.stop()
        if not can_bind_mount():
            return
        copy = os.path.join(self.d.base, "copy")
        shutil.copytree(self.d.data_dir, copy)
        os.chmod(copy, 0o700)
        for f in os.listdir(copy):
            if f.endswith("-shm"):
                os.unlink(os.path.join(copy, f))
        mnt = os.path.join(self.d.base, "ro-mount")
        os.mkdir(mnt, 0o700)
        subprocess.run(["mount", "--bind", "-o", "ro", copy, mnt], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", mnt])
        ro2 = self.read_only(data_dir=mnt, socket_name="ro2.sock", start=False)
        ro2.start(wait=False)
        self.assertNotEqual(ro2.wait(60 * ct.SLOW), 0)
        self.assertIn("its last commits are in its -wal file", ro2.log_text())

    def test_locks_against_writers_and_beside_other_readers(self):
        self.make_store()
        ro = self.read_only()
        ro2 = self.read_only(socket_name="ro2.sock")
        self.assertEqual(ro2.cli("get", "copy.txt").stdout, self.fox + b"version two\n")
        self.d.start(wait=False)
        self.assertNotEqual(self.d.wait(60 * ct.SLOW), 0)
        self.assertIn("a cairnd --read-only is running on data dir", self.d.log_text())
        ro.stop()
        ro2.stop()
        self.d.start()
        ro3 = self.read_only(socket_name="ro3.sock", start=False)
        ro3.start(wait=False)
        self.assertNotEqual(ro3.wait(60 * ct.SLOW), 0)
        self.assertIn("a cairnd that writes (pid %d) is already running on data dir" % self.d.pid, ro3.log_text())

    def test_mount(self):
        why = test_mount.fuse_missing()
        if why:
            self.skipTest(why)
        self.make_store()
        ro = self.read_only()
        mnt = os.path.join(self.d.base, "mnt")
        m = test_mount.Mount(ro, mnt, self).start()
        with open(os.path.join(mnt, "copy.txt"), "rb") as f:
            self.assertEqual(f.read(), self.fox + b"version two\n")
        self.assertIn("fox.txt", os.listdir(os.path.join(mnt, "notes")))
        test_mount.unmount(mnt)
        self.assertEqual(m.wait(), 0, m.log_text())
        ro.stop()
        self.assertEqual(tree_state(self.d.data_dir), self.before)

    def test_what_it_refuses_to_start_on(self):
        base = ct.make_tempdir(self)
        run = os.path.join(base, "run")

        def start(*args):
            return subprocess.run([ct.CAIRND, "--socket", os.path.join(run, "s.sock"), *args],
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=60 * ct.SLOW)
        missing = os.path.join(base, "nothing-here")
        p = start("--read-only", "--data-dir", missing)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"No such file or directory", p.stderr)
        self.assertFalse(os.path.exists(missing), "a read-only daemon made its data directory")
        empty = os.path.join(base, "empty")
        os.mkdir(empty, 0o700)
        p = start("--read-only", "--data-dir", empty)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"it holds no store (no cairn.db) to serve read-only", p.stderr)
        self.assertEqual(os.listdir(empty), [], "a read-only daemon wrote into an empty directory")
        p = start("--read-only", "--rebuild-index", "--data-dir", empty)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"do not go together", p.stderr)

    def test_an_encrypted_store_opens_with_its_passphrase(self):
        pw = os.path.join(ct.make_tempdir(self), "pw")
        with open(pw, "w") as f:
            f.write("correct horse\n")
        os.chmod(pw, 0o600)
        self.make_store(env={"CAIRN_PASSWORD_FILE": pw}, args=["--encryption", "on"])
        ro = self.read_only(env={"CAIRN_PASSWORD_FILE": pw})
        self.assertEqual(ro.cli("get", "copy.txt").stdout, self.fox + b"version two\n")
        self.assertEqual(json.loads(ro.cli("--json", "status").stdout)["encryption"], "aes-256-gcm")
        ro.stop()
        wrong = os.path.join(os.path.dirname(pw), "wrong")
        with open(wrong, "w") as f:
            f.write("wrong\n")
        os.chmod(wrong, 0o600)
        bad = self.read_only(env={"CAIRN_PASSWORD_FILE": wrong}, socket_name="bad.sock", start=False)
        bad.start(wait=False)
        self.assertNotEqual(bad.wait(60 * ct.SLOW), 0)
        self.assertIn("wrong passphrase", bad.log_text())
        self.assertEqual(tree_state(self.d.data_dir), self.before)


if __name__ == "__main__":
    ct.main()
