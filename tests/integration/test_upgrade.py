#!/usr/bin/env python3
"""Upgrading a data directory of storage format 1 to packs (format 2).

A format 1 directory is made by the real binaries of the last format 1 commit
($CAIRND_V1 and $CAIRN_V1; scripts/check builds them, see cairn_build_format1
in scripts/lib.sh). It holds text, binary and empty documents, documents of
thousands of chunks (small chunk sizes, so their manifests need segments),
names with several versions (one with its newest version deleted, one with a
middle version deleted), a document with several names, tags and metadata
(also added later, one value overwritten), non-ASCII names, a nameless
document, and deleted documents (one deleted and added again). Everything the
format 1 CLI shows of it is recorded: `ls`, `ls -t TAG`, `stat --json` of
every document and name, the bytes of every document and name, search hits of
many queries, status totals, `verify` totals, and each name's history (taken
by resolving the name and deleting what it resolves to, until it resolves to
nothing, on a copy).

Three copies of the directory are then upgraded by the current cairnd: on its
first start; with `cairnd --upgrade`; and after an upgrade cut by SIGKILL once
its packs were written (CAIRN_CRASH_AT=upgrade-packed). Each must show exactly
what format 1 showed, verify clean, keep the old database as
cairn.db.v1-<time>, hold no format 1 objects, and go on taking adds and gc.
A fourth is rebuilt from its packs alone (`cairnd --rebuild-index`) right
after the upgrade and must still show format 1's documents and names.

test_comparison_notices_each_difference proves that the comparison fails when
any single recorded fact differs.

Without $CAIRND_V1/$CAIRN_V1 every test is skipped with the reason
(scripts/check passes it in $CAIRN_V1_UNAVAILABLE when this checkout has no
history to build format 1 from).
"""

import copy
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

CAIRND_V1 = os.environ.get("CAIRND_V1") or ""
CAIRN_V1 = os.environ.get("CAIRN_V1") or ""
V1_MISSING = None
if not CAIRND_V1 or not CAIRN_V1:
    V1_MISSING = os.environ.get("CAIRN_V1_UNAVAILABLE") or (
        "$CAIRND_V1 and $CAIRN_V1 are not set: they name cairnd and cairn of the last format 1 "
        "commit, which scripts/check builds (cairn_build_format1 in scripts/lib.sh)")

# Small chunks, so a document of a few MiB has thousands of them.
V1_CONFIG = """[store]
chunk_min = 64
chunk_avg = 256
chunk_max = 1K
"""
# Packs of 1 MiB (the smallest), so the upgrade fills several; gc rewrites
# every pack with anything dead in it, so it has upgraded packs to rewrite.
V2_CONFIG = V1_CONFIG + "pack_size = 1M\nrepack_threshold = 100\n"

WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "glacier", "heath", "isthmus",
         "jetty", "kelp", "lagoon", "moraine", "nimbus", "oxbow", "prairie", "quay", "reef",
         "scree", "tundra", "upland", "vale", "wadi", "xeric", "yardang", "zephyr"]


def words_text(seed, size, first, last):
    """About `size` bytes of words; `first` opens it and `last` closes it."""
    rnd = random.Random(seed)
    out = [first]
    n = len(first)
    while n < size:
        w = "%s%d" % (rnd.choice(WORDS), rnd.randrange(4000))
        out.append(w)
        n += len(w) + 1
    out.append(last)
    return (" ".join(out) + "\n").encode()


def binary(seed, size):
    rnd = random.Random(seed)
    return bytes(rnd.getrandbits(8) for _ in range(size)) + b"\0\xff\0"


BIG_TEXT = words_text(1, 2 * ct.MiB, "frontispiece", "colophon")
# The same text with a different middle: most chunks are shared with BIG_TEXT.
mid = len(BIG_TEXT) // 2
BIG_EDITED = BIG_TEXT[:mid] + b" palimpsest " + BIG_TEXT[mid + 12:]
del mid
# 3 MiB of zeros: 3,072 identical chunks, so identical manifest segments.
ZEROS = bytes(3 * ct.MiB)

SHARED = b"One text under three names: lighthouse keeper's logbook.\n"
ALPHA = b"The aardvark inspects quartz crystals near the harbour at dawn.\n"
BRAVO = b"Quartz veins cut the basalt cliffs; the harbour master logs every vessel.\n"
CHARLIE = "Résumé des fouilles : la céramique émaillée du quartier nord.\n".encode()
MARKDOWN = b"# Field guide\n\nQuartz, *feldspar* and mica: the granite trio.\n"
REPORT = [b"Quarterly report, draft one: marmalade exports fell.\n",
          b"Quarterly report, draft two: marmalade exports recovered.\n",
          b"Quarterly report, final: marmalade exports doubled.\n"]
