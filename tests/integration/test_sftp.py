#!/usr/bin/env python3
"""The SFTP backend against a real OpenSSH server on 127.0.0.1 (a private
sshd per test, sshfixture.py; skipped when openssh-server is missing):

  HostKeys        an unknown or changed host key stops cairnd at start with
                  a clear error; accept_new_host=1 records an unknown key in
                  known_hosts, and still refuses a changed one
  Authentication  a key the server does not authorize stops cairnd at start
  SshdKilled      kill -9 of sshd (and of its per-connection processes) in
                  the middle of a 100 MiB add: the add fails cleanly or
                  completes once sshd is back; no complete-looking pack is
                  partial, acknowledged documents are intact, verify passes,
                  leftover temporaries go at the next start
  Concurrency     8 clients adding and reading 8 KiB documents at once
  ServerGone      sshd stopped past the retry deadline: an add fails with
                  backend_unavailable in bounded time, and the next add after
                  sshd is back succeeds
  Kill9Cairnd     kill -9 of cairnd during concurrent adds (the durability
                  test's loop): every acknowledged add is intact after restart
  SharedDirectory two daemons on one remote directory, 3 clients on each
                  adding, getting, naming and deleting: every acknowledged
                  add reads back on both, every delete holds on both, their
                  listings agree; a gc on one marks, the other lets go, the
                  next gc deletes (create-only renames keep their packs
                  apart: the server is OpenSSH, SFTP version 3)
  LocalDataDir    with the sftp backend the data dir holds the database and
                  the read cache only; the packs are on the server, and gc
                  deletes them there; after a restart a document read before
                  comes from the read cache, nothing fetched

The remote store of each test is a directory of the test's temp dir, reached
through sshd as the current user, so the tests read the pack files the
server wrote directly (packfmt.py): PATH/packs/<writer>-<seq> are sealed
packs, PATH/packs/.tmp-* files being written.
"""

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import packfmt as pf  # noqa: E402
import sshfixture  # noqa: E402
import test_durability as td  # noqa: E402
from test_shared import Load, SharedChecks  # noqa: E402

MiB = ct.MiB
# the backend gives up on an unreachable server after about 10-20 s
UNAVAILABLE_BOUND = 60 * ct.SLOW

TMP_PREFIX = ".tmp-"


def is_pack_name(name):
    return pf.parse_pack_name(name) is not None


class SftpCase(ct.StoreChecks, unittest.TestCase):
    """A private sshd (self.srv, started) and a remote store path
    (self.remote, not created: the backend makes it)."""

    def setUp(self):
        sshfixture.require_tools()
        self.base = ct.make_tempdir(self, prefix="cairn-sftp-")
        self.srv = sshfixture.SshServer(os.path.join(self.base, "ssh"))
        self.addCleanup(self.srv.stop)  # after the daemons' cleanups (LIFO)
        self.srv.start()
        self.remote = os.path.join(self.base, "remote", "store")
        self.ndaemons = 0

    def daemon(self, remote=None, args=(), **params):
        """A Daemon (not started) on the sftp backend with URL parameters
        `params` (key= and known_hosts= default to the fixture's)."""
        self.ndaemons += 1
        dbase = os.path.join(self.base, "d%d" % self.ndaemons)
        os.makedirs(dbase)
        url = self.srv.url(remote or self.remote, **params)
        return ct.Daemon(self, base=dbase, args=["--backend", url] + list(args))

    # -- the remote store

    def packs_dir(self, remote=None):
        return os.path.join(remote or self.remote, "packs")

    def remote_files(self, remote=None):
        """{name: size} of the files in the remote packs directory."""
        d = self.packs_dir(remote)
        out = {}
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            return out
        for n in names:
            try:
                out[n] = os.path.getsize(os.path.join(d, n))
            except FileNotFoundError:
                pass  # renamed or deleted meanwhile
        return out

    def assert_remote_packs_complete(self, remote=None):
        """Every file of the remote packs dir is a temporary (.tmp-*) or a
        complete sealed pack whose name is its sequence number. Returns
        (packs, temporaries)."""
        files = self.remote_files(remote)
        packs, tmps = [], []
        for name in sorted(files):
            if name.startswith(TMP_PREFIX):
                tmps.append(name)
                continue
            path = os.path.join(self.packs_dir(remote), name)
            self.assertTrue(is_pack_name(name), "unexpected file %s in the remote packs dir" % path)
            try:
                pack = pf.read_pack(path)
            except FileNotFoundError:
                continue  # deleted since the listing (gc deletes packs after its reply)
            except pf.PackFormatError as e:
                self.fail("remote pack %s (%d bytes) does not parse: %s" % (name, files[name], e))
            self.assertTrue(pack.sealed, "remote pack %s (%d bytes) is not a complete sealed pack: %r, "
                            "tail: %s" % (name, files[name], pack, pack.tail))
            self.assertEqual(pack.hseq, pf.parse_pack_name(name)[1],
                             "pack %s holds sequence number %d" % (name, pack.hseq))
            self.assertTrue(pack.records, "sealed pack %s without records" % name)
            self.assertEqual([e.key() for e in pack.index], [e.key() for e in pack.expected_index()],
                             "pack %s: its index does not match its records" % name)
            packs.append(pack)
        return packs, tmps

    # -- daemons



