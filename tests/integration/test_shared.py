#!/usr/bin/env python3
"""Several cairnd on one bucket (README "Several machines, one bucket").

Against the project's S3 test server (tests/s3/server.js: s3rver behind a
proxy that checks signatures and injects faults and latency), started once
per class; every test has its own prefix in the bucket.

  Naming         every daemon's packs carry its writer id: two daemons on one
                 prefix never write the same key
  Visibility     adds, names, deletes and search reach every daemon
  Workload       3 daemons, 4 clients on each adding, getting, naming and
                 deleting at once: every acknowledged add reads back
                 byte-exact on every daemon, every acknowledged delete holds
                 on all, and ls, stat and search agree; the same on a server
                 that ignores If-None-Match
  Dedup          a daemon reuses the chunks another daemon stored
  Gc             gc on one daemon while the others add and read: it marks,
                 the others acknowledge, and the next gc deletes; kill -9 of
                 the gc'ing daemon at each step, and of a writer mid-add;
                 a writer gone past the grace period, and its rebuild; the
                 lease, held by a daemon killed while holding it
  KillMidRefresh kill -9 of a daemon in the middle of a refresh, before and
                 after it applied what it read: every document reads back,
                 and a delete holds, after its restart
  OrphanPack     a pack whose write was reported failed but landed is read
                 at the next start where its entries belong in the journal's
                 order: a newer name and a newer delete hold, and the same
                 after --rebuild-index
"""
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
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


KiB = 1024


class SharedChecks:
    """What a shared store's tests check, whatever the backend: every daemon
    refreshed, documents reading back (or gone) on a daemon, verify, gc."""

    def refresh(self, d):
        p = d.cli("refresh", check_exit=None)
        self.assertEqual(p.returncode, 0, "refresh on %s: %s\n%s" % (
            d.data_dir, p.stderr.decode(errors="replace"), d.log_tail(3000)))
        self.assertEqual(p.stdout, b"")

    def refresh_all(self, ds):
        for d in ds:
            if d.running():
                self.refresh(d)

    def get_all(self, d, docs, when):
        """Every {hash: content} reads back byte-exact from d."""
        bad = []
        with d.connect() as c:
            for h, content in docs.items():
                frames, got = c.get(h)
                if got != content:
                    bad.append((h[:12], ct.short(frames[-1])))
        self.assertEqual(bad, [], "%s: %d of %d documents do not read back on %s\n%s" % (
            when, len(bad), len(docs), d.data_dir, d.log_tail(2000)))

    def gone_all(self, d, hashes, when):
        with d.connect() as c:
            for h in hashes:
                frames, got = c.get(h)
                self.assertEqual(ct.error_code(frames[-1]), "not_found",
                                 "%s: deleted %s on %s: %r" % (when, h[:12], d.data_dir, ct.short(frames[-1])))

    def verify(self, d, when):
        p = d.cli("verify", check_exit=None)
        self.assertEqual(p.returncode, 0, "%s: verify on %s exited %d:\n%s" % (
            when, d.data_dir, p.returncode, p.stdout.decode()[-2000:]))

    def gc(self, d):
        with d.connect(timeout=300) as c:
            r = c.call("gc", timeout=300 * ct.SLOW)
        self.assertIs(r.get("ok"), True, ct.short(r))
        return r

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


