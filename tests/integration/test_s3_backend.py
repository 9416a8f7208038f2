#!/usr/bin/env python3
"""The S3 and R2 backends against a real S3 server on 127.0.0.1: s3rver
behind the SigV4-checking, fault-injecting proxy of tests/s3/server.js
(s3fixture.py; one server per test class, each with a bucket of its own;
skipped without node and tests/s3/node_modules):

  OddKeys         a prefix with spaces, unicode, '+', ':', '=' and '/' signs
                  right: adds, gets, a restart and a fresh data dir rebuilt
                  from the listing, no signature rejection at the proxy, and
                  the objects are in the bucket under that prefix
  StartRefusals   wrong secret, unknown access key, no credentials at all,
                  a missing bucket, http without allow_http=1, a secret in a
                  world-readable config file: cairnd exits non-zero at start,
                  in bounded time, saying why; the secret is never in
                  cairnd's log, `cairn status` or --print-config
  Faults          10% of requests fail (503, 500, reset, reset_request,
                  stall, truncate):
                  8 clients adding and reading see no failure, every
                  acknowledged document is intact and verify passes
  ServerGone      the S3 port gone past the retry deadline (timeout=8): an
                  add fails with backend_unavailable in bounded time, the
                  daemon stays healthy and adds again once the port is back
  BigDocument     a large document through `cairn add` / `cairn get` goes to
                  S3 and back byte-identical, cairnd's VmHWM under 150 MiB
  Kill9Cairnd     test_durability's kill -9 loop on the s3 backend
  R2              r2:// with temporary credentials from the Cloudflare API
                  stand-in: renewals under load, a wrong API token refused at
                  start, keys expired mid-run recovered from
  LocalDataDir    the data dir holds no packs; gc deletes packs in the bucket
  BatchedDeletes  the packs a gc empties go in DeleteObjects requests, fewer
                  requests than packs
  RebuildIndex    --rebuild-index with a fresh data dir rebuilds everything
                  from the bucket; a rebuild whose reads fail fails loudly and
                  does not leave an emptier database in place

The packs are read straight from s3rver's files (packfmt.py), so the tests
check what the server holds, not what cairnd says it holds.
"""

import os
import random
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import packfmt as pf  # noqa: E402
import s3fixture  # noqa: E402
import test_durability as td  # noqa: E402

MiB = ct.MiB
# timeout=8 in the URL: the backend gives up on a request with its retries
# after about 8 s; the bound only tells a failure from a hang
UNAVAILABLE_TIMEOUT = 8
UNAVAILABLE_BOUND = 60 * ct.SLOW
# the bound for a 2 GiB add and get
BIG_RSS_LIMIT_KIB = 150 * 1024
# environment variables that could hand cairnd credentials the test did not mean to
CRED_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
             "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_REGION",
             "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "CLOUDFLARE_API_TOKEN", "CAIRN_TEST_BACKEND")


def daemon_output(d):
    """What cairnd itself wrote to its log: without the harness's "=== start"
    lines, which show the command line the test ran (a URL with a secret in
    it is the test's doing, not cairnd's)."""
    return "".join(l for l in d.log_text().splitlines(True) if not l.startswith("=== start"))


def is_pack_name(name):
    return pf.parse_pack_name(name) is not None


def is_pack_key(key):
    """A key of a pack: a pack name under packs/ (writers/ holds objects of
    the same 16-hex-digit form that are no packs)."""
    parts = key.rsplit("/", 2)
    return len(parts) >= 2 and parts[-2] == "packs" and is_pack_name(parts[-1])


class S3Daemon(ct.Daemon):
    """A Daemon whose environment holds only the credentials the test gives
    it, with HOME and XDG_CONFIG_HOME in an empty directory (no
    ~/.aws/credentials, no default cairn.conf)."""

    def __init__(self, testcase, home, **kw):
        super().__init__(testcase, **kw)
        self.home = home

    def env(self):
        env = dict(os.environ)
        for k in list(env):
            if k in CRED_VARS or k.startswith("AWS_"):
                del env[k]
        env["HOME"] = self.home
        env["XDG_CONFIG_HOME"] = os.path.join(self.home, ".config")
        env["CAIRN_SOCKET"] = self.socket_path
        env["CAIRN_DATA_DIR"] = self.data_dir
        env.update(self.extra_env)
        return env