PLAN = [b"Plan A: ford the river at the oxbow.\n", b"Plan B: take the ferry at the quay.\n"]
MEMO = [b"Memo one: the kiln needs new firebricks.\n",
        b"Memo two: the kiln is fixed, firebricks replaced.\n"]
TEMP = b"Scratch notes with the word ephemeralword, deleted before the upgrade.\n"
PHOENIX = b"The phoenixword rises from the ashes.\n"
NAMELESS = b"Piped in without a name: zebra crossing notes.\n"
LATE = b"Added last, after every deletion: quartz again, and a yardang.\n"
BLOB = binary(2, 40000)
PIXEL = binary(3, 3000)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------
# the CLI of either version
# --------------------------------------------------------------------------


class Cli:
    """`cairn` of one version, on one socket."""

    def __init__(self, exe, socket_path):
        self.exe = exe
        self.socket_path = socket_path

    def run(self, *args, input=None, check_exit=0, timeout=60):
        cmd = [self.exe, "--socket", self.socket_path, "--no-autostart"] + [str(a) for a in args]
        try:
            p = subprocess.run(cmd, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout * ct.SLOW)
        except subprocess.TimeoutExpired:
            raise AssertionError("%r did not finish within %d s" % (cmd, timeout * ct.SLOW))
        if check_exit is not None and p.returncode != check_exit:
            raise AssertionError("%s exited with %d, expected %d\nstdout: %s\nstderr: %s" % (
                " ".join(cmd), p.returncode, check_exit,
                p.stdout[:2000].decode("utf-8", "replace"), p.stderr[:2000].decode("utf-8", "replace")))
        return p

    def json(self, *args):
        [obj] = ct.parse_json_lines(self.run("--json", *args).stdout)
        return obj

    def json_lines(self, *args):
        return ct.parse_json_lines(self.run("--json", *args).stdout)

    def search(self, *args):
        """Hits of `search ARGS` (a handful of small documents: quick, or something hangs)."""
        return ct.parse_json_lines(self.run("--json", "search", *args, timeout=20).stdout)

    def add(self, content, name=None, tags=(), meta=(), mime=None):
        args = ["add"]
        if name is not None:
            args += ["-n", name]
        for t in tags:
            args += ["-t", t]
        for kv in meta:
            args += ["-m", kv]
        if mime:
            args += ["--mime", mime]
        p = self.run(*(args + ["-"]), input=content)
        [(h, _)] = ct.parse_add(p.stdout)
        if h != sha256(content):
            raise AssertionError("add answered %s for content hashing to %s" % (h, sha256(content)))
        return h


class V1Daemon(ct.Daemon):
    """cairnd of format 1."""

    def command(self):
        return [CAIRND_V1, "--socket", self.socket_path, "--data-dir", self.data_dir] + self.args


# --------------------------------------------------------------------------
# what a version shows of a data directory
# --------------------------------------------------------------------------


def search_queries(created):
    """(args, expect hits in format 1) for `cairn search`; `created` maps a
    document's label to its creation time."""
    # The first document of phase 3: phases 1 and 2 were before this second.
    split = created["phoenix"]
    return [
        (["quartz"], True),
        (["harbour"], True),
        (['"quartz veins"'], True),
        (["quartz", "OR", "marmalade"], True),
        (["quartz", "-aardvark"], True),
        (["quartz", "NOT", "harbour"], True),
        (["marma*"], True),
        (["name:report"], True),
        (["name:summary"], True),
        (["tag:field"], True),
        (["tag:reborn"], True),
        (["tag:mortal"], False),
        (["hypatia"], False),  # overwritten by a later value
        (["theon"], True),     # the later value
        (["reviewed"], True),
        (["-t", "field", "quartz"], True),
        (["--name", "notes/*", "quartz"], True),
        (["--mime", "text/markdown", "quartz"], True),
        (["--after", "@%d" % split, "quartz"], True),
        (["--before", "@%d" % split, "quartz"], True),
        (["--after", "@%d" % split, "phoenixword"], True),
        (["frontispiece"], True),
        (["colophon"], True),
        (["palimpsest"], True),
        (["zebra"], True),
        (["resume"], True),
        (["céramique"], True),
        (["ete"], True),        # a tag with a diacritic
        (["firebricks"], True),
        (["ephemeralword"], False),
        (["--fuzzy", "quarts"], True),
    ]