class SharedCase(SharedChecks, S3Case):
    # Refresh often. An add must reach the bucket within half the grace
    # period of its daemon's last refresh: a minute is plenty even on a busy
    # machine; tests that outwait the grace period make it short.
    STORE_CONFIG = {"refresh_interval": "300ms", "gc_grace": "60s", "repack_threshold": "60"}

    def shared(self, n, grace=None, intervals=None, **url_params):
        """n daemons with their own data directories on this test's prefix,
        started; intervals: each one's refresh_interval."""
        ds = []
        for i in range(n):
            conf = os.path.join(self.base, "cairn-%s-%d.conf" % (self.prefix.replace("/", "-"), i))
            store = dict(self.STORE_CONFIG, **({"gc_grace": grace} if grace else {}))
            if intervals:
                store["refresh_interval"] = intervals[i]
            with open(conf, "w") as f:
                f.write("[store]\n" + "".join("%s = %s\n" % kv for kv in store.items()))
            ds.append(self.daemon(url=self.url(**url_params), args=["--config", conf]))
        for d in ds:
            d.start()
        return ds


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

    def test_copies_renames_edits_and_file_modes_reach_every_daemon(self):
        """cairn cp, mv, tag, meta and the mode and mtime of add -r, made on one
        daemon, are what the other one shows after a refresh."""
        a, b = self.daemon(), self.daemon()
        a.start()
        b.start()
        tree = os.path.join(self.base, "tree-%s" % self.prefix.replace("/", "-"))
        os.makedirs(tree)
        with open(os.path.join(tree, "run.sh"), "wb") as f:
            f.write(b"#!/bin/sh\n")
        os.chmod(os.path.join(tree, "run.sh"), 0o750)
        os.symlink("run.sh", os.path.join(tree, "link"))
        a.cli("add", "-q", "-r", tree)
        h = self.add_ok(a, b"notes of the day\n", name="notes")
        a.cli("cp", "notes", "notes-copy")
        a.cli("mv", "notes", "renamed")
        a.cli("tag", "renamed", "t1", "t2")
        a.cli("tag", "-d", "renamed", "t1")
        a.cli("meta", "renamed", "owner=ann")
        self.refresh(b)
        names = {j["name"]: j for j in ct.parse_json_lines(b.cli("--json", "ls").stdout)}
        self.assertNotIn("notes", names)
        self.assertEqual(names["renamed"]["hash"], h)
        self.assertEqual(names["notes-copy"]["hash"], h)
        self.assertEqual(names[os.path.join(tree, "run.sh")]["mode"], 0o100750)
        self.assertEqual(names[os.path.join(tree, "link")]["mode"] & 0o170000, 0o120000)
        st = json.loads(b.cli("--json", "stat", "notes-copy").stdout)
        self.assertEqual((st["tags"], st["meta"]), (["t2"], {"owner": "ann"}))
        self.assertEqual(b.cli("ls", "-t", "t1").stdout, b"")

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


class Load:
    """Clients adding, getting, naming and deleting on several daemons at
    once, keeping what was acknowledged: docs {hash: content} added and not
    deleted, deleted {hash}, names {name: hash} last given."""

    def __init__(self, case, daemons, clients=4, seconds=6.0, big=False):
        self.case, self.daemons, self.clients, self.seconds, self.big = case, daemons, clients, seconds, big
        self.lock = threading.Lock()
        self.docs, self.deleted, self.names = {}, set(), {}
        self.errors = []
        self.stop = threading.Event()
        self.shared = os.urandom(256 * KiB)  # every daemon adds documents that share it

    def client(self, di, ci):
        d = self.daemons[di]
        rnd = random.Random(di * 100 + ci)
        mine = []
        try:
            with d.connect(timeout=120) as c:
                i = 0
                while not self.stop.is_set():
                    i += 1
                    op = rnd.random()
                    if op < 0.55 or not mine:
                        size = rnd.choice([300, 5000, 70 * KiB]) if not self.big else 300 * KiB
                        content = (self.shared if rnd.random() < 0.3 else b"") + os.urandom(size)
                        name = "w%d/c%d/%d" % (di, ci, i)
                        r = c.add(content, name=name)
                        if r.get("ok") is not True:
                            self.errors.append(("add", d.data_dir, ct.short(r)))
                            continue
                        with self.lock:
                            self.docs[r["hash"]] = content
                            self.names[name] = r["hash"]
                        mine.append(r["hash"])
                    elif op < 0.8:
                        h = rnd.choice(mine)
                        frames, got = c.get(h)
                        with self.lock:
                            want = self.docs.get(h)
                        if want is not None and got != want:
                            self.errors.append(("get", d.data_dir, h[:12], ct.short(frames[-1])))
                    elif op < 0.9:
                        h = rnd.choice(mine)
                        name = "w%d/c%d/alias-%d" % (di, ci, i)
                        # a second name: the content added again under it (dedup makes it a name)
                        with self.lock:
                            content = self.docs.get(h)
                        if content is None:
                            continue
                        r = c.add(content, name=name)
                        if r.get("ok") is not True or r["hash"] != h:
                            self.errors.append(("name", d.data_dir, ct.short(r)))
                            continue
                        with self.lock:
                            self.names[name] = h
                    else:
                        h = mine.pop(rnd.randrange(len(mine)))
                        r = c.call("delete", ref=h)
                        if r.get("ok") is not True:
                            self.errors.append(("delete", d.data_dir, ct.short(r)))
                            continue
                        with self.lock:
                            self.docs.pop(h, None)
                            self.deleted.add(h)
                            for n in [n for n, v in self.names.items() if v == h]:
                                del self.names[n]
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(("client", d.data_dir, repr(e)))

    def run(self):
        threads = [threading.Thread(target=self.client, args=(di, ci), daemon=True)
                   for di in range(len(self.daemons)) for ci in range(self.clients)]
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        self.stop.set()
        for t in threads:
            t.join(300)
        self.case.assertEqual(self.errors[:5], [], "%d operations failed\n%s" % (
            len(self.errors), "\n".join(d.log_tail(1500) for d in self.daemons)))
        # What one client deleted, no client added again meanwhile.
        self.deleted -= set(self.docs)