class S3Case(ct.StoreChecks, unittest.TestCase):
    """One S3 server per class (cls.srv, bucket cls.bucket); every test has
    its own prefix in it (self.prefix)."""

    @classmethod
    def setUpClass(cls):
        s3fixture.require_tools()
        cls.bucket = "cairn-" + cls.__name__.lower()
        cls.srv_base = ct.make_tempdir(None, prefix="cairn-s3srv-")
        cls.addClassCleanup(__import__("shutil").rmtree, cls.srv_base, True)
        cls.srv = s3fixture.S3Server(cls.srv_base, buckets=[cls.bucket])
        cls.addClassCleanup(cls.srv.stop)
        cls.srv.start()

    def setUp(self):
        if not self.srv.running():
            self.srv.start()
        self.srv.control(clear_faults=True, down=False, api_down=False, api_fault=None, temp_ttl_cap=None,
                         stall_max_s=120)
        self.srv.control(reset_counters=True)
        self.base = ct.make_tempdir(self, prefix="cairn-s3-")
        self.home = os.path.join(self.base, "home")
        os.makedirs(self.home)
        self.prefix = "t-%s/store" % self._testMethodName
        self.ndaemons = 0

    # -- daemons

    def url(self, prefix=None, **params):
        params.setdefault("stall_timeout", 5)
        params.setdefault("timeout", 30)
        return self.srv.url(self.bucket, self.prefix if prefix is None else prefix, **params)

    def r2_url(self, prefix=None, **params):
        params.setdefault("stall_timeout", 5)
        params.setdefault("timeout", 30)
        u = self.srv.url(self.bucket, self.prefix if prefix is None else prefix, account=self.srv.account_id,
                         api_base=self.srv.api_url, **params)
        assert u.startswith("s3://")
        return "r2://" + u[len("s3://"):]

    def daemon(self, url=None, env=None, args=(), data_dir=None):
        """A Daemon (not started) on `url` (default: self.url()) with `env`
        as its only credentials (default: the fixture's key pair)."""
        self.ndaemons += 1
        dbase = os.path.join(self.base, "d%d" % self.ndaemons)
        os.makedirs(dbase)
        backend = ["--backend", url or self.url()] if url is not False else []
        return S3Daemon(self, self.home, base=dbase, data_dir=data_dir, args=backend + list(args),
                        env=self.srv.env() if env is None else env)

    def assert_start_refused(self, d, *needles):
        """cairnd exits non-zero at start, in bounded time, not by a signal,
        and its output names one of `needles` (case-insensitive). Returns
        the output of that start."""
        t0 = time.monotonic()
        d.start(wait=False)
        rc = d.wait(self.STARTUP_REFUSAL_TIMEOUT)
        elapsed = time.monotonic() - t0
        text = d.log_text()
        this_start = text[text.rfind("=== start"):]
        sys.stderr.write("# refused in %.1f s: %s\n" % (elapsed, this_start.strip().splitlines()[-1][:300]))
        self.assertNotEqual(rc, 0, "cairnd started (and exited 0) although it should refuse\n%s" % d.log_tail())
        self.assertFalse(rc < 0, "cairnd died of signal %d instead of refusing\n%s" % (-rc, d.log_tail()))
        low = this_start.lower()
        self.assertTrue(any(n.lower() in low for n in needles),
                        "cairnd's output names none of %r\n%s" % (needles, d.log_tail()))
        self.assertFalse(os.path.exists(d.socket_path) and d.running(), "a refused cairnd listens")
        return this_start

    # -- the bucket, read from s3rver's files

    def keys(self, prefix=None):
        p = self.prefix if prefix is None else prefix
        return self.srv.list_keys(self.bucket, p + "/")

    def remote_packs(self, prefix=None):
        """Every object under the prefix that is a pack (a 16-hex-digit last
        component), parsed; asserts each is complete and sealed. Returns
        {key: Pack}."""
        out = {}
        for key in self.keys(prefix):
            name = key.rsplit("/", 1)[-1]
            if not is_pack_key(key):
                continue
            path = self.srv.object_path(self.bucket, key)
            try:
                pack = pf.read_pack(path)
            except FileNotFoundError:
                continue  # deleted since the listing
            except pf.PackFormatError as e:
                self.fail("pack %s in the bucket does not parse: %s" % (key, e))
            self.assertTrue(pack.sealed, "pack %s in the bucket is not sealed: %r" % (key, pack))
            self.assertEqual(pack.hseq, pf.parse_pack_name(name)[1],
                             "pack %s holds sequence number %d" % (key, pack.hseq))
            out[key] = pack
        return out

    def rejected(self):
        return self.srv.counters().get("rejected", {})


# --------------------------------------------------------------------------
# 1. keys that need encoding
# --------------------------------------------------------------------------


class OddKeys(S3Case):
    PREFIX = "we ird/\u00fc+:=/x"

    def test_odd_prefix_signs_and_lists(self):
        d = self.daemon(url=self.url(self.PREFIX))
        self.assertIn("%C3%BC%2B%3A%3D", d.args[1], "the prefix is not percent-encoded in the URL")
        d.start()
        docs = self.add_docs(d, 12, size=3000, prefix="odd name +:=/\u00fc")
        with d.connect() as c:
            big = os.urandom(3 * MiB)
            r = c.add(big, name="big \u00fc+:=")
            self.assertIs(r.get("ok"), True, ct.short(r))
            docs[r["hash"]] = big
        self.assert_docs(d, docs)
        d.stop()

        keys = self.keys(self.PREFIX)
        self.assertTrue(keys, "no object in the bucket under %r: %r"
                        % (self.PREFIX, self.srv.list_keys(self.bucket)))
        packs = self.remote_packs(self.PREFIX)
        self.assertTrue(packs, "no pack under %r: %r" % (self.PREFIX, keys))
        # nothing went anywhere else in the bucket
        self.assertEqual(self.srv.list_keys(self.bucket), keys)

        # a restart, then a fresh data dir that has only the bucket's listing
        d.start()
        self.assert_docs(d, docs)
        d.stop()
        d2 = self.daemon(url=self.url(self.PREFIX))
        d2.start()
        self.assertEqual(d2.status()["documents"], len(docs), d2.log_tail())
        self.assert_docs(d2, docs)
        self.assert_verify_ok(d2)
        d2.stop()

        c = self.srv.counters()
        self.assertEqual(c.get("rejected", {}), {}, "the proxy refused requests: %r\n%s"
                         % (c.get("rejected"), self.srv.log_tail()))
        self.assertGreater(c["forwarded"].get("GET", 0), 0, c)
        self.assertGreater(c["forwarded"].get("PUT", 0), 0, c)