# --------------------------------------------------------------------------
# host keys and authentication
# --------------------------------------------------------------------------


class HostKeys(SftpCase):
    def empty_known_hosts(self):
        path = os.path.join(self.base, "known_hosts.empty")
        open(path, "w").close()
        return path

    def test_unknown_host_refused(self):
        kh = self.empty_known_hosts()
        d = self.daemon(known_hosts=kh)
        self.assert_start_refused(d, "host key")
        with open(kh) as f:
            self.assertEqual(f.read(), "", "an unknown host key was recorded without accept_new_host")
        self.assertFalse(os.path.exists(self.packs_dir()), "packs dir made on a refused server")

    def test_changed_host_key_refused(self):
        d = self.daemon()
        d.start()
        docs = self.add_docs(d, 3)
        d.stop()
        with open(self.srv.known_hosts) as f:
            recorded = f.read()
        self.srv.regenerate_host_key()  # same port, new key; known_hosts keeps the old one
        self.assertNotEqual(self.srv.host_key_line(), recorded)
        out = self.assert_start_refused(d, "host key")
        self.assertTrue("match" in out.lower() or "changed" in out.lower(),
                        "the refusal does not say the key changed (vs. unknown):\n%s" % out)
        # accept_new_host does not cover a changed key
        d2 = self.daemon(accept_new_host=1)
        d2.data_dir = d.data_dir
        self.assert_start_refused(d2, "host key")
        with open(self.srv.known_hosts) as f:
            self.assertEqual(f.read(), recorded, "known_hosts was changed for a changed host key")
        # with the new key in known_hosts the same store opens, documents intact
        self.srv.write_known_hosts()
        d.start()
        self.assert_docs(d, docs)
        d.stop()

    def test_accept_new_host_records_key_then_refuses_a_changed_one(self):
        kh = self.empty_known_hosts()
        with open(self.srv.host_key + ".pub") as f:
            blob = f.read().split()[1]
        d = self.daemon(known_hosts=kh, accept_new_host=1)
        d.start()
        with open(kh) as f:
            text = f.read()
        self.assertIn(blob, text, "accept_new_host=1 did not record the host key in known_hosts")
        docs = self.add_docs(d, 2)
        d.stop()
        # what was recorded is read back: the same host is known without accept_new_host
        d2 = self.daemon(known_hosts=kh)
        d2.data_dir = d.data_dir
        d2.start()
        self.assert_docs(d2, docs)
        d2.stop()
        # a changed key is refused even with accept_new_host, and not recorded
        self.srv.regenerate_host_key()
        with open(self.srv.host_key + ".pub") as f:
            new_blob = f.read().split()[1]
        self.assert_start_refused(d, "host key")
        with open(kh) as f:
            after = f.read()
        self.assertNotIn(new_blob, after, "a changed host key was recorded in known_hosts")
        self.assertIn(blob, after, "the recorded host key was dropped from known_hosts")


