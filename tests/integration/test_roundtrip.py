#!/usr/bin/env python3
"""Round trips through the real `cairn` CLI and `cairnd`: content is returned
byte for byte, names/tags/metadata/versions behave as specified, references
resolve (hash, prefix, name), and exit codes and output formats match the
spec (0 ok, 1 failed, 2 usage, 3 unreachable; `--json` one object a line)."""

import ctypes
import hashlib
import json
import os
import stat
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402


class CliTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        self.d = ct.Daemon(self)
        self.d.start()

    def stop_daemon(self):
        self.d.stop()

    def cli(self, *args, **kw):
        return self.d.cli(*args, **kw)

    def write(self, name, content):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def add(self, content, *opts):
        """Adds `content` from stdin; returns its hash."""
        p = self.cli("add", *opts, "-", input=content)
        [(h, _)] = ct.parse_add(p.stdout)
        self.assertEqual(h, ct.sha256_hex(content))
        return h

    def get(self, ref):
        return self.cli("get", ref).stdout


class RoundTrip(CliTestCase):
    def test_small_sizes_roundtrip_byte_exact(self):
        for size in (0, 1, 8192):
            with self.subTest(size=size):
                content = os.urandom(size)
                path = self.write("in-%d" % size, content)
                p = self.cli("add", "-n", "doc-%d" % size, path)
                self.assertEqual(ct.parse_add(p.stdout), [(ct.sha256_hex(content), "doc-%d" % size)])
                h = ct.sha256_hex(content)
                self.assertEqual(self.get(h), content)
                self.assertEqual(self.get("doc-%d" % size), content)
                out = os.path.join(self.tmp, "out-%d" % size)
                self.cli("get", "-o", out, h)
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), content)
        self.stop_daemon()

    def test_empty_document_hash(self):
        h = self.add(b"", "-n", "empty")
        self.assertEqual(h, hashlib.sha256(b"").hexdigest())
        self.assertEqual(self.get("empty"), b"")
        self.stop_daemon()

    def test_100mib_file_and_stdin_roundtrip(self):
        path = os.path.join(self.tmp, "big")
        digest = ct.write_random_file(path, 100 * ct.MiB)
        p = self.cli("add", "-n", "big", path)
        self.assertEqual(ct.parse_add(p.stdout), [(digest, "big")])

        # get to stdout, redirected to a file so nothing is held in memory here
        out = os.path.join(self.tmp, "big.out")
        with open(out, "wb") as f:
            self.cli("get", digest, stdout=f)
        self.assertEqual(os.path.getsize(out), 100 * ct.MiB)
        self.assertEqual(ct.sha256_file(out), digest)
        os.unlink(out)

        # the same content again through stdin: same hash, still one document
        with open(path, "rb") as f:
            p = self.cli("add", "-n", "big-stdin", "-", stdin=f)
        self.assertEqual(ct.parse_add(p.stdout), [(digest, "big-stdin")])
        self.cli("get", "-o", out, "big-stdin")
        self.assertEqual(ct.sha256_file(out), digest)
        listed = ct.parse_ls(self.cli("ls", "--docs").stdout)
        self.assertEqual([(h, s) for h, s, _ in listed], [(digest, 100 * ct.MiB)])
        self.stop_daemon()

    def test_stdin_add_without_name_prints_dash(self):
        content = b"from stdin\n"
        p = self.cli("add", "-", input=content)
        self.assertEqual(ct.parse_add(p.stdout), [(ct.sha256_hex(content), "-")])
        self.assertEqual(self.get(ct.sha256_hex(content)), content)
        self.stop_daemon()

    def test_several_paths_and_recursive(self):
        a = self.write("a.txt", b"alpha\n")
        b = self.write("b.txt", b"beta\n")
        p = self.cli("add", a, b)
        # without -n a document is named by its path as given
        self.assertEqual(ct.parse_add(p.stdout),
                         [(ct.sha256_hex(b"alpha\n"), a), (ct.sha256_hex(b"beta\n"), b)])
        self.assertEqual(self.get(a), b"alpha\n")

        tree = os.path.join(self.tmp, "tree")
        os.makedirs(os.path.join(tree, "sub", "deeper"))
        files = {"one": b"1\n", "sub/two": b"22\n", "sub/deeper/three": b"333\n"}
        for rel, content in files.items():
            with open(os.path.join(tree, rel), "wb") as f:
                f.write(content)
        p = self.cli("add", "-r", tree)
        self.assertEqual(sorted(ct.parse_add(p.stdout)),
                         sorted((ct.sha256_hex(c), os.path.join(tree, rel)) for rel, c in files.items()))
        for content in files.values():
            self.assertEqual(self.get(ct.sha256_hex(content)), content)
        self.stop_daemon()

    def test_recursive_exclude(self):
        tree = os.path.join(self.tmp, "ex")
        files = {"keep.txt": b"k\n", "obj.o": b"o\n", "sub/deep.o": b"d\n",
                 "sub/keep2.txt": b"k2\n", ".git/config": b"g\n", "skipdir/x.txt": b"x\n",
                 "sub/skipdir/y.txt": b"y\n"}
        for rel, content in files.items():
            os.makedirs(os.path.dirname(os.path.join(tree, rel)), exist_ok=True)
            with open(os.path.join(tree, rel), "wb") as f:
                f.write(content)
        # A name pattern works at any depth, a pattern with a / matches the path.
        p = self.cli("add", "-r", "--exclude", "*.o", "--exclude", ".git",
                     "--exclude", os.path.join(tree, "skipdir"), tree)
        added = sorted(name for _, name in ct.parse_add(p.stdout))
        self.assertEqual(added, sorted(os.path.join(tree, rel) for rel in
                                       ("keep.txt", "sub/keep2.txt", "sub/skipdir/y.txt")))
        p = self.cli("add", "--exclude", "", tree, check_exit=2)
        self.assertIn(b"empty --exclude", p.stderr)

    def test_recursive_never_follows_links_unless_asked(self):
        """add -r stored /etc/passwd through a link planted in the tree, and
        skipped other links and FIFOs without a word; links are stored as
        links (their targets, never what they point to), -L follows those to
        files, FIFOs are skipped and named and never block the walk."""
        tree = os.path.join(self.tmp, "links")
        outside = self.write("outside-secret", b"not part of the tree\n")
        os.makedirs(os.path.join(tree, "dir"))
        with open(os.path.join(tree, "plain.txt"), "wb") as f:
            f.write(b"plain\n")
        os.symlink(outside, os.path.join(tree, "link-out"))
        os.symlink("dir", os.path.join(tree, "link-dir"))
        os.symlink("nowhere", os.path.join(tree, "dangling"))
        os.mkfifo(os.path.join(tree, "fifo"))
        p = self.cli("add", "-r", tree)
        self.assertEqual([n for _, n in ct.parse_add(p.stdout)],
                         [os.path.join(tree, n) for n in ("dangling", "dir", "link-dir", "link-out",
                                                          "plain.txt")])
        self.assertEqual(self.get(os.path.join(tree, "link-out")), outside.encode())
        self.assertIn("cairn: skipped %s: not a regular file" % os.path.join(tree, "fifo"),
                      p.stderr.decode())
        self.assertNotIn(b"not part of the tree", self.cli("search", "part").stdout)
        p = self.cli("add", "-r", "-L", tree)
        added = sorted(n for _, n in ct.parse_add(p.stdout))
        self.assertEqual(added, [os.path.join(tree, "dir"), os.path.join(tree, "link-out"),
                                 os.path.join(tree, "plain.txt")])
        self.assertEqual(self.get(os.path.join(tree, "link-out")), b"not part of the tree\n")
        err = p.stderr.decode()
        self.assertIn("skipped %s: a symbolic link to a directory" % os.path.join(tree, "link-dir"), err)
        self.assertIn("skipped %s: a symbolic link to nothing" % os.path.join(tree, "dangling"), err)
        self.assertEqual(self.cli("-q", "add", "-r", tree).stderr, b"")

    def test_get_output_file_is_sparse(self):
        # Zero runs (aligned or not) in the middle and at the end; data at odd offsets.
        content = (os.urandom(1000) + bytes(8 * ct.MiB) + os.urandom(70000) + bytes(5000)
                   + os.urandom(3) + bytes(4 * ct.MiB + 123))
        h = self.add(content, "-n", "sparse")
        out = os.path.join(self.tmp, "sparse.bin")
        self.cli("get", "-o", out, "sparse")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), content)
        st = os.stat(out)
        self.assertEqual(st.st_size, len(content))
        # Holes where the zero runs were: far less allocated than the size.
        self.assertLess(st.st_blocks * 512, 1 * ct.MiB, "get -o wrote the zeros")
        # Standard output gets every byte.
        self.assertEqual(self.get(h), content)

    def test_get_output_file(self):
        content = os.urandom(5000)
        h = self.add(content, "-n", "for-o")
        out = os.path.join(self.tmp, "o.bin")
        p = self.cli("get", "-o", out, "for-o")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), content)
        self.assertNotIn(content, p.stdout)
        # -o replaces an existing file entirely
        with open(out, "wb") as f:
            f.write(b"x" * 100000)
        self.cli("get", "-o", out, h)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), content)
        self.stop_daemon()

    def test_get_o_keeps_the_mode_of_the_file_it_replaces(self):
        """A private file stays private (it became 0644); a new file gets
        0666 less the umask, as a plain create."""
        h = self.add(b"secret\n", "-n", "secret")
        private = os.path.join(self.tmp, "private")
        with open(private, "wb") as f:
            f.write(b"old")
        for mode in (0o600, 0o640, 0o755):
            with self.subTest(mode=oct(mode)):
                os.chmod(private, mode)
                self.cli("get", "-o", private, h)
                self.assertEqual(stat.S_IMODE(os.stat(private).st_mode), mode)
                with open(private, "rb") as f:
                    self.assertEqual(f.read(), b"secret\n")
        fresh = os.path.join(self.tmp, "fresh")
        old = os.umask(0o027)
        try:
            self.cli("get", "-o", fresh, h)
        finally:
            os.umask(old)
        self.assertEqual(stat.S_IMODE(os.stat(fresh).st_mode), 0o640)