# --------------------------------------------------------------------------
# 2. refusals at start, secrets kept out of sight
# --------------------------------------------------------------------------


class StartRefusals(S3Case):
    def test_wrong_secret(self):
        env = {"AWS_ACCESS_KEY_ID": self.srv.access_key, "AWS_SECRET_ACCESS_KEY": "wrong/secret+key=NOPE0123"}
        d = self.daemon(env=env)
        out = self.assert_start_refused(d, "SignatureDoesNotMatch")
        self.assertNotIn("wrong/secret+key=NOPE0123", out, "cairnd logged the secret")
        self.assertEqual(self.rejected().get("SignatureDoesNotMatch", 0) > 0, True, self.rejected())
        self.assertEqual(self.keys(), [], "objects written with a wrong secret")

    def test_unknown_access_key(self):
        env = {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000", "AWS_SECRET_ACCESS_KEY": self.srv.secret_key}
        d = self.daemon(env=env)
        out = self.assert_start_refused(d, "InvalidAccessKeyId")
        self.assertNotIn(self.srv.secret_key, out, "cairnd logged the secret")
        self.assertGreater(self.rejected().get("InvalidAccessKeyId", 0), 0, self.rejected())

    def test_no_credentials(self):
        d = self.daemon(env={})
        self.assertEqual(os.listdir(self.home), [])
        self.assert_start_refused(d, "credential")
        self.assertEqual(self.srv.counters()["requests_total"], 0,
                         "cairnd sent requests without credentials")

    def test_missing_bucket(self):
        url = self.srv.url("no-such-bucket", "x", stall_timeout=5, timeout=30)
        d = self.daemon(url=url)
        out = self.assert_start_refused(d, "NoSuchBucket", "bucket")
        self.assertIn("no-such-bucket", out, "the refusal does not name the bucket")

    def test_http_without_allow_http(self):
        d = self.daemon(url=self.url(allow_http=0))
        self.assert_start_refused(d, "allow_http")
        self.assertEqual(self.srv.counters()["requests_total"], 0, "cairnd talked plain http")

    def config(self, mode, secret=None):
        path = os.path.join(self.base, "cairn-%o.conf" % mode)
        u = self.url()
        with open(path, "w") as f:
            f.write("[backend]\nurl = %s\naccess_key_id = %s\nsecret_access_key = %s\n"
                    % (u, self.srv.access_key, secret or self.srv.secret_key))
        os.chmod(path, mode)
        return path

    def test_secret_in_world_readable_config(self):
        conf = self.config(0o644)
        d = self.daemon(url=False, env={}, args=["--config", conf])
        out = self.assert_start_refused(d, "secret")
        self.assertIn(conf, out, "the refusal does not name the file")
        self.assertTrue("group or others" in out or "chmod" in out or "600" in out,
                        "the refusal does not say what is wrong with the file:\n%s" % out)
        self.assertNotIn(self.srv.secret_key, out, "cairnd logged the secret")
        self.assertEqual(self.srv.counters()["requests_total"], 0)

        # the same file at 0600 works, and the secret shows nowhere
        os.chmod(conf, 0o600)
        p = subprocess.run(d.command() + ["--print-config"], env=d.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        self.assertIn("secret_access_key", text, "--print-config does not mention the secret's key:\n%s" % text)
        self.assertNotIn(self.srv.secret_key, text, "--print-config shows the secret")
        self.assertNotIn(urllib.parse.quote(self.srv.secret_key, safe=""), text)
        d.start()
        docs = self.add_docs(d, 3)
        self.assert_docs(d, docs)
        self.assertTrue(self.keys(), "nothing in the bucket")
        st = d.cli("status")
        stj = d.cli("--json", "status")
        for blob in (st.stdout + st.stderr, stj.stdout + stj.stderr):
            self.assertIn(b"s3://", blob, "status does not show the backend: %r" % blob)
            self.assertNotIn(self.srv.secret_key.encode(), blob, "cairn status shows the secret")
            self.assertNotIn(urllib.parse.quote(self.srv.secret_key, safe="").encode(), blob)
        d.stop()
        log = daemon_output(d)
        self.assertNotIn(self.srv.secret_key, log, "cairnd logged the secret")
        self.assertNotIn(urllib.parse.quote(self.srv.secret_key, safe=""), log, "cairnd logged the secret")

    def test_secret_in_url_not_logged(self):
        """A secret given in the URL itself stays out of the log, status and
        --print-config too."""
        # In a file of the user's alone: on the command line every user could
        # read it. The server's parameters as keys of their own, the
        # credentials in the URL (a line of the file holds 198 bytes at most).
        full = urllib.parse.urlsplit(self.url())
        keys = urllib.parse.parse_qsl(full.query)
        u = "s3://%s%s?%s" % (full.netloc, full.path, urllib.parse.urlencode(
            {"access_key_id": self.srv.access_key, "secret_access_key": self.srv.secret_key}))
        conf = os.path.join(self.base, "url.conf")
        with open(conf, "w") as f:
            f.write("[backend]\n" + "".join("%s = %s\n" % kv for kv in keys) + "url = %s\n" % u)
        os.chmod(conf, 0o600)
        d = self.daemon(url=False, env={}, args=["--config", conf])
        p = subprocess.run(d.command() + ["--print-config"], env=d.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, text)
        self.assertNotIn(self.srv.secret_key, text, "--print-config shows the secret")
        self.assertNotIn(urllib.parse.quote(self.srv.secret_key, safe=""), text, "--print-config shows the secret")
        d.start()
        self.add_docs(d, 2)
        st = d.cli("--json", "status")
        self.assertNotIn(urllib.parse.quote(self.srv.secret_key, safe="").encode(), st.stdout)
        self.assertNotIn(self.srv.secret_key.encode(), st.stdout)
        d.stop()
        log = daemon_output(d)
        self.assertIn("credentials from", log, "cairnd did not log where its credentials came from")
        self.assertNotIn(urllib.parse.quote(self.srv.secret_key, safe=""), log, "cairnd logged the secret")
        self.assertNotIn(self.srv.secret_key, log, "cairnd logged the secret")


# --------------------------------------------------------------------------
# 3. faults, 4. the server gone
# --------------------------------------------------------------------------


class Faults(S3Case):
    THREADS = 8
    OPS = 40
    SIZE = 8 * 1024
    KINDS = ["503", "500", "reset", "reset_request", "stall", "truncate"]

    def test_10pct_faults_8_clients(self):
        d = self.daemon(url=self.url(stall_timeout=2, timeout=120))
        d.start()
        self.srv.control(fault_rate=0.1, faults=self.KINDS, seed=1234, stall_max_s=30)
        t0 = time.monotonic()
        docs, counts, failures = ct.run_clients(self, d, self.THREADS, self.OPS, self.SIZE)
        sys.stderr.write("# %d adds, %d gets in %.1f s\n" % (counts["add"], counts["get"], time.monotonic() - t0))
        # reads from S3 after the clients: a get of everything, with faults still on
        self.assert_docs(d, docs)
        c = self.srv.counters()
        sys.stderr.write("# faults injected: %r, requests %r\n" % (c["faults"], c["requests"]))
        self.assertEqual(failures, [], "%d failed operations under faults\n%s" % (len(failures), d.log_tail()))
        self.assertEqual(counts["add"] + counts["get"], self.THREADS * self.OPS)
        self.assertGreater(counts["get"], 0)
        injected = {k: v for k, v in c["faults"].items() if v > 0}
        self.assertGreaterEqual(len(injected), 3, "faults of too few kinds were injected: %r" % c["faults"])
        self.assertGreaterEqual(c["faults_total"], 10, c["faults"])
        self.assertEqual(c.get("rejected", {}).get("SignatureDoesNotMatch", 0), 0, c.get("rejected"))
        self.assertEqual(d.status()["documents"], len(docs))
        self.assertTrue(d.running(), d.log_tail())
        self.srv.clean()
        self.remote_packs()  # everything in the bucket is a complete pack
        self.assert_verify_ok(d)
        d.stop()
        d.start()
        self.assert_docs(d, docs)
        d.stop()


class ServerGone(S3Case):
    def test_add_fails_backend_unavailable_then_recovers(self):
        d = self.daemon(url=self.url(timeout=UNAVAILABLE_TIMEOUT, connect_timeout=2, stall_timeout=2))
        d.start()
        docs = self.add_docs(d, 3)
        self.srv.down()
        wrong_code = None
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
            if ct.error_code(r) != "backend_unavailable":
                wrong_code = "add with the server gone failed with %r, expected backend_unavailable\n%s" \
                    % (ct.short(r), d.log_tail())
            self.assertTrue(d.running(), "cairnd died while the server was gone\n%s" % d.log_tail())
            d.assert_healthy()
            # a read of a stored document fails the same way, in bounded time
            t0 = time.monotonic()
            h = next(iter(docs))
            try:
                frames, got = c.get(h, timeout=UNAVAILABLE_BOUND)
            except socket.timeout:
                self.fail("a get with the server gone got no reply within %ds\n%s" % (UNAVAILABLE_BOUND, d.log_tail()))
            sys.stderr.write("# get with the server gone after %.1f s: %r\n"
                             % (time.monotonic() - t0, ct.short(frames[-1])))
            if got is not None:
                self.assertEqual(got, docs[h])  # served from a cache: fine
            else:
                self.assertEqual(ct.error_code(frames[-1]), "backend_unavailable", ct.short(frames[-1]))

            self.srv.up()
            content2 = os.urandom(8192) + b"after the server is back"
            r = c.add(content2, name="back", timeout=UNAVAILABLE_BOUND)
            self.assertIs(r.get("ok"), True, "the first add after the server came back: %r\n%s"
                          % (ct.short(r), d.log_tail()))
            self.assertEqual(r.get("hash"), ct.sha256_hex(content2))
            _, got = c.get("back")
            self.assertEqual(got, content2)
            # the add that failed can be repeated
            r = c.add(content, name="gone", timeout=UNAVAILABLE_BOUND)
            self.assertIs(r.get("ok"), True, ct.short(r))
        self.assert_docs(d, docs)
        self.assert_verify_ok(d)
        d.stop()
        if wrong_code:
            self.fail(wrong_code)


# --------------------------------------------------------------------------
# 5. a large document
# --------------------------------------------------------------------------


# 2 GiB as the issue asks (measured on the 2-core test machine: 9 s to write
# the file, 49 s to add, 53 s to get, cairnd's VmHWM 76 MiB). Under the
# sanitizers, where the RSS bound does not hold anyway (it is skipped
# there), 256 MiB runs the same code in a fraction of the time.
# CAIRN_S3_BIG_MIB sets another size.
BIG_SIZE = int(os.environ.get("CAIRN_S3_BIG_MIB", "256" if ct.SANITIZED else "2048")) * MiB


class BigDocument(S3Case):
    def test_large_document_roundtrip_and_rss(self):
        conf = os.path.join(self.base, "cairnd.conf")
        with open(conf, "w") as f:
            f.write("[store]\ncache_size = 32M\n")
        d = self.daemon(args=["--config", conf])
        d.start()
        src = os.path.join(self.base, "big.in")
        out = os.path.join(self.base, "big.out")
        t0 = time.monotonic()
        digest = ct.write_random_file(src, BIG_SIZE)
        cli = [ct.CAIRN, "--socket", d.socket_path, "--no-autostart"]
        t1 = time.monotonic()
        rc, _, err = ct.spawn_wait(cli + ["add", "-n", "big", src], stdout_path=os.path.join(self.base, "add.out"))
        t2 = time.monotonic()
        self.assertEqual(rc, 0, "cairn add failed: %r\n%s" % (err[-2000:], d.log_tail()))
        os.unlink(src)
        hwm_add = d.vm_hwm_kib()
        stored = sum(os.path.getsize(self.srv.object_path(self.bucket, k)) for k in self.keys())
        self.assertGreater(stored, BIG_SIZE * 0.99,
                           "the bucket holds %d bytes after a %d byte add" % (stored, BIG_SIZE))
        rc, _, err = ct.spawn_wait(cli + ["get", "-o", out, "big"])
        t3 = time.monotonic()
        self.assertEqual(rc, 0, "cairn get failed: %r\n%s" % (err[-2000:], d.log_tail()))
        self.assertEqual(os.path.getsize(out), BIG_SIZE)
        self.assertEqual(ct.sha256_file(out), digest, "the document came back different")
        os.unlink(out)
        hwm = d.vm_hwm_kib()
        sys.stderr.write("# %d MiB: write %.1f s, add %.1f s, get %.1f s; cairnd VmHWM %d KiB after add, %d after get\n"
                         % (BIG_SIZE // MiB, t1 - t0, t2 - t1, t3 - t2, hwm_add, hwm))
        # each pack in the bucket is whole: header and trailer magic (parsing
        # 2 GiB of records in Python would take longer than the round trip)
        npacks = 0
        for key in self.keys():
            if not is_pack_key(key):
                continue
            with open(self.srv.object_path(self.bucket, key), "rb") as f:
                self.assertEqual(f.read(8), pf.PACK_MAGIC, key)
                f.seek(-8, os.SEEK_END)
                self.assertEqual(f.read(8), pf.INDEX_MAGIC, "pack %s in the bucket is not sealed" % key)
            npacks += 1
        self.assertGreater(npacks, 1, "a %d MiB document in %d pack(s)" % (BIG_SIZE // MiB, npacks))
        d.stop()
        if ct.SANITIZED:
            self.skipTest("RSS bound not meaningful under ASan (CAIRN_SANITIZED=1)")
        self.assertLess(hwm, BIG_RSS_LIMIT_KIB, "cairnd peaked at %d KiB" % hwm)


# --------------------------------------------------------------------------
# 6. kill -9 of cairnd
# --------------------------------------------------------------------------


class Kill9Cairnd(S3Case):
    """test_durability's kill -9 loop, on the s3 backend."""

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
            self.remote_packs()
            self.verify(d, acked, names)
        self.assertGreater(len(acked), 0)
        self.assert_verify_ok(d)
        d.stop()


# --------------------------------------------------------------------------
# 7. R2 temporary credentials
# --------------------------------------------------------------------------


class R2(S3Case):
    def r2_env(self, token=None):
        return {"AWS_ACCESS_KEY_ID": self.srv.access_key, "CLOUDFLARE_API_TOKEN": token or self.srv.api_token}

    def activity(self, d, seconds, prefix):
        """Adds and gets on 2 connections for `seconds`; returns (docs, failures)."""
        docs = {}
        failures = []
        lock = threading.Lock()
        end = time.monotonic() + seconds

        def worker(k):
            n = 0
            try:
                with d.connect(timeout=120) as c:
                    while time.monotonic() < end:
                        content = os.urandom(4000) + b"%s-%d-%d" % (prefix.encode(), k, n)
                        r = c.add(content, name="%s-%d-%d" % (prefix, k, n))
                        n += 1
                        if r.get("ok") is not True:
                            failures.append("add: %r" % ct.short(r))
                            continue
                        with lock:
                            docs[r["hash"]] = content
                            h = random.choice(list(docs))
                            want = docs[h]
                        frames, got = c.get(h)
                        if got != want:
                            failures.append("get %s: %r" % (h, ct.short(frames[-1])))
                        time.sleep(0.05)
            except Exception as e:
                failures.append("thread %d: %r" % (k, e))

        ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(seconds + 180)
            self.assertFalse(t.is_alive(), "a client hangs\n%s" % d.log_tail())
        return docs, failures

    def test_renewals_under_load(self):
        d = self.daemon(url=self.r2_url(temp_ttl=3), env=self.r2_env())
        d.start()
        issued0 = self.srv.counters()["temp_credentials_issued"]
        self.assertGreaterEqual(issued0, 1, "no temporary credentials fetched at open")
        docs, failures = self.activity(d, 8, "r")
        c = self.srv.counters()
        sys.stderr.write("# temp credentials issued: %d, %d docs, rejected %r\n"
                         % (c["temp_credentials_issued"], len(docs), c.get("rejected")))
        self.assertEqual(failures, [], "%d failed operations\n%s" % (len(failures), d.log_tail()))
        self.assertGreater(len(docs), 10)
        self.assertGreaterEqual(c["temp_credentials_issued"], 3,
                                "temporary credentials were not renewed at least twice in 8 s with a 3 s TTL")
        self.assertEqual(c["temp_credentials_refused"], 0)
        # nothing was refused but, at worst, a request that met a key's expiry
        # on the way (it is signed again with the renewed key)
        self.assertLessEqual(set(c.get("rejected", {})), {"ExpiredToken"}, c.get("rejected"))
        self.assertTrue(self.keys(), "nothing in the bucket")
        self.assert_docs(d, docs)
        self.assert_verify_ok(d)
        d.stop()
        log = daemon_output(d)
        self.assertNotIn(self.srv.api_token, log, "cairnd logged the API token")

    def test_a_renewed_token_longer_than_the_first(self):
        """A request retried after ExpiredToken is signed and sent with the
        renewed token whole, however much longer it is than the first."""
        self.srv.control(temp_token_bytes=12)
        self.addCleanup(self.srv.control, temp_token_bytes=48)
        d = self.daemon(url=self.r2_url(), env=self.r2_env())
        d.start()
        docs = self.add_docs(d, 3)
        # Each next request meets ExpiredToken once, then goes again with a token 50 times longer.
        self.srv.control(temp_token_bytes=600, expire_temp_keys=True)
        docs.update(self.add_docs(d, 3, prefix="after"))
        self.assert_docs(d, docs)
        self.assertNotIn("InvalidToken", self.srv.counters().get("rejected", {}))
        d.stop()

    def test_wrong_api_token_refused(self):
        d = self.daemon(url=self.r2_url(temp_ttl=3), env=self.r2_env(token="not-the-token"))
        out = self.assert_start_refused(d, "token", "403", "credentials")
        self.assertNotIn("not-the-token", out, "cairnd logged the API token")
        self.assertGreater(self.srv.counters()["temp_credentials_refused"], 0,
                           "the credentials API was not asked (refused for another reason?)")
        self.assertEqual(self.keys(), [])

    def test_expired_keys_recovered(self):
        # a long TTL: the only way out of the expiry is the ExpiredToken path
        d = self.daemon(url=self.r2_url(temp_ttl=3600), env=self.r2_env())
        d.start()
        docs = self.add_docs(d, 5, prefix="before")
        issued = self.srv.counters()["temp_credentials_issued"]
        self.srv.expire_temp_keys()
        more, failures = self.activity(d, 3, "after")
        c = self.srv.counters()
        sys.stderr.write("# rejected after expiry: %r, issued %d -> %d\n"
                         % (c.get("rejected"), issued, c["temp_credentials_issued"]))
        self.assertEqual(failures, [], "%d failed operations after the keys expired\n%s"
                         % (len(failures), d.log_tail()))
        self.assertGreater(c.get("rejected", {}).get("ExpiredToken", 0), 0,
                           "no request met ExpiredToken: the test did not test the expiry")
        self.assertGreater(c["temp_credentials_issued"], issued, "no new credentials after ExpiredToken")
        docs.update(more)
        self.assert_docs(d, docs)
        d.stop()


# --------------------------------------------------------------------------
# 8. nothing stored locally
# --------------------------------------------------------------------------


class LocalDataDir(S3Case):
    def assert_no_local_objects(self, d):
        self.assertFalse(os.path.exists(os.path.join(d.data_dir, "objects")),
                         "the s3 backend left an objects/ dir in the data dir")
        for root, _, files in os.walk(d.data_dir):
            for name in files:
                path = os.path.join(root, name)
                self.assertFalse(is_pack_name(name), "pack-like file %s in the data dir" % path)
                with open(path, "rb") as f:
                    self.assertNotEqual(f.read(8), pf.PACK_MAGIC, "a pack in the data dir: %s" % path)

    def test_data_dir_holds_no_packs_and_gc_deletes_in_bucket(self):
        d = self.daemon()
        d.start()
        st = d.status()
        self.assertTrue(str(st.get("backend", "")).startswith("s3://"), "status backend: %r" % st.get("backend"))
        keep = self.add_docs(d, 5, size=50000, prefix="keep")
        with d.connect() as c:
            r = c.add(os.urandom(3 * MiB), name="big")
            self.assertIs(r.get("ok"), True, ct.short(r))
        gone = self.add_docs(d, 5, size=50000, prefix="gone")
        packs = self.remote_packs()
        self.assertTrue(packs, "no packs in the bucket after adds: %r" % self.keys())
        self.assert_no_local_objects(d)

        before = set(packs)
        with d.connect() as c:
            for h in gone:
                self.assertIs(c.call("delete", ref=h).get("ok"), True)
            r = c.call("delete", ref="big")
            self.assertIs(r.get("ok"), True, ct.short(r))
            r = c.call("gc", timeout=120 * ct.SLOW)
            self.assertIs(r.get("ok"), True, ct.short(r))
        self.assertGreater(r.get("packs_deleted", 0) + r.get("packs_rewritten", 0), 0, ct.short(r))
        deadline = time.monotonic() + 30 * ct.SLOW
        while True:
            after = set(self.remote_packs())
            if before - after or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertTrue(before - after, "gc reported %r but no pack left the bucket" % ct.short(r))
        # one DELETE each, or several gathered in one DeleteObjects (POST ?delete)
        fwd = self.srv.counters()["forwarded"]
        self.assertGreater(fwd.get("DELETE", 0) + fwd.get("POST", 0), 0, fwd)
        self.assert_docs(d, keep)
        self.assert_verify_ok(d)
        self.assert_no_local_objects(d)
        d.stop()
        d.start()
        self.assert_docs(d, keep)
        with d.connect() as c:
            for h in gone:
                frames, got = c.get(h)
                self.assertIsNone(got, "a deleted document came back after gc and a restart")
        d.stop()
        self.assert_no_local_objects(d)


class BatchedDeletes(S3Case):
    def packs_to_delete(self, nkeep, ngone):
        """A started daemon with nkeep documents kept and ngone deleted, one
        add (so one pack) each; returns (daemon, kept docs, the packs listed)."""
        d = self.daemon()
        d.start()
        keep = self.add_docs(d, nkeep, prefix="keep")
        gone = {}
        for i in range(ngone):
            gone.update(self.add_docs(d, 1, prefix="gone%d" % i))
        with d.connect() as c:
            for h in gone:
                self.assertIs(c.call("delete", ref=h).get("ok"), True)
        return d, keep, set(self.remote_packs())

    def test_status_right_after_gc_shows_the_packs_gone(self):
        """The packs a gc deletes are gone from `status` once its reply
        comes, even when the server makes the deletion wait (here a SlowDown
        with Retry-After: 2 on it; issue #28: status showed them for about
        two seconds after the reply)."""
        d, keep, before = self.packs_to_delete(2, 4)
        # the first delete request of the run is the packs' (the lease goes after them)
        self.srv.control(reset_counters=True, fault_rate=1, faults=["503"], retry_after=2,
                         fault_methods=["DELETE", "POST"], fault_limit=1)
        try:
            with d.connect() as c:
                r = c.call("gc", timeout=120 * ct.SLOW)
                self.assertIs(r.get("ok"), True, ct.short(r))
                st = c.call("status")
            faults = self.srv.counters()["faults_total"]
        finally:
            self.srv.control(clear_faults=True)
        self.assertEqual(faults, 1, "test setup: the deletion got its SlowDown")
        self.assertGreaterEqual(r.get("packs_deleted", 0), 4, ct.short(r))
        # what status should have said: the bucket once the deletion is done
        deadline = time.monotonic() + 30 * ct.SLOW
        while len(self.remote_packs()) > len(before) - 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.remote_packs()
        self.assertLessEqual(len(left), len(before) - 4, "packs gc deleted still in the bucket")
        self.assertEqual((st["packs"], st["pack_bytes"]),
                         (len(left), sum(p.size for p in left.values())),
                         "status right after gc %r vs the packs in the bucket" % ct.short(r))
        self.assert_docs(d, keep)
        d.stop()

    def test_gc_deletes_packs_with_delete_objects(self):
        """The packs a gc empties go in DeleteObjects requests (POST ?delete),
        fewer requests than packs; every one of them leaves the bucket, and
        what is kept stays readable."""
        d, keep, before = self.packs_to_delete(3, 12)
        # Deletes are batched when they overlap: with 200 ms per request the
        # gc empties its packs (a database commit each) faster than a delete
        # returns, however loaded the machine is.
        self.srv.control(reset_counters=True, latency_ms=200)
        with d.connect() as c:
            r = c.call("gc", timeout=120 * ct.SLOW)
        self.assertIs(r.get("ok"), True, ct.short(r))
        deleted = r.get("packs_deleted", 0)
        self.assertGreaterEqual(deleted, 12, ct.short(r))
        deadline = time.monotonic() + 30 * ct.SLOW
        while len(before - set(self.remote_packs())) < deleted and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(len(before - set(self.remote_packs())), deleted, "packs gc deleted still in the bucket")
        fwd = self.srv.counters()["forwarded"]
        self.srv.control(latency_ms=0)
        self.assertGreater(fwd.get("POST", 0), 0, "no DeleteObjects request: %r" % fwd)
        self.assertLess(fwd.get("POST", 0) + fwd.get("DELETE", 0), deleted,
                        "as many delete requests as packs: %r" % fwd)
        self.assertEqual(self.rejected(), {}, "requests the proxy refused")
        self.assert_docs(d, keep)
        d.stop()


# --------------------------------------------------------------------------
# 9. --rebuild-index from the bucket
# --------------------------------------------------------------------------


class RebuildIndex(S3Case):
    def rebuild(self, d, timeout=300 * ct.SLOW):
        """cairnd --rebuild-index on d's data dir and backend; (exit, output)."""
        p = subprocess.run(d.command() + ["--rebuild-index"], env=d.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")

    def fill(self):
        d = self.daemon()
        d.start()
        docs = self.add_docs(d, 20, size=5000)
        with d.connect() as c:
            big = os.urandom(2 * MiB)
            r = c.add(big, name="big")
            self.assertIs(r.get("ok"), True, ct.short(r))
            docs[r["hash"]] = big
            # a delete, so that a rebuild has a tombstone to honour
            victim = next(iter(docs))
            self.assertIs(c.call("delete", ref=victim).get("ok"), True)
            del docs[victim]
        self.assertEqual(d.status()["documents"], len(docs))
        d.stop()
        return d, docs, victim

    def test_rebuild_from_bucket_alone(self):
        d, docs, victim = self.fill()
        d2 = self.daemon()  # a fresh data dir
        self.assertFalse(os.path.exists(d2.data_dir))
        rc, out = self.rebuild(d2)
        self.assertEqual(rc, 0, out)
        d2.start()
        st = d2.status()
        self.assertEqual(st["documents"], len(docs), "rebuilt %d documents, expected %d\n%s"
                         % (st["documents"], len(docs), out))
        self.assert_docs(d2, docs)
        with d2.connect() as c:
            frames, got = c.get(victim)
            self.assertIsNone(got, "the rebuild brought a deleted document back")
            self.assertEqual(c.call("stat", ref="big").get("ok"), True)
        self.assert_verify_ok(d2)
        d2.stop()

    def rebuild_with_failing_reads(self, d):
        """cairnd --rebuild-index on d, with every S3 request failing from
        the first one after the open-time probe: each request waits 1 s in
        the proxy before its fault is picked, so faults switched on when the
        probe's answer is seen hit the rebuild's own reads. Returns (exit,
        output, the faults injected)."""
        self.srv.control(reset_counters=True, latency_ms=1000)
        p = subprocess.Popen(d.command() + ["--rebuild-index"], env=d.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        deadline = time.monotonic() + 60 * ct.SLOW
        while not any(e.get("status") == 200 for e in self.srv.requests()):
            if p.poll() is not None:
                self.fail("the rebuild ended before its probe was answered: %r" % p.stdout.read())
            self.assertLess(time.monotonic(), deadline, "no request of the rebuild was answered")
            time.sleep(0.05)
        self.srv.control(fault_rate=1.0, faults=["503", "500", "reset_request"], seed=7)
        try:
            out, _ = p.communicate(timeout=UNAVAILABLE_BOUND * 3)
        except subprocess.TimeoutExpired:
            self.fail("cairnd --rebuild-index hangs when every read fails")
        faults = self.srv.counters()["faults_total"]
        self.srv.clean()
        out = out.decode("utf-8", "replace")
        sys.stderr.write("# rebuild with failing reads: exit %d, %d faults: %s\n"
                         % (p.returncode, faults, out.strip().splitlines()[-1:] if out.strip() else ""))
        self.assertGreater(faults, 0, "no fault hit the rebuild: the test did not test a failing read")
        return p.returncode, out, faults

    def test_rebuild_with_failing_reads_fails_and_keeps_the_database(self):
        d, docs, _ = self.fill()
        db = os.path.join(d.data_dir, "cairn.db")
        with open(db, "rb") as f:
            db_before = f.read()
        # the backend gives up on a request after a short timeout
        d.args[1] = self.url(timeout=4, stall_timeout=2, connect_timeout=2)
        rc, out, _ = self.rebuild_with_failing_reads(d)
        problems = []
        if rc == 0:
            problems.append("--rebuild-index exited 0 although every read of the bucket failed:\n%s" % out[-3000:])
        elif not any(w in out.lower() for w in ("unavailable", "503", "timed out", "cannot reach", "failed")):
            problems.append("--rebuild-index failed without saying why:\n%s" % out[-3000:])
        # the database the next start opens is the old one, not an emptier one
        with open(db, "rb") as f:
            db_after = f.read()
        entries = sorted(os.listdir(d.data_dir))
        sys.stderr.write("# data dir after the failed rebuild: %r\n" % entries)
        if db_after != db_before:
            problems.append("the failed rebuild left a different cairn.db in place (%d bytes, %d before); "
                            "data dir: %r" % (len(db_after), len(db_before), entries))
        d.args[1] = self.url()
        d.start()
        n = d.status()["documents"]
        if n != len(docs):
            problems.append("after the failed rebuild a start serves %d documents, %d before\n%s"
                            % (n, len(docs), d.log_tail()))
        else:
            self.assert_docs(d, docs)
        d.stop()
        self.assertEqual(problems, [], "\n".join(problems))

    def test_rebuild_into_fresh_dir_with_failing_reads_fails(self):
        _, docs, _ = self.fill()
        d2 = self.daemon(url=self.url(timeout=4, stall_timeout=2, connect_timeout=2))
        rc, out, _ = self.rebuild_with_failing_reads(d2)
        self.assertNotEqual(rc, 0, "--rebuild-index exited 0 although every read failed:\n%s" % out[-3000:])
        self.assertTrue(any(w in out.lower() for w in ("unavailable", "503", "timed out", "cannot reach", "failed")),
                        "--rebuild-index failed without saying why:\n%s" % out[-3000:])


if __name__ == "__main__":
    ct.main()