class Workload(SharedCase):
    def workload(self):
        ds = self.shared(3)
        load = Load(self, ds)
        load.run()
        self.assertGreater(len(load.docs), 50)
        self.refresh_all(ds)
        for d in ds:
            self.get_all(d, load.docs, "after the load")
            self.gone_all(d, load.deleted, "after the load")
            with d.connect() as c:
                for name, h in sorted(load.names.items())[:40]:
                    r = c.call("stat", ref=name)
                    self.assertEqual(r.get("hash"), h, "%s on %s: %r" % (name, d.data_dir, ct.short(r)))
        listings = [d.cli("ls").stdout for d in ds]
        self.assertEqual(listings[0], listings[1])
        self.assertEqual(listings[1], listings[2])
        stats = [d.status() for d in ds]
        self.assertEqual(len({s["documents"] for s in stats}), 1, [s["documents"] for s in stats])
        for d in ds:
            self.verify(d, "after the load")
        return ds

    def test_three_daemons_four_clients_each(self):
        self.workload()

    def test_a_server_that_ignores_if_none_match(self):
        self.srv.control(conditional_writes=False)
        try:
            self.workload()
        finally:
            self.srv.control(conditional_writes=True)


class Dedup(SharedCase):
    def test_a_daemon_reuses_chunks_another_stored(self):
        a, b = self.shared(2)
        big = os.urandom(4 * ct.MiB)
        self.add_ok(a, big, name="a/big")
        self.refresh(b)
        before = {w: list(v) for w, v in pack_writers(self.keys()).items()}
        bw = pf.own_writer(b.data_dir)
        h = self.add_ok(b, big + b"a few bytes more", name="b/big")
        sizes = [len(open(self.srv.object_path(self.bucket, k), "rb").read())
                 for k in self.keys() if "/packs/" in "/" + k
                 and pf.parse_pack_name(k.rsplit("/", 1)[-1])
                 and pf.parse_pack_name(k.rsplit("/", 1)[-1])[0] == bw]
        self.assertLess(sum(sizes), 512 * KiB,
                        "b wrote %d bytes for 4 MiB a had stored (%r)" % (sum(sizes), before))
        self.assertEqual(b.cli("get", h).stdout, big + b"a few bytes more")
        self.refresh(a)
        self.assertEqual(a.cli("get", "b/big").stdout, big + b"a few bytes more")