class NamesTagsMeta(CliTestCase):
    def test_mime_of_content_stored_already_is_not_dropped_silently(self):
        """add --mime TYPE of content stored already changed nothing and said
        nothing; a mime type is the content's, set when it is first stored."""
        h = self.add(b"<p>hi</p>\n", "-n", "page.html", "--mime", "text/html")
        self.assertEqual(json.loads(self.cli("--json", "stat", h).stdout)["mime"], "text/html")
        p = self.cli("add", "-n", "again.html", "--mime", "text/plain", "-", input=b"<p>hi</p>\n")
        self.assertIn(b"stored already as text/html; --mime text/plain not applied", p.stderr)
        self.assertEqual(json.loads(self.cli("--json", "stat", h).stdout)["mime"], "text/html")
        # The same type, or none given: no word.
        p = self.cli("add", "-n", "third.html", "--mime", "text/html", "-", input=b"<p>hi</p>\n")
        self.assertEqual(p.stderr, b"")
        self.assertEqual(self.cli("add", "-", input=b"<p>hi</p>\n").stderr, b"")
        [js] = ct.parse_json_lines(self.cli("--json", "add", "-", input=b"<p>hi</p>\n").stdout)
        self.assertEqual(js["mime"], "text/html")

    def test_control_characters_never_reach_the_terminal_raw(self):
        """A name with an escape sequence or a newline went to the terminal
        raw (colours, split ls lines); on a terminal they show as '?', in a
        pipe as they are. stat lists an item a line: "a, b" is one name."""
        evil = "evil\x1b[31mred\nsplit"
        self.cli("add", "-n", evil, "-", input=b"evil content\n")
        h = ct.sha256_hex(b"evil content\n")
        self.add(b"evil content\n", "-n", "a, b")
        for args in (("ls",), ("stat", h), ("add", "-n", evil, self.write("e", b"evil content\n"))):
            with self.subTest(args=args):
                rc, tty = ct.run_on_tty([ct.CAIRN, "--socket", self.d.socket_path,
                                         "--no-autostart"] + list(args), timeout=60 * ct.SLOW)
                self.assertEqual(rc, 0, tty)
                self.assertNotIn(b"\x1b[31m", tty)
                self.assertIn(b"evil?[31mred?split", tty)
        self.assertIn(evil.encode(), self.cli("ls").stdout)
        # A snippet too: a document that clears the screen.
        self.add(b"bell ringer \x1b[2J cleared\n", "-n", "bell.txt")
        rc, tty = ct.run_on_tty([ct.CAIRN, "--socket", self.d.socket_path, "--no-autostart",
                                 "search", "ringer"], timeout=60 * ct.SLOW)
        self.assertNotIn(b"\x1b[2J", tty)
        self.assertIn(b"?[2J", tty)
        out = self.cli("stat", h).stdout.decode()
        self.assertIn("names:\n  %s\n  a, b\n" % evil, out)

    def test_name_with_spaces(self):
        h = self.add(b"spaced", "-n", "my file.txt")
        p = self.cli("add", "-n", "my file.txt", "-", input=b"spaced")
        self.assertEqual(ct.parse_add(p.stdout), [(h, "my file.txt")])
        self.assertEqual(self.get("my file.txt"), b"spaced")
        self.stop_daemon()

    def test_versions_same_name_newest_wins(self):
        h1 = self.add(b"version one\n", "-n", "notes.txt")
        h2 = self.add(b"version two\n", "-n", "notes.txt")
        self.assertNotEqual(h1, h2)
        self.assertEqual(self.get("notes.txt"), b"version two\n")
        self.assertEqual(self.get(h1), b"version one\n")
        self.assertEqual(self.get(h2), b"version two\n")
        h3 = self.add(b"version three\n", "-n", "notes.txt")
        self.assertEqual(self.get("notes.txt"), b"version three\n")
        # deleting the newest version makes the name fall back to the previous one
        p = self.cli("rm", h3)
        self.assertEqual(p.stdout.decode().splitlines(), ["deleted " + h3, "  name notes.txt"])
        self.assertEqual(self.get("notes.txt"), b"version two\n")
        self.assertEqual(self.get(h1), b"version one\n")
        self.stop_daemon()

    def test_tags_filter_ls(self):
        ha = self.add(b"doc a", "-n", "a", "-t", "red", "-t", "blue")
        hb = self.add(b"doc b", "-n", "b", "-t", "blue")
        hc = self.add(b"doc c", "-n", "c")
        red = ct.parse_ls(self.cli("ls", "--docs", "-t", "red").stdout)
        blue = ct.parse_ls(self.cli("ls", "--docs", "-t", "blue").stdout)
        every = ct.parse_ls(self.cli("ls", "--docs").stdout)
        self.assertEqual(red, [(ha, 5, "a")])
        self.assertEqual(sorted(blue), sorted([(ha, 5, "a"), (hb, 5, "b")]))
        self.assertEqual(sorted(every), sorted([(ha, 5, "a"), (hb, 5, "b"), (hc, 5, "c")]))
        self.assertEqual(self.cli("ls", "-t", "green").stdout, b"")
        # the alias
        self.assertEqual(sorted(ct.parse_ls(self.cli("list", "--docs", "-t", "blue").stdout)), sorted(blue))
        self.stop_daemon()

    def test_ls_lists_each_document_once(self):
        h = self.add(b"shared content", "-n", "first")
        self.add(b"shared content", "-n", "second", "-t", "x")
        other = self.add(b"other", "-n", "third")
        hashes = [row[0] for row in ct.parse_ls(self.cli("ls", "--docs").stdout)]
        self.assertEqual(sorted(hashes), sorted([h, other]))
        # tags of a re-added document are merged into the existing one
        self.assertEqual([row[0] for row in ct.parse_ls(self.cli("ls", "--docs", "-t", "x").stdout)], [h])
        self.stop_daemon()

    def test_meta_shown_by_stat(self):
        h = self.add(b"with meta", "-n", "m.txt", "-m", "author=ada", "-m", "formula=a=b+c",
                     "-t", "tagged")
        st = ct.parse_kv(self.cli("stat", h).stdout)
        self.assertEqual(st.get("hash"), h)
        self.assertEqual(st.get("size", "").split()[:1], ["9"])
        self.assertEqual(st.get("name"), "m.txt")
        text = self.cli("stat", "m.txt").stdout.decode()
        for needle in ("author", "ada", "formula", "a=b+c", "tagged"):
            self.assertIn(needle, text)
        [js] = ct.parse_json_lines(self.cli("--json", "stat", "m.txt").stdout)
        self.assertEqual(js.get("hash"), h)
        self.assertEqual(js.get("meta"), {"author": "ada", "formula": "a=b+c"})
        self.assertEqual(js.get("tags"), ["tagged"])
        self.stop_daemon()


