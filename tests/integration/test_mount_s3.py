#!/usr/bin/env python3
"""Databases stored on the s3 backend, queried read-only through `cairn
mount` as if they were local files (issue #11).

An SQLite and a DuckDB database (dbfixture.py: the same two tables in both,
60,000 orders, a few MiB each, so many chunks) are added to a cairnd whose
packs are on the S3 test server (s3fixture.py: s3rver behind the
SigV4-checking proxy), with 20 ms added to every request (profile rtt20).
For each engine, from cold - cairnd restarted with nothing cached, a fresh
mount, so the kernel holds none of the file either - the queries of
dbfixture.queries() (aggregates over a table, a join with GROUP BY, a point
lookup by primary key, a lookup through a secondary index) run through the
mount in a process of their own (SQLite through Python's sqlite3 with
mode=ro, DuckDB through @duckdb/node-api with access_mode READ_ONLY,
tests/duckdb/query.js). Their answers must equal those of the same queries
on the original local file, the proxy must have served GETs for them (the
bytes came from the bucket), the queries run again warm must answer the
same, and the whole file read through the mount must hash like the
original. DuckDB's answers must also equal SQLite's.

Skipped, saying why, without /dev/fuse, fusermount3 or a cairn built with
libfuse3 (as test_mount.py), without node or tests/s3/node_modules (the S3
server: tests/s3/setup.sh), and - the DuckDB case only - without
tests/duckdb/node_modules (tests/duckdb/setup.sh).
"""

import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import dbfixture  # noqa: E402
import s3fixture  # noqa: E402
import test_mount as tm  # noqa: E402
from test_s3_backend import S3Daemon  # noqa: E402

ROWS = 60000
LATENCY = "rtt20"
BUCKET = "cairn-mount-db"
FILES = {"sqlite": "orders.sqlite", "duckdb": "orders.duckdb"}


def make_cold(d, mount):
    """cairnd and its mount as after a fresh start, with nothing of the
    stored documents cached on this machine: unmount (the kernel's page
    cache of the mounted files goes with it), stop cairnd (its memory cache
    goes), remove DATA_DIR/read-cache (cairnd's persistent read cache of
    remote backends, where there is one), start cairnd, mount again."""
    if mount.proc is not None and mount.proc.poll() is None:
        tm.unmount(mount.mountpoint)
        rc = mount.wait()
        if rc != 0:
            raise AssertionError("cairn mount exited with %d at unmount:\n%s"
                                 % (rc, mount.log_text()))
    if d.running():
        d.stop()
    shutil.rmtree(os.path.join(d.data_dir, "read-cache"), ignore_errors=True)
    d.start()
    mount.start()


class MountS3Databases(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = tm.fuse_missing()
        if why:
            raise unittest.SkipTest(why)
        cls.require_backend()
        cls.duckdb_why = dbfixture.duckdb_missing()
        cls.base = ct.make_tempdir(prefix="cairn-mount-s3-")
        cls.addClassCleanup(shutil.rmtree, cls.base, True)
        src = os.path.join(cls.base, "src")
        os.makedirs(src)
        cls.local = {e: os.path.join(src, f) for e, f in FILES.items()}
        dbfixture.make_sqlite(cls.local["sqlite"], ROWS)
        if not cls.duckdb_why:
            dbfixture.make_duckdb(cls.local["duckdb"], ROWS)
        cls.queries = dbfixture.queries(ROWS)
        cls.expected = {e: cls.run_engine(e, cls.local[e]) for e in FILES
                        if os.path.exists(cls.local[e])}

        home = os.path.join(cls.base, "home")
        os.makedirs(home)
        dbase = os.path.join(cls.base, "d")
        os.makedirs(dbase)
        cls.d = cls.start_backend(home, dbase)
        cls.addClassCleanup(cls.d.cleanup)
        cls.d.start()
        for engine, path in cls.local.items():
            if os.path.exists(path):
                cls.d.cli("add", "-n", "db/" + FILES[engine], path, timeout=300 * ct.SLOW)
        cls.mnt = os.path.join(cls.base, "mnt")
        cls.mount = tm.Mount(cls.d, cls.mnt)
        cls.addClassCleanup(cls.mount.cleanup)

    # -- the backend: what test_mount_azure.py replaces

    @classmethod
    def require_backend(cls):
        s3fixture.require_tools()

    @classmethod
    def start_backend(cls, home, dbase):
        """The server, with LATENCY on every request; returns the Daemon (not started) on it."""
        cls.srv = s3fixture.S3Server(os.path.join(cls.base, "s3"), buckets=[BUCKET])
        cls.addClassCleanup(cls.srv.stop)
        cls.srv.start()
        cls.srv.control(latency=LATENCY)
        url = cls.srv.url(BUCKET, "store", stall_timeout=5, timeout=30)
        return S3Daemon(None, home, base=dbase, args=["--backend", url], env=cls.srv.env())

    def reset_gets(self):
        self.srv.control(reset_counters=True)

    def gets(self):
        """GETs the server has served since reset_gets()."""
        return self.srv.counters().get("requests", {}).get("GET", 0)

    @classmethod
    def run_engine(cls, engine, path):
        """The rows of every query, run on `path` in a process of their own."""
        out = dbfixture.run_queries(engine, path, [sql for _, sql in cls.queries],
                                    timeout=300 * ct.SLOW)
        return [r["rows"] for r in out["results"]]

    def check_engine(self, engine):
        local = self.expected[engine]
        # the queries are not vacuous: every one has rows, the point lookup one
        for (name, _), rows in zip(self.queries, local):
            self.assertTrue(rows, "%s: no rows on the local file" % name)
        self.assertEqual(len(local[2]), 1, local[2])
        self.assertEqual(str(local[0][0][0]), str(ROWS))

        make_cold(self.d, self.mount)
        self.reset_gets()
        path = os.path.join(self.mnt, "db", FILES[engine])
        got = self.run_engine(engine, path)
        gets = self.gets()
        for (name, sql), want, have in zip(self.queries, local, got):
            self.assertEqual(have, want, "%s through the mount: %s" % (name, sql))
        self.assertGreater(gets, 0, "cold queries through the mount read nothing from the bucket")
        self.assertEqual(self.run_engine(engine, path), local, "warm, the second time")
        self.assertEqual(ct.sha256_file(path), ct.sha256_file(self.local[engine]))
        self.d.assert_healthy()
        return got

    def test_sqlite_through_the_mount(self):
        self.check_engine("sqlite")

    def test_duckdb_through_the_mount(self):
        if self.duckdb_why:
            self.skipTest(self.duckdb_why)
        got = self.check_engine("duckdb")
        # and DuckDB answers as SQLite does on the same rows
        self.assertEqual([dbfixture.normalized(rows) for rows in got],
                         [dbfixture.normalized(rows) for rows in self.expected["sqlite"]])


if __name__ == "__main__":
    ct.main()