class Gc(SharedCase):
    def populate(self, ds):
        """Documents on each daemon, some shared by dedup; some deleted on
        another daemon than the one that added them. Returns (keep, doomed)."""
        keep, doomed = {}, set()
        for i, d in enumerate(ds):
            # The doomed documents' packs hold chunks the kept ones reuse:
            # gc rewrites those packs (copies the live chunks) rather than
            # only deleting them.
            # (600 KiB shared: chunk boundaries fall alike in it after its
            # first few KiB, so several chunks surely match; the doomed
            # packs stay less than repack_threshold alive)
            shared = [os.urandom(600 * KiB) for _ in range(3)]
            for k in range(3):
                doomed.add(self.add_ok(d, os.urandom(1500 * KiB) + shared[k], name="doomed/%d/%d" % (i, k)))
            for k in range(4):
                content = shared[k % 3] + os.urandom(200 * KiB)
                keep[self.add_ok(d, content, name="keep/%d/%d" % (i, k))] = content
        self.refresh_all(ds)
        for i, h in enumerate(sorted(doomed)):
            r = ds[(i + 1) % len(ds)].cli("rm", h, check_exit=None)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.refresh_all(ds)
        return keep, doomed

    def own_packs(self, d):
        return set(pack_writers(self.keys()).get(pf.own_writer(d.data_dir), []))

    def check_everywhere(self, ds, keep, doomed, when):
        self.refresh_all(ds)
        for d in ds:
            self.get_all(d, keep, when)
            self.gone_all(d, doomed, when)
            self.verify(d, when)

    def test_gc_marks_the_others_let_go_then_it_deletes(self):
        # b and c read the bucket only when asked (and every quarter of the
        # grace period, 15 s): a's gc waits for them
        a, b, c = ds = self.shared(3, intervals=["300ms", "0", "0"])
        keep, doomed = self.populate(ds)
        packs_before = self.own_packs(a)
        load = Load(self, [b, c], clients=2, seconds=4)
        t = threading.Thread(target=load.run, daemon=True)
        t.start()
        r1 = self.gc(a)
        # b and c have yet to let go: a deletes nothing yet.
        self.assertGreater(r1["packs_pending"], 0, r1)
        self.assertGreater(r1["bytes_pending"], 0, r1)
        self.assertEqual(r1["bytes_reclaimed"], 0, r1)
        self.assertEqual(packs_before - self.own_packs(a), set(), "a deleted packs before the others let go")
        t.join(120)
        self.assertEqual(load.errors, [])
        keep.update(load.docs)
        doomed |= load.deleted
        # b and c learn of the mark, and once their running operations have
        # ended, acknowledge it
        self.refresh_all(ds)
        self.refresh_all(ds)
        # (a run marks the packs with nothing alive and the others apart)
        acks = {}
        for k in self.keys():
            if ".ack-" in k:
                acks.setdefault(k.split(".ack-")[0], set()).add(k.split(".ack-")[1])
        self.assertTrue(acks, self.keys())
        for mark, ackers in acks.items():
            self.assertEqual(len(ackers), 2, "%s: %r" % (mark, acks))
        r2 = self.gc(a)
        self.assertGreater(r2["bytes_reclaimed"], 0, r2)
        self.assertGreater(len(packs_before - self.own_packs(a)), 0, "no pack of a was deleted")
        self.check_everywhere(ds, keep, doomed, "after gc")
        # The marked packs' documents still read after every daemon restarts.
        for d in ds:
            d.restart()
        self.check_everywhere(ds, keep, doomed, "after gc and restarts")
        for d in ds:
            d.stop()

    def test_kill9_of_the_gc_at_each_step_and_of_a_writer_mid_add(self):
        for point in ("gc-leased", "repack-copied", "repack-committed", "gc-marked", "repack-deleted"):
            with self.subTest(point=point):
                self.prefix = "t-kill9-%s/store" % point
                self.kill9_at(point)

    def kill9_at(self, point):
        a, b, c = ds = self.shared(3, intervals=["300ms", "0", "0"])
        keep, doomed = self.populate(ds)
        if point == "repack-deleted":
            # the mark first, acknowledged; the crash comes when the next gc deletes
            self.assertGreater(self.gc(a)["packs_pending"], 0)
            self.refresh_all(ds)
            self.refresh_all(ds)
        a.stop()
        a.extra_env["CAIRN_CRASH_AT"] = point
        a.start()
        # b adds while a's gc runs and dies; c is killed in the middle of an add
        load = Load(self, [b], clients=2, seconds=3)
        t = threading.Thread(target=load.run, daemon=True)
        t.start()
        cut = threading.Thread(target=lambda: self.add_interrupted(c), daemon=True)
        cut.start()
        with a.connect(timeout=120) as conn:
            try:
                conn.call("gc", timeout=120 * ct.SLOW)
            except (ct.ConnectionClosed, OSError):
                pass
        rc = a.wait(30)
        self.assertEqual(rc, -9, "cairnd did not die at %s\n%s" % (point, a.log_tail()))
        ct._LIVE.discard(a.proc)
        t.join(120)
        cut.join(120)
        self.assertEqual(load.errors, [])
        keep.update(load.docs)
        doomed |= load.deleted
        del a.extra_env["CAIRN_CRASH_AT"]
        a.start()
        c.start()
        self.check_everywhere(ds, keep, doomed, "after kill -9 at %s" % point)
        # gc runs on: it finishes what the crash cut, and reclaims.
        self.gc(a)
        self.refresh_all(ds)
        self.gc(a)
        self.check_everywhere(ds, keep, doomed, "after gc following kill -9 at %s" % point)
        for d in ds:
            d.stop()

    def add_interrupted(self, d):
        """kill -9 of d in the middle of a large add."""
        proc = d.proc
        with d.connect(timeout=60) as conn:
            rid = conn.next_id()
            conn.send({"id": rid, "op": "add", "name": "cut", "data": os.urandom(200 * KiB),
                       "more": True})
            for _ in range(20):
                conn.send({"id": rid, "op": "data", "data": os.urandom(200 * KiB), "more": True})
            time.sleep(0.3)
            proc.kill()
        proc.wait(30)
        ct._LIVE.discard(proc)

    def test_a_writer_away_past_the_grace_period(self):
        a, b, c = ds = self.shared(3, grace="6s")
        keep, doomed = self.populate(ds)
        c.kill9()
        r1 = self.gc(a)
        self.assertGreater(r1["packs_pending"], 0, r1)
        self.refresh(b)
        # c does not answer: within the grace period nothing goes
        r2 = self.gc(a)
        self.assertEqual(r2["bytes_reclaimed"], 0, r2)
        time.sleep(7)
        r3 = self.gc(a)
        self.assertGreater(r3["bytes_reclaimed"], 0, r3)
        self.assertIn("did not acknowledge", a.log_text())
        # c comes back: its database may lack what that gc removed; it says so, and is made anew
        c.start(wait=False)
        rc = c.wait(60)
        self.assertEqual(rc, 1, c.log_tail())
        self.assertIn("another daemon's gc removed", c.log_text())
        c.start()
        self.assertIn("made anew from the bucket", c.log_text())
        self.check_everywhere(ds, keep, doomed, "after c came back")
        for d in ds:
            d.stop()

    def test_the_lease_of_a_daemon_killed_while_holding_it(self):
        a, b = ds = self.shared(2, grace="6s")
        keep, doomed = self.populate(ds)
        a.stop()
        a.extra_env["CAIRN_CRASH_AT"] = "gc-leased"
        a.start()
        with a.connect(timeout=60) as conn:
            try:
                conn.call("gc", timeout=60)
            except (ct.ConnectionClosed, OSError):
                pass
        self.assertEqual(a.wait(30), -9)
        ct._LIVE.discard(a.proc)
        self.assertTrue([k for k in self.keys() if "/locks/gc-" in "/" + k], self.keys())
        with b.connect() as conn:
            r = conn.call("gc", timeout=60)
        self.assertEqual(ct.error_code(r), "busy", ct.short(r))
        self.assertIn("%016x" % pf.own_writer(a.data_dir), r["error"].get("message", ""))
        # the lease lapses by the server's clock (its time to live, here the
        # grace period, and 2 s for the whole seconds LastModified carries and
        # the clocks' steps); then b's gc runs
        time.sleep(9)
        self.gc(b)
        del a.extra_env["CAIRN_CRASH_AT"]
        a.start()
        self.check_everywhere(ds, keep, doomed, "after the lease lapsed")
        for d in ds:
            d.stop()