class References(CliTestCase):
    def test_hash_prefixes(self):
        content = b"prefix me"
        h = self.add(content, "-n", "pfx")
        self.assertEqual(self.get(h[:8]), content)
        self.assertEqual(self.get(h[:63]), content)
        self.assertEqual(self.get(h[:20]), content)
        # fewer than 8 digits is not a prefix but a name, and there is none
        p = self.cli("get", h[:7], check_exit=1)
        self.assertEqual(p.stdout, b"")
        ct.assert_cli_error(self, p)
        self.stop_daemon()

    def test_ambiguous_prefix_fails(self):
        a, b = ct.colliding_pair(8)
        ha = self.add(a)
        hb = self.add(b)
        self.assertEqual(ha[:8], hb[:8])
        self.assertNotEqual(ha, hb)
        p = self.cli("get", ha[:8], check_exit=1)
        self.assertEqual(p.stdout, b"")
        ct.assert_cli_error(self, p)
        self.cli("stat", ha[:8], check_exit=1)
        # a longer prefix disambiguates
        common = 8
        while ha[common] == hb[common]:
            common += 1
        self.assertEqual(self.get(ha[:common + 1]), a)
        self.assertEqual(self.get(hb[:common + 1]), b)
        self.stop_daemon()

    def test_hex_name_that_matches_no_hash_resolves_as_name(self):
        content = b"named like hex"
        h = self.add(content, "-n", "00000000ff")
        if h.startswith("00000000ff"):
            self.skipTest("astronomically unlikely hash collision with the name")
        self.assertEqual(self.get("00000000ff"), content)
        self.stop_daemon()


class Removal(CliTestCase):
    def test_rm_then_get_fails(self):
        h = self.add(b"short-lived", "-n", "tmp.txt")
        p = self.cli("rm", "tmp.txt")
        self.assertEqual(p.stdout.decode().splitlines(), ["removed tmp.txt", "deleted " + h])
        for ref in (h, "tmp.txt", h[:8]):
            p = self.cli("get", ref, check_exit=1)
            self.assertEqual(p.stdout, b"")
            ct.assert_cli_error(self, p)
        self.cli("rm", h, check_exit=1)
        self.assertEqual(self.cli("ls").stdout, b"")
        self.stop_daemon()

    def test_rm_several_and_delete_alias(self):
        h1 = self.add(b"one", "-n", "one")
        h2 = self.add(b"two", "-n", "two")
        h3 = self.add(b"three", "-n", "three")
        p = self.cli("rm", h1, "two")
        self.assertEqual(p.stdout.decode().splitlines(),
                         ["deleted " + h1, "  name one", "removed two", "deleted " + h2])
        p = self.cli("delete", h3[:10])
        self.assertEqual(p.stdout.decode().splitlines(), ["deleted " + h3, "  name three"])
        self.assertEqual(self.cli("ls").stdout, b"")
        st = ct.parse_kv(self.cli("status").stdout)
        self.assertEqual(st.get("documents", "").split()[:1], ["0"])
        self.stop_daemon()

    def test_names_behave_like_paths(self):
        """Names are like hard links: rm NAME removes that name only, the
        content goes with its last name; rm HASH removes every name."""
        lic = b"the same license text\n"
        names = ["doc/pkg%d/copyright" % i for i in range(5)]
        h = None
        for n in names:
            h = self.add(lic, "-n", n)
        p = self.cli("rm", names[0])
        self.assertEqual(p.stdout.decode().splitlines(), ["removed " + names[0]])
        self.cli("get", names[0], check_exit=1)
        for n in names[1:]:
            self.assertEqual(self.get(n), lic, n)
        self.assertEqual(self.get(h), lic)
        # --dry-run says what would go and changes nothing
        for args, want in ((("-n", names[1]), ["would remove " + names[1]]),
                           (("--dry-run", h), ["would delete " + h]
                            + ["  name " + n for n in names[1:]])):
            p = self.cli("rm", *args)
            self.assertEqual(p.stdout.decode().splitlines(), want)
        for n in names[1:]:
            self.assertEqual(self.get(n), lic, n)
        # the last names go one by one; the content with the last of them
        for n in names[1:-1]:
            self.cli("rm", n)
        self.assertEqual(self.get(h), lic)
        p = self.cli("rm", names[-1])
        self.assertEqual(p.stdout.decode().splitlines(), ["removed " + names[-1], "deleted " + h])
        self.cli("get", h, check_exit=1)
        # rm HASH: the document and every name pointing to it, printed
        h = self.add(lic, "-n", "x")
        self.add(lic, "-n", "y")
        [r] = ct.parse_json_lines(self.cli("--json", "rm", h[:12]).stdout)
        self.assertEqual((r.get("names"), r.get("deleted"), r.get("dry_run")), (["x", "y"], [h], False))
        for ref in ("x", "y", h):
            self.cli("get", ref, check_exit=1)
        # a name's versions go with it; one another name points to stays
        v1 = self.add(b"v1", "-n", "notes")
        v2 = self.add(b"v2", "-n", "notes")
        self.add(b"v1", "-n", "keep")
        p = self.cli("rm", "notes")
        self.assertEqual(p.stdout.decode().splitlines(), ["removed notes", "deleted " + v2])
        self.assertEqual(self.get(v1), b"v1")
        self.assertEqual(self.get("keep"), b"v1")
        self.stop_daemon()


class Ranges(CliTestCase):
    def test_get_range_is_byte_exact(self):
        """get --range START-END (END included) and START-: first and last
        byte, across chunk boundaries, past the end; to stdout and -o."""
        content = os.urandom(3 * 1024 * 1024 + 17)
        h = self.add(content, "-n", "big.bin")
        n = len(content)
        rng = random.Random(7)
        cases = [(0, 0), (n - 1, n - 1), (0, n - 1), (1, 65536), (n - 10, n + 100)]
        cases += [(a, a + rng.randrange(1, 300000)) for a in (rng.randrange(n) for _ in range(12))]
        for start, end in cases:
            with self.subTest(start=start, end=end):
                got = self.cli("get", "--range", "%d-%d" % (start, end), h).stdout
                self.assertEqual(got, content[start:end + 1])
        self.assertEqual(self.cli("get", "--range", "%d-" % (n - 5), "big.bin").stdout, content[-5:])
        self.assertEqual(self.cli("get", "--range", "%d-" % (n + 5), h).stdout, b"")
        out = os.path.join(self.tmp, "part")
        self.cli("get", "-o", out, "--range", "1000-1999", h)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), content[1000:2000])
        for bad in ("5-4", "x-1", "-5", "1", "1-2-3", ""):
            p = self.cli("get", "--range", bad, h, check_exit=2)
            self.assertIn(b"--range", p.stderr)
        self.stop_daemon()


