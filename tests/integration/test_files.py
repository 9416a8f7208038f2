#!/usr/bin/env python3
"""Files as files: `cairn add -r` keeps each file's mode and mtime with its
name, stores symbolic links as links (never followed out of the tree) and
directories it stored nothing under as themselves; `get -r` restores them,
`ls -l`, `stat` and `log` show them; the database and the journal keep them
across a restart and a `--rebuild-index`."""

import glob
import json
import os
import stat
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

# 2001-09-09 01:46:40 UTC and a bit, as a file system keeps it
MTIME_NS = 1000000000 * 10 ** 9 + 123456789


def rebuild_index(testcase, d):
    """Stops d, deletes its database and runs cairnd --rebuild-index (which must succeed),
    then starts d again: what the packs alone say."""
    d.stop()
    for f in glob.glob(os.path.join(d.data_dir, "cairn.db*")):
        os.unlink(f)
    p = subprocess.run([ct.CAIRND, "--data-dir", d.data_dir, "--socket", d.socket_path,
                        "--rebuild-index"], stdin=subprocess.DEVNULL, capture_output=True,
                       env=d.env(), timeout=120 * ct.SLOW)
    testcase.assertEqual(p.returncode, 0, p.stderr)
    d.start()


class FileAttributes(unittest.TestCase):
    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        self.d = ct.Daemon(self).start()
        self.tree = os.path.join(self.tmp, "tree")
        t = self.tree
        os.makedirs(os.path.join(t, "sub", "deep"))
        os.makedirs(os.path.join(t, "empty"))
        os.makedirs(os.path.join(t, "only-fifo"))
        os.mkfifo(os.path.join(t, "only-fifo", "fifo"))
        self.outside = os.path.join(self.tmp, "outside-secret")
        with open(self.outside, "wb") as f:
            f.write(b"not part of the tree\n")
        files = {"script.sh": (b"#!/bin/sh\necho hi\n", 0o755), "private": (b"mine\n", 0o600),
                 "sub/deep/file.txt": (b"deep\n", 0o644), "sub/group": (b"g\n", 0o640)}
        for rel, (content, mode) in files.items():
            path = os.path.join(t, rel)
            with open(path, "wb") as f:
                f.write(content)
            os.chmod(path, mode)
            os.utime(path, ns=(MTIME_NS, MTIME_NS))
        self.files = files
        os.symlink("script.sh", os.path.join(t, "link-in"))
        os.symlink(self.outside, os.path.join(t, "link-out"))
        os.symlink("nowhere", os.path.join(t, "dangling"))
        os.chmod(os.path.join(t, "empty"), 0o750)
        os.utime(os.path.join(t, "empty"), ns=(MTIME_NS, MTIME_NS))
        os.utime(os.path.join(t, "link-in"), ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)

    def cli(self, *args, **kw):
        return self.d.cli(*args, **kw)

    def stat_json(self, ref):
        return json.loads(self.cli("--json", "stat", ref).stdout)

    def name(self, rel):
        return os.path.join(self.tree, rel)

    def test_add_r_keeps_modes_mtimes_links_and_empty_directories(self):
        p = self.cli("add", "-r", self.tree)
        added = {n: h for h, n in ct.parse_add(p.stdout)}
        for rel in list(self.files) + ["link-in", "link-out", "dangling", "empty", "only-fifo"]:
            self.assertIn(self.name(rel), added, p.stdout)
        self.assertIn("skipped %s: not a regular file" % self.name("only-fifo/fifo"), p.stderr.decode())
        for rel, (content, mode) in self.files.items():
            with self.subTest(rel=rel):
                st = self.stat_json(self.name(rel))
                self.assertEqual(st["mode"], stat.S_IFREG | mode)
                self.assertEqual(st["mtime"], MTIME_NS)
        # A link is its target, stored as a link: the file outside is never read.
        self.assertEqual(self.stat_json(self.name("link-out"))["mode"] & 0o170000, stat.S_IFLNK)
        self.assertEqual(self.cli("get", self.name("link-out")).stdout, self.outside.encode())
        self.assertEqual(self.cli("get", self.name("link-in")).stdout, b"script.sh")
        self.assertEqual(self.stat_json(self.name("link-in"))["mtime"], MTIME_NS)
        self.assertEqual(self.cli("get", self.name("dangling")).stdout, b"nowhere")
        self.assertNotIn(b"not part of the tree", self.cli("search", "part").stdout)
        st = self.stat_json(self.name("empty"))
        self.assertEqual((st["mode"], st["mtime"], st["size"]), (stat.S_IFDIR | 0o750, MTIME_NS, 0))
        # A directory holding only what -r leaves out is kept as a directory too.
        self.assertEqual(self.stat_json(self.name("only-fifo"))["mode"] & 0o170000, stat.S_IFDIR)
        # Directories that hold stored names are implied by them, not stored.
        self.assertNotIn(self.name("sub"), added)
        # ls -l shows the mode and the file's mtime.
        lines = {line.split()[-1]: line.split() for line in
                 self.cli("ls", "-l", self.tree).stdout.decode().splitlines()}
        self.assertEqual(lines[self.name("script.sh")][0], "-rwxr-xr-x")
        self.assertEqual(lines[self.name("script.sh")][5], "2001-09-09T01:46:40Z")
        self.assertEqual(lines[self.name("private")][0], "-rw-------")
        self.assertEqual(lines[self.name("empty")][0], "drwxr-x---")
        self.assertEqual(lines[self.name("link-in")][0], "lrwxrwxrwx")
        text = self.cli("stat", self.name("script.sh")).stdout.decode()
        self.assertIn("mode: -rwxr-xr-x (100755)", text)
        self.assertIn("mtime: 2001-09-09T01:46:40.123456789Z", text)

    def test_get_r_restores_them(self):
        self.cli("add", "-q", "-r", self.tree)
        out = os.path.join(self.tmp, "out")
        self.cli("get", "-r", self.tree, out)
        back = out + self.tree
        for rel, (content, mode) in self.files.items():
            with self.subTest(rel=rel):
                st = os.lstat(os.path.join(back, rel))
                self.assertEqual(stat.S_IMODE(st.st_mode), mode)
                self.assertEqual(st.st_mtime_ns, MTIME_NS)
                with open(os.path.join(back, rel), "rb") as f:
                    self.assertEqual(f.read(), content)
        self.assertEqual(os.readlink(os.path.join(back, "link-in")), "script.sh")
        self.assertEqual(os.lstat(os.path.join(back, "link-in")).st_mtime_ns, MTIME_NS)
        self.assertEqual(os.readlink(os.path.join(back, "link-out")), self.outside)
        self.assertEqual(os.readlink(os.path.join(back, "dangling")), "nowhere")
        st = os.lstat(os.path.join(back, "empty"))
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_mtime_ns), (0o750, MTIME_NS))
        self.assertEqual(os.listdir(os.path.join(back, "empty")), [])
        # Restoring again over the tree it made replaces links and files alike.
        self.cli("get", "-r", self.tree, out)
        self.assertEqual(os.readlink(os.path.join(back, "link-in")), "script.sh")

    def test_get_r_never_writes_through_a_restored_link(self):
        """A stored link `x` -> a directory outside, then a name `x/y`: the
        restore makes the link and refuses to write y through it."""
        victim = os.path.join(self.tmp, "victim")
        os.makedirs(victim)
        src = os.path.join(self.tmp, "src")
        os.makedirs(src)
        os.symlink(victim, os.path.join(src, "x"))
        self.cli("add", "-q", "-r", src)
        self.cli("add", "-q", "-n", os.path.join(src, "x", "y"), "-", input=b"planted\n")
        out = os.path.join(self.tmp, "out2")
        p = self.cli("get", "-r", src, out, check_exit=1)
        self.assertIn(b"a symbolic link or a file is in the way", p.stderr)
        self.assertEqual(os.readlink(out + os.path.join(src, "x")), victim)
        self.assertEqual(os.listdir(victim), [])

    def test_a_changed_mode_or_mtime_is_a_new_version_an_unchanged_file_is_not(self):
        self.cli("add", "-q", "-r", self.tree)
        script = self.name("script.sh")
        self.cli("add", "-q", "-r", self.tree)
        self.assertEqual(len(self.cli("log", script).stdout.splitlines()), 1)
        os.chmod(script, 0o700)
        self.cli("add", "-q", "-r", self.tree)
        got = [json.loads(line) for line in self.cli("--json", "log", script).stdout.splitlines()]
        self.assertEqual([v["mode"] for v in got], [stat.S_IFREG | 0o700, stat.S_IFREG | 0o755])
        self.assertEqual(got[0]["hash"], got[1]["hash"])
        self.assertEqual(self.stat_json(script + "@{1}")["mode"], stat.S_IFREG | 0o755)
        # An add without a file (standard input) keeps what the name has.
        self.cli("add", "-q", "-n", script, "-", input=self.files["script.sh"][0])
        self.assertEqual(len(self.cli("log", script).stdout.splitlines()), 2)
        # A single file added by its path keeps its mode too.
        single = os.path.join(self.tmp, "single")
        with open(single, "wb") as f:
            f.write(b"one\n")
        os.chmod(single, 0o741)
        self.cli("add", "-q", single)
        self.assertEqual(self.stat_json(single)["mode"], stat.S_IFREG | 0o741)
        # From standard input there is no file: no mode.
        self.cli("add", "-q", "-n", "piped", "-", input=b"piped\n")
        self.assertNotIn("mode", self.stat_json("piped"))

    def test_kept_across_restart_and_rebuild(self):
        self.cli("add", "-q", "-r", self.tree)
        want = {rel: self.stat_json(self.name(rel)) for rel in ("script.sh", "link-in", "empty")}
        self.d.stop()
        self.d.start()
        self.assertEqual({rel: self.stat_json(self.name(rel)) for rel in want}, want)
        # From the journal alone: the database made again from the packs.
        rebuild_index(self, self.d)
        for rel, st in want.items():
            with self.subTest(rel=rel):
                got = self.stat_json(self.name(rel))
                self.assertEqual((got["mode"], got["mtime"]), (st["mode"], st["mtime"]))

    def test_protocol_refuses_bad_modes(self):
        for fields, why in (({"name": "x", "mode": 0o020644, "mtime": 0}, "mode"),
                            ({"name": "x", "mode": 0o100644}, "mtime"),
                            ({"name": "x", "mode": "0644", "mtime": 0}, "mode"),
                            ({"mode": 0o100644, "mtime": 0}, "need name")):
            with self.subTest(fields=fields):
                with self.d.connect() as c:
                    reply = c.add(b"x", **fields)
                self.assertEqual(ct.error_code(reply), "bad_request", reply)
                self.assertIn(why, reply["error"]["message"])

    def test_mount_shows_them(self):
        from test_mount import Mount, fuse_missing
        why = fuse_missing()
        if why:
            self.skipTest(why)
        self.cli("add", "-q", "-r", self.tree)
        mnt = os.path.join(self.tmp, "mnt")
        Mount(self.d, mnt, self).start()
        seen = mnt + self.tree
        st = os.lstat(os.path.join(seen, "script.sh"))
        # Read-only: the recorded permissions without their write bits.
        self.assertEqual((stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode)), (stat.S_IFREG, 0o555))
        self.assertEqual(st.st_mtime, MTIME_NS // 10 ** 9)
        self.assertEqual(stat.S_IMODE(os.lstat(os.path.join(seen, "private")).st_mode), 0o400)
        self.assertTrue(stat.S_ISLNK(os.lstat(os.path.join(seen, "link-in")).st_mode))
        self.assertEqual(os.readlink(os.path.join(seen, "link-in")), "script.sh")
        self.assertEqual(os.readlink(os.path.join(seen, "link-out")), self.outside)
        # The link inside the tree leads to its file there.
        with open(os.path.join(seen, "link-in"), "rb") as f:
            self.assertEqual(f.read(), self.files["script.sh"][0])
        st = os.lstat(os.path.join(seen, "empty"))
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_mtime), (0o550, MTIME_NS // 10 ** 9))
        self.assertEqual(os.listdir(os.path.join(seen, "empty")), [])
        kinds = {e.name: (e.is_dir(follow_symlinks=False), e.is_symlink()) for e in os.scandir(seen)}
        self.assertEqual(kinds["empty"], (True, False))
        self.assertEqual(kinds["link-in"], (False, True))
        self.assertEqual(kinds["script.sh"], (False, False))

    def test_a_database_of_format_3_is_brought_up_to_date(self):
        """Names of a format-3 database had no mode or mtime: the columns are
        added at start, the names kept, and new adds keep their files'."""
        import sqlite3
        self.cli("add", "-q", "-n", "old", "-", input=b"old content\n")
        self.d.stop()
        db = sqlite3.connect(os.path.join(self.d.data_dir, "cairn.db"))
        db.executescript("DROP INDEX IF EXISTS names_by_name; DROP INDEX IF EXISTS names_by_doc;"
                         "ALTER TABLE names DROP COLUMN mode; ALTER TABLE names DROP COLUMN mtime;"
                         "PRAGMA user_version=3;")
        db.close()
        self.d.start()
        self.assertEqual(self.cli("get", "old").stdout, b"old content\n")
        self.assertNotIn("mode", self.stat_json("old"))
        self.cli("add", "-q", "-r", self.tree)
        self.assertEqual(self.stat_json(self.name("script.sh"))["mode"], stat.S_IFREG | 0o755)
        db = sqlite3.connect(os.path.join(self.d.data_dir, "cairn.db"))
        self.assertEqual(db.execute("PRAGMA user_version").fetchone()[0], 4)
        db.close()


class CopyAndRename(unittest.TestCase):
    """cairn cp REF NAME and cairn mv NAME NEWNAME: journaled names, no content stored,
    nothing deleted; the same after a restart and a --rebuild-index."""

    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        self.d = ct.Daemon(self).start()

    def cli(self, *args, **kw):
        return self.d.cli(*args, **kw)

    def add(self, name, content):
        return ct.parse_add(self.cli("add", "-n", name, "-", input=content).stdout)[0][0]

    def test_cp_and_mv(self):
        script = os.path.join(self.tmp, "run.sh")
        with open(script, "wb") as f:
            f.write(b"#!/bin/sh\n")
        os.chmod(script, 0o751)
        self.cli("add", "-q", script)
        h = ct.sha256_hex(b"#!/bin/sh\n")
        stored = json.loads(self.cli("--json", "status").stdout)["stored_bytes"]
        p = self.cli("cp", script, "copy.sh")
        self.assertEqual(p.stdout, ("%s  copy.sh\n" % h).encode())
        st = json.loads(self.cli("--json", "stat", "copy.sh").stdout)
        self.assertEqual((st["hash"], st["mode"]), (h, stat.S_IFREG | 0o751))
        self.assertEqual(json.loads(self.cli("--json", "stat", script).stdout)["hash"], h)
        # Copying onto a name that points elsewhere makes a new version of it.
        other = self.add("other", b"other content\n")
        self.cli("cp", "copy.sh", "other")
        self.assertEqual([line.split()[0] for line in self.cli("log", "other").stdout.decode().splitlines()],
                         [h, other])
        # A copy by hash or by NAME@{N}.
        self.cli("cp", other, "by-hash-copy")
        self.assertEqual(self.cli("get", "by-hash-copy").stdout, b"other content\n")
        self.cli("cp", "other@{1}", "from-version")
        self.assertEqual(self.cli("get", "from-version").stdout, b"other content\n")
        # Nothing stored but names.
        self.assertLessEqual(json.loads(self.cli("--json", "status").stdout)["stored_bytes"],
                             stored + 4096)

        # mv: the new name gets the newest version, the old name goes, nothing is deleted.
        v1 = self.add("notes", b"first notes\n")
        v2 = self.add("notes", b"second notes\n")
        p = self.cli("mv", "notes", "renamed")
        self.assertEqual(p.stdout, ("%s  renamed\n" % v2).encode())
        self.assertEqual(self.cli("get", "renamed").stdout, b"second notes\n")
        p = self.cli("get", "notes", check_exit=1)
        self.assertIn(b"not found", p.stderr)
        self.assertEqual(self.cli("get", v1).stdout, b"first notes\n")
        self.assertIn(v1, [j["hash"] for j in ct.parse_json_lines(self.cli("--json", "ls").stdout)
                           if not j["name"]])
        self.assertEqual([j["hash"] for j in ct.parse_json_lines(
            self.cli("--json", "search", "second").stdout)], [v2])
        # Refusals: a hash has no name to move; a name onto itself.
        for args in (("mv", v1, "x"), ("mv", "renamed", "renamed"), ("mv", "other@{1}", "y")):
            with self.subTest(args=args):
                p = self.cli("--json", *args, check_exit=1)
                self.assertEqual(json.loads(p.stdout)["error"]["code"], "bad_request", p.stdout)
        p = self.cli("cp", "no-such-name", "z", check_exit=1)
        self.assertIn(b"not found", p.stderr)
        self.cli("cp", "only-one", check_exit=2)

        want = {j["name"]: j["hash"] for j in ct.parse_json_lines(self.cli("--json", "ls").stdout)}
        self.d.stop()
        self.d.start()
        self.assertEqual({j["name"]: j["hash"] for j in
                          ct.parse_json_lines(self.cli("--json", "ls").stdout)}, want)
        rebuild_index(self, self.d)
        self.assertEqual({j["name"]: j["hash"] for j in
                          ct.parse_json_lines(self.cli("--json", "ls").stdout)}, want)
        self.assertEqual(json.loads(self.cli("--json", "stat", "copy.sh").stdout)["mode"],
                         stat.S_IFREG | 0o751)


class TagsAndMeta(unittest.TestCase):
    """cairn tag [-d] REF TAG... and cairn meta REF KEY=VALUE... / -d REF KEY...: a
    document's tags and metadata changed without adding it again, journaled, so a
    restart, a gc and a --rebuild-index keep every change in its order."""

    def setUp(self):
        self.d = ct.Daemon(self).start()

    def cli(self, *args, **kw):
        return self.d.cli(*args, **kw)

    def stat(self, ref):
        return json.loads(self.cli("--json", "stat", ref).stdout)

    def tagged(self, tag):
        return sorted(j["name"] for j in ct.parse_json_lines(self.cli("--json", "ls", "-t", tag).stdout))

    def test_tag_and_meta(self):
        content = b"the quarterly numbers, in words\n"
        self.cli("add", "-q", "-n", "report.txt", "-t", "draft", "-", input=content)
        self.cli("add", "-q", "-n", "copy.txt", "-", input=content)
        p = self.cli("tag", "report.txt", "finance", "q3")
        self.assertIn(b"tags:\n  draft\n  finance\n  q3\n", p.stdout)
        # The document's: every name pointing to it has them.
        self.assertEqual(self.tagged("finance"), ["copy.txt", "report.txt"])
        self.assertEqual(len(ct.parse_json_lines(self.cli("--json", "search", "tag:finance").stdout)), 1)
        self.cli("tag", "-d", "copy.txt", "draft")
        self.assertEqual(self.stat("report.txt")["tags"], ["finance", "q3"])
        self.assertEqual(self.tagged("draft"), [])
        self.assertEqual(len(ct.parse_json_lines(self.cli("--json", "search", "tag:draft").stdout)), 0)
        p = self.cli("tag", "report.txt", "q3")
        self.assertIn(b"nothing changed", p.stderr)
        self.cli("meta", "report.txt", "owner=ann", "lang=en")
        self.assertEqual(self.stat("copy.txt")["meta"], {"owner": "ann", "lang": "en"})
        self.cli("meta", "report.txt", "owner=bob")
        self.cli("meta", "-d", "report.txt", "lang")
        self.assertEqual(self.stat("report.txt")["meta"], {"owner": "bob"})
        # A later add brings a removed tag back: the journal's order decides.
        self.cli("tag", "-d", "report.txt", "q3")
        self.cli("add", "-q", "-t", "q3", "-", input=content)
        want = {"tags": ["finance", "q3"], "meta": {"owner": "bob"}}
        got = self.stat("report.txt")
        self.assertEqual({k: got[k] for k in want}, want)
        # Usage and refusals.
        self.cli("tag", "report.txt", check_exit=2)
        self.cli("meta", "report.txt", "novalue", check_exit=2)
        p = self.cli("tag", "nosuch", "t", check_exit=1)
        self.assertIn(b"not found", p.stderr)
        # Kept across a restart, a gc and a rebuild from the packs alone.
        self.d.stop()
        self.d.start()
        got = self.stat("report.txt")
        self.assertEqual({k: got[k] for k in want}, want)
        json.loads(self.cli("--json", "gc").stdout)
        rebuild_index(self, self.d)
        got = self.stat("report.txt")
        self.assertEqual({k: got[k] for k in want}, want)
        self.assertEqual(self.tagged("draft"), [])


class EditAndNameRefusals(unittest.TestCase):
    """What bad requests to the edit and name ops get: bad_request, nothing changed."""

    def test_bad_requests(self):
        d = ct.Daemon(self).start()
        d.cli("add", "-q", "-n", "doc", "-t", "keep", "-", input=b"content\n")
        cases = [("edit", {"ref": "doc"}, "needs tags"),
                 ("edit", {"ref": "doc", "tags": "t"}, "tags must be an array"),
                 ("edit", {"ref": "doc", "tags": [""]}, "tags must hold"),
                 ("edit", {"ref": "doc", "untags": ["t"] * 65}, "untags must be an array"),
                 ("edit", {"ref": "doc", "meta": {"k": 1}}, "meta values"),
                 ("edit", {"ref": "doc", "unmeta": ["k" * 257]}, "unmeta must hold"),
                 ("name", {"ref": "doc"}, "name must be"),
                 ("name", {"ref": "doc", "name": "n", "rename": 1}, "rename"),
                 ("name", {"ref": "doc", "name": "doc", "rename": True}, "to itself")]
        with d.connect() as c:
            for op, fields, why in cases:
                with self.subTest(op=op, fields=fields):
                    reply = c.call(op, **fields)
                    self.assertEqual(ct.error_code(reply), "bad_request", reply)
                    self.assertIn(why, reply["error"]["message"])
            for op, fields in (("edit", {"ref": "nothing", "tags": ["t"]}),
                               ("name", {"ref": "nothing", "name": "n"})):
                self.assertEqual(ct.error_code(c.call(op, **fields)), "not_found")
        st = json.loads(d.cli("--json", "stat", "doc").stdout)
        self.assertEqual((st["tags"], st["meta"]), (["keep"], {}))
        self.assertEqual([j["name"] for j in ct.parse_json_lines(d.cli("--json", "ls").stdout)],
                         ["doc"])


if __name__ == "__main__":
    ct.main()