def record(cli, names, hashes, queries, gone=()):
    """Everything `cli` shows about the documents `hashes` and the `names`,
    the `queries`, and the documents `gone` (which should not be there)."""
    snap = {"docs": {}, "content": {}, "names": {}, "tags": {}, "search": {}, "gone": {}}
    # format 1's cairn lists documents with `ls`; this one with `ls --docs`
    docs = ["--docs"] if cli.exe == ct.CAIRN else []
    snap["ls"] = sorted(cli.json_lines("ls", *docs), key=lambda d: d["hash"])
    tags = set()
    for h in sorted(hashes):
        p = cli.run("--json", "stat", h, check_exit=None)
        if p.returncode != 0:
            snap["docs"][h] = {"error": p.returncode}
            continue
        [st] = ct.parse_json_lines(p.stdout)
        snap["docs"][h] = st
        tags.update(st.get("tags", []))
        snap["content"][h] = sha256(cli.run("get", h).stdout)
    for n in sorted(names):
        p = cli.run("--json", "stat", n, check_exit=None)
        if p.returncode != 0:
            snap["names"][n] = {"error": p.returncode}
            continue
        [st] = ct.parse_json_lines(p.stdout)
        snap["names"][n] = {"stat": st, "content": sha256(cli.run("get", n).stdout)}
    for t in sorted(tags):
        snap["tags"][t] = sorted(d["hash"] for d in cli.json_lines("ls", *docs, "-t", t))
    for args, _ in queries:
        hits = cli.search(*args)
        # A hit found by a name (name:word, --name) shows that name since format 2, the
        # document's newest in format 1: those compare by hash alone.
        by_name = any(a.startswith("name:") or a == "--name" for a in args)
        snap["search"][" ".join(args)] = sorted([h["hash"]] if by_name else [h["hash"], h["name"]]
                                                for h in hits)
    for h in sorted(gone):
        snap["gone"][h] = cli.run("stat", h, check_exit=None).returncode
    st = cli.json("status")
    snap["status"] = {k: st.get(k) for k in ("documents", "logical_bytes")}
    v = cli.json("verify")
    snap["verify"] = {k: v.get(k) for k in ("chunks_checked", "bytes_checked", "bad_count")}
    return snap


def name_histories(cli, names):
    """Each name's versions, newest first, found by resolving the name and
    deleting the document it resolves to until it resolves to nothing.
    Destroys the directory's contents. Names are peeled in the given order."""
    out = {}
    for n in names:
        seq = []
        while True:
            p = cli.run("--json", "stat", n, check_exit=None)
            if p.returncode != 0:
                break
            [st] = ct.parse_json_lines(p.stdout)
            seq.append(st["hash"])
            cli.run("rm", st["hash"])
            if len(seq) > 20:
                raise AssertionError("name %r does not run out of versions: %r" % (n, seq))
        out[n] = seq
    docs = ["--docs"] if cli.exe == ct.CAIRN else []
    out["(left)"] = sorted(d["hash"] for d in cli.json_lines("ls", *docs))
    return out


def version_refs_as_names(obj):
    """`obj` with each name or names entry NAME@{N} shown as NAME: stat and ls
    show a document that is only an older version of a name by the ref that
    reaches it, where format 1 showed the name itself."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("name", "names"):
                strip = lambda x: re.sub(r"@\{\d+\}$", "", x) if isinstance(x, str) else x
                v = [strip(x) for x in v] if isinstance(v, list) else strip(v)
            out[k] = version_refs_as_names(v)
        return out
    if isinstance(obj, list):
        return [version_refs_as_names(x) for x in obj]
    return obj


def differences(expected, actual, path=""):
    """Every place where `actual` differs from `expected`, as strings."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in sorted(set(expected) | set(actual), key=str):
            p = "%s/%s" % (path, k)
            if k not in actual:
                out.append("%s: missing (expected %s)" % (p, _short(expected[k])))
            elif k not in expected:
                out.append("%s: unexpected %s" % (p, _short(actual[k])))
            else:
                out += differences(expected[k], actual[k], p)
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += differences(e, a, "%s[%d]" % (path, i))
        return out
    if expected != actual or type(expected) is not type(actual):
        return ["%s: expected %s, got %s" % (path or "/", _short(expected), _short(actual))]
    return []


def _short(v):
    s = json.dumps(v, ensure_ascii=False, sort_keys=True)
    return s if len(s) <= 160 else s[:160] + "..."


def user_version(path):
    """PRAGMA user_version of a database, read from a copy: reading one in WAL
    mode leaves files beside it, and the daemon may be running."""
    tmp = tempfile.mkdtemp(prefix="cairn-probe-")
    try:
        for suffix in ("", "-wal"):
            if os.path.exists(path + suffix):
                shutil.copyfile(path + suffix, os.path.join(tmp, "db" + suffix))
        c = sqlite3.connect(os.path.join(tmp, "db"))
        try:
            return c.execute("PRAGMA user_version").fetchone()[0]
        finally:
            c.close()
    finally:
        shutil.rmtree(tmp, True)