class OutputToSpecialFiles(CliTestCase):
    def test_get_o_writes_into_devices_and_fifos(self):
        """get -o into a device or a FIFO writes into it: it is never replaced
        by a file renamed over it (get -o /dev/null once made /dev/null a
        regular file)."""
        import stat
        import threading
        content = os.urandom(300000)
        h = self.add(content, "-n", "special.bin")
        # a null device of the test's own (a regression must not break the real one)
        if os.geteuid() == 0:
            null = os.path.join(self.tmp, "null")
            os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            self.cli("get", "-o", null, h)
            self.assertTrue(stat.S_ISCHR(os.stat(null).st_mode), "the device was replaced by a file")
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
        reader.start()
        self.cli("get", "-o", fifo, "--range", "10-99999", h)
        reader.join(30)
        self.assertEqual(got, [content[10:100000]])
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))
        self.stop_daemon()


class Listing(CliTestCase):
    def test_ls_lists_every_name(self):
        """`ls` has one row per name, sorted bytewise, even when names share
        content; PREFIX narrows it like a path; --docs has one per document;
        documents without a name come last without PREFIX."""
        lic = b"shared license\n"
        names = ["usr/share/doc/%s/copyright" % p for p in ("zlib", "git", "bash", "git-man")]
        for n in names:
            h = self.add(lic, "-n", n)
        other = self.add(b"readme\n", "-n", "usr/share/doc/git/README")
        anon = self.add(b"no name\n")
        rows = self.cli("ls").stdout.decode().splitlines()
        listed = [r.split("  ")[-1] for r in rows]
        self.assertEqual(listed, sorted(names + ["usr/share/doc/git/README"]) + ["-"])
        for r in rows:
            cols = r.split("  ")
            self.assertRegex(r, r"^[0-9a-f]{12}  +\d+  \d{4}-\d\d-\d\d \d\d:\d\d  ")
            self.assertIn(cols[0], (h[:12], other[:12], anon[:12]))
        git = [r.split("  ")[-1] for r in self.cli("ls", "usr/share/doc/git/").stdout.decode().splitlines()]
        self.assertEqual(git, ["usr/share/doc/git/README", "usr/share/doc/git/copyright"])
        # a PREFIX is a path: usr/share/doc/git is not usr/share/doc/git-man
        for prefix in ("usr/share/doc/git", "/usr/share/doc/git"[1:]):
            rows = self.cli("ls", prefix).stdout.decode().splitlines()
            self.assertEqual([r.split("  ")[-1] for r in rows], git)
        self.assertEqual(self.cli("ls", "usr/share/doc/g").stdout, b"")
        docs = ct.parse_ls(self.cli("ls", "--docs").stdout)
        self.assertEqual(sorted(d[0] for d in docs), sorted([h, other, anon]))
        js = ct.parse_json_lines(self.cli("--json", "ls", "usr/share/doc").stdout)
        self.assertEqual([(j["name"], j["hash"], j["size"]) for j in js],
                         [(n, other if n.endswith("README") else h, 7 if n.endswith("README") else len(lic))
                          for n in sorted(names + ["usr/share/doc/git/README"])])
        # the protocol's prefix without path is a plain string prefix
        with self.d.connect() as c:
            items = c.list_all(names=True, prefix="usr/share/doc/g")
            self.assertEqual([x["name"] for x in items], sorted(
                n for n in names + ["usr/share/doc/git/README"] if n.startswith("usr/share/doc/g")))
            items = c.list_all(names=True, prefix="usr/share/doc/git", path=True)
            self.assertEqual([x["name"] for x in items], git)
        self.assertTrue(all(isinstance(j.get("named"), int) for j in js))
        # -l: the mode (none recorded from standard input), the full hash, sizes and mime
        # type; -h: human sizes
        big = self.add(b"x" * 3000000, "-n", "big.bin")
        [row] = [r for r in self.cli("ls", "-lh", "big.bin").stdout.decode().splitlines()]
        self.assertTrue(row.startswith("?---------  " + big + "  "), row)
        self.assertIn("2.9 MiB", row)
        self.assertTrue(row.endswith("  big.bin"), row)
        # after rm NAME the other names stay listed
        self.cli("rm", names[0])
        listed = [r.split("  ")[-1] for r in self.cli("ls", "usr/").stdout.decode().splitlines()]
        self.assertEqual(listed, sorted(names[1:] + ["usr/share/doc/git/README"]))
        self.stop_daemon()

    def test_du_sums_a_prefix(self):
        """du: each name's size (logical), each document once (unique), its
        share of the packs (stored), and what that saved."""
        lic = os.urandom(5000)
        for i in range(4):
            self.add(lic, "-n", "doc/p%d/copyright" % i)
        self.add(b"readme " * 100, "-n", "doc/p0/README")
        self.add(b"elsewhere", "-n", "other/x")
        [du] = ct.parse_json_lines(self.cli("--json", "du", "doc/").stdout)
        self.assertEqual((du["names"], du["documents"]), (5, 2))
        self.assertEqual(du["logical_bytes"], 4 * 5000 + 700)
        self.assertEqual(du["unique_bytes"], 5000 + 700)
        self.assertGreater(du["stored_bytes"], 5000)
        self.assertEqual(du["saved_bytes"], du["logical_bytes"] - du["stored_bytes"])
        every = ct.parse_kv(self.cli("du").stdout)
        self.assertEqual((every["names"], every["documents"]), ("6", "3"))
        self.assertEqual(ct.parse_kv(self.cli("du", "doc/p0/").stdout)["names"], "2")
        self.assertEqual(ct.parse_kv(self.cli("du", "doc/p0").stdout)["names"], "2")  # a path
        self.assertEqual(ct.parse_kv(self.cli("du", "doc/p").stdout)["names"], "0")
        self.assertEqual(ct.parse_kv(self.cli("du", "doc/p0/README").stdout)["names"], "1")
        self.assertEqual(ct.parse_kv(self.cli("du", "nothing/").stdout)["names"], "0")
        self.assertEqual(ct.parse_kv(self.cli("du", "-h", "doc/").stdout)["logical_bytes"], "20.2 KiB")
        self.stop_daemon()

    def test_get_recursive_restores_a_tree(self):
        """get -r PREFIX DIR writes each name under PREFIX to DIR/NAME,
        byte-exact, sparse where zeros run; a name that would leave DIR is
        refused (exit 1) and nothing is written outside DIR."""
        src = os.path.join(self.tmp, "src")
        files = {"a/b/c.txt": b"deep\n", "a/top.bin": os.urandom(70000), "a/empty": b"",
                 "a/sparse": b"\0" * (1 << 20) + b"end"}
        for rel, content in files.items():
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            with open(os.path.join(src, rel), "wb") as f:
                f.write(content)
        self.cli("add", "-r", os.path.join(src, "a"))
        out = os.path.join(self.tmp, "out")
        self.cli("get", "-r", src + "/a/", out)
        for rel, content in files.items():
            with open(out + os.path.join(src, rel), "rb") as f:
                self.assertEqual(f.read(), content, rel)
        st = os.stat(out + os.path.join(src, "a/sparse"))
        self.assertLess(st.st_blocks * 512, 1 << 20, "a run of zeros was written, not left a hole")
        # a hostile name is refused; the others are restored
        self.add(b"escape", "-n", "x/../../../escaped")
        self.add(b"fine", "-n", "x/fine")
        out2 = os.path.join(self.tmp, "deep", "out2")
        p = self.cli("get", "-r", "x/", out2, check_exit=1)
        self.assertIn(b"x/../../../escaped", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "escaped")))
        with open(os.path.join(out2, "x", "fine"), "rb") as f:
            self.assertEqual(f.read(), b"fine")
        # a path: x/fin is not x/fine
        p = self.cli("get", "-r", "x/fin", os.path.join(self.tmp, "out3"), check_exit=1)
        self.assertIn(b"no name starts with it", p.stderr)
        p = self.cli("get", "-r", "no/such/prefix", out2, check_exit=1)
        self.assertIn(b"no name starts with it", p.stderr)
        self.cli("get", "-r", "x/", check_exit=2)
        self.stop_daemon()

    def test_ls_pages_through_many_names(self):
        """More names than one reply frame holds (500 a frame): every name
        once, in order, with a prefix that ends mid-page."""
        want = ["p/%04d" % i for i in range(1200)]
        with self.d.connect() as c:
            for i, n in enumerate(want + ["q/0", "o/0"]):
                self.assertIs(c.add(b"doc %d" % (i % 7), name=n).get("ok"), True)
            items = c.list_all(names=True, prefix="p/")
            self.assertEqual([x["name"] for x in items], want)
            page = c.list_all(names=True, prefix="p/", after="p/1150", limit=10)
            self.assertEqual([x["name"] for x in page], ["p/%04d" % i for i in range(1151, 1161)])
            r = c.call("list", prefix="p/")
            self.assertEqual(r.get("error", {}).get("code"), "bad_request", r)
            r = c.call("list", names=True, unnamed=True)
            self.assertEqual(r.get("error", {}).get("code"), "bad_request", r)
        listed = [r.split("  ")[-1] for r in self.cli("ls", "p/").stdout.decode().splitlines()]
        self.assertEqual(listed, want)
        # get -r restores in pages too: every name once
        out = os.path.join(self.tmp, "out")
        self.cli("get", "-r", "p/", out)
        self.assertEqual(sorted(os.listdir(os.path.join(out, "p"))), [n[2:] for n in want])
        with open(os.path.join(out, "p", "1199"), "rb") as f:
            self.assertEqual(f.read(), b"doc %d" % (1199 % 7))
        self.stop_daemon()