class KillMidRefresh(SharedCase):
    def test_kill9_in_the_middle_of_a_refresh(self):
        for point in ("refresh-read", "refresh-applied"):
            with self.subTest(point=point):
                self.prefix = "t-kill9-%s/store" % point
                a, b = ds = self.shared(2, intervals=["0", "0"])
                docs = {}
                for i, d in enumerate(ds):
                    for k in range(4):
                        content = os.urandom(3000 + 70 * KiB * (k % 2))
                        docs[self.add_ok(d, content, name="d%d/%d" % (i, k))] = content
                gone = self.add_ok(a, os.urandom(4000), name="gone")
                self.refresh(b)
                self.assertEqual(a.cli("rm", "gone").returncode, 0)
                b.stop()
                b.extra_env["CAIRN_CRASH_AT"] = point
                b.start()
                p = b.cli("refresh", check_exit=None)
                self.assertNotEqual(p.returncode, 0, "the refresh did not reach %s" % point)
                self.assertEqual(b.wait(30), -9, "cairnd did not die at %s\n%s" % (point, b.log_tail()))
                ct._LIVE.discard(b.proc)
                del b.extra_env["CAIRN_CRASH_AT"]
                b.start()
                self.refresh_all(ds)
                for d in ds:
                    self.get_all(d, docs, "after kill -9 at %s" % point)
                    self.gone_all(d, [gone], "after kill -9 at %s" % point)
                    self.verify(d, "after kill -9 at %s" % point)
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