def names_table(path):
    """{document hash: [(name, added)] in version order} of a database's
    names table, format 1 or 2 (the same columns), read-only."""
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        out = {}
        for h, name, added in db.execute("SELECT d.hash, n.name, n.added FROM names n"
                                         " JOIN documents d ON d.id = n.doc ORDER BY n.seq"):
            out.setdefault(h, []).append((name, added))
        return out
    finally:
        db.close()


def count_files(path):
    n = 0
    for _, _, files in os.walk(path):
        n += len(files)
    return n


# --------------------------------------------------------------------------
# the format 1 directory
# --------------------------------------------------------------------------


class Format1:
    """Builds the format 1 directory once and records what format 1 shows."""

    def __init__(self, base):
        self.base = base
        self.dir = os.path.join(base, "pristine")  # the data directory, never used directly
        self.v1_conf = os.path.join(base, "v1.conf")
        self.v2_conf = os.path.join(base, "v2.conf")
        with open(self.v1_conf, "w") as f:
            f.write(V1_CONFIG)
        with open(self.v2_conf, "w") as f:
            f.write(V2_CONFIG)
        self.h = {}        # label -> hash
        self.created = {}  # label -> creation time (format 1)
        self.gone = {}     # label -> hash of a document deleted for good

    def v1_daemon(self, data_dir, name):
        base = os.path.join(self.base, name)
        os.makedirs(base, exist_ok=True)
        d = V1Daemon(base=base, data_dir=data_dir, args=["--config", self.v1_conf])
        d.start()
        return d

    def build(self):
        d = self.v1_daemon(self.dir, "v1-make")
        try:
            cli = Cli(CAIRN_V1, d.socket_path)
            self._fill(cli)
            for label, h in self.h.items():
                self.created[label] = cli.json("stat", h)["created"]
            self.names = sorted({n for h in self.h.values() for n in cli.json("stat", h)["names"]})
            self.queries = search_queries(self.created)
            self.expected = record(cli, self.names, self.h.values(), self.queries,
                                   self.gone.values())
            d.stop()
        finally:
            d.cleanup()
        # Each name's history, on a copy: finding it deletes documents.
        d = self.v1_daemon(self.copy("v1-peel"), "v1-peel")
        try:
            self.histories = name_histories(Cli(CAIRN_V1, d.socket_path), self.peel_order())
            d.stop()
        finally:
            d.cleanup()

    def peel_order(self):
        """Names with several versions first, so their whole history shows."""
        many = ["report", "plan", "memo"]
        return many + [n for n in self.names if n not in many]

    def _fill(self, cli):
        h = self.h
        # Phase 1.
        h["alpha"] = cli.add(ALPHA, "notes/alpha.txt", ["field"], ["author=hypatia"])
        h["bravo"] = cli.add(BRAVO, "notes/bravo.txt", ["field", "geology"])
        h["charlie"] = cli.add(CHARLIE, "café/résumé.txt", ["été"], ["titre=Ça va", "lang=fr"])
        h["markdown"] = cli.add(MARKDOWN, "guide.md", mime="text/markdown")
        h["blob"] = cli.add(BLOB, "blob.bin", ["binary"])
        h["pixel"] = cli.add(PIXEL, "pixel.png", ["binary", "image"], mime="image/png")
        h["empty"] = cli.add(b"", "empty")
        h["nameless"] = cli.add(NAMELESS)
        h["big"] = cli.add(BIG_TEXT, "big/corpus.txt", ["big"], ["source=generated"])
        h["edited"] = cli.add(BIG_EDITED, "big/corpus-edited.txt", ["big"])
        h["zeros"] = cli.add(ZEROS, "big/zeros.bin")
        h["shared"] = cli.add(SHARED, "a/one.txt")
        h["report1"] = cli.add(REPORT[0], "report", ["draft"])
        h["plan1"] = cli.add(PLAN[0], "plan")
        h["memo1"] = cli.add(MEMO[0], "memo")
        h["phoenix"] = cli.add(PHOENIX, "phoenix.txt", ["mortal"], ["lives=1"])
        self.gone["temp"] = cli.add(TEMP, "temp.txt", ["scratch"])
        self._next_second()
        # Phase 2: new versions, more names, tags and metadata, deletions.
        h["report2"] = cli.add(REPORT[1], "report", ["draft"])
        h["report3"] = cli.add(REPORT[2], "report", ["final"])
        cli.add(SHARED, "b/two.txt")
        cli.add(SHARED, "c/three with spaces.txt", ["shared"])
        cli.add(ALPHA, None, ["extra"], ["reviewed=yes", "author=theon"])
        cli.add(BLOB, None, ["archived"], ["origin=scanner"])
        cli.add(REPORT[0], "summary")
        # plan: P1, P2, then P1 again with another name between; P2 deleted
        # below, so P1's two versions of "plan" end up next to each other.
        self.gone["plan2"] = cli.add(PLAN[1], "plan")
        cli.add(PLAN[0], "plan-final")
        cli.add(PLAN[0], "plan")
        self.gone["memo2"] = cli.add(MEMO[1], "memo")
        cli.run("rm", self.gone["plan2"])
        cli.run("rm", "memo")  # the newest version: "memo" falls back to the first
        cli.run("rm", "temp.txt")
        cli.run("rm", h["phoenix"])
        self._next_second()
        # Phase 3: one deleted document comes back, with other tags.
        cli.add(PHOENIX, "phoenix.txt", ["reborn"], ["lives=2"])
        h["late"] = cli.add(LATE, "late.txt", ["field"])

    @staticmethod
    def _next_second():
        """Lets the clock move to the next second, so creation times differ."""
        start = int(time.time())
        while int(time.time()) == start:
            time.sleep(0.05)

    def copy(self, name):
        dst = os.path.join(self.base, name, "data")
        shutil.copytree(self.dir, dst, symlinks=True)
        return dst