class OutputAndExitCodes(CliTestCase):
    def test_json_output_is_json_lines(self):
        c1, c2 = b"json one", b"json two"
        p1 = self.write("j1", c1)
        p2 = self.write("j2", c2)
        added = ct.parse_json_lines(self.cli("--json", "add", "-t", "j", p1, p2).stdout)
        self.assertEqual([a.get("hash") for a in added], [ct.sha256_hex(c1), ct.sha256_hex(c2)])
        listed = ct.parse_json_lines(self.cli("--json", "ls", "--docs").stdout)
        self.assertEqual(sorted(x.get("hash") for x in listed), sorted(a["hash"] for a in added))
        self.assertEqual(sorted(x.get("size") for x in listed), [8, 8])
        listed = ct.parse_json_lines(self.cli("--json", "ls", "--docs", "-t", "j").stdout)
        self.assertEqual(len(listed), 2)
        [st] = ct.parse_json_lines(self.cli("--json", "stat", ct.sha256_hex(c1)).stdout)
        self.assertEqual(st.get("hash"), ct.sha256_hex(c1))
        self.assertEqual(st.get("size"), 8)
        [status] = ct.parse_json_lines(self.cli("--json", "status").stdout)
        self.assertEqual(status.get("documents"), 2)
        removed = ct.parse_json_lines(self.cli("--json", "rm", ct.sha256_hex(c1)).stdout)
        self.assertEqual([r.get("hash") for r in removed], [ct.sha256_hex(c1)])
        self.stop_daemon()

    def test_not_found_exit_1(self):
        missing = "f" * 64
        for args in (("get", missing), ("get", "no-such-name"), ("stat", "no-such-name"),
                     ("rm", "no-such-name"), ("get", "-o", os.path.join(self.tmp, "x"), missing)):
            with self.subTest(args=args):
                p = self.cli(*args, check_exit=1)
                self.assertEqual(p.stdout, b"")
                ct.assert_cli_error(self, p)
        # a failed get -o leaves no file behind
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x")))
        self.stop_daemon()

    def test_usage_errors_exit_2(self):
        path = self.write("u.txt", b"usage")
        cases = [
            (),
            ("frobnicate",),
            ("get",),
            ("stat",),
            ("rm",),
            ("add",),
            ("add", "-m", "novalue", path),
            ("add", "-n"),
            ("ls", "-t"),
            ("--no-such-option", "status"),
        ]
        for args in cases:
            with self.subTest(args=args):
                p = self.cli(*args, check_exit=2)
                self.assertTrue(p.stderr.strip(), "usage error without a message on stderr")
        # nothing was stored by the bad add
        self.assertEqual(self.cli("ls").stdout, b"")
        self.stop_daemon()

    def test_status_fields(self):
        self.add(b"12345", "-n", "five")
        self.add(b"1234567890", "-n", "ten")
        self.add(b"12345", "-n", "five-again")  # same content: no new document
        st = ct.parse_kv(self.cli("status").stdout)
        for key in ("version", "uptime", "backend", "documents", "logical_bytes", "stored_bytes"):
            self.assertIn(key, st)
        self.assertEqual(st["documents"].split()[:1], ["2"])
        self.assertEqual(st["logical_bytes"].split()[:1], ["15"])
        self.assertTrue(st["uptime"] and st["version"] and st["backend"], st)
        self.assertTrue(st["stored_bytes"][:1].isdigit(), st["stored_bytes"])
        self.stop_daemon()

    def test_daemon_unreachable_exit_3(self):
        missing = os.path.join(self.tmp, "nobody-here.sock")
        p = ct.run_cli("status", socket=missing, check_exit=3)
        ct.assert_cli_error(self, p)
        ct.run_cli("get", "x" * 8, socket=missing, check_exit=3)
        # a stale socket file nobody listens on
        stale = os.path.join(self.tmp, "stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)
        s.close()
        p = ct.run_cli("ls", socket=stale, check_exit=3)
        ct.assert_cli_error(self, p)
        self.stop_daemon()


class InputFiles(CliTestCase):
    """add reads a file to its end, whatever its size says, and a file that
    changes while it is read is stored as it was read, with a warning."""

    def test_proc_file_is_read_to_its_end(self):
        # /proc files say size 0; their content is generated as they are read.
        with open("/proc/self/status", "rb") as f:
            self.assertEqual(os.fstat(f.fileno()).st_size, 0)
        p = self.cli("add", "-n", "cpuinfo", "/proc/cpuinfo")
        [(h, name)] = ct.parse_add(p.stdout)
        self.assertEqual(name, "cpuinfo")
        content = self.get("cpuinfo")
        self.assertGreater(len(content), 0)
        self.assertEqual(h, ct.sha256_hex(content))
        self.assertIn(b"processor", content)

    def test_file_growing_while_read(self):
        path = self.write("growing", os.urandom(48 * ct.MiB))
        stop = threading.Event()

        def grow():
            with open(path, "ab") as f:
                while not stop.is_set():
                    f.write(os.urandom(64 * 1024))
                    f.flush()
                    time.sleep(0.001)

        t = threading.Thread(target=grow)
        t.start()
        try:
            p = self.cli("add", "-n", "growing", path)
        finally:
            stop.set()
            t.join()
        self.assertIn(b"changed while it was read; stored as read", p.stderr)
        [(h, _)] = ct.parse_add(p.stdout)
        stored = self.get("growing")
        self.assertEqual(h, ct.sha256_hex(stored))
        with open(path, "rb") as f:
            final = f.read()
        # What was read: at least the original, a prefix of what the file became.
        self.assertGreaterEqual(len(stored), 48 * ct.MiB)
        self.assertEqual(stored, final[:len(stored)])


class GetInterrupted(CliTestCase):
    """A signal during `get -o FILE` leaves neither FILE nor its temporary file."""

    def test_signals_remove_the_temporary_file(self):
        src = self.write("big", os.urandom(256 * ct.MiB))
        p = self.cli("add", "-n", "big", src)
        os.unlink(src)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(sig=sig.name):
                outdir = os.path.join(self.tmp, "out-%s" % sig.name)
                os.mkdir(outdir)
                proc = subprocess.Popen(
                    [ct.CAIRN, "--socket", self.d.socket_path, "--no-autostart", "get", "-o",
                     os.path.join(outdir, "file"), "big"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ct.cli_env())
                deadline = time.monotonic() + 60 * ct.SLOW
                # Wait until the temporary file holds some bytes, then interrupt.
                while time.monotonic() < deadline:
                    names = os.listdir(outdir)
                    if names and os.path.getsize(os.path.join(outdir, names[0])) > 0:
                        break
                    time.sleep(0.001)
                self.assertTrue(names and names[0].startswith(".file."), names)
                proc.send_signal(sig)
                proc.communicate(timeout=60 * ct.SLOW)
                if proc.returncode == 0:
                    self.skipTest("the get finished before the signal came")
                self.assertEqual(proc.returncode, -sig)
                self.assertEqual(os.listdir(outdir), [])


class Help(unittest.TestCase):
    """Each command has its own help: `cairn CMD --help` and `cairn help CMD`."""

    def test_command_help(self):
        for cmd, option in (("add", "--recursive"), ("get", "--output"), ("rm", "REF"),
                            ("delete", "REF"), ("ls", "--tag"), ("list", "--tag"),
                            ("stat", "REF"), ("status", "status"), ("search", "--fuzzy"),
                            ("refresh", "refresh"), ("gc", "gc"), ("verify", "REF"), ("help", "COMMAND")):
            with self.subTest(cmd=cmd):
                a = ct.run_cli(cmd, "--help").stdout
                b = ct.run_cli("help", cmd).stdout
                self.assertEqual(a, b)
                self.assertTrue(a.startswith(b"Usage: cairn "), a[:80])
                self.assertIn(option.encode(), a)
                # Its own text, not the overview of every command.
                self.assertNotIn(b"Commands:", a)
        self.assertIn(b"Commands:", ct.run_cli("help").stdout)
        p = ct.run_cli("help", "frobnicate", check_exit=2)
        self.assertIn(b"unknown command 'frobnicate'", p.stderr)
        self.assertEqual(ct.run_cli("-V").stdout, ct.run_cli("--version").stdout)


class Progress(CliTestCase):
    """Progress and the add summary go to stderr when it is a terminal or with
    -v; never with -q or --json, and never to stdout."""

    def test_verbose_quiet_and_terminal(self):
        tree = os.path.join(self.tmp, "tree")
        os.makedirs(tree)
        for i in range(5):
            with open(os.path.join(tree, "f%d" % i), "wb") as f:
                f.write(os.urandom(3000) if i else b"same\n")
        big = self.write("big", os.urandom(40 * ct.MiB))
        p = self.cli("-v", "add", "-r", tree)
        self.assertEqual(len(ct.parse_add(p.stdout)), 5)
        self.assertRegex(p.stderr.decode(), r"added 5 documents, [0-9.]+ KiB; [0-9.]+ (B|KiB) new "
                                            r"in the store \([0-9.]+x smaller\) in [0-9.]+ s\n")
        # Not a terminal, no -v: nothing on stderr. -q: nothing even with a terminal.
        self.assertEqual(self.cli("add", "-r", tree).stderr, b"")
        # A 5 MB file that differs from a stored one in 2 bytes adds a chunk or two: the
        # summary counts what was written (it said 4.8 MiB; the store grew by 20 KB).
        # Seeded, since the chunker's boundaries are fixed: with os.urandom the changed
        # chunk and its neighbours were now and then three chunks near the 256 KiB
        # maximum, past the bound below.
        five = bytearray(random.Random(27).randbytes(5 * 1000 * 1000))
        self.cli("add", self.write("five", bytes(five)))
        five[2500000] ^= 1
        five[2500001] ^= 1
        before = self.d.status()["stored_bytes"]
        p = self.cli("-v", "add", self.write("five2", bytes(five)))
        grew = self.d.status()["stored_bytes"] - before
        m = re.search(r"; ([0-9.]+) (B|KiB|MiB) new in the store", p.stderr.decode())
        self.assertTrue(m, p.stderr)
        said = float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1024 * 1024}[m.group(2)]
        self.assertLess(said, 600 * 1024, p.stderr)
        self.assertLess(abs(said - grew), 0.1 * grew + 2048, (said, grew))
        self.assertIn(b"nothing new in the store", self.cli("-v", "add", self.write("five3", bytes(five))).stderr)
        self.assertEqual(self.cli("add", big, "--verbose", "-q").stderr, b"")
        h = ct.sha256_hex(open(big, "rb").read())
        p = self.cli("get", "-v", "-o", os.path.join(self.tmp, "out"), h)
        self.assertEqual(p.stdout, b"")
        p = self.cli("--json", "-v", "add", tree + "/f1")
        self.assertEqual(p.stderr, b"")
        json.loads(p.stdout)

    def test_verify_and_gc_show_their_progress(self):
        """cairnd's progress frames (every 1 ms here) become lines on stderr
        with -v: verify's bytes of the total, gc's phase. -q and --json: none."""
        self.d.stop()
        self.d = ct.Daemon(self, env={"CAIRN_TEST_PROGRESS_MS": "1"})
        self.d.start()
        h = self.add(os.urandom(24 * ct.MiB), "-n", "big")
        p = self.cli("-v", "verify")
        self.assertRegex(p.stderr.decode(), r"verified [0-9.]+ (KiB|MiB) of 24\.[0-9] MiB")
        self.assertIn(b"0 bad", p.stdout)
        self.assertEqual(self.cli("-q", "verify").stderr, b"")
        self.assertEqual(self.cli("--json", "-v", "verify").stderr, b"")
        self.cli("rm", h)
        p = self.cli("-v", "gc")
        self.assertRegex(p.stderr.decode(), r"gc: (start|mark|sweep|repack)")
        self.assertIn(b"chunks_removed", p.stdout)
        self.stop_daemon()

    def test_terminal_gets_progress_in_place(self):
        big = self.write("big", os.urandom(200 * ct.MiB))
        rc, out, err = ct.run_stderr_on_tty([ct.CAIRN, "--socket", self.d.socket_path,
                                             "--no-autostart", "add", big],
                                            timeout=120 * ct.SLOW)
        self.assertEqual(rc, 0)
        self.assertEqual(len(ct.parse_add(out)), 1)  # stdout has only the result
        self.assertIn(b"added 1 document, 200.0 MiB", err)
        # A progress line, if the add took long enough for one, was drawn in place and cleared.
        self.assertNotIn(b"MiB/s\n", err)

    def test_progress_is_erased_before_output_on_the_same_terminal(self):
        """stdout and stderr on one terminal: every result line starts a line
        of its own, never glued to the progress text (which stays in place)."""
        big = self.write("big", os.urandom(300 * ct.MiB))
        small = self.write("small", b"small\n")
        rc, tty = ct.run_on_tty([ct.CAIRN, "--socket", self.d.socket_path, "--no-autostart",
                                 "add", big, small], timeout=120 * ct.SLOW)
        self.assertEqual(rc, 0, tty)
        self.assertIn(b"MiB/s", tty, "the add was too quick for a progress line: %r" % tty[:300])
        for path in (big, small):
            line = ct.sha256_file(path).encode() + b"  " + path.encode()
            at = tty.find(line)
            self.assertGreaterEqual(at, 0, tty[-500:])
            before = tty[:at]
            self.assertTrue(before == b"" or before.endswith((b"\n", b"\033[K")),
                            "a result glued to what came before it: %r" % tty[max(0, at - 80):at + 80])


class VerifyCounts(CliTestCase):
    def verify_json(self, *refs):
        [js] = ct.parse_json_lines(self.cli("--json", "verify", *refs).stdout)
        self.assertEqual(js.get("bad_count"), 0, js)
        return js["chunks_checked"], js["bytes_checked"]

    def test_one_request_checks_each_distinct_chunk_once(self):
        """verify REF... counts each distinct chunk once, however many of the
        refs (or places in one document) reach it, as a whole-store verify
        does (PROTOCOL.md `verify`)."""
        a = os.urandom(3 * ct.MiB)
        b = a[:2 * ct.MiB] + os.urandom(ct.MiB // 2)  # shares a's first chunks
        piece = os.urandom(ct.MiB)
        c = piece * 4  # its own chunks, again and again
        ha = self.add(a, "-n", "a.bin")
        hb = self.add(b, "-n", "b.bin")
        hc = self.add(c, "-n", "c.bin")
        [st] = ct.parse_json_lines(self.cli("--json", "status").stdout)
        whole = (st["chunks"], st["unique_bytes"])
        self.assertEqual(self.verify_json(), whole)
        # every document of the store, some twice (by hash and by name)
        self.assertEqual(self.verify_json("a.bin", ha, hb, "b.bin", hc, "c.bin", hc[:12]), whole)
        # one document named twice: its chunks once
        alone = self.verify_json("a.bin")
        self.assertEqual(self.verify_json(ha, "a.bin", ha[:10]), alone)
        self.assertEqual(alone[1], len(a))
        # a document whose chunks repeat: each distinct one once
        chunks_c, bytes_c = self.verify_json("c.bin")
        self.assertLess(bytes_c, len(c))
        # Chunks that straddle the 3 seams between the copies are distinct too: at most
        # a few of chunk_max (256 KiB) each, however the random content cuts.
        self.assertLessEqual(bytes_c, len(piece) + 6 * 256 * 1024)
        # two documents sharing chunks: the shared ones once
        both = self.verify_json("a.bin", "b.bin")
        only_b = self.verify_json("b.bin")
        self.assertLess(both[1], len(a) + len(b))
        self.assertLess(both[0], alone[0] + only_b[0])
        self.assertEqual(self.verify_json("a.bin", "b.bin", "c.bin"), whole)
        self.stop_daemon()

    def test_refs_that_name_nothing_are_named_and_the_others_verified(self):
        """verify fox.txt nosuch said `cairn: not found`, named neither and
        verified nothing; with several refs cairn goes on after a failure."""
        fox = b"the quick brown fox\n" * 1000
        self.add(fox, "-n", "fox.txt")
        p = self.cli("verify", "fox.txt", "nosuch", check_exit=1)
        self.assertIn(b"cairn: nosuch: not found", p.stderr)
        self.assertNotIn(b"fox.txt", p.stderr)
        self.assertRegex(p.stdout.decode(), r"checked [1-9][0-9]* chunks \(%d bytes\): 0 bad"
                         % len(fox))
        # Nothing left to verify: no whole-store verify instead.
        p = self.cli("verify", "nosuch", "nope", check_exit=1)
        self.assertIn(b"cairn: nosuch: not found", p.stderr)
        self.assertIn(b"cairn: nope: not found", p.stderr)
        self.assertEqual(p.stdout, b"")
        self.stop_daemon()


class BashCompletion(CliTestCase):
    """completions/cairn.bash driven by bash itself: stored names come back
    quoted for the shell (`stat ünïcode 名前.txt` was two words), and the
    long options are offered."""
    SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "completions",
                          "cairn.bash")

    def complete(self, *words):
        """COMPREPLY for the command line `cairn WORDS...` (the last word is the one completed)."""
        line = ["cairn", "--socket", self.d.socket_path] + list(words)
        script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
                  '_cairn; printf "%s\\n" "${COMPREPLY[@]}"')
        # A UTF-8 locale, as a user's terminal has (in C, bash quotes non-ASCII as $'\\303...').
        env = dict(os.environ, PATH=os.path.dirname(ct.CAIRN) + os.pathsep + os.environ["PATH"],
                   LANG="C.UTF-8")
        env.pop("LC_ALL", None)
        p = subprocess.run(["bash", "-c", script, "bash", self.SCRIPT] + line, env=env,
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [ln for ln in p.stdout.decode().split("\n") if ln]

    def test_names_are_quoted_and_long_options_offered(self):
        self.add(b"uni\n", "-n", "\u00fcn\u00efcode \u540d\u524d.txt")
        self.add(b"q\n", "-n", "it's $HOME")
        self.assertEqual(self.complete("stat", "\u00fc"), ["\u00fcn\u00efcode\\ \u540d\u524d.txt"])
        self.assertEqual(self.complete("get", "\u00fcn\u00efcode\\ "),
                         ["\u00fcn\u00efcode\\ \u540d\u524d.txt"])
        self.cli("add", "-n", "two\nlines", "-", input=b"nl\n")
        self.assertEqual(self.complete("stat", "two"), ["$'two\\nlines'"])
        [q] = self.complete("rm", "it")
        # What the shell reads back from the completion is the name itself.
        p = subprocess.run(["bash", "-c", "printf %s " + q], capture_output=True, timeout=10)
        self.assertEqual(p.stdout.decode(), "it's $HOME")
        for cmd, opts in (("add", ("--recursive", "--name", "--tag", "--meta", "--mime")),
                          ("get", ("--output", "--recursive", "--range")),
                          ("ls", ("--tag", "--long", "--docs")),
                          ("search", ("--limit", "--tag", "--offset", "--fuzzy"))):
            with self.subTest(cmd=cmd):
                got = self.complete(cmd, "--")
                for o in opts:
                    self.assertIn(o, got)


class GlobalOptionsAnywhere(CliTestCase):
    """--json, --socket and --no-autostart may come before or after the command."""

    def test_after_the_command(self):
        h = self.add(b"anywhere\n", "-n", "anywhere")
        for args in (("ls", "--json"), ("--json", "ls"), ("stat", "anywhere", "--json"),
                     ("search", "anywhere", "--json"), ("search", "--json", "anywhere")):
            with self.subTest(args=args):
                out = ct.run_cli(*args, "--socket", self.d.socket_path).stdout
                rows = [json.loads(line) for line in out.decode().splitlines()]
                self.assertTrue(rows, out)
                self.assertIn(h, json.dumps(rows))

    def test_search_options_after_the_words(self):
        """`search epoll -l 1` limits to one hit; a word that begins with "-"
        and is no option of search stays the query's NOT."""
        for i in range(3):
            self.add(b"epoll wait number %d lisp tree\n" % i, "-n", "ep-%d" % i)
        self.add(b"epoll alone\n", "-n", "ep-alone")

        def hits(*args):
            out = self.cli("search", *args).stdout.decode()
            return [ln.split("  ")[2] for ln in out.splitlines()]
        self.assertEqual(len(hits("epoll")), 4)
        for args in (("epoll", "-l", "1"), ("epoll", "-l1"), ("epoll", "--limit", "1"),
                     ("epoll", "--limit=1"), ("-l", "1", "epoll")):
            with self.subTest(args=args):
                self.assertEqual(len(hits(*args)), 1)
        self.assertEqual(hits("epoll", "-lisp"), ["ep-alone"])
        self.assertEqual(hits("epoll", "-tree"), ["ep-alone"])
        self.assertEqual(len(hits("epoll", "-t", "none")), 0)
        # After "--", an option's spelling is a word (here: NOT l, which no document has).
        self.assertEqual(len(hits("epoll", "--", "-l")), 4)
        # Global options among the words still count.
        out = self.cli("search", "epoll", "--json", "-l", "2").stdout.decode().splitlines()
        self.assertEqual(len([json.loads(ln) for ln in out]), 2)

    def test_socket_after_the_command(self):
        # The harness puts --no-autostart first; a wrong --socket after the command wins.
        p = ct.run_cli("ls", "--socket", os.path.join(self.tmp, "none.sock"), check_exit=3)
        self.assertIn(b"none.sock", p.stderr)


def _become_subreaper():
    """Makes this process adopt orphaned descendants (PR_SET_CHILD_SUBREAPER),
    so a daemon the CLI starts can be reaped and its exit status seen."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Autostart(unittest.TestCase):
    def test_autostart_starts_daemon_with_same_socket(self):
        base = ct.make_tempdir(self)
        sock = os.path.join(base, "auto", "cairnd.sock")
        data = os.path.join(base, "auto-data")
        env = ct.cli_env({"CAIRND": ct.CAIRND, "CAIRN_DATA_DIR": data}, unset=["CAIRN_SOCKET"])
        reaper = _become_subreaper()
        pid = None

        def kill_leftover():
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    if reaper:
                        os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass

        def find_pid():
            try:
                with ct.Conn(sock, timeout=5) as c:
                    return c.call("status").get("pid")
            except (OSError, ct.ConnectionClosed):
                return None

        self.addCleanup(kill_leftover)
        try:
            p = ct.run_cli("add", "-n", "auto.txt", "-", socket=sock, autostart=True,
                           input=b"autostarted\n", env=env, timeout=60 * ct.SLOW)
        except AssertionError as e:
            pid = find_pid()
            raise AssertionError("%s\n(if it hung: does the autostarted cairnd keep the CLI's "
                                 "stdout/stderr open?)" % e)
        [(h, name)] = ct.parse_add(p.stdout)
        self.assertEqual(h, ct.sha256_hex(b"autostarted\n"))
        pid = find_pid()
        self.assertIsInstance(pid, int, "no daemon answers on %s after autostart" % sock)
        self.assertTrue(os.path.isdir(data) and os.listdir(data), "data dir from CAIRN_DATA_DIR unused")
        p = ct.run_cli("get", "auto.txt", socket=sock, env=env)
        self.assertEqual(p.stdout, b"autostarted\n")

        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + ct.STOP_TIMEOUT
        if reaper:
            while True:
                wpid, status = os.waitpid(pid, os.WNOHANG)
                if wpid == pid:
                    break
                self.assertLess(time.monotonic(), deadline, "autostarted cairnd ignores SIGTERM")
                time.sleep(0.05)
            pid = None
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        else:
            while os.path.exists("/proc/%d" % pid) and \
                    ct.process_status(pid).get("State", "").split()[0] != "Z":
                self.assertLess(time.monotonic(), deadline, "autostarted cairnd ignores SIGTERM")
                time.sleep(0.05)
        # with the daemon gone and --no-autostart the CLI reports unreachable
        ct.run_cli("status", socket=sock, env=env, check_exit=3)


class CliConfig(unittest.TestCase):
    """The CLI reads cairnd's config file: [daemon] socket and [store] data_dir
    (the default file, or --config FILE, which it passes to a daemon it
    starts), and a daemon that fails to start has its own reason printed."""

    def setUp(self):
        self.base = ct.make_tempdir(self)
        self.reaper = _become_subreaper()
        self.sock = os.path.join(self.base, "run", "from-config.sock")
        self.data = os.path.join(self.base, "data-from-config")
        os.makedirs(os.path.join(self.base, "xdg", "cairn"))
        self.conf = os.path.join(self.base, "xdg", "cairn", "cairn.conf")
        with open(self.conf, "w") as f:
            f.write("[daemon]\nsocket = %s\n\n[store]\ndata_dir = %s\n" % (self.sock, self.data))
        self.env = ct.cli_env({"CAIRND": ct.CAIRND, "XDG_CONFIG_HOME": os.path.join(self.base, "xdg"),
                               "HOME": self.base},
                              unset=["CAIRN_SOCKET", "CAIRN_DATA_DIR"])
        self.addCleanup(self.stop_daemon)

    def stop_daemon(self):
        try:
            with ct.Conn(self.sock, timeout=5) as c:
                pid = c.call("status").get("pid")
        except (OSError, ct.ConnectionClosed):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + ct.STOP_TIMEOUT
        while time.monotonic() < deadline and os.path.exists("/proc/%d" % pid):
            if self.reaper:
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        return
                except ChildProcessError:
                    return
            time.sleep(0.05)

    def cli(self, *args, **kw):
        kw.setdefault("env", self.env)
        kw.setdefault("timeout", 60 * ct.SLOW)
        return ct.run_cli(*args, autostart=True, **kw)

    def test_default_config_file_gives_socket_and_data_dir(self):
        p = self.cli("add", "-n", "conf.txt", "-", input=b"configured\n")
        [(h, _)] = ct.parse_add(p.stdout)
        self.assertTrue(os.path.exists(self.sock), "the CLI did not start cairnd on the config's socket")
        self.assertTrue(os.path.exists(os.path.join(self.data, "cairnd.log")))
        self.assertTrue(os.path.exists(os.path.join(self.data, "cairn.db")))
        # The daemon's log lines carry the time (UTC, milliseconds).
        with open(os.path.join(self.data, "cairnd.log")) as f:
            first = f.readline()
        self.assertRegex(first, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z cairnd: info: ")
        # A second command finds the daemon through the config too.
        self.assertEqual(self.cli("get", "conf.txt").stdout, b"configured\n")
        # $CAIRN_SOCKET still wins over the file.
        env = dict(self.env, CAIRN_SOCKET=os.path.join(self.base, "elsewhere.sock"))
        ct.run_cli("status", env=env, check_exit=3)

    def test_explicit_config_is_passed_to_the_daemon(self):
        other = os.path.join(self.base, "other.conf")
        sock = os.path.join(self.base, "other.sock")
        with open(other, "w") as f:
            f.write("[daemon]\nsocket = %s\nlog_level = warn\n[store]\ndata_dir = %s\n"
                    % (sock, os.path.join(self.base, "other-data")))
        self.sock = sock
        self.cli("--config", other, "add", "-", input=b"x\n")
        self.assertTrue(os.path.exists(sock))
        self.assertEqual(ct.run_cli("status", socket=sock, env=self.env).returncode, 0)
        # A missing --config file is an error, not a silent default, and a usage error (2):
        # 3 says the daemon is unreachable, which a script would retry forever.
        for args in (("ls",), ("add", "-", "-"), ("get", "x"), ("search", "x")):
            with self.subTest(args=args):
                p = ct.run_cli("--config", os.path.join(self.base, "nope.conf"), *args,
                               env=self.env, input=b"x", check_exit=2)
                self.assertEqual(p.stderr.count(b"nope.conf"), 1, p.stderr)

    def test_failed_autostart_prints_the_daemons_reason(self):
        with open(self.conf, "a") as f:
            f.write("compression_level = 99\n")
        p = self.cli("ls", check_exit=3)
        self.assertIn(b"cairnd exited during startup", p.stderr)
        self.assertIn(b"compression_level must be between 1 and 19", p.stderr)
        self.assertIn(os.path.join(self.data, "cairnd.log").encode(), p.stderr)


if __name__ == "__main__":
    ct.main()