class FailedCommit(SharedCase):
    def test_an_entry_another_daemon_applied_is_undone_by_its_void(self):
        """A's database fails an add after its pack is in the bucket
        (CAIRN_TEST_FAIL_APPLY); B refreshes before A's void entry lands (the
        void's pack is held back with SlowDowns), so B applies the add, and
        undoes it when the void arrives: the client was told it failed."""
        a, b = self.shared(2, intervals=["1h", "1h"])
        a.stop()
        a.extra_env["CAIRN_TEST_FAIL_APPLY"] = "doomed"
        a.start()
        old = os.urandom(3000)
        h_old = self.add_ok(a, old, name="doomed2")
        self.refresh(b)
        writer = pf.own_writer(a.data_dir)
        top = max(pack_writers(self.keys()).get(writer, [0]))
        # in a shared bucket each batch is a pack: the add's is top+1, its void's top+2
        void_key = pf.pack_name(writer, top + 2)
        self.srv.control(fault_rate=1, faults=["503"], retry_after=2, fault_methods=["PUT"],
                         fault_path=void_key, fault_limit=3)
        content = os.urandom(4000) + b"doomed"
        result = {}

        def add():
            with a.connect(timeout=120) as c:
                result["r"] = c.add(content, name="doomed")

        t = threading.Thread(target=add, daemon=True)
        try:
            t.start()
            deadline = time.monotonic() + 30 * ct.SLOW
            while top + 1 not in pack_writers(self.keys()).get(writer, []):
                self.assertLess(time.monotonic(), deadline, "the add's pack never reached the bucket")
                time.sleep(0.05)
            self.refresh(b)
            self.assertTrue(t.is_alive(), "test setup: the void landed before B's refresh")
            self.assertEqual(b.cli("get", "doomed").stdout, content, "test setup: B did not apply the add")
            t.join(120 * ct.SLOW)
        finally:
            self.srv.control(clear_faults=True)
        self.assertFalse(t.is_alive())
        self.assertIsNot(result["r"].get("ok"), True, "the add whose commit failed was reported done")
        self.refresh(b)
        for d in (a, b):
            p = d.cli("stat", ct.sha256_hex(content), check_exit=None)
            self.assertEqual(p.returncode, 1, "the failed add is on %s: %r" % (d.data_dir, p.stdout))
            self.assertEqual(d.cli("get", "doomed2").stdout, old)
            self.assertEqual(d.cli("get", h_old).stdout, old)
        a.stop()
        b.stop()
        self.rebuild(b)
        b.start()
        self.assertEqual(b.cli("stat", ct.sha256_hex(content), check_exit=None).returncode, 1,
                         "the failed add is back after --rebuild-index")
        b.stop()


if __name__ == "__main__":
    ct.main()
