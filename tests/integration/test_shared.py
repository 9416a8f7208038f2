#!/usr/bin/env python3
"""Several cairnd on one bucket (README "Several machines, one bucket").

Against the project's S3 test server (tests/s3/server.js: s3rver behind a
proxy that checks signatures and injects faults and latency), started once
per class; every test has its own prefix in the bucket.

  Naming         every daemon's packs carry its writer id: two daemons on one
                 prefix never write the same key
  OrphanPack     a pack whose write was reported failed but landed is read
                 at the next start where its entries belong in the journal's
                 order: a newer name and a newer delete hold, and the same
                 after --rebuild-index
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import packfmt as pf  # noqa: E402
from test_s3_backend import S3Case  # noqa: E402


def pack_writers(keys):
    """{writer id: [seq]} of the packs among `keys`."""
    out = {}
    for k in keys:
        name = k.rsplit("/", 1)[-1]
        parsed = pf.parse_pack_name(name) if "/packs/" in "/" + k else None
        if parsed is not None:
            out.setdefault(parsed[0], []).append(parsed[1])
    return out


class SharedCase(S3Case):
    def rebuild(self, d, timeout=300 * ct.SLOW):
        """cairnd --rebuild-index on d's data dir and backend; its output."""
        p = subprocess.run(d.command() + ["--rebuild-index"], env=d.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        out = p.stdout.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, "--rebuild-index failed:\n%s" % out[-3000:])
        return out

    def add_ok(self, d, content, **fields):
        with d.connect() as c:
            r = c.add(content, **fields)
        self.assertIs(r.get("ok"), True, ct.short(r))
        return r["hash"]


class Naming(SharedCase):
    def test_two_daemons_never_write_one_key(self):
        a, b = self.daemon(), self.daemon()
        a.start()
        b.start()
        for i in range(5):
            self.add_ok(a, os.urandom(3000), name="a-%d" % i)
            self.add_ok(b, os.urandom(3000), name="b-%d" % i)
        writers = pack_writers(self.keys())
        ids = {pf.own_writer(a.data_dir), pf.own_writer(b.data_dir)}
        self.assertEqual(len(ids), 2, "two data directories drew one writer id")
        self.assertEqual(set(writers), ids, "packs of writers other than the two: %r" % writers)
        for w, seqs in writers.items():
            self.assertEqual(len(seqs), len(set(seqs)))
        a.stop()
        b.stop()


class Visibility(SharedCase):
    def refresh(self, d):
        """`cairn refresh`: returns once d has read what the others wrote."""
        p = d.cli("refresh")
        self.assertEqual(p.stdout, b"")

    def test_adds_names_and_deletes_reach_every_daemon(self):
        ds = [self.daemon() for _ in range(3)]
        for d in ds:
            d.start()
        docs = {}
        for i, d in enumerate(ds):
            for k in range(3):
                content = os.urandom(2000 + k)
                docs["d%d/%d" % (i, k)] = (self.add_ok(d, content, name="d%d/%d" % (i, k)), content)
        for d in ds:
            self.refresh(d)
        for d in ds:
            for name, (h, content) in docs.items():
                self.assertEqual(d.cli("get", name).stdout, content, "%s on %s" % (name, d.data_dir))
                self.assertEqual(d.cli("get", h).stdout, content)
        # A delete on one daemon holds on every daemon; a name given on one
        # points at its newest content on all.
        self.assertEqual(ds[1].cli("rm", "d0/0").returncode, 0)
        newer = os.urandom(3000)
        self.add_ok(ds[2], newer, name="d1/1")
        for d in ds:
            self.refresh(d)
        for d in ds:
            self.assertEqual(d.cli("stat", docs["d0/0"][0], check_exit=None).returncode, 1,
                             "the deleted document is still on %s" % d.data_dir)
            self.assertEqual(d.cli("get", "d1/1").stdout, newer)
        # Text one daemon added is found by every daemon's search.
        self.add_ok(ds[0], b"a zanzibarian quokka wrote this\n", name="note.txt", mime="text/plain")
        for d in ds:
            self.refresh(d)
        for d in ds:
            out = d.cli("search", "quokka").stdout.decode()
            self.assertIn("note.txt", out, "search on %s: %r" % (d.data_dir, out))
        listings = [d.cli("ls").stdout for d in ds]
        self.assertEqual(listings[0], listings[1])
        self.assertEqual(listings[1], listings[2])
        for d in ds:
            st = d.status()
            self.assertEqual(len(st["writers"]), 2, st)
            self.assertEqual(int(st["writer"], 16), pf.own_writer(d.data_dir))
            lines = d.cli("status").stdout.decode().splitlines()
            self.assertIn("writer: %s" % st["writer"], lines)
            others = [ln for ln in lines if ln.startswith("other writer: ")]
            self.assertEqual(sorted(ln.split()[2].rstrip(",") for ln in others),
                             sorted(w["id"] for w in st["writers"]), lines)
        for d in ds:
            d.stop()


class OrphanPack(SharedCase):
    def test_orphan_entries_take_their_place_in_the_journal(self):
        # Puts time out quickly: an orphan is a put the daemon gave up on.
        d = self.daemon(url=self.url(timeout=4, stall_timeout=1, connect_timeout=2))
        d.start()
        x = os.urandom(5000)
        old, new = os.urandom(4000), os.urandom(4000)
        # Every put of a pack lands on the server, and no answer about a pack
        # comes (so the daemon cannot find out that its put landed either).
        self.srv.control(fault_rate=1.0, faults=["lost"], fault_path="/packs/", stall_max_s=20)
        with d.connect(timeout=120) as c:
            r1 = c.add(old, name="n")
            r2 = c.add(x, name="m")
        self.assertIsNot(r1.get("ok"), True, "an add answered ok while no put was answered")
        self.assertIsNot(r2.get("ok"), True, "an add answered ok while no put was answered")
        self.srv.control(clear_faults=True)
        orphans = sum(len(v) for v in pack_writers(self.keys()).values())
        self.assertGreater(orphans, 0, "no orphan pack in the bucket: %r" % self.keys())
        # Newer events of the same name and the same document.
        h_new = self.add_ok(d, new, name="n")
        h_x = self.add_ok(d, x, name="m")
        self.assertEqual(d.cli("rm", "m").returncode, 0)

        def check(when):
            self.assertEqual(d.cli("get", "n").stdout, new, "name n points at older content %s" % when)
            self.assertEqual(d.cli("stat", h_x, check_exit=None).returncode, 1,
                             "the deleted document is back %s" % when)
            self.assertEqual(d.cli("stat", h_new).returncode, 0)

        d.stop()
        d.start()
        check("after a restart")
        d.stop()
        self.rebuild(d)
        d.start()
        check("after --rebuild-index")
        d.stop()


if __name__ == "__main__":
    ct.main()
