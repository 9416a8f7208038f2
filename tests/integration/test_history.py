#!/usr/bin/env python3
"""A name's history: `cairn log NAME` lists its versions newest first, and
the ref NAME@{N} reads version N (0 is the newest), through the CLI and the
protocol's `log` op. A name that is itself spelled NAME@{N} is found as a
name first."""

import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402


class History(unittest.TestCase):
    def setUp(self):
        self.d = ct.Daemon(self).start()
        self.versions = []  # oldest first: (hash, content)
        for i in range(3):
            content = ("version %d of the notes\n" % i).encode()
            p = self.d.cli("add", "-n", "notes.txt", "-", input=content)
            self.versions.append((p.stdout.split()[0].decode(), content))
            time.sleep(1.1)  # each version named a second apart

    def test_log_lists_versions_newest_first(self):
        p = self.d.cli("log", "notes.txt")
        lines = p.stdout.decode().splitlines()
        self.assertEqual(len(lines), 3, p.stdout)
        for n, line in enumerate(lines):
            fields = line.split()
            self.assertEqual(fields[0], self.versions[2 - n][0], line)
            self.assertEqual(fields[-1], "notes.txt@{%d}" % n, line)
        times = [line.split()[2] for line in lines]
        self.assertEqual(times, sorted(times, reverse=True))
        p = self.d.cli("log", "-n", "2", "notes.txt")
        self.assertEqual(len(p.stdout.splitlines()), 2)
        p = self.d.cli("--json", "log", "notes.txt")
        got = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([v["version"] for v in got], [0, 1, 2])
        self.assertEqual([v["hash"] for v in got], [h for h, _ in reversed(self.versions)])
        self.assertTrue(all(isinstance(v["named"], int) and v["size"] > 0 for v in got), got)
        self.d.stop()

    def test_version_refs(self):
        for n in range(3):
            h, content = self.versions[2 - n]
            p = self.d.cli("get", "notes.txt@{%d}" % n)
            self.assertEqual(p.stdout, content)
            p = self.d.cli("--json", "stat", "notes.txt@{%d}" % n)
            self.assertEqual(json.loads(p.stdout)["hash"], h)
        p = self.d.cli("get", "notes.txt@{3}", check_exit=1)
        self.assertIn(b"not found", p.stderr)
        for bad in ("notes.txt@{}", "notes.txt@{x}", "notes.txt@{1", "@{1}", "notes.txt@{1234567}"):
            with self.subTest(ref=bad):
                p = self.d.cli("get", bad, check_exit=1)
                self.assertIn(b"not found", p.stderr)
        # an older version is shown by the ref that reaches it, not by a name that reads another
        p = self.d.cli("--json", "stat", "notes.txt@{1}")
        st = json.loads(p.stdout)
        self.assertEqual((st["name"], st["names"]), ("notes.txt@{1}", ["notes.txt@{1}"]), st)
        p = self.d.cli("--json", "stat", self.versions[0][0])
        self.assertEqual(json.loads(p.stdout)["name"], "notes.txt@{2}")
        self.d.cli("add", "-n", "kept.txt", "-", input=self.versions[0][1])
        st = json.loads(self.d.cli("--json", "stat", self.versions[0][0]).stdout)
        self.assertEqual((st["name"], st["names"]), ("kept.txt", ["notes.txt@{2}", "kept.txt"]), st)
        st = json.loads(self.d.cli("--json", "stat", "notes.txt").stdout)
        self.assertEqual((st["name"], st["names"]), ("notes.txt", ["notes.txt"]), st)
        # a name spelled like a version ref is that name
        self.d.cli("add", "-n", "notes.txt@{1}", "-", input=b"a literal name\n")
        self.assertEqual(self.d.cli("get", "notes.txt@{1}").stdout, b"a literal name\n")
        self.assertEqual(self.d.cli("get", "notes.txt@{2}").stdout, self.versions[0][1])
        self.d.stop()

    def test_log_errors(self):
        p = self.d.cli("log", "nosuch", check_exit=1)
        self.assertIn(b"nosuch: not found", p.stderr)
        self.d.cli("log", check_exit=2)
        self.d.cli("log", "-n", "0", "notes.txt", check_exit=2)
        with self.d.connect() as c:
            for fields in ({}, {"name": ""}, {"name": "notes.txt", "limit": 0},
                           {"name": "notes.txt", "limit": 1001}, {"name": 7},
                           {"name": "notes.txt", "offset": -1}):
                with self.subTest(fields=fields):
                    r = c.call("log", **fields)
                    self.assertEqual(ct.error_code(r), "bad_request", r)
            r = c.call("log", name="notes.txt", offset=1, limit=1)
            self.assertIs(r.get("ok"), True, r)
            self.assertEqual(r["total"], 3)
            self.assertEqual([(v["version"], v["hash"]) for v in r["versions"]],
                             [(1, self.versions[1][0])])
        self.d.assert_healthy()
        self.d.stop()


if __name__ == "__main__":
    ct.main()
