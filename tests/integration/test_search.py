#!/usr/bin/env python3
"""Full-text search through the real `cairnd` and `cairn`: the query language
(words, "phrases", OR, NOT/-word, prefix*, name:, tag:), the filters (-t,
--name, --mime, --after/--before), ranking (names weighted above content),
--fuzzy, paging and reply frames, snippets, text vs binary indexing, the index
kept in step with add and delete, and hostile queries (malformed, SQL- and
FTS5-looking, NUL bytes, oversized, random) that must get results or
`bad_request`, never an SQLite error, and never take the daemon down.

The corpus is tests/fixtures/search/: short text documents with known answers
and one binary file. CORPUS below gives each file's name, tags, metadata and
mime type; the assertions rely on which words occur in which file, so change
the two together. CAIRN_FUZZ_SEED fixes the random fuzz (default: a constant).
"""

import os
import random
import re
import shutil
import sqlite3
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

FIXTURES = os.path.join(ct.REPO_ROOT, "tests", "fixtures", "search")

# file (= document name), tags, metadata, --mime (None: the CLI guesses)
CORPUS = [
    ("kubernetes-basics.txt", ["ops"], {}, None),
    ("postgres-tuning.txt", ["db"], {}, None),
    ("sqlite-wal.txt", ["db"], {}, None),
    ("quick-fox.txt", [], {}, None),
    ("scattered-fox.txt", [], {}, None),
    ("pancakes.txt", ["food", "recipe"], {}, None),
    ("omelette.txt", ["food", "recipe"], {}, None),
    ("jupiter.txt", ["space"], {}, None),
    ("oceans.txt", [], {}, None),
    ("zephyr-field-notes.txt", [], {}, None),
    ("weather-glossary.txt", [], {}, None),
    ("photosynthesis.txt", [], {}, None),
    ("old-photograph.txt", [], {}, None),
    ("storage-guide.md", [], {}, "text/markdown"),
    ("storage-notes.txt", [], {}, None),
    ("meeting-minutes.txt", [], {"author": "hypatia"}, None),
    ("cafe-menu.txt", [], {}, None),
    ("firmware-image.bin", ["binary"], {}, None),
]

# What an error message about a query must never leak.
LEAKS = ("sqlite", "fts5", "syntax error near", "no such column", "malformed match",
         "unterminated string", "fts5: ")

QUERY_TIMEOUT = 30 * ct.SLOW


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def search_frames(conn, query, timeout=None, **fields):
    """Sends one search request; returns every reply frame for it (a failed
    request has one frame). Checks the framing: at most 50 hits a frame, a
    boolean `more` on every frame of a successful reply."""
    rid = conn.send_request("search", query=query, **fields)
    frames = []
    while True:
        msg = conn.recv_for(rid, timeout)
        frames.append(msg)
        if msg.get("ok") is not True:
            if frames[:-1]:
                raise ct.ProtocolViolation("search failed after %d frames: %r"
                                           % (len(frames) - 1, ct.short(msg)))
            return frames
        hits = msg.get("hits")
        if not isinstance(hits, list):
            raise ct.ProtocolViolation("search frame without a hits array: %r" % ct.short(msg))
        if len(hits) > 50:
            raise ct.ProtocolViolation("search frame with %d hits (at most 50)" % len(hits))
        if not isinstance(msg.get("more"), bool):
            raise ct.ProtocolViolation("search frame without a boolean more: %r" % ct.short(msg))
        if not msg["more"]:
            return frames
        if len(frames) > 100:
            raise ct.ProtocolViolation("search reply does not end")


def search_reply(conn, query, timeout=None, **fields):
    """(hits, None) on success, (None, error map) on failure."""
    frames = search_frames(conn, query, timeout, **fields)
    if frames[-1].get("ok") is not True:
        err = frames[-1].get("error")
        if not isinstance(err, dict):
            raise ct.ProtocolViolation("failed reply without an error map: %r" % ct.short(frames[-1]))
        return None, err
    hits = []
    for f in frames:
        hits.extend(f["hits"])
    for h in hits:
        check_hit(h)
    return hits, None


def check_hit(h):
    if not isinstance(h, dict):
        raise AssertionError("hit is not a map: %r" % (h,))
    for key, types in (("hash", str), ("name", str), ("score", float), ("size", int),
                       ("snippet", str)):
        if not isinstance(h.get(key), types) or isinstance(h.get(key), bool):
            raise AssertionError("hit field %r missing or not %s: %r" % (key, types.__name__, h))
    if not ct.is_hash(h["hash"]):
        raise AssertionError("hit hash is not 64 hex digits: %r" % h)


def parse_search(stdout):
    """`<hash>  <score>  <name>  <snippet>` lines -> [(hash, score, name, snippet)]."""
    out = []
    for line in stdout.decode("utf-8").split("\n")[:-1] if stdout else []:
        parts = line.split("  ", 3)
        if len(parts) != 4 or not ct.is_hash(parts[0]) or not re.fullmatch(r"-?\d+\.\d{3}", parts[1]):
            raise AssertionError("search printed %r, expected '<hash>  <score>  <name>  <snippet>'"
                                 % line)
        out.append((parts[0], float(parts[1]), parts[2], parts[3]))
    if stdout and not stdout.endswith(b"\n"):
        raise AssertionError("search output does not end with a newline: %r" % stdout[-200:])
    return out


def marked(snippet):
    """The **marked** parts of a snippet, lower-cased."""
    return [m.lower() for m in re.findall(r"\*\*(.+?)\*\*", snippet)]


def class_daemon(cls, args=()):
    base = ct.make_tempdir()
    cls.addClassCleanup(shutil.rmtree, base, True)
    d = ct.Daemon(None, base=base, args=args)
    cls.addClassCleanup(d.cleanup)
    d.start()
    return d, base


def load_corpus(d):
    """Adds every fixture through the CLI; returns {name: hash}."""
    hashes = {}
    for fname, tags, meta, mime in CORPUS:
        path = os.path.join(FIXTURES, fname)
        args = ["add", "-n", fname]
        for t in tags:
            args += ["-t", t]
        for k, v in meta.items():
            args += ["-m", "%s=%s" % (k, v)]
        if mime:
            args += ["--mime", mime]
        p = d.cli(*(args + [path]))
        [(h, name)] = ct.parse_add(p.stdout)
        with open(path, "rb") as f:
            content = f.read()
        assert h == ct.sha256_hex(content), (fname, h)
        assert name == fname, (fname, name)
        hashes[fname] = h
    return hashes


class SearchCase(unittest.TestCase):
    """Helpers over self.d (a Daemon) and self.hashes ({name: hash})."""

    d = None
    hashes = {}

    def conn(self):
        c = self.d.connect()
        self.addCleanup(c.close)
        return c

    def proto(self, query, **fields):
        """Hits of a search that must succeed (raw protocol)."""
        with self.d.connect() as c:
            hits, err = search_reply(c, query, **fields)
        self.assertIsNone(err, "search %r %r failed: %r" % (query, fields, err))
        return hits

    def proto_error(self, query, **fields):
        with self.d.connect() as c:
            hits, err = search_reply(c, query, **fields)
        self.assertIsNotNone(err, "search %r %r succeeded (%d hits), expected an error"
                             % (query, fields, len(hits or [])))
        return err

    def cli_hits(self, *args):
        """`cairn search ARGS...` text output, parsed; exit 0 asserted."""
        p = self.d.cli("search", *args)
        self.assertEqual(p.stderr, b"", "search %r wrote to stderr" % (args,))
        return parse_search(p.stdout)

    def names(self, *args):
        """The names of the hits of `cairn search ARGS...`, best first."""
        return [name for _, _, name, _ in self.cli_hits(*args)]

    def assert_names(self, args, expected, ordered=False):
        got = self.names(*args)
        self.assertEqual(len(got), len(set(got)), "a document appears twice: %r for %r" % (got, args))
        if ordered:
            self.assertEqual(got, list(expected), "search %r" % (args,))
        else:
            self.assertEqual(sorted(got), sorted(expected), "search %r" % (args,))
        return got

    def assert_invalid_cli(self, *args, needle="invalid query"):
        if args and args[0].startswith("-") and args[0] != "--":
            args = ("--",) + args  # a query, not options
        p = self.d.cli("search", *args, check_exit=1)
        self.assertEqual(p.stdout, b"")
        ct.assert_cli_error(self, p)
        err = p.stderr.decode("utf-8", "replace")
        self.assertIn("cairn: invalid query:", err, "search %r" % (args,))
        self.assertIn(needle, err, "search %r" % (args,))
        self.assert_no_leak(err)
        return err

    def assert_bad_request(self, query, needle=None, **fields):
        err = self.proto_error(query, **fields)
        self.assertEqual(err.get("code"), "bad_request", "query %r: %r" % (query[:200], err))
        msg = err.get("message")
        self.assertIsInstance(msg, str)
        self.assert_no_leak(msg)
        if needle is not None:
            self.assertIn(needle, msg, "query %r" % (query[:200],))
        return msg

    def assert_no_leak(self, text):
        low = text.lower()
        for leak in LEAKS:
            self.assertNotIn(leak, low, "an SQLite/FTS5 message reached the user: %r" % text)


# --------------------------------------------------------------------------
# the fixture corpus: read-only queries
# --------------------------------------------------------------------------