# --------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------


@unittest.skipIf(V1_MISSING is not None, V1_MISSING)
class Upgrade(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for exe, var in ((CAIRND_V1, "CAIRND_V1"), (CAIRN_V1, "CAIRN_V1")):
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                raise AssertionError("$%s is %s, which is not an executable" % (var, exe))
        base = ct.make_tempdir(prefix="cairn-upgrade-")
        cls.addClassCleanup(shutil.rmtree, base, True)
        cls.v1 = Format1(base)
        cls.v1.build()

    # -- helpers

    def new_daemon(self, data_dir, env=None):
        d = ct.Daemon(self, base=os.path.dirname(data_dir), data_dir=data_dir,
                      args=["--config", self.v1.v2_conf], env=env)
        return d

    def assert_same(self, expected, actual, what):
        diff = differences(expected, version_refs_as_names(actual))
        if diff:
            self.fail("%s differs from format 1 in %d places:\n  %s" % (
                what, len(diff), "\n  ".join(diff[:40])))

    def assert_shows_format1(self, cli, what):
        v1 = self.v1
        got = record(cli, v1.names, v1.h.values(), v1.queries, v1.gone.values())
        self.assert_same(v1.expected, got, what)

    def assert_documents_as_format1(self, cli, what):
        """What format 1 showed of the documents and names (ls, stat of every
        document and name, tags, contents, status, verify), searches left
        out: a search that differs must not hide a name that came back
        wrong, nor the other way round."""
        v1 = self.v1
        got = record(cli, v1.names, v1.h.values(), [], v1.gone.values())
        expected = {k: v for k, v in v1.expected.items() if k != "search"}
        del got["search"]
        self.assert_same(expected, got, what)

    def assert_names_table_as_format1(self, data_dir, what):
        """Every version of every name, in order, with its time: the names
        table against that of the format 1 database kept beside it."""
        [aside] = [n for n in os.listdir(data_dir) if re.fullmatch(r"cairn\.db\.v1-\d+", n)]
        self.assert_same(names_table(os.path.join(data_dir, aside)),
                         names_table(os.path.join(data_dir, "cairn.db")), what)

    def assert_upgraded_layout(self, data_dir):
        names = os.listdir(data_dir)
        aside = [n for n in names if re.fullmatch(r"cairn\.db\.v1-\d+", n)]
        self.assertEqual(len(aside), 1, "the format 1 database kept once as cairn.db.v1-<time>: %r"
                         % sorted(names))
        self.assertEqual(user_version(os.path.join(data_dir, aside[0])), 1,
                         "%s is not the format 1 database" % aside[0])
        self.assertEqual(user_version(os.path.join(data_dir, "cairn.db")), 4)  # the current format (daemon/meta/db.h DB_FORMAT)
        objects = os.path.join(data_dir, "objects")
        for old in ("chunks", "entries"):
            self.assertFalse(os.path.exists(os.path.join(objects, old)),
                             "objects/%s is still there after the upgrade" % old)
        packs = os.listdir(os.path.join(objects, "packs"))
        self.assertGreater(len(packs), 1, "more than %d bytes of chunks, packs of 1 MiB: %r"
                           % (ct.MiB, packs))
        for p in packs:
            self.assertRegex(p, r"^[0-9a-f]{16}$")

    def assert_verify_clean(self, cli):
        p = cli.run("--json", "verify", check_exit=None)
        [v] = ct.parse_json_lines(p.stdout)
        self.assertEqual((p.returncode, v.get("bad_count"), v.get("bad")), (0, 0, []),
                         "verify after the upgrade: %r" % v)

    def check_works_on(self, d, cli):
        """Adds, searches, deletes, gc and a restart after the upgrade."""
        v1 = self.v1
        new_text = b"Written after the upgrade: a quokka on the quay.\n"
        new_big = os.urandom(300 * 1024)
        with self.subTest("adds after the upgrade"):
            h1 = cli.add(new_text, "after/quokka.txt", ["post"], ["when=after"])
            h2 = cli.add(new_big, "after/random.bin")
            h3 = cli.add(REPORT[2] + b"and one more line\n", "report")
            self.assertEqual(cli.run("get", h1).stdout, new_text)
            self.assertEqual(cli.run("get", h2).stdout, new_big)
            st = cli.json("stat", h1)
            self.assertEqual((st["name"], st["tags"], st["meta"]),
                             ("after/quokka.txt", ["post"], {"when": "after"}))
        with self.subTest("a search right after the adds"):
            self.assertEqual([h["hash"] for h in cli.search("quokka")], [h1])
        with self.subTest("a new version of a name made in format 1"):
            self.assertEqual(cli.json("stat", "report")["hash"], h3)
            cli.run("rm", h3)
            self.assertEqual(cli.json("stat", "report")["hash"], v1.h["report3"])
        with self.subTest("gc after deleting an upgraded document"):
            # Most of its chunks are shared with big/corpus.txt; the rest is garbage.
            before = cli.json("status")
            cli.run("rm", "big/corpus-edited.txt")
            gc = cli.json("gc")
            self.assertGreater(gc.get("chunks_removed", 0), 0, "gc: %r\n%s" % (gc, d.log_tail(1500)))
            self.assertGreater(gc.get("packs_rewritten", 0), 0, "gc: %r" % gc)
            after = cli.json("status")
            self.assertLess(after["chunks"], before["chunks"])
            self.assertLess(after["pack_bytes"], before["pack_bytes"])
            self.assert_verify_clean(cli)
            for label, h in v1.h.items():
                if label != "edited":
                    self.assertEqual(sha256(cli.run("get", h).stdout), h, "%s after gc" % label)
            self.assertEqual(cli.run("get", h2).stdout, new_big)
        with self.subTest("a restart after all that"):
            d.restart()
            self.assertEqual(cli.run("get", h2).stdout, new_big)
            self.assertEqual(sha256(cli.run("get", v1.h["big"]).stdout), v1.h["big"])
            self.assertEqual(cli.run("stat", v1.h["edited"], check_exit=None).returncode, 1)
            self.assert_verify_clean(cli)
        with self.subTest("a search after the restart"):
            self.assertEqual([h["hash"] for h in cli.search("quokka")], [h1])

    # -- the format 1 directory itself

    def test_format1_directory_is_what_the_test_needs(self):
        """The directory really is format 1 and holds what the upgrade must carry."""
        v1, exp = self.v1, self.v1.expected
        probe = v1.copy("probe")
        self.assertEqual(user_version(os.path.join(probe, "cairn.db")), 1)
        self.assertFalse(os.path.exists(os.path.join(probe, "objects", "packs")))
        self.assertGreaterEqual(count_files(os.path.join(probe, "objects", "chunks")),
                                exp["docs"][v1.h["big"]]["chunks"])
        self.assertGreater(count_files(os.path.join(probe, "objects", "entries")), 0)
        # More than 1,024 chunks: the upgrade writes manifest segments.
        for label in ("big", "edited", "zeros"):
            self.assertGreater(exp["docs"][v1.h[label]]["chunks"], 1024, label)
        # Every document is there, byte for byte, and the deleted ones are gone.
        for label, h in v1.h.items():
            self.assertEqual(exp["content"].get(h), h, label)
        self.assertEqual(exp["docs"][v1.h["empty"]]["size"], 0)
        self.assertEqual(exp["gone"], {h: 1 for h in v1.gone.values()})
        # Name histories: "memo" lost its newest version, "plan" a middle one.
        self.assertEqual(v1.histories["report"], [v1.h["report3"], v1.h["report2"], v1.h["report1"]])
        self.assertEqual(v1.histories["memo"], [v1.h["memo1"]])
        self.assertEqual(v1.histories["plan"], [v1.h["plan1"]])
        self.assertEqual(exp["names"]["summary"]["stat"]["hash"], v1.h["report1"])
        self.assertEqual(exp["docs"][v1.h["plan1"]]["name"], "plan")
        self.assertEqual(exp["docs"][v1.h["shared"]]["names"],
                         ["a/one.txt", "b/two.txt", "c/three with spaces.txt"])
        self.assertEqual(exp["docs"][v1.h["alpha"]]["meta"], {"author": "theon", "reviewed": "yes"})
        self.assertEqual(exp["docs"][v1.h["phoenix"]]["tags"], ["reborn"])
        self.assertEqual(exp["docs"][v1.h["nameless"]]["name"], "")
        # Three creation seconds.
        self.assertEqual(len({v1.created["alpha"], v1.created["report2"], v1.created["late"]}), 3)
        # A query format 1 answers must have answers, or comparing them proves nothing.
        for args, hits in v1.queries:
            self.assertEqual(bool(exp["search"][" ".join(args)]), hits, args)
        self.assertEqual((exp["verify"]["bad_count"], exp["status"]["documents"]), (0, len(v1.h)))

    def test_comparison_notices_each_difference(self):
        """The comparison fails on any single changed fact."""
        v1, exp = self.v1, self.v1.expected
        self.assertEqual(differences(exp, copy.deepcopy(exp)), [])
        alpha, big = v1.h["alpha"], v1.h["big"]
        mutations = {
            "a tag dropped": lambda s: s["docs"][alpha]["tags"].pop(),
            "a meta value": lambda s: s["docs"][alpha]["meta"].update(author="hypatia"),
            "a meta key dropped": lambda s: s["docs"][alpha]["meta"].pop("reviewed"),
            "a name dropped": lambda s: s["docs"][v1.h["shared"]]["names"].pop(),
            "names reordered": lambda s: s["docs"][v1.h["shared"]]["names"].reverse(),
            "the newest name": lambda s: s["docs"][v1.h["plan1"]].update(name="plan-final"),
            "a creation time": lambda s: s["docs"][big].update(created=s["docs"][big]["created"] + 1),
            "a size": lambda s: s["docs"][big].update(size=1),
            "a mime type": lambda s: s["docs"][v1.h["markdown"]].update(mime="text/plain"),
            "content": lambda s: s["content"].update({big: "0" * 64}),
            "a name resolving elsewhere": lambda s: s["names"]["summary"]["stat"].update(
                hash=v1.h["report3"]),
            "a name gone": lambda s: s["names"].update(summary={"error": 1}),
            "a search hit missing": lambda s: s["search"]["quartz"].pop(),
            "a search hit's name": lambda s: s["search"]["quartz"][0].__setitem__(1, "x"),
            "an empty search": lambda s: s["search"]["zebra"].clear(),
            "a document in ls": lambda s: s["ls"].pop(),
            "a tag listing": lambda s: s["tags"]["field"].pop(),
            "a deleted document back": lambda s: s["gone"].update({v1.gone["temp"]: 0}),
            "status": lambda s: s["status"].update(documents=0),
            "verify totals": lambda s: s["verify"].update(chunks_checked=1),
            "an integer as a string": lambda s: s["docs"][big].update(size=str(s["docs"][big]["size"])),
        }
        for what, mutate in mutations.items():
            changed = copy.deepcopy(exp)
            mutate(changed)
            self.assertNotEqual(differences(exp, changed), [], what)
            self.assertNotEqual(differences(changed, exp), [], what)
        hist = copy.deepcopy(v1.histories)
        hist["report"].pop()
        self.assertNotEqual(differences(v1.histories, hist), [])

    # -- the upgrades

    def check_upgraded(self, d, cli, data, what):
        """Each check in a subtest: one that fails does not hide the others."""
        with self.subTest("documents and names as format 1 showed them, " + what):
            self.assert_documents_as_format1(cli, what)
        with self.subTest("everything format 1 showed, " + what):
            self.assert_shows_format1(cli, what)
        with self.subTest("the directory after the upgrade"):
            self.assert_upgraded_layout(data)
        with self.subTest("verify"):
            self.assert_verify_clean(cli)

    def test_first_start_upgrades(self):
        data = self.v1.copy("first-start")
        d = self.new_daemon(data)
        d.start(timeout=120 * ct.SLOW)
        cli = Cli(ct.CAIRN, d.socket_path)
        self.check_upgraded(d, cli, data, "after the upgrade at the first start")
        self.check_works_on(d, cli)
        d.stop()

    def test_upgrade_flag(self):
        data = self.v1.copy("upgrade-flag")
        d = self.new_daemon(data)
        cmd = [ct.CAIRND, "--data-dir", data, "--config", self.v1.v2_conf, "--upgrade"]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300 * ct.SLOW, env=d.env())
        self.assertEqual(p.returncode, 0, p.stderr.decode("utf-8", "replace"))
        out = p.stdout.decode("utf-8", "replace").splitlines()
        self.assertEqual(len(out), 1, "one summary line: %r" % out)
        self.assertTrue(out[0].startswith("cairnd: upgraded %s: " % data), out)
        self.assertFalse(os.path.exists(d.socket_path), "--upgrade must not serve")
        with self.subTest("the directory after --upgrade"):
            self.assert_upgraded_layout(data)
        # Once more: nothing left to upgrade.
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300 * ct.SLOW, env=d.env())
        self.assertEqual(p.returncode, 0, p.stderr.decode("utf-8", "replace"))
        self.assertTrue(p.stdout.decode().startswith("cairnd: nothing to upgrade in %s" % data),
                        p.stdout)
        # It says what the store holds (it said "the packs hold nothing").
        self.assertRegex(p.stdout.decode(), r": the store is current: [1-9][0-9]* documents? in ",
                         p.stdout)
        d.start()
        cli = Cli(ct.CAIRN, d.socket_path)
        self.check_upgraded(d, cli, data, "after cairnd --upgrade")
        with self.subTest("name histories"):
            # Found as in format 1, by deleting what each name resolves to.
            got = name_histories(cli, self.v1.peel_order())
            self.assert_same(self.v1.histories, got, "the name histories")
        d.stop()

    def test_upgrade_draws_progress_on_a_terminal(self):
        """--upgrade with stderr on a terminal draws its progress there (the
        chunks copied into packs, the documents' entries), in place, and
        clears it."""
        data = self.v1.copy("tty")
        d = self.new_daemon(data)
        cmd = [ct.CAIRND, "--data-dir", data, "--config", self.v1.v2_conf, "--upgrade"]
        rc, out, err = ct.run_stderr_on_tty(cmd, env=d.env(), timeout=300 * ct.SLOW)
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.decode().startswith("cairnd: upgraded %s: " % data), out)
        text = err.decode("utf-8", "replace")
        self.assertRegex(text, r"\r\x1b\[Kupgrade: copied 1 of [0-9]+ chunks into packs")
        self.assertRegex(text, r"\r\x1b\[Kupgrade: wrote 1 of [0-9]+ documents' entries")

    def test_upgrade_cut_after_packs_is_redone(self):
        data = self.v1.copy("crash")
        d = self.new_daemon(data, env={"CAIRN_CRASH_AT": "upgrade-packed"})
        d.start(wait=False)
        rc = d.wait(120 * ct.SLOW)
        self.assertEqual(rc, -signal.SIGKILL, "cairnd should kill itself at upgrade-packed\n%s"
                         % d.log_tail())
        # Cut there, the directory is still format 1, with packs beside it.
        self.assertEqual(user_version(os.path.join(data, "cairn.db")), 1)
        self.assertEqual([n for n in os.listdir(data) if n.startswith("cairn.db.v1-")], [])
        self.assertGreaterEqual(count_files(os.path.join(data, "objects", "chunks")),
                                self.v1.expected["docs"][self.v1.h["big"]]["chunks"])
        self.assertGreater(len(os.listdir(os.path.join(data, "objects", "packs"))), 1)
        d.extra_env = {}
        d.start(timeout=120 * ct.SLOW)
        cli = Cli(ct.CAIRN, d.socket_path)
        self.check_upgraded(d, cli, data, "after an upgrade cut after its packs, redone")
        self.check_works_on(d, cli)
        d.stop()

    def test_rebuild_after_the_upgrade_keeps_the_names(self):
        """The packs the upgrade wrote carry format 1's names version for
        version, a version whose document in between was deleted too ("plan":
        P1, P2, plan-final for P1, P1 again, P2 deleted): `cairnd
        --rebuild-index` from the packs alone shows the same documents, names
        and name histories as format 1."""
        data = self.v1.copy("rebuild")
        d = self.new_daemon(data)
        d.start(timeout=120 * ct.SLOW)
        cli = Cli(ct.CAIRN, d.socket_path)
        with self.subTest("after the upgrade"):
            self.assert_documents_as_format1(cli, "after the upgrade")
        d.stop()
        with self.subTest("the names table after the upgrade"):
            self.assert_names_table_as_format1(data, "the names table after the upgrade")
        cmd = [ct.CAIRND, "--data-dir", data, "--socket", d.socket_path, "--config",
               self.v1.v2_conf, "--rebuild-index"]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300 * ct.SLOW, env=d.env())
        self.assertEqual(p.returncode, 0, p.stdout.decode("utf-8", "replace")[-3000:])
        self.assertNotIn(b"not restored", p.stdout)
        d.start()
        with self.subTest("after --rebuild-index"):
            self.assert_documents_as_format1(cli, "after --rebuild-index")
        d.stop()
        with self.subTest("the names table after --rebuild-index"):
            self.assert_names_table_as_format1(data, "the names table after --rebuild-index")
        d.start()
        with self.subTest("name histories after --rebuild-index"):
            got = name_histories(cli, self.v1.peel_order())
            self.assert_same(self.v1.histories, got, "the name histories")
        d.stop()


if __name__ == "__main__":
    ct.main()