class Authentication(SftpCase):
    def test_wrong_user_key_refused(self):
        other = self.srv.new_user_key("not_authorized_ed25519")
        d = self.daemon(key=other)
        self.assert_start_refused(d, "authentication")
        self.assertIn("Failed publickey", self.srv.log_text(),
                      "sshd saw no failed public key login (did cairnd reach it at all?)")
        self.assertFalse(os.path.exists(self.packs_dir()))
        # the right key with the same everything else works
        d2 = self.daemon()
        d2.data_dir = d.data_dir
        d2.start()
        self.add_docs(d2, 1)
        d2.stop()


# --------------------------------------------------------------------------
# sshd dying under the daemon
# --------------------------------------------------------------------------


class SshdKilled(SftpCase):
    SIZE = 100 * MiB
    PAUSE_AT = 56 * MiB  # the feed waits here until sshd has been killed
    DOWN = 2.0  # seconds sshd stays dead: within the retry deadline

    def test_sshd_killed_mid_100mib_add(self):
        d = self.daemon()
        d.start()
        small = self.add_docs(d, 10, prefix="before")
        path = os.path.join(self.base, "big.bin")
        digest = ct.write_random_file(path, self.SIZE)

        before = sum(self.remote_files().values())
        cmd = [ct.CAIRN, "--socket", d.socket_path, "--no-autostart", "add", "-n", "big", "-"]
        out_path = os.path.join(self.base, "add.out")
        err_path = os.path.join(self.base, "add.err")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            cli = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err)
        self.addCleanup(lambda: cli.poll() is None and (cli.kill(), cli.wait()))
        fed = [0]
        paused = threading.Event()
        resume = threading.Event()
        feed_error = []

        def feed():
            try:
                with open(path, "rb") as f:
                    while True:
                        piece = f.read(MiB)
                        if not piece:
                            break
                        cli.stdin.write(piece)
                        cli.stdin.flush()
                        fed[0] += len(piece)
                        if fed[0] >= self.PAUSE_AT and not resume.is_set():
                            paused.set()
                            resume.wait(120)
            except BrokenPipeError:
                pass  # the add failed and the CLI stopped reading
            except Exception as e:
                feed_error.append(repr(e))
            finally:
                paused.set()
                try:
                    cli.stdin.close()
                except OSError:
                    pass

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        # kill once packs of this add are going to the server (or at the pause)
        deadline = time.monotonic() + 120 * ct.SLOW
        while not paused.is_set() and sum(self.remote_files().values()) - before < 8 * MiB:
            self.assertIsNone(cli.poll(), "the add ended before sshd was killed: %r"
                              % open(err_path, "rb").read())
            self.assertLess(time.monotonic(), deadline, "the add does not progress\n%s" % d.log_tail())
            time.sleep(0.01)
        sessions = self.srv.session_pids()
        self.assertTrue(sessions, "cairnd holds no SSH connection at the kill")
        at_kill = self.remote_files()
        self.srv.kill9()
        killed_at = fed[0]
        sys.stderr.write("# killing sshd with %d MiB fed; remote packs dir: %r\n"
                         % (killed_at // MiB, sorted(at_kill.items())))
        self.assertLess(killed_at, self.SIZE, "sshd killed after the whole document was sent")
        self.assertEqual([p for p in sessions if not sshfixture._gone(p)], [],
                         "per-connection sshd processes survived the kill")
        resume.set()
        time.sleep(self.DOWN)
        # what the server holds while down: no partial file under a pack's name
        self.assert_remote_packs_complete()
        self.srv.start()
        try:
            rc = cli.wait(300 * ct.SLOW)
        except subprocess.TimeoutExpired:
            self.fail("the add hangs after sshd came back\n%s" % d.log_tail())
        feeder.join(60)
        self.assertFalse(feed_error, feed_error)
        with open(out_path, "rb") as f:
            stdout = f.read()
        with open(err_path, "rb") as f:
            stderr = f.read()
        sys.stderr.write("# sshd killed after %d MiB fed; add exit %d %r\n"
                         % (killed_at // MiB, rc, stderr[-300:]))
        if rc == 0:
            self.assertEqual(ct.parse_add(stdout), [(digest, "big")])
        else:
            self.assertEqual(rc, 1, "add exit %d, expected 0 or 1: %r\n%s" % (rc, stderr, d.log_tail()))
            self.assertTrue(stderr.startswith(b"cairn: ") or b"\ncairn: " in stderr,
                            "a failed add without an error message: %r" % stderr)
        self.assertTrue(d.running(), "cairnd died\n%s" % d.log_tail())

        self.assert_remote_packs_complete()
        self.assert_docs(d, small)
        if rc == 0:
            out = os.path.join(self.base, "big.out")
            d.cli("get", "-o", out, "big", timeout=300 * ct.SLOW)
            self.assertEqual(ct.sha256_file(out), digest, "the acknowledged 100 MiB add is damaged")
            os.unlink(out)
        # the daemon goes on: a new add, then the store checks out
        self.add_docs(d, 2, prefix="after")
        self.assert_verify_ok(d)
        d.stop()

        # a start removes leftover temporaries, and everything is still there
        d.start()
        packs, tmps = self.assert_remote_packs_complete()
        self.assertEqual(tmps, [], "temporaries left in the remote packs dir after a restart")
        self.assert_docs(d, small)
        self.assert_verify_ok(d)
        if rc == 0:
            self.assertEqual(d.cli("stat", "big").returncode, 0)
        d.stop()


class Concurrency(SftpCase):
    THREADS = 8
    OPS = 50
    SIZE = 8 * 1024

    def test_8_clients_adding_and_reading(self):
        d = self.daemon()
        d.start()
        docs = {}
        lock = threading.Lock()
        failures = []
        counts = {"add": 0, "get": 0}

        def worker(k):
            rng = random.Random(k)
            mine = []
            try:
                with d.connect() as c:
                    for i in range(self.OPS):
                        if not mine or rng.random() < 0.5:
                            content = os.urandom(self.SIZE)
                            r = c.add(content, name="t%d-%d" % (k, i), tags=["t%d" % k])
                            if r.get("ok") is not True or r.get("hash") != ct.sha256_hex(content):
                                failures.append("add t%d-%d: %r" % (k, i, ct.short(r)))
                                continue
                            mine.append(r["hash"])
                            with lock:
                                docs[r["hash"]] = content
                                counts["add"] += 1
                        else:
                            with lock:
                                pool = list(docs) if rng.random() < 0.5 else mine
                                h = rng.choice(pool)
                                want = docs[h]
                            frames, got = c.get(h)
                            if got != want:
                                failures.append("get %s: %r" % (h, ct.short(frames[-1])))
                            with lock:
                                counts["get"] += 1
            except Exception as e:
                failures.append("thread %d: %r" % (k, e))

        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(self.THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300 * ct.SLOW)
            self.assertFalse(t.is_alive(), "a client hangs\n%s" % d.log_tail())
        self.assertEqual(failures, [], "%d failures\n%s" % (len(failures), d.log_tail()))
        self.assertEqual(counts["add"] + counts["get"], self.THREADS * self.OPS)
        self.assertGreater(counts["get"], 0)
        self.assertEqual(len(docs), counts["add"])
        self.assert_docs(d, docs)
        self.assertEqual(d.status()["documents"], len(docs))
        self.assert_remote_packs_complete()
        d.stop()
        d.start()
        self.assert_docs(d, docs)
        self.assert_verify_ok(d)
        d.stop()


class ServerGone(SftpCase):
    def test_add_fails_backend_unavailable_then_recovers(self):
        d = self.daemon()
        d.start()
        docs = self.add_docs(d, 3)
        self.srv.stop()
        with d.connect(timeout=UNAVAILABLE_BOUND + 30) as c:
            content = os.urandom(8192) + b"while the server is gone"
            t0 = time.monotonic()
            try:
                r = c.add(content, name="gone", timeout=UNAVAILABLE_BOUND)
            except socket.timeout:
                self.fail("an add with the server gone got no reply within %ds\n%s"
                          % (UNAVAILABLE_BOUND, d.log_tail()))
            elapsed = time.monotonic() - t0
            sys.stderr.write("# add failed after %.1f s: %r\n" % (elapsed, ct.short(r)))
            self.assertIs(r.get("ok"), False, "an add succeeded with the server gone: %r" % ct.short(r))
            # the error code is checked at the end, so that a wrong one does
            # not hide whether the daemon recovers
            wrong_code = None
            if ct.error_code(r) != "backend_unavailable":
                wrong_code = "add with the server gone failed with %r, expected backend_unavailable\n%s" \
                    % (ct.short(r), d.log_tail())
            self.assertTrue(d.running(), "cairnd died while the server was gone\n%s" % d.log_tail())
            d.assert_healthy()

            self.srv.start()
            content2 = os.urandom(8192) + b"after the server is back"
            t0 = time.monotonic()
            r = c.add(content2, name="back", timeout=UNAVAILABLE_BOUND)
            self.assertIs(r.get("ok"), True, "the first add after sshd came back: %r\n%s"
                          % (ct.short(r), d.log_tail()))
            self.assertEqual(r.get("hash"), ct.sha256_hex(content2))
            sys.stderr.write("# add after restart took %.1f s\n" % (time.monotonic() - t0))
            _, got = c.get("back")
            self.assertEqual(got, content2)
        self.assert_docs(d, docs)
        self.assert_verify_ok(d)
        d.stop()
        if wrong_code:
            self.fail(wrong_code)


class Kill9Cairnd(SftpCase):
    """test_durability's kill -9 loop, on the sftp backend."""

    THREADS = 8
    CYCLES = 2
    run_cycle = td.KillDuringAdds.run_cycle
    verify = td.KillDuringAdds.verify

    def test_kill9_during_concurrent_adds(self):
        d = self.daemon()
        d.start()
        acked = {}
        names = {}
        for cycle in range(self.CYCLES):
            self.run_cycle(d, cycle, acked, names)
            d.start()
            _, tmps = self.assert_remote_packs_complete()
            self.assertEqual(tmps, [], "temporaries left after the restart")
            self.verify(d, acked, names)
        self.assert_verify_ok(d)
        d.stop()


class SharedDirectory(SharedChecks, SftpCase):
    def shared(self, intervals):
        """A daemon per refresh interval, on the one remote directory."""
        ds = []
        for i, interval in enumerate(intervals):
            conf = os.path.join(self.base, "shared-%d.conf" % i)
            with open(conf, "w") as f:
                f.write("[store]\nrefresh_interval = %s\ngc_grace = 60s\nrepack_threshold = 60\n"
                        % interval)
            ds.append(self.daemon(args=["--config", conf]))
        for d in ds:
            d.start()
        return ds

    def test_two_daemons_one_directory(self):
        # b reads the directory only when asked (and every quarter of the
        # grace period): a's gc waits for it
        a, b = ds = self.shared(["300ms", "0"])
        load = Load(self, ds, clients=3, seconds=5)
        load.run()
        self.assertGreater(len(load.docs), 20)
        packs, _ = self.assert_remote_packs_complete()
        writers = {pf.parse_pack_name(os.path.basename(p.path))[0] for p in packs}
        self.assertEqual(len(writers), 2, "the packs of both writers: %r" % writers)
        self.refresh_all(ds)
        for d in ds:
            self.get_all(d, load.docs, "after the load")
            self.gone_all(d, load.deleted, "after the load")
        self.assertEqual(a.cli("ls").stdout, b.cli("ls").stdout)
        # gc on a: b has to let go of what a marks before a deletes it
        for h in list(load.docs)[: len(load.docs) // 2]:
            self.assertEqual(b.cli("rm", h).returncode, 0)
            load.deleted.add(h)
            load.docs.pop(h)
        self.refresh_all(ds)
        before = set(self.remote_files())
        r1 = self.gc(a)
        self.assertGreater(r1["packs_pending"], 0, r1)
        self.assertEqual(r1["bytes_reclaimed"], 0, r1)
        self.refresh_all(ds)
        self.refresh_all(ds)
        r2 = self.gc(a)
        self.assertGreater(r2["bytes_reclaimed"], 0, r2)
        self.assertTrue(before - set(self.remote_files()), "no pack was deleted")
        self.refresh_all(ds)
        for d in ds:
            self.get_all(d, load.docs, "after gc")
            self.gone_all(d, load.deleted, "after gc")
            self.verify(d, "after gc")
        for d in ds:
            d.stop()


class LocalDataDir(SftpCase):
    def test_data_dir_holds_no_packs(self):
        d = self.daemon()
        self.assertFalse(os.path.exists(os.path.dirname(self.remote)))
        d.start()
        st = d.status()
        self.assertTrue(str(st.get("backend", "")).startswith("sftp://"), "status backend: %r" % st.get("backend"))
        keep = self.add_docs(d, 5, size=50000, prefix="keep")
        with d.connect() as c:
            big = os.urandom(3 * MiB)
            r = c.add(big, name="big")
            self.assertIs(r.get("ok"), True, ct.short(r))
        gone = self.add_docs(d, 5, size=50000, prefix="gone")
        self.assertTrue(os.path.isdir(self.packs_dir()), "the backend made no remote packs dir")
        packs, _ = self.assert_remote_packs_complete()
        self.assertTrue(packs, "no packs on the server after adds")
        self.assert_no_local_objects(d)

        # gc deletes packs on the server once nothing in them is alive
        names_before = {p.seq for p in packs}
        with d.connect() as c:
            for h in gone:
                self.assertIs(c.call("delete", ref=h).get("ok"), True)
            r = c.call("delete", ref="big")
            self.assertIs(r.get("ok"), True, ct.short(r))
            r = c.call("gc", timeout=120 * ct.SLOW)
            self.assertIs(r.get("ok"), True, ct.short(r))
        self.assertGreater(r.get("packs_deleted", 0) + r.get("packs_rewritten", 0), 0, ct.short(r))
        # a pack goes once no running operation can read it any more: soon,
        # but not necessarily before gc replies
        deadline = time.monotonic() + 30 * ct.SLOW
        while True:
            packs_after, _ = self.assert_remote_packs_complete()
            names_after = {p.seq for p in packs_after}
            if names_before - names_after or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertTrue(names_before - names_after, "gc reported %r but no pack left the server"
                        % ct.short(r))
        self.assert_docs(d, keep)
        self.assert_verify_ok(d)
        self.assert_no_local_objects(d)
        d.stop()
        d.start()
        self.assert_docs(d, keep)
        d.stop()
        self.assert_no_local_objects(d)

    def test_read_cache_serves_a_second_read(self):
        """The read cache works on sftp too: after a restart (empty memory
        caches) a document comes back from the slice files, nothing fetched."""
        d = self.daemon()
        d.start()
        data = os.urandom(5 * MiB + 77)
        with d.connect() as c:
            self.assertIs(c.add(data, name="doc").get("ok"), True)
            self.assertEqual(c.get("doc")[1], data)
        st = d.status()
        self.assertGreaterEqual(st.get("read_cache_fetched", 0), len(data), st)
        d.stop()
        d.start()
        with d.connect() as c:
            self.assertEqual(c.get("doc")[1], data)
        st = d.status()
        self.assertEqual((st.get("read_cache_misses"), st.get("read_cache_fetched")), (0, 0), st)
        self.assertGreater(st.get("read_cache_hits", 0), 0, st)
        d.stop()

    def assert_no_local_objects(self, d):
        self.assertFalse(os.path.exists(os.path.join(d.data_dir, "objects")),
                         "the sftp backend left an objects/ dir in the data dir")
        for root, _, files in os.walk(d.data_dir):
            for name in files:
                path = os.path.join(root, name)
                self.assertFalse(is_pack_name(name), "pack-like file %s in the data dir" % path)
                with open(path, "rb") as f:
                    self.assertNotEqual(f.read(8), pf.PACK_MAGIC, "a pack in the data dir: %s" % path)


if __name__ == "__main__":
    ct.main()