class Corpus(SearchCase):
    @classmethod
    def setUpClass(cls):
        cls.d, cls.base = class_daemon(cls)
        cls.hashes = load_corpus(cls.d)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_indexer_thread_runs_at_the_lowest_priority(self):
        """One thread of cairnd, the indexer's, runs under SCHED_IDLE at nice
        10: adds and reads (and other programs) preempt it at once."""
        idle = []
        task = "/proc/%d/task" % self.d.proc.pid
        for tid in os.listdir(task):
            with open(os.path.join(task, tid, "stat")) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            policy, nice = int(fields[38]), int(fields[16])  # stat fields 41 and 19
            if policy == 5:  # SCHED_IDLE
                idle.append((tid, nice))
        self.assertEqual(len(idle), 1, idle)
        self.assertEqual(idle[0][1], 10)

    def test_exact_word_ranks_expected_doc_first(self):
        self.assert_names(["vacuum"], ["postgres-tuning.txt"])
        self.assert_names(["chloroplasts"], ["photosynthesis.txt"])
        # case-folded
        self.assert_names(["KUBERNETES"], ["kubernetes-basics.txt"])
        # omelette.txt has the word in its name and its body, pancakes.txt once
        # in its body: the best match comes first, with the higher score
        hits = self.cli_hits("omelette")
        self.assertEqual([n for _, _, n, _ in hits], ["omelette.txt", "pancakes.txt"])
        phits = self.proto("omelette")
        self.assertEqual([h["name"] for h in phits], ["omelette.txt", "pancakes.txt"])
        self.assertGreater(phits[0]["score"], phits[1]["score"])
        self.assert_names(["eggs"], ["pancakes.txt", "omelette.txt"])
        # with --all every word must match
        self.assert_names(["--all", "eggs", "flour"], ["pancakes.txt"])
        self.assert_names(["--all", "eggs flour butter"], [])
        # without, the documents with every word come first, then those with some
        self.assert_names(["eggs", "flour"], ["pancakes.txt", "omelette.txt"], ordered=True)
        # none has all three: those with some of them
        self.assert_names(["eggs flour butter"], ["pancakes.txt", "omelette.txt"])
        # nothing matches: exit 0, no output
        p = self.d.cli("search", "nosuchwordanywhere")
        self.assertEqual((p.stdout, p.stderr), (b"", b""))
        # hashes are the documents'
        [(h, _, name, _)] = self.cli_hits("vacuum")
        self.assertEqual(h, self.hashes["postgres-tuning.txt"])

    def test_phrase_matches_only_the_exact_sequence(self):
        # both fox documents have quick, brown and fox; only one has the phrase
        self.assert_names(["quick brown fox"], ["quick-fox.txt", "scattered-fox.txt"])
        self.assert_names(['"quick brown fox"'], ["quick-fox.txt"])
        self.assert_names(['"brown fox"'], ["quick-fox.txt"])
        self.assert_names(['"fox brown quick"'], [])
        self.assert_names(['"brown bear"'], ["scattered-fox.txt"])
        # the operands are joined: the phrase may span several arguments
        self.assert_names(['"quick', 'brown', 'fox"'], ["quick-fox.txt"])

    def test_prefix(self):
        self.assert_names(["photo"], [])  # no such whole word
        self.assert_names(["photo*"], ["photosynthesis.txt", "old-photograph.txt"])
        self.assert_names(["photos*"], ["photosynthesis.txt"])
        self.assert_names(["chloro*"], ["photosynthesis.txt"])
        self.assert_names(["Kuber*"], ["kubernetes-basics.txt"])
        self.assert_names(["--all", "photo*", "harbor"], ["old-photograph.txt"])

    def test_or(self):
        self.assert_names(["--all", "jupiter neptune"], [])
        self.assert_names(["jupiter OR neptune"], ["jupiter.txt", "oceans.txt"])
        # OR binds tighter than the implicit AND: (a OR b) c
        self.assert_names(["--all", "neptune OR jupiter planet"], ["jupiter.txt"])
        self.assert_names(["--all", "jupiter OR neptune largest"], ["jupiter.txt", "oceans.txt"])
        self.assert_names(["--all", "jupiter OR neptune ocean"], ["oceans.txt"])
        self.assert_names(["vacuum OR checkpoints OR butter"],
                          ["postgres-tuning.txt", "sqlite-wal.txt", "omelette.txt"])
        # lower-case "or" is an ordinary word, not the operator
        self.assert_names(["--all", "jupiter or neptune"], [])
        # AND written in the query requires every word, as --all does
        self.assert_names(["--all", "eggs AND flour"], ["pancakes.txt"])
        self.assert_names(["eggs AND flour"], ["pancakes.txt"])
        self.assert_names(["eggs flour"], ["pancakes.txt", "omelette.txt"], ordered=True)

    def test_some_words_after_all_words_and_paging(self):
        """Any word makes a hit, the document with every word ranking first;
        paging goes on through them without a gap or a repeat."""
        full = self.names("-l", "20", "eggs", "flour")
        self.assertEqual(full, ["pancakes.txt", "omelette.txt"])
        self.assertEqual(self.names("-l", "1", "eggs", "flour"), full[:1])
        self.assertEqual(self.names("-l", "1", "--offset", "1", "eggs", "flour"), full[1:2])
        self.assertEqual(self.names("-l", "5", "--offset", "2", "eggs", "flour"), [])
        hits = self.proto("eggs flour")
        self.assertGreater(hits[0]["score"], hits[1]["score"])
        self.assertEqual([h["name"] for h in self.proto("eggs flour", all=True)], ["pancakes.txt"])
        err = self.proto_error("eggs flour", all="yes")
        self.assertEqual(err.get("code"), "bad_request")

    def test_not_and_minus(self):
        self.assert_names(["eggs NOT flour"], ["omelette.txt"])
        self.assert_names(["eggs -butter"], ["pancakes.txt"])
        self.assert_names(["salt -eggs"], [])
        self.assert_names(["fox NOT bear"], ["quick-fox.txt"])
        self.assert_names(['fox -"quick brown"'], ["scattered-fox.txt"])
        self.assert_names(["fox NOT \"brown bear\""], ["quick-fox.txt"])
        self.assert_names(["salt -milk -butter"], [])
        self.assert_names(["photo* -harbor"], ["photosynthesis.txt"])
        # a -word as its own argument needs `--` so getopt leaves it alone
        self.assert_names(["--", "eggs", "-butter"], ["pancakes.txt"])

    def test_tag_filter_in_query_and_option(self):
        self.assert_names(["vacuum tag:db"], ["postgres-tuning.txt"])
        self.assert_names(["eggs tag:db"], [])
        self.assert_names(["eggs tag:food"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["eggs tag:food tag:recipe"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["eggs tag:food tag:db"], [])
        self.assert_names(["eggs tag:foo"], [])  # exact, not a prefix
        # a filter-only query lists the tagged documents with score 0
        hits = self.cli_hits("tag:db")
        self.assertEqual(sorted(n for _, _, n, _ in hits), ["postgres-tuning.txt", "sqlite-wal.txt"])
        self.assertEqual([s for _, s, _, _ in hits], [0.0, 0.0])
        # the -t option
        self.assert_names(["-t", "food", "eggs"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["-t", "food", "-t", "recipe", "salt"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["-t", "db", "eggs"], [])
        self.assert_names(["-t", "db", "tables OR journal"], ["postgres-tuning.txt", "sqlite-wal.txt"])
        self.assert_names(["-t", "space", "largest"], ["jupiter.txt"])
        self.assert_names(["-t", "food", "flour tag:recipe"], ["pancakes.txt"])
        # the protocol field
        hits = self.proto("largest", tags=["space"])
        self.assertEqual([h["name"] for h in hits], ["jupiter.txt"])

    def test_name_glob(self):
        self.assert_names(["salt"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["--name", "pan*", "salt"], ["pancakes.txt"])
        self.assert_names(["--name", "omelette.txt", "salt"], ["omelette.txt"])
        self.assert_names(["--name", "PAN*", "salt"], [])  # case-sensitive
        self.assert_names(["--name", "*.md", "storage"], ["storage-guide.md"])
        self.assert_names(["--name", "storage-????s.txt", "storage"], ["storage-notes.txt"])
        self.assert_names(["--name", "*.txt", "tag:food"], ["pancakes.txt", "omelette.txt"])
        hits = self.proto("salt", name="o*")
        self.assertEqual([h["name"] for h in hits], ["omelette.txt"])

    def test_mime(self):
        self.assert_names(["storage"], ["storage-guide.md", "storage-notes.txt"])
        self.assert_names(["--mime", "text/markdown", "storage"], ["storage-guide.md"])
        self.assert_names(["--mime", "text/plain", "storage"], ["storage-notes.txt"])
        self.assert_names(["--mime", "image/png", "storage"], [])
        self.assert_names(["--mime", "application/octet-stream", "firmware"], ["firmware-image.bin"])
        self.assert_names(["--mime", "text/plain", "firmware"], [])

    def test_after_before(self):
        both = ["pancakes.txt", "omelette.txt"]
        now = int(time.time())
        self.assert_names(["--after", "2000-01-01", "eggs"], both)
        self.assert_names(["--after", "2999-12-31", "eggs"], [])
        self.assert_names(["--before", "2999-12-31", "eggs"], both)
        self.assert_names(["--before", "2000-01-01", "eggs"], [])
        self.assert_names(["--after", "2000-01-01T00:00:00Z", "--before", "2999-01-01T12:30", "eggs"],
                          both)
        self.assert_names(["--after", "@%d" % (now - 3600), "eggs"], both)
        self.assert_names(["--before", "@%d" % (now - 3600), "eggs"], [])
        self.assert_names(["--after", "@%d" % (now + 3600), "eggs"], [])
        self.assert_names(["--before", "@%d" % (now + 3600), "eggs"], both)
        # on a filter-only query too
        self.assert_names(["--before", "2000-01-01", "tag:food"], [])
        self.assert_names(["--after", "2000-01-01", "tag:food"], both)
        # the protocol takes Unix seconds, negative ones too
        self.assertEqual(len(self.proto("eggs", after=-86400 * 365 * 10)), 2)
        self.assertEqual(len(self.proto("eggs", before=-86400)), 0)

    def test_name_weighted_above_body(self):
        # zephyr-field-notes.txt has the word only in its name, weather-glossary.txt
        # once in a short body; with equal column weights the body would win.
        hits = self.cli_hits("zephyr")
        self.assertEqual([n for _, _, n, _ in hits], ["zephyr-field-notes.txt", "weather-glossary.txt"])
        phits = self.proto("zephyr")
        self.assertEqual([h["name"] for h in phits], ["zephyr-field-notes.txt", "weather-glossary.txt"])
        self.assertGreater(phits[0]["score"], phits[1]["score"])
        # name:word looks at names only
        self.assert_names(["name:zephyr"], ["zephyr-field-notes.txt"])
        self.assert_names(["name:wind"], [])
        self.assert_names(["name:storage"], ["storage-guide.md", "storage-notes.txt"])
        self.assert_names(["--all", "name:storage guide"], ["storage-guide.md"])

    def test_fuzzy_typo_and_substring(self):
        self.assert_names(["kubernets"], [])
        got = self.names("--fuzzy", "kubernets")
        self.assertEqual(got[:1], ["kubernetes-basics.txt"], got)
        self.assertEqual(got, ["kubernetes-basics.txt"], "fuzzy widened to unrelated documents")
        # a fragment: "netes" is inside "kubernetes" (and one edit from "notes")
        self.assert_names(["netes"], [])
        got = self.names("--fuzzy", "netes")
        self.assertEqual(got[:1], ["kubernetes-basics.txt"], got)
        self.assertEqual(sorted(got), ["kubernetes-basics.txt", "storage-notes.txt",
                                       "zephyr-field-notes.txt"])
        self.assert_names(["--fuzzy", "bernete"], ["kubernetes-basics.txt"])
        self.assert_names(["--fuzzy", "ube"], ["kubernetes-basics.txt"])
        self.assert_names(["ube"], [])
        # one edit for 4-7 letters, two from 8
        got = self.assert_names(["--fuzzy", "omlette"], ["omelette.txt", "pancakes.txt"])
        self.assertEqual(got[0], "omelette.txt")
        self.assert_names(["--fuzzy", "chloroplast"], ["photosynthesis.txt"])
        self.assert_names(["--fuzzy", "kubrnets"], ["kubernetes-basics.txt"])  # two edits, 8 letters
        self.assert_names(["--fuzzy", "omlete"], [])  # two edits, 6 letters
        self.assert_names(["--fuzzy", "klorophlasts"], [])  # three edits
        self.assert_names(["--fuzzy", "jupitr", "storm"], ["jupiter.txt"])
        # the protocol flag
        hits = self.proto("kubernets", fuzzy=True)
        self.assertEqual([h["name"] for h in hits], ["kubernetes-basics.txt"])
        self.assertEqual(self.proto("kubernets", fuzzy=False), [])

    def test_fuzzy_folds_like_the_index(self):
        # cafe-menu.txt has "café", "crêpes", "résumé"; the index folds case and
        # diacritics, so "crêpe" and "crepe" are the same word to it. The typo
        # tolerance must not depend on which spelling the user typed.
        for typo in ("crepe", "cafes", "resumes"):
            with self.subTest(query=typo):
                self.assert_names(["--fuzzy", typo], ["cafe-menu.txt"])
        for typo in ("crêpe", "cafés", "résumés", "RÉSUMÉS", "Crêpe"):
            with self.subTest(query=typo):
                self.assert_names([typo], [])
                self.assert_names(["--fuzzy", typo], ["cafe-menu.txt"])

    def test_limit(self):
        every = self.names("-l", "100", "the")
        self.assertGreater(len(every), 5)
        self.assertEqual(len(self.names("-l", "3", "the")), 3)
        self.assertEqual(len(self.names("the")), min(10, len(every)))  # default 10
        self.assertEqual(len(self.names("-l", "1", "eggs")), 1)
        self.assertEqual(len(self.proto("the", limit=2)), 2)

    def test_snippets_mark_matches(self):
        [(_, _, _, snip)] = self.cli_hits("chloroplasts")
        self.assertIn("**chloroplasts**", snip)
        self.assertNotIn("\n", snip)
        for h in self.proto("eggs"):
            self.assertIn("eggs", marked(h["snippet"]), h)
        [h] = self.proto('"quick brown fox"')
        self.assertEqual(" ".join(marked(h["snippet"])).replace("**", ""), "quick brown fox", h)
        [h] = self.proto("photos*")
        self.assertIn("photosynthesis", marked(h["snippet"]))
        [h] = self.proto("crepes")
        self.assertIn("crêpes", marked(h["snippet"]))  # the original text, marked
        # a match on the second line: the CLI still prints one line per hit
        p = self.d.cli("search", "restarts")
        lines = p.stdout.decode().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("**restarts**", lines[0])
        [h] = self.proto("restarts")
        self.assertIn(h["snippet"].replace("\n", " ").replace("\t", " ").replace("\r", " "), lines[0])

    def test_binary_document_found_by_name_not_content(self):
        # firmware-image.bin holds "secretpayloadword" between NUL and 0xff bytes
        with open(os.path.join(FIXTURES, "firmware-image.bin"), "rb") as f:
            self.assertIn(b"secretpayloadword", f.read())
        self.assert_names(["secretpayloadword"], [])
        self.assert_names(["secretpay*"], [])
        self.assert_names(["--fuzzy", "secretpayloadword"], [])
        self.assert_names(["elf"], [])
        [h] = self.proto("firmware")
        self.assertEqual((h["name"], h["hash"], h["size"]),
                         ("firmware-image.bin", self.hashes["firmware-image.bin"], 4096))
        self.assertIn("firmware", marked(h["snippet"]), "a binary document's snippet is its name")
        self.assert_names(["tag:binary"], ["firmware-image.bin"])
        self.assert_names(["image tag:binary"], ["firmware-image.bin"])

    def test_metadata_tags_and_diacritics_indexed(self):
        self.assert_names(["hypatia"], ["meeting-minutes.txt"])  # a metadata value
        self.assert_names(["recipe"], ["pancakes.txt", "omelette.txt"])  # a tag, as a word
        for q in ("cafe", "café", "CAFÉ", "crepes", "crêpes", "resume", "naif"):
            self.assert_names([q], ["cafe-menu.txt"])
        self.assert_names(['"le cafe sert"'], ["cafe-menu.txt"])

    def test_json_output(self):
        p = self.d.cli("--json", "search", "-l", "20", "eggs OR zephyr")
        rows = ct.parse_json_lines(p.stdout)
        self.assertEqual(len(rows), 4)
        for r in rows:
            self.assertEqual(set(r), {"hash", "name", "score", "size", "snippet"}, r)
            self.assertTrue(ct.is_hash(r["hash"]), r)
            self.assertEqual(r["hash"], self.hashes[r["name"]])
            self.assertIsInstance(r["score"], (int, float))
            self.assertNotIsInstance(r["score"], bool)
            self.assertEqual(r["size"], os.path.getsize(os.path.join(FIXTURES, r["name"])))
            self.assertIsInstance(r["snippet"], str)
        scores = [r["score"] for r in rows]
        self.assertEqual(scores, sorted(scores, reverse=True), "hits not best first")
        # same hits, same order as the text output and the protocol
        text = self.cli_hits("-l", "20", "eggs OR zephyr")
        self.assertEqual([r["hash"] for r in rows], [h for h, _, _, _ in text])
        self.assertEqual([round(r["score"], 3) for r in rows], [s for _, s, _, _ in text])
        proto = self.proto("eggs OR zephyr", limit=20)
        self.assertEqual([(r["hash"], r["snippet"]) for r in rows],
                         [(h["hash"], h["snippet"]) for h in proto])
        # no hits: no output
        self.assertEqual(self.d.cli("--json", "search", "nosuchwordanywhere").stdout, b"")

    def test_punctuation_only_words_are_ignored(self):
        both = ["pancakes.txt", "omelette.txt"]
        self.assert_names(["eggs ..."], both)
        self.assert_names(["eggs", "--", "-!"], both)
        self.assert_invalid_cli("...", needle="no words")
        # Non-ASCII punctuation and symbols are separators to the tokenizer as
        # well (PROTOCOL.md: "A word made only of punctuation is ignored").
        for sym in ("\u2014", "\u2026", "\u00ab", "\u20ac", "\U0001F642", "\u00a0"):
            with self.subTest(symbol=repr(sym)):
                self.assert_names(["eggs %s" % sym], both)
            with self.subTest(alone=repr(sym)):
                self.assert_invalid_cli(sym, needle="no words")

    def test_or_does_not_reach_over_a_negated_term_or_filter(self):
        # "jupiter -storm OR neptune": OR binds to its neighbours. Whatever the
        # reading, every hit must contain the required word "jupiter" (or the
        # query is refused as OR joining a negated term). oceans.txt has
        # neptune but no jupiter.
        # The same with a tag filter between: "pancakes tag:food OR omelette"
        # ("eggs OR tag:food" is refused, so "tag:food OR omelette" is no
        # disjunction either); omelette.txt does not contain "pancakes".
        for q, required, stray in (("jupiter -storm OR neptune", "jupiter", "oceans.txt"),
                                   ("pancakes tag:food OR omelette", "pancakes", "omelette.txt")):
            with self.subTest(query=q), self.d.connect() as c:
                hits, err = search_reply(c, q)
                if err is not None:
                    self.assertEqual(err.get("code"), "bad_request")
                    self.assertIn("invalid query", err.get("message", ""))
                else:
                    self.assertNotIn(stray, [h["name"] for h in hits],
                                     "OR reached over a negated term or filter and joined %r"
                                     % required)


# --------------------------------------------------------------------------
# paging and reply frames
# --------------------------------------------------------------------------


class Typos(SearchCase):
    """Typo tolerance as people expect it: a transposition is one edit, even
    in a short word; exact matches rank above fuzzy ones; equal scores come
    in a fixed order."""

    @classmethod
    def setUpClass(cls):
        cls.d, cls.base = class_daemon(cls)
        docs = {
            "epoll.txt": b"epoll_wait waits for events on the epoll instance",
            "article.txt": b"teh spelling is wrong here but the rest is fine",
            "house.txt": b"a house by the lake, with a garden and a dock and trees and a long "
                         b"road and a gate and a fence and a shed",
            "mouse.txt": b"mouse mouse mouse",
            "twin-a.txt": b"identical twin text",
            "twin-b.txt": b"identical twin text ",
        }
        cls.hashes = {}
        with cls.d.connect() as c:
            for name, text in docs.items():
                r = c.add(text, name=name, mime="text/plain")
                assert r.get("ok") is True, r
                cls.hashes[name] = r["hash"]

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_transposition_is_one_edit(self):
        # "wiat" is "wait" with two letters swapped: one edit, as for 4 letters
        self.assert_names(["--fuzzy", "epoll", "wiat"], ["epoll.txt"])
        self.assert_names(["--fuzzy", "epoll", "wakt"], ["epoll.txt"])
        self.assert_names(["--all", "epoll", "wiat"], [])
        self.assert_names(["--fuzzy", "evnets"], ["epoll.txt"])

    def test_identifier_parts_each_get_their_typo(self):
        """A typo in any part of an identifier, or in two parts, still finds
        it: the parts are widened one by one and put back together."""
        for q in ("epol_wiat", "epol_wait", "epoll_wakt", "epoll_wiat()", "EPOLL_WAKT"):
            with self.subTest(query=q):
                self.assert_names(["--fuzzy", q], ["epoll.txt"])
        self.assert_names(["epol_wiat"], [])
        # a part no document has, widened to nothing, finds nothing
        self.assert_names(["--fuzzy", "epoll_zzzzzz"], [])

    def test_short_word_gets_a_transposition_only(self):
        self.assert_names(["--fuzzy", "hte"], ["article.txt", "epoll.txt", "house.txt"])  # -> "the"
        self.assertEqual(self.names("--fuzzy", "lakx"), ["house.txt"])  # 4 letters: any one edit
        self.assertEqual(self.names("--fuzzy", "dok"), [])  # 3 letters: a substitution is not enough

    def test_exact_matches_rank_above_fuzzy_ones(self):
        # "mouse mouse mouse" scores higher for the widened query than the
        # long house text, but "house" as typed matches only house.txt
        got = self.names("--fuzzy", "house")
        self.assertEqual(got[0], "house.txt", got)
        self.assertIn("mouse.txt", got)
        exact = self.proto("house")
        fuzzy = self.proto("house", fuzzy=True)
        self.assertEqual(fuzzy[0]["hash"], exact[0]["hash"])
        self.assertEqual(fuzzy[0]["score"], exact[0]["score"], "an exact hit keeps its exact score")

    def test_equal_scores_in_hash_order(self):
        hits = self.proto("identical twin")
        self.assertEqual(len(hits), 2)
        self.assertEqual([h["hash"] for h in hits], sorted(h["hash"] for h in hits))


class Identifiers(SearchCase):
    """An identifier is found by its other spellings: snake_case, camelCase,
    dotted, with its call parentheses, or as words."""

    @classmethod
    def setUpClass(cls):
        cls.d, cls.base = class_daemon(cls)
        docs = {
            "snake.c": b"int n = epoll_wait(fd, events, 64, -1); /* sched_setattr too */",
            "camel.java": b"the EpollWait method of the HttpClient class calls send",
            "acronym.go": b"an HTTPServer serves; see the http_client.send helper",
            "words.txt": b"epoll is a thing and later we wait for a server",
        }
        with cls.d.connect() as c:
            for name, text in docs.items():
                r = c.add(text, name=name, mime="text/plain")
                assert r.get("ok") is True, r

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_spellings_of_one_identifier(self):
        for q in ("epoll_wait", "epoll_wait()", "EpollWait", "epollWait", "EPOLL_WAIT", "epoll.wait"):
            with self.subTest(query=q):
                self.assert_names([q], ["camel.java", "snake.c"])
        # as two words it is two words: also the text that merely has both
        self.assert_names(["epoll", "wait"], ["snake.c", "words.txt"])

    def test_camel_case_and_acronyms(self):
        for q in ("HttpClient", "httpClient", "http_client", "HTTP_CLIENT"):
            with self.subTest(query=q):
                self.assert_names([q], ["acronym.go", "camel.java"])
        self.assert_names(["HTTPServer"], ["acronym.go"])
        self.assert_names(["http_server"], ["acronym.go"])
        self.assert_names(["HttpClient.send"], ["acronym.go"])
        self.assert_names(["schedSetattr"], ["snake.c"])

    def test_snippet_marks_the_other_spelling(self):
        [hit] = self.proto("EpollWait", name="snake.c")
        self.assertIn("**epoll**_**wait**", hit["snippet"])
        [hit] = self.proto("epoll_wait", name="camel.java")
        self.assertIn("**EpollWait**", hit["snippet"])


class Paging(SearchCase):
    BEACONS = 25
    FRAMES = 120

    @classmethod
    def setUpClass(cls):
        cls.d, cls.base = class_daemon(cls)
        with cls.d.connect() as c:
            # "beacon" k times in a body of 40 words: distinct, ordered scores
            for k in range(1, cls.BEACONS + 1):
                words = ["beacon"] * k + ["filler%d" % j for j in range(40 - k)]
                r = c.add(" ".join(words).encode(), name="beacon-%02d" % k, mime="text/plain")
                assert r.get("ok") is True, r
            for i in range(cls.FRAMES):
                r = c.add(b"framecheck document number %d\n" % i, name="frame-%03d" % i,
                          mime="text/plain")
                assert r.get("ok") is True, r

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_limit_offset_pages_disjoint_same_order(self):
        expected = ["beacon-%02d" % k for k in range(self.BEACONS, 0, -1)]
        full = self.cli_hits("-l", "100", "beacon")
        self.assertEqual([n for _, _, n, _ in full], expected)
        scores = [s for _, s, _, _ in full]
        self.assertEqual(scores, sorted(scores, reverse=True))
        pages = []
        for off in (0, 10, 20, 30):
            args = ["-l", "10", "beacon"] if off == 0 else ["-l", "10", "--offset", str(off), "beacon"]
            pages.append([h for h, _, _, _ in self.cli_hits(*args)])
        self.assertEqual([len(p) for p in pages], [10, 10, 5, 0])
        flat = [h for p in pages for h in p]
        self.assertEqual(len(set(flat)), len(flat), "pages overlap")
        self.assertEqual(flat, [h for h, _, _, _ in full])
        # the same through the protocol, in pages of 7
        proto = []
        for off in range(0, 35, 7):
            proto.extend(h["hash"] for h in self.proto("beacon", limit=7, offset=off))
        self.assertEqual(proto, flat)
        # an offset past everything, even past int64
        self.assertEqual(self.proto("beacon", offset=2 ** 63 - 1), [])
        self.assertEqual(self.proto("beacon", offset=2 ** 64 - 1), [])

    def test_tied_scores_page_in_hash_order_with_and_without_filters(self):
        # The 120 framecheck documents tie (same words, same length). An unfiltered
        # search reads the best matches first and then their documents; a filtered one
        # (here a mime filter every document passes) joins them in one query. Both
        # give the same hits in the same order, on every page.
        full = self.proto("framecheck", limit=1000)
        self.assertEqual(len(full), self.FRAMES)
        self.assertEqual(len({h["score"] for h in full}), 1, "the documents should tie")
        hashes = [h["hash"] for h in full]
        self.assertEqual(hashes, sorted(hashes))
        self.assertEqual(self.proto("framecheck", limit=1000, mime="text/plain"), full)
        for limit, offset in ((1, 0), (7, 0), (7, 7), (10, 95), (50, 100), (3, 119), (5, 120)):
            with self.subTest(limit=limit, offset=offset):
                page = self.proto("framecheck", limit=limit, offset=offset)
                self.assertEqual(page, full[offset:offset + limit])
                self.assertEqual(self.proto("framecheck", limit=limit, offset=offset,
                                            mime="text/plain"), page)
        # distinct scores, and ties among the beacon hits of a two-word query
        both = self.proto("beacon OR framecheck", limit=1000)
        self.assertEqual(both, self.proto("beacon OR framecheck", limit=1000, mime="text/plain"))
        self.assertEqual(self.proto("beacon OR framecheck", limit=9, offset=20), both[20:29])

    def test_hits_in_frames_of_at_most_50(self):
        with self.d.connect() as c:
            frames = search_frames(c, "framecheck", limit=1000)
        self.assertTrue(all(f.get("ok") is True for f in frames), [ct.short(f) for f in frames])
        self.assertEqual([len(f["hits"]) for f in frames], [50, 50, 20])
        self.assertEqual([f["more"] for f in frames], [True, True, False])
        hashes = [h["hash"] for f in frames for h in f["hits"]]
        self.assertEqual(len(set(hashes)), self.FRAMES)
        # exactly 50: one frame, more false
        with self.d.connect() as c:
            frames = search_frames(c, "framecheck", limit=50)
        self.assertEqual([(len(f["hits"]), f["more"]) for f in frames], [(50, False)])
        # the CLI reads every frame
        self.assertEqual(len(self.cli_hits("-l", "1000", "framecheck")), self.FRAMES)
        rows = ct.parse_json_lines(self.d.cli("--json", "search", "-l", "1000", "framecheck").stdout)
        self.assertEqual(sorted(r["hash"] for r in rows), sorted(hashes))

    def test_limit_bounds(self):
        self.assertEqual(len(self.names("-l", "1000", "beacon OR framecheck")), self.BEACONS + self.FRAMES)
        for bad in ("0", "1001", "-1", "x", ""):
            with self.subTest(limit=bad):
                p = self.d.cli("search", "-l", bad, "beacon", check_exit=2)
                ct.assert_cli_error(self, p)
        for bad in (0, 1001, -1, "10", 1.5):
            with self.subTest(limit=bad):
                self.assert_bad_request("beacon", limit=bad)


# --------------------------------------------------------------------------
# the index follows adds and deletes
# --------------------------------------------------------------------------


def random_word(rng, n=10):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


class IndexConsistency(SearchCase):
    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        self.d = ct.Daemon(self)
        self.d.start()

    def add_cli(self, content, *opts):
        p = self.d.cli("add", *(list(opts) + ["-"]), input=content)
        [(h, _)] = ct.parse_add(p.stdout)
        self.assertEqual(h, ct.sha256_hex(content))
        return h

    def test_snippets_have_at_most_16_words(self):
        # PROTOCOL.md: a snippet is up to 16 words, the context before the match included.
        words = " ".join("w%02d" % i for i in range(40))
        self.add_cli(("%s needle %s\n" % (words, words)).encode(), "-n", "long-line.txt")
        [h] = self.proto("needle")
        text = h["snippet"].replace("**", "").replace("...", " ")
        self.assertLessEqual(len(text.split()), 16, h["snippet"])
        self.assertIn("**needle**", h["snippet"])

    def test_removed_name_leaves_the_index_at_once(self):
        """rm NAME of a document another name keeps: a search for the
        removed name finds nothing, one for the kept name finds it."""
        h = self.add_cli(b"A brass compass points north.\n", "-n", "old-compass.txt")
        self.add_cli(b"A brass compass points north.\n", "-n", "kept-compass.txt")
        self.assertEqual([x[0] for x in self.cli_hits("name:old")], [h])
        self.d.cli("rm", "old-compass.txt")
        self.assertEqual(self.cli_hits("name:old"), [])
        self.assertEqual([x[0] for x in self.cli_hits("name:kept")], [h])
        self.assertEqual([x[0] for x in self.cli_hits("compass")], [h])

    def test_delete_then_search_gone_at_once(self):
        ha = self.add_cli(b"The lantern by the gate burns oil; the keeper is Ingrid.\n",
                          "-n", "gate-lantern.txt", "-t", "lamps")
        hb = self.add_cli(b"A paper lantern floats over the pond.\n", "-n", "pond-lantern.txt")
        self.assertEqual(sorted(h for h, _, _, _ in self.cli_hits("lantern")), sorted([ha, hb]))
        p = self.d.cli("rm", "gate-lantern.txt")
        self.assertEqual(p.stdout.decode().splitlines(), ["removed gate-lantern.txt", "deleted " + ha])
        # gone immediately, by every route into the index
        self.assertEqual([h for h, _, _, _ in self.cli_hits("lantern")], [hb])
        for q in (["ingrid"], ["name:gate"], ["tag:lamps"], ["lamps"], ["--fuzzy", "ingrd"],
                  ["--fuzzy", "ingri"], ["ingr*"], ['"the keeper"']):
            with self.subTest(query=q):
                self.assertEqual(self.cli_hits(*q), [])
        # the other one is untouched; deleting it too empties the index
        self.assertEqual([h for h, _, _, _ in self.cli_hits("pond")], [hb])
        self.d.cli("rm", hb)
        self.assertEqual(self.cli_hits("lantern"), [])
        self.assertEqual(self.cli_hits("--fuzzy", "lanter"), [])

    def test_delete_via_protocol_then_search_on_another_connection(self):
        rng = random.Random(7)
        a, b = self.conn(), self.conn()
        for i in range(20):
            word = random_word(rng)
            r = a.add(("note %d about %s\n" % (i, word)).encode(), name="n%d" % i, mime="text/plain")
            self.assertIs(r.get("ok"), True, r)
            hits, err = search_reply(b, word)
            self.assertEqual([h["hash"] for h in hits or []], [r["hash"]], (word, err))
            d = a.call("delete", ref=r["hash"])
            self.assertIs(d.get("ok"), True, d)
            hits, err = search_reply(b, word)
            self.assertEqual((hits, err), ([], None), "deleted document %d still found" % i)
            hits, err = search_reply(b, word[:-1] + ("x" if word[-1] != "x" else "y"), fuzzy=True)
            self.assertEqual((hits, err), ([], None), "deleted document %d found by --fuzzy" % i)

    def test_index_entries_of_gone_documents_leave_full_pages(self):
        # "pillar" k times in 40 words: document k scores above document k-1. Then the
        # index gets entries that rank above all of them but whose documents do not
        # exist (as when the index got ahead of the database in a crash, or in the
        # moment between a delete and the index dropping it): every page must hold
        # the documents that do exist, in their order.
        c = self.conn()
        docs = [c.add(" ".join(["pillar"] * k + ["stone%d" % j for j in range(40 - k)]).encode(),
                      name="pillar-%02d" % k, mime="text/plain") for k in range(1, 11)]
        self.assertTrue(all(r.get("ok") is True for r in docs), docs)
        best = [r["hash"] for r in reversed(docs)]
        self.assertEqual([h["hash"] for h in self.proto("pillar", limit=100)], best)
        ix = sqlite3.connect(os.path.join(self.d.data_dir, "search.db"), timeout=10)
        self.addCleanup(ix.close)
        with ix:
            for i in range(30):
                ix.execute("INSERT INTO search(rowid, name, body, tags, meta) VALUES(?, '', ?, '', '')",
                           (10 ** 9 + i, " ".join(["pillar"] * 40)))
        self.assertEqual([h["hash"] for h in self.proto("pillar", limit=3)], best[:3])
        self.assertEqual([h["hash"] for h in self.proto("pillar", limit=4, offset=3)], best[3:7])
        self.assertEqual([h["hash"] for h in self.proto("pillar", limit=100)], best)
        self.assertEqual([h["hash"] for h in self.proto("pillar", limit=100, mime="text/plain")],
                         best)

    def test_entries_of_gone_documents_make_the_index_start_afresh(self):
        # An entry whose document is gone and not pending removal (the index
        # got ahead of the database in a crash) cannot be taken out exactly:
        # at start the index is made anew, and every document is found again.
        c = self.conn()
        docs = {c.add(("column %d of granite\n" % i).encode(), name="col-%d" % i,
                      mime="text/plain")["hash"] for i in range(5)}
        c.close()
        self.d.stop()
        ix = sqlite3.connect(os.path.join(self.d.data_dir, "search.db"), timeout=10)
        with ix:
            ix.execute("INSERT INTO search(rowid, name, body, tags, meta) VALUES(?, '', ?, '', '')",
                       (10 ** 9, "granite ghost"))
            ix.execute("INSERT INTO indexed(doc, gen, hash, name, tags, meta, body_len)"
                       " VALUES(?, 1, ?, '', '', '', 12)", (10 ** 9, "0" * 64))
        ix.close()
        since = len(self.d.log_text())
        self.d.start()
        self.assertEqual({h["hash"] for h in self.proto("granite", limit=100)}, docs)
        self.assertEqual(self.proto("ghost"), [])
        self.assertIn("1 entries of documents that are gone; rebuilding it",
                      self.d.log_text()[since:])

    def test_add_then_search_immediately_after_ack(self):
        rng = random.Random(11)
        a, b = self.conn(), self.conn()
        for i in range(30):
            word = random_word(rng)
            r = a.add(("entry %d mentions %s once\n" % (i, word)).encode(), name="entry-%d" % i,
                      mime="text/plain")
            self.assertIs(r.get("ok"), True, r)
            # no sleep: the ack means the index has it
            hits, err = search_reply(b, word)
            self.assertIsNone(err)
            self.assertEqual([h["hash"] for h in hits], [r["hash"]], "add %d not searchable at once" % i)
            # the fuzzy vocabulary is current too
            typo = word[:4] + ("q" if word[4] != "q" else "z") + word[5:]
            hits, err = search_reply(b, typo, fuzzy=True)
            self.assertIsNone(err)
            self.assertEqual([h["hash"] for h in hits], [r["hash"]],
                             "fuzzy %r did not find the fresh %r" % (typo, word))
            hits, err = search_reply(b, "name:entry-%d" % i)
            self.assertIn(r["hash"], [h["hash"] for h in hits or []])
        # through the CLI as well
        for i in range(3):
            word = random_word(rng)
            h = self.add_cli(("cli entry %s\n" % word).encode(), "-n", "cli-%d" % i)
            self.assertEqual([x for x, _, _, _ in self.cli_hits(word)], [h])

    def test_readd_same_content_one_hit(self):
        content = b"The albatross glides for hours without flapping its wings.\n"
        h = self.add_cli(content, "-n", "seabird-draft.txt")
        self.add_cli(content)
        self.add_cli(content, "-n", "seabird-draft.txt")
        with open(os.path.join(self.tmp, "copy.txt"), "wb") as f:
            f.write(content)
        self.d.cli("add", "-n", "seabird-draft.txt", os.path.join(self.tmp, "copy.txt"))
        for q in (["albatross"], ["glides", "wings"], ["name:seabird"], ["--fuzzy", "albatros"]):
            with self.subTest(query=q):
                self.assertEqual([x for x, _, _, _ in self.cli_hits(*q)], [h])
        self.assertEqual(len(self.proto("albatross", limit=100)), 1)

    def test_readd_same_content_under_new_name(self):
        content = b"The albatross glides for hours without flapping its wings.\n"
        h = self.add_cli(content, "-n", "seabird-draft.txt")
        self.add_cli(content, "-n", "albatross-final.txt", "-t", "published", "-m", "editor=quimby")
        # one document, found by the new name, the old name, tags and metadata
        for q in (["final"], ["name:final"], ["seabird"], ["name:draft"], ["albatross"],
                  ["wings", "tag:published"], ["quimby"], ["albatross", "-t", "published"]):
            with self.subTest(query=q):
                self.assertEqual([x for x, _, _, _ in self.cli_hits(*q)], [h])
        # the hit shows the newest name
        [(_, _, name, _)] = self.cli_hits("albatross")
        self.assertEqual(name, "albatross-final.txt")
        # the body is still indexed after the names changed
        [hit] = self.proto("flapping")
        self.assertIn("flapping", marked(hit["snippet"]))

    def test_glob_matches_any_name_of_a_document(self):
        content = b"Ledger of the granary: barley, oats and rye.\n"
        h = self.add_cli(content, "-n", "granary-2023.txt")
        self.add_cli(content, "-n", "archive/granary.txt")
        self.assertEqual([x for x, _, _, _ in self.cli_hits("--name", "granary-*", "barley")], [h])
        self.assertEqual([x for x, _, _, _ in self.cli_hits("--name", "archive/*", "barley")], [h])

    def test_hit_shows_the_name_that_matched(self):
        """A document with two names: a hit found by the older one (a glob,
        name:word, a word only in that name) shows it; found by the content,
        the newest (it always showed the newest)."""
        content = b"Ledger of the mill: wheat, spelt and millet.\n"
        h = self.add_cli(content, "-n", "windmill-1890.txt")
        time.sleep(1.1)
        self.add_cli(content, "-n", "archive/ledger.txt")
        for args, name in ((["--name", "windmill-*", "wheat"], "windmill-1890.txt"),
                           (["name:windmill"], "windmill-1890.txt"),
                           (["windmill"], "windmill-1890.txt"),
                           (["wheat"], "archive/ledger.txt"),
                           (["name:ledger"], "archive/ledger.txt")):
            with self.subTest(args=args):
                self.assertEqual([(x, n) for x, _, n, _ in self.cli_hits(*args)], [(h, name)])

    def test_text_with_nul_or_bad_utf8_indexed_by_name_only(self):
        self.add_cli(b"visible words then a NUL\x00 and hiddenword\n", "-n", "nulled.txt", "--mime",
                     "text/plain")
        self.add_cli(b"valid start \xff\xfe then brokenword\n", "-n", "badutf.txt", "--mime",
                     "text/plain")
        self.assertEqual(self.cli_hits("hiddenword"), [])
        self.assertEqual(self.cli_hits("visible"), [])
        self.assertEqual(self.cli_hits("brokenword"), [])
        self.assertEqual(self.names("nulled"), ["nulled.txt"])
        self.assertEqual(self.names("badutf"), ["badutf.txt"])
        # valid multibyte UTF-8 is text
        self.add_cli("Größe und Maß: übermäßig 東京 ✓\n".encode(), "-n", "utf8.txt")
        self.assertEqual(self.names("grosse"), [])  # ß is not folded to ss
        self.assertEqual(self.names("übermäßig"), ["utf8.txt"])
        self.assertEqual(self.names("ubermassig"), [])
        self.assertEqual(self.names("uberma*"), ["utf8.txt"])
        self.assertEqual(self.names("東京"), ["utf8.txt"])


    def test_multi_frame_text_document_fully_indexed(self):
        # 3 MiB of multibyte text sent in 256 KiB frames, with characters cut
        # by the frame boundaries: still one text document, indexed to the end.
        unit = "caf\u00e9 \u6771\u4eac na\u00efve "  # 2-, 3- and 2-byte characters
        markers = ["marker%02d" % i for i in range(30)]
        body = bytearray()
        for i, m in enumerate(markers):
            body += ((unit * 5000)[i:i + 45000] + " %s " % m).encode()  # about 100 KB
        body += "fin\u00e9\n".encode()
        cut = [i for i in range(ct.MAX_DATA, len(body), ct.MAX_DATA) if (body[i] & 0xC0) == 0x80]
        self.assertTrue(cut, "no frame boundary falls inside a character; adjust the filler")
        with self.d.connect(timeout=120) as c:
            r = c.add(bytes(body), name="multibyte.txt", mime="text/plain")
            self.assertIs(r.get("ok"), True, r)
        for m in markers:
            hits = self.proto(m)
            self.assertEqual([h["name"] for h in hits], ["multibyte.txt"], m)
            self.assertIn(m, marked(hits[0]["snippet"]))
        self.assertEqual(len(self.proto('"%s fin\u00e9"' % markers[-1])), 1)
        self.assertEqual(len(self.proto("fine")), 1)  # the last word, diacritic folded

    def test_metadata_and_tag_changes_reindexed(self):
        content = b"Quarterly report on the orchard harvest.\n"
        h = self.add_cli(content, "-n", "orchard.txt", "-m", "editor=quimby")
        self.assertEqual([x for x, _, _, _ in self.cli_hits("quimby")], [h])
        self.add_cli(content, "-m", "editor=zoltan", "-t", "reviewed")
        self.assertEqual(self.cli_hits("quimby"), [])
        self.assertEqual([x for x, _, _, _ in self.cli_hits("zoltan")], [h])
        self.assertEqual([x for x, _, _, _ in self.cli_hits("harvest", "tag:reviewed")], [h])
        self.assertEqual([x for x, _, _, _ in self.cli_hits("--fuzzy", "zoltn")], [h])
        self.assertEqual(self.cli_hits("--fuzzy", "quimb"), [])

    def test_filter_only_query_newest_first(self):
        h1 = self.add_cli(b"first of the batch\n", "-n", "older", "-t", "batch")
        time.sleep(1.1)  # creation times are in seconds
        h2 = self.add_cli(b"second of the batch\n", "-n", "newer", "-t", "batch")
        hits = self.cli_hits("tag:batch")
        self.assertEqual([h for h, _, _, _ in hits], [h2, h1])
        self.assertEqual([s for _, s, _, _ in hits], [0.0, 0.0])
        self.assertEqual([h for h, _, _, _ in self.cli_hits("-t", "batch", "tag:batch")], [h2, h1])

    def test_after_before_bounds_are_creation_time(self):
        h = self.add_cli(b"the sundial casts a shadow\n", "-n", "sundial.txt")
        [st] = ct.parse_json_lines(self.d.cli("--json", "stat", h).stdout)
        created = st["created"]
        self.assertIsInstance(created, int)
        # after: at or after; before: strictly before
        self.assertEqual(len(self.cli_hits("--after", "@%d" % created, "sundial")), 1)
        self.assertEqual(len(self.cli_hits("--after", "@%d" % (created + 1), "sundial")), 0)
        self.assertEqual(len(self.cli_hits("--before", "@%d" % created, "sundial")), 0)
        self.assertEqual(len(self.cli_hits("--before", "@%d" % (created + 1), "sundial")), 1)
        iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
        self.assertEqual(len(self.cli_hits("--after", iso, "--before", "@%d" % (created + 1),
                                           "sundial")), 1)

    def test_index_survives_restart(self):
        h = self.add_cli(b"The heron waits motionless in the shallows.\n", "-n", "heron.txt",
                         "-t", "birds")
        gone = self.add_cli(b"A transient egret passes.\n", "-n", "egret.txt")
        self.d.cli("rm", gone)
        self.d.restart()
        self.assertEqual([x for x, _, _, _ in self.cli_hits("heron")], [h])
        self.assertEqual([x for x, _, _, _ in self.cli_hits("--fuzzy", "motionles")], [h])
        self.assertEqual([x for x, _, _, _ in self.cli_hits("tag:birds")], [h])
        self.assertEqual(self.cli_hits("egret"), [])
        self.assertEqual(self.cli_hits("--fuzzy", "egrets"), [])
        self.d.stop()


class IndexBatchesAndCheckpoints(SearchCase):
    """An index batch takes hundreds of milliseconds. While one ran it kept a snapshot
    of cairn.db (attached to its connection), so cairn.db's checkpoints could copy
    nothing after it and a restarting one held the database's writer, and every add
    waiting for a commit, for the whole of its wait. A batch held open
    (CAIRN_TEST_INDEX_HOLD_MS) must leave cairn.db's WAL free to start over."""

    HOLD_MS = 2000 * ct.SLOW

    def setUp(self):
        self.d = ct.Daemon(self, env={"CAIRN_TEST_INDEX_HOLD_MS": str(self.HOLD_MS)})
        self.d.start()

    def wait_held(self, since):
        """Waits until the log has a batch held open after offset `since`."""
        deadline = time.monotonic() + 30 * ct.SLOW
        while "(CAIRN_TEST_INDEX_HOLD_MS)" not in self.d.log_text()[since:]:
            self.assertLess(time.monotonic(), deadline, self.d.log_tail())
            time.sleep(0.02)

    def restart_checkpoint(self):
        """(busy, frames in the WAL, frames copied) of a restarting checkpoint of cairn.db
        that waits at most half a second for readers."""
        db = sqlite3.connect(os.path.join(self.d.data_dir, "cairn.db"), timeout=0.5)
        try:
            return db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        finally:
            db.close()

    def test_checkpoints_do_not_wait_for_an_open_index_batch(self):
        c = self.conn()
        self.assertIs(c.add(b"the first words\n", name="a", mime="text/plain").get("ok"), True)
        self.wait_held(0)
        # Committed while the batch is open: newer than any snapshot it could hold.
        self.assertIs(c.add(b"more words\n", name="b", mime="text/plain").get("ok"), True)
        busy, frames, copied = self.restart_checkpoint()
        self.assertEqual((busy, copied), (0, frames), self.d.log_tail())
        # The catch-up, which finds what the index lacks by reading cairn.db, likewise.
        c.close()
        self.d.stop()
        for suffix in ("", "-wal", "-shm"):
            path = os.path.join(self.d.data_dir, "search.db" + suffix)
            if os.path.exists(path):
                os.unlink(path)
        since = len(self.d.log_text())
        self.d.start()
        self.wait_held(since)
        with self.d.connect() as c2:
            self.assertIs(c2.add(b"words added during the catch-up\n", name="c",
                                 mime="text/plain").get("ok"), True)
        busy, frames, copied = self.restart_checkpoint()
        self.assertEqual((busy, copied), (0, frames), self.d.log_tail())
        self.assertEqual(sorted(self.names("words")), ["a", "b", "c"])
        self.d.stop()


class LargeDocuments(SearchCase):
    def setUp(self):
        self.d = ct.Daemon(self)
        self.d.start()

    def test_common_word_in_a_large_text_document_answers_in_time(self):
        # A 2 MiB text document (well under the 16 MiB max_text default) with
        # a word every 30 bytes. A search for it must not take minutes: the
        # snippet of one hit is 16 words.
        size = 2 * ct.MiB
        body = ("loremword ipsum dolor sit amet " * (size // 31 + 1))[:size].encode()
        budget = 10 * ct.SLOW
        with self.d.connect(timeout=120) as c:
            r = c.add(body, name="large.txt", mime="text/plain")
            self.assertIs(r.get("ok"), True, r)
            start = time.monotonic()
            try:
                hits, err = search_reply(c, "loremword", timeout=budget, limit=1)
            except OSError:
                self.fail("no search reply within %ds for a word repeated through a 2 MiB document"
                          % budget)
            elapsed = time.monotonic() - start
        self.assertIsNone(err)
        self.assertEqual([h["name"] for h in hits], ["large.txt"])
        self.assertLess(elapsed, budget)
        self.d.assert_healthy()


class TextLimit(SearchCase):
    """[search] max_text bounds the indexed prefix of a text document."""

    def start(self, max_text):
        base = ct.make_tempdir(self)
        conf = os.path.join(base, "cairn.conf")
        with open(conf, "w") as f:
            f.write("[search]\nmax_text = %s\n" % max_text)
        self.d = ct.Daemon(self, base=base, args=["--config", conf])
        self.d.start()

    def test_prefix_up_to_max_text_indexed(self):
        self.start("4K")
        # "é" (2 bytes) straddles byte 4096: the prefix before it stays indexed
        head = b"earlyword " + b"x" * (4095 - 10 - len(b" middleword ")) + b" middleword "
        body = head + "é".encode() + b" lateword\n"
        self.assertEqual(len(head), 4095)
        with self.d.connect() as c:
            r = c.add(body, name="long.txt", mime="text/plain")
            self.assertIs(r.get("ok"), True, r)
            r2 = c.add(b"short text with tinyword\n", name="short.txt", mime="text/plain")
            self.assertIs(r2.get("ok"), True, r2)
        self.assertEqual(self.names("earlyword"), ["long.txt"])
        self.assertEqual(self.names("middleword"), ["long.txt"])
        self.assertEqual(self.names("lateword"), [])
        self.assertEqual(self.names("tinyword"), ["short.txt"])

    def test_max_text_zero_indexes_names_only(self):
        self.start("0")
        with self.d.connect() as c:
            r = c.add(b"plain words inside\n", name="names-only.txt", mime="text/plain", tags=["t1"])
            self.assertIs(r.get("ok"), True, r)
        self.assertEqual(self.names("inside"), [])
        self.assertEqual(self.names("names"), ["names-only.txt"])
        self.assertEqual(self.names("t1"), ["names-only.txt"])


# --------------------------------------------------------------------------
# hostile queries
# --------------------------------------------------------------------------

SQLISH = [
    "'; DROP TABLE documents; --",
    "\"; DROP TABLE documents; --\"",
    "eggs'; DELETE FROM search; --",
    "') OR 1=1 --",
    "x' OR '1'='1",
    "eggs UNION SELECT * FROM documents",
    "eggs) OR (1=1",
    "eggs\"\" OR \"\"1",
    "*",
    "eggs*)*",
    "{name body}: eggs",
    "name : eggs",
    "body:eggs",
    "^eggs",
    "eggs + salt",
    "NEAR(eggs salt, 2)",
    "NEAR(eggs",
    "eggs:",
    ":eggs",
    "rank:1",
    "rowid:1",
    "search:eggs",
    "eggs AND AND salt",
    "(eggs OR salt",
    "eggs)",
    "-- eggs",
    "eggs -- salt",
    "tag:food' OR '1'='1",
    "tag:%",
    "name:*",
    "eggs \\",
    "eggs%",
    "eggs\u200b",
]


class HostileQueries(SearchCase):
    @classmethod
    def setUpClass(cls):
        cls.d, cls.base = class_daemon(cls)
        cls.hashes = load_corpus(cls.d)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def tearDown(self):
        self.d.assert_healthy()

    def test_unbalanced_quote(self):
        for q in ('"unbalanced', 'eggs "salt', '"', 'a"b', 'eggs "a" "b', '-"eggs'):
            with self.subTest(query=q):
                self.assert_bad_request(q, "unbalanced quote")
                self.assert_invalid_cli(q, needle="unbalanced quote")

    def test_lone_or_not_and_only_negated(self):
        cases = {
            "OR": "OR", "NOT": "NOT", "eggs OR": "OR", "OR eggs": "OR", "eggs OR OR salt": "OR",
            "eggs NOT": "NOT", "NOT NOT eggs": "NOT", "eggs OR NOT salt": None,
            "eggs OR -salt": "OR", "eggs OR ...": "OR",
            "-eggs": "negated", "NOT eggs": "negated", "-eggs -salt": "negated",
            '-"quick brown"': "negated", "-eggs tag:food": "negated",
            "": "no words", "   ": "no words", "AND": "no words", "...": "no words",
            "-tag:food eggs": "tag:", "eggs OR tag:food": "tag:", "eggs OR NOT": None,
        }
        for q, needle in cases.items():
            with self.subTest(query=q):
                msg = self.assert_bad_request(q)
                self.assertTrue(msg.startswith("invalid query: "), msg)
                if needle:
                    self.assertIn(needle, msg)
        for q in ("OR", "NOT", "eggs OR", "NOT eggs"):
            with self.subTest(cli=q):
                self.assert_invalid_cli(q)
        self.assert_invalid_cli("--", "-eggs")

    def test_sql_and_fts5_syntax_is_inert(self):
        before = self.d.status()
        baseline = self.proto("vacuum")
        for q in SQLISH:
            with self.subTest(query=q):
                with self.d.connect() as c:
                    hits, err = search_reply(c, q, timeout=QUERY_TIMEOUT)
                if err is not None:
                    self.assertEqual(err.get("code"), "bad_request", err)
                    self.assert_no_leak(err.get("message", ""))
                else:
                    for h in hits:
                        self.assertIn(h["name"], self.hashes)
                p = self.d.cli("search", "--", q, check_exit=None)
                self.assertIn(p.returncode, (0, 1), p.stderr)
                self.assert_no_leak(p.stderr.decode("utf-8", "replace"))
                if p.returncode == 1:
                    self.assertIn(b"cairn: invalid query:", p.stderr)
        # nothing was dropped or deleted; search still works
        after = self.d.status()
        for key in ("documents", "logical_bytes", "chunks"):
            self.assertEqual(after.get(key), before.get(key), key)
        self.assertEqual(self.proto("vacuum"), baseline)
        self.assertEqual(len(ct.parse_ls(self.d.cli("ls", "--docs").stdout)), len(CORPUS))
        self.assertNotIn("database: search", self.d.log_text())

    def test_fts5_operators_are_plain_words(self):
        # words that FTS5 would read as syntax are searched as words
        self.assert_names(["body:eggs"], [])  # "body eggs" nowhere
        self.assert_names(["--all", "(eggs", "milk)"], ["pancakes.txt"])
        self.assert_names(["--all", "NEAR(eggs", "milk)"], [])  # the phrase "near eggs"
        self.assert_names(["eggs*)"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["eggs + salt"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["^eggs"], ["pancakes.txt", "omelette.txt"])
        self.assert_names(["{name}:eggs"], [])

    def test_nul_byte(self):
        for q in ("eggs\x00", "\x00", "eggs\x00salt", '"eggs\x00"'):
            with self.subTest(query=q):
                self.assert_bad_request(q, "NUL")

    def test_invalid_utf8_query(self):
        # a msgpack str with bytes that are not UTF-8: refused or searched, nothing worse
        for raw in (b"\xff\xfe", b"eggs \xc3", b"\xed\xa0\x80", b"caf\xc3\xa9 \x80"):
            with self.subTest(raw=raw), self.d.connect() as c:
                # fixstr header + the raw bytes, spliced in verbatim
                c.send({"id": 1, "op": "search", "query": ct.Raw(bytes([0xA0 | len(raw)]) + raw)})
                msg = c.recv_for(1, QUERY_TIMEOUT)
                if msg.get("ok") is not True:
                    self.assertIn(ct.error_code(msg), ("bad_request", "bad_frame"), msg)
                    self.assert_no_leak(msg["error"].get("message", ""))

    def test_oversized_queries(self):
        # 1,000,000 bytes still fit in a frame; the daemon refuses the query
        self.assert_bad_request("a" * 1000000, "longer than")
        self.assert_bad_request("eggs " * 200000, "longer than")
        # the limit is exactly 65,536 bytes
        q = "eggs" + " " * (65536 - 4)
        self.assertEqual(len(q), 65536)
        self.assertEqual(sorted(h["name"] for h in self.proto(q)), ["omelette.txt", "pancakes.txt"])
        self.assert_bad_request(q + " ", "longer than")
        # through the CLI: exit 1, invalid query
        self.assert_invalid_cli("x" * 70000)
        self.assert_invalid_cli(*(["eggs"] * 14000))
        # 64 terms are allowed, 65 are not
        words = [w for w in open(os.path.join(FIXTURES, "postgres-tuning.txt")).read().split()]
        words = (words * 10)[:64]
        self.proto(" ".join(words))
        self.proto(" ".join(words), fuzzy=True)
        self.assert_bad_request(" ".join(words + ["eggs"]), "64 terms")

    def test_large_real_word_queries_answer_in_time(self):
        vocab = []
        for fname, _, _, _ in CORPUS:
            if fname.endswith(".bin"):
                continue
            with open(os.path.join(FIXTURES, fname), encoding="utf-8") as f:
                vocab += re.findall(r"\w+", f.read())
        rng = random.Random(5)
        text = ""
        while len(text) < 60 * 1024:
            text += rng.choice(vocab) + " "
        text = text[:60 * 1024]
        for q, fields in ((text, {}), (text, {"fuzzy": True}), ('"%s"' % text[:-2], {}),
                          ('"%s"' % text[:-2], {"fuzzy": True}), (text.replace(" ", "") + "*", {}),
                          (text.replace(" ", "")[:60000], {"fuzzy": True}),
                          (" OR ".join(vocab[:63]), {"fuzzy": True}),
                          ("e" * 64 + " " + "ee " * 62, {"fuzzy": True})):
            with self.subTest(query=q[:40], fields=fields):
                start = time.monotonic()
                with self.d.connect(timeout=QUERY_TIMEOUT) as c:
                    hits, err = search_reply(c, q, timeout=QUERY_TIMEOUT, **fields)
                elapsed = time.monotonic() - start
                if err is not None:
                    self.assertEqual(err.get("code"), "bad_request", err)
                    self.assert_no_leak(err.get("message", ""))
                self.assertLess(elapsed, QUERY_TIMEOUT)
        self.d.cli("search", "--", text, check_exit=None, timeout=QUERY_TIMEOUT)

    def test_request_field_validation(self):
        with self.d.connect() as c:
            for fields in ({}, {"query": 5}, {"query": b"eggs"}, {"query": None}):
                with self.subTest(fields=fields):
                    r = c.call("search", **fields)
                    self.assertEqual(ct.error_code(r), "bad_request", r)
        bad = [{"offset": -1}, {"offset": "1"}, {"tags": "food"}, {"tags": [""]}, {"tags": [1]},
               {"tags": ["x"] * 65}, {"name": ""}, {"name": 5}, {"mime": ""}, {"after": "2020-01-01"},
               {"before": 1.5}, {"fuzzy": "yes"}, {"fuzzy": 1}]
        for fields in bad:
            with self.subTest(fields=fields):
                self.assert_bad_request("eggs", **fields)
        for args in (("search",), ("search", "--after", "yesterday", "x"),
                     ("search", "--before", "2020-13-01", "x"), ("search", "--offset", "-1", "x"),
                     ("search", "-t", "", "x"), ("search", "--nope", "x")):
            with self.subTest(args=args):
                p = self.d.cli(*args, check_exit=2)
                ct.assert_cli_error(self, p)

    def test_random_fuzz(self):
        seed = int(os.environ.get("CAIRN_FUZZ_SEED", "20240611"))
        rng = random.Random(seed)
        atoms = ['"', '"', '*', '-', '-', 'OR', 'OR', 'NOT', 'AND', 'tag:', 'name:', ' ', ' ', ' ',
                 '  ', '\t', '\n', '(', ')', '{', '}', ':', '^', '+', "'", ';', ',', '.', '\\', '%',
                 '_', 'eggs', 'salt', 'fox', 'quick', 'kuber', 'photo', 'food', 'db', 'x', 'ab',
                 'é', 'ß', 'ü', '中文', '—', '…', '\U0001F642', '\u0301', '\u200b', '\u00a0',
                 'NEAR', 'abc', '0', '42', 'e' * 70]
        letters = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789"
        before = self.d.status()
        counts = {"ok": 0, "bad_request": 0}
        with self.d.connect() as c:
            for i in range(300):
                parts = []
                for _ in range(rng.randint(0, 24)):
                    if rng.random() < 0.3:
                        parts.append("".join(rng.choice(letters) for _ in range(rng.randint(1, 8))))
                    else:
                        parts.append(rng.choice(atoms))
                q = "".join(parts)
                fields = {}
                if rng.random() < 0.3:
                    fields["fuzzy"] = True
                if rng.random() < 0.1:
                    fields["tags"] = ["food"]
                if rng.random() < 0.1:
                    fields["name"] = rng.choice(["*", "[", "p*", "?*"])
                try:
                    hits, err = search_reply(c, q, timeout=QUERY_TIMEOUT, **fields)
                except (ct.ConnectionClosed, OSError) as e:
                    raise AssertionError("seed %d, query %d %r %r: %s\n%s"
                                         % (seed, i, q, fields, e, self.d.log_tail()))
                where = "seed %d, query %d: %r %r" % (seed, i, q, fields)
                if err is None:
                    counts["ok"] += 1
                    for h in hits:
                        self.assertIn(h["name"], self.hashes, where)
                else:
                    self.assertEqual(err.get("code"), "bad_request", "%s -> %r" % (where, err))
                    msg = err.get("message", "")
                    self.assertTrue(msg.startswith("invalid query: "), "%s -> %r" % (where, msg))
                    self.assert_no_leak(msg)
                    counts["bad_request"] += 1
        # both outcomes occurred, so the fuzz reached the parser and the index
        self.assertGreater(counts["ok"], 30, counts)
        self.assertGreater(counts["bad_request"], 30, counts)
        self.d.assert_healthy()
        self.assertEqual(self.d.status().get("documents"), before.get("documents"))
        self.assertNotIn("database: search", self.d.log_text())
        # a few through the CLI: exit 0 or 1, never anything else
        for i in range(30):
            q = "".join(rng.choice(atoms + list(letters)) for _ in range(rng.randint(1, 12)))
            p = self.d.cli("search", "--", q, check_exit=None)
            self.assertIn(p.returncode, (0, 1), "%r: %r" % (q, p.stderr))
            if p.returncode == 1:
                self.assertIn(b"cairn: invalid query:", p.stderr, q)
            else:
                parse_search(p.stdout)


if __name__ == "__main__":
    ct.main()
