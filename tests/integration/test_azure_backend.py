#!/usr/bin/env python3
"""The azure backend against Azurite on 127.0.0.1 (azurefixture.py; one
emulator per class, with a container of its own; skipped without node and
tests/azure/node_modules). Azurite checks SharedKey and SAS signatures, so a
request signed wrong fails here as it would on Azure.

  Start           what cairnd refuses at start, and says why: a wrong key,
                  a read-only SAS token, a container that does not exist,
                  an endpoint nobody listens on, a clock an hour off (the
                  proxy checks x-ms-date as Azure does); a SAS token that may
                  write is taken, and so is the connection string
  Blocks          packs above the block size go up as Put Block + Put Block
                  List (the blob's committed blocks show it), and come back
                  whole, after --rebuild-index from the container alone
  Faults          8 clients at 10% injected faults (503, 500, resets, lost
                  answers, truncated bodies) through a proxy: no failure, no
                  lost add; kill -9 mid-add leaves only sealed packs
  ServerKilled    Azurite (on disk) killed with -9 while 4 clients add, with
                  uploads in flight: no add fails, none acknowledged is lost
  ReadCache       a second cairnd reads what the first fetched from its
                  read cache on disk, without a Get Blob
  Shared          three daemons on one container: adds, deletes and a gc
                  reach every one
  Secrets         the key in the config file (chmod 600) is in neither the
                  log, nor status, nor --print-config; a readable file is
                  refused
"""

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest

import azurefixture
import cairntest as ct
import packfmt as pf
from test_shared import SharedChecks

CRED_VARS = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
             "AZURE_STORAGE_SAS_TOKEN", "CAIRN_TEST_BACKEND")
OTHER_KEY = "AAAAvdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class AzureDaemon(ct.Daemon):
    """A Daemon whose environment holds only the credentials the test gives
    it, with HOME and XDG_CONFIG_HOME in an empty directory."""

    def __init__(self, testcase, home, **kw):
        super().__init__(testcase, **kw)
        self.home = home

    def env(self):
        env = dict(os.environ)
        for k in CRED_VARS:
            env.pop(k, None)
        env["HOME"] = self.home
        env["XDG_CONFIG_HOME"] = os.path.join(self.home, ".config")
        env["CAIRN_SOCKET"] = self.socket_path
        env["CAIRN_DATA_DIR"] = self.data_dir
        env.update(self.extra_env)
        return env


def daemon_output(d):
    """What cairnd wrote, without the harness's "=== start" command lines."""
    return "".join(l for l in d.log_text().splitlines(True) if not l.startswith("=== start"))


class AzureCase(ct.StoreChecks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        azurefixture.require_tools()
        cls.container = "c-" + cls.__name__.lower()
        cls.srv_base = ct.make_tempdir(None, prefix="cairn-azsrv-")
        cls.addClassCleanup(shutil.rmtree, cls.srv_base, True)
        cls.srv = azurefixture.AzureServer(cls.srv_base, containers=[cls.container])
        cls.addClassCleanup(cls.srv.stop)
        cls.srv.start()

    def setUp(self):
        self.base = ct.make_tempdir(self, prefix="cairn-az-")
        self.home = os.path.join(self.base, "home")
        os.makedirs(self.home)
        self.prefix = "t-%s/store" % self._testMethodName
        self.ndaemons = 0

    def url(self, container=None, endpoint=None, **params):
        params.setdefault("stall_timeout", 5)
        params.setdefault("timeout", 30)
        q = "&".join("%s=%s" % kv for kv in sorted(params.items()))
        return "azure://%s/%s/%s?allow_http=1&endpoint=%s&%s" % (
            self.srv.account, container or self.container, self.prefix, endpoint or self.srv.endpoint, q)

    def daemon(self, url=None, env=None, args=()):
        self.ndaemons += 1
        dbase = os.path.join(self.base, "d%d" % self.ndaemons)
        os.makedirs(dbase)
        if env is None:
            env = {"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_KEY": self.srv.key}
        return AzureDaemon(self, self.home, base=dbase, args=["--backend", url or self.url()] + list(args),
                           env=env)

    def blobs(self):
        return self.srv.list_blobs(self.container, self.prefix + "/")

    def assert_nothing_local(self, d):
        objects = os.path.join(d.data_dir, "objects")
        found = []
        for dirpath, _, files in os.walk(objects):
            found += files
        self.assertEqual(found, [], "packs stored locally in %s" % objects)


class Start(AzureCase):
    def test_wrong_key_is_refused(self):
        d = self.daemon(env={"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_KEY": OTHER_KEY})
        out = self.assert_start_refused(d, "refused our account key")
        self.assertIn("AZURE_STORAGE_KEY", out)
        self.assertNotIn(OTHER_KEY, daemon_output(d))

    def test_read_only_sas_is_refused(self):
        sas = self.srv.account_sas("rl")
        d = self.daemon(env={"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_SAS_TOKEN": sas})
        self.assert_start_refused(d, "does not allow writing")
        self.assertNotIn(sas.split("sig=")[1], daemon_output(d))
        self.assertEqual(self.blobs(), [])

    def test_sas_that_may_write_is_taken(self):
        sas = self.srv.account_sas("racwdl")
        d = self.daemon(env={"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_SAS_TOKEN": sas})
        d.start()
        docs = self.add_docs(d, 3)
        self.assert_docs(d, docs)
        # the write check at start leaves nothing behind
        self.assertFalse([n for n, _ in self.blobs() if "/probe/" in n], self.blobs())
        self.assert_nothing_local(d)

    def test_missing_container_is_refused(self):
        d = self.daemon(url=self.url(container="no-such-container"))
        self.assert_start_refused(d, "container no-such-container does not exist")

    def test_unreachable_endpoint_is_refused(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = self.daemon(url=self.url(endpoint="http://127.0.0.1:%d/%s" % (port, self.srv.account), timeout=3,
                                     stall_timeout=2, connect_timeout=1))
        self.assert_start_refused(d, "cannot reach")

    def test_clock_skew_is_refused_and_said_plainly(self):
        proxy = azurefixture.FaultProxy(self.srv).start()
        self.addCleanup(proxy.stop)
        proxy.clock_offset = 3600
        d = self.daemon(url=self.url(endpoint=proxy.endpoint))
        out = self.assert_start_refused(d, "is this machine's clock right?")
        self.assertIn("AuthenticationFailed", out)
        proxy.clock_offset = 0
        d.start()
        self.add_docs(d, 1)

    def test_no_credentials_is_refused(self):
        d = self.daemon(env={})
        self.assert_start_refused(d, "no credentials")

    def test_connection_string(self):
        d = self.daemon(url="azure://%s/%s/%s?allow_http=1" % (self.srv.account, self.container, self.prefix),
                        env=self.srv.env())
        d.start()
        docs = self.add_docs(d, 2)
        self.assert_docs(d, docs)
        self.assertIn("credentials from AZURE_STORAGE_CONNECTION_STRING", daemon_output(d))


class Blocks(AzureCase):
    def test_blocks_and_rebuild_from_the_container(self):
        env = {"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_KEY": self.srv.key,
               "CAIRN_TEST_AZURE_BLOCK_SIZE": "65536"}
        d = self.daemon(env=env)
        d.start()
        big = os.urandom(3 * 1024 * 1024)
        with d.connect() as c:
            r = c.add(big, name="big")
        self.assertIs(r.get("ok"), True, r)
        docs = self.add_docs(d, 5)
        docs[r["hash"]] = big
        d.stop()
        packs = [n for n, size in self.blobs() if "/packs/" in n]
        self.assertTrue(packs, self.blobs())
        committed = [self.srv.block_list(self.container, n) for n in packs]
        self.assertTrue(any(c > 1 and u == 0 for c, u in committed), committed)
        self.assert_nothing_local(d)
        # a new data directory, rebuilt from the container alone, listed 2 blobs a page
        env["CAIRN_TEST_AZURE_LIST_PAGE"] = "2"
        d2 = self.daemon(env=env, args=["--rebuild-index"])
        d2.start(wait=False)
        self.assertEqual(d2.wait(120 * ct.SLOW), 0, d2.log_tail())
        d3 = AzureDaemon(self, self.home, base=d2.base, data_dir=d2.data_dir, socket_path=d2.socket_path,
                         args=["--backend", self.url()], env=env)
        d3.start()
        self.assert_docs(d3, docs)


class Faults(AzureCase):
    THREADS = 8
    OPS = 30
    SIZE = 8 * 1024

    def test_faults_8_clients_lose_nothing(self):
        proxy = azurefixture.FaultProxy(self.srv, seed=1234).start()
        self.addCleanup(proxy.stop)
        d = self.daemon(url=self.url(endpoint=proxy.endpoint, stall_timeout=2, timeout=120))
        d.start()
        proxy.set(0.1, azurefixture.FaultProxy.KINDS)
        docs, counts, failures = ct.run_clients(self, d, self.THREADS, self.OPS, self.SIZE)
        # reads after the clients: a get of everything, with faults still on
        self.assert_docs(d, docs)
        sys.stderr.write("# faults injected: %r of %d requests\n" % (proxy.counts, proxy.requests))
        self.assertEqual(failures, [], "%d failed operations under faults\n%s" % (len(failures), d.log_tail()))
        self.assertEqual(counts["add"] + counts["get"], self.THREADS * self.OPS)
        injected = {k: v for k, v in proxy.counts.items() if v > 0}
        self.assertGreaterEqual(len(injected), 4, "faults of too few kinds were injected: %r" % proxy.counts)
        self.assertEqual(d.status()["documents"], len(docs))
        proxy.set(0)
        self.assert_verify_ok(d)
        d.stop()
        # everything acknowledged is in the container: rebuilt from it alone
        d2 = self.daemon(args=["--rebuild-index"])
        d2.start(wait=False)
        self.assertEqual(d2.wait(120 * ct.SLOW), 0, d2.log_tail())
        d3 = AzureDaemon(self, self.home, base=d2.base, data_dir=d2.data_dir, socket_path=d2.socket_path,
                         args=["--backend", self.url()], env=d2.extra_env)
        d3.start()
        self.assert_docs(d3, docs)
        self.assert_nothing_local(d3)

    def test_kill9_mid_add_leaves_no_partial_pack(self):
        d = self.daemon(env={"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_KEY": self.srv.key,
                             "CAIRN_TEST_AZURE_BLOCK_SIZE": "65536"})
        d.start()
        docs = self.add_docs(d, 4)
        # a big add, killed while its blocks go up
        big = os.urandom(8 * 1024 * 1024)
        c = d.connect()
        rid = c.next_id()
        c.send({"id": rid, "op": "add", "data": big[:ct.MAX_DATA], "more": True})
        pos = ct.MAX_DATA
        while pos < len(big) // 2:
            c.send({"id": rid, "op": "data", "data": big[pos:pos + ct.MAX_DATA], "more": True})
            pos += ct.MAX_DATA
        d.kill9()
        c.close()
        # every blob under a pack's final name is a complete, sealed pack
        packs = [name for name, size in self.blobs() if "/packs/" in name]
        self.assertTrue(packs)
        for name in packs:
            pack = pf.Pack(name, self.srv.get_blob(self.container, name))
            self.assertTrue(pack.sealed, "%s is not a complete pack (%s)" % (name, pack.tail))
        d.start()
        self.assert_docs(d, docs)
        self.assert_verify_ok(d)


class ServerKilled(AzureCase):
    """Azurite, keeping its blobs on disk, killed with -9 while 4 clients add
    and started again on the same port: the uploads in flight are retried,
    no add fails, none acknowledged is lost. Azurite itself writes its
    metadata to disk only every 5 s (LokiJS autosave), so a kill loses what
    it acknowledged in the 5 s before - its own limit, which Azure does not
    have. So the proxy in front holds every request for 8 s from before
    the first add: what Azurite acknowledged (the daemon's start) is on its
    disk by the kill, every client's first add is waiting on its upload
    then, and the held uploads go on to a server that is down or starting
    again. Holding from a moment later instead raced the clients: a fast
    build had finished all their work before the hold began."""

    @classmethod
    def setUpClass(cls):
        azurefixture.require_tools()
        cls.container = "c-serverkilled"
        cls.srv_base = ct.make_tempdir(None, prefix="cairn-azsrv-")
        cls.addClassCleanup(shutil.rmtree, cls.srv_base, True)
        cls.srv = azurefixture.AzureServer(cls.srv_base, containers=[cls.container], persist=True)
        cls.addClassCleanup(cls.srv.stop)
        cls.srv.start()

    def test_kill9_of_the_server_mid_upload(self):
        proxy = azurefixture.FaultProxy(self.srv).start()
        self.addCleanup(proxy.stop)
        d = self.daemon(url=self.url(endpoint=proxy.endpoint, timeout=120, stall_timeout=3))
        d.start()
        proxy.delay_ms = 8000
        result = {}

        def clients():
            result["out"] = ct.run_clients(self, d, 4, 20, 64 * 1024)

        t = threading.Thread(target=clients, daemon=True)
        t.start()
        time.sleep(7.0)  # past Azurite's 5 s autosave of the daemon's start
        held = proxy.requests
        self.assertEqual(result, {}, "the clients were done before the kill")
        self.srv.kill9()
        time.sleep(1.0)
        self.srv.start()
        proxy.delay_ms = 0
        t.join(300 * ct.SLOW)
        self.assertFalse(t.is_alive(), d.log_tail())
        docs, counts, failures = result["out"]
        self.assertEqual(failures, [], "%d failed operations\n%s" % (len(failures), d.log_tail()))
        self.assertGreater(counts["add"], 0)
        self.assertGreater(proxy.requests, held, "no request came after the restart")
        self.assert_docs(d, docs)
        d.stop()
        # every blob under a pack's name is a sealed pack, and they hold every acknowledged add
        for name in [n for n, _ in self.blobs() if "/packs/" in n]:
            self.assertTrue(pf.Pack(name, self.srv.get_blob(self.container, name)).sealed, name)
        d2 = self.daemon(args=["--rebuild-index"])
        d2.start(wait=False)
        self.assertEqual(d2.wait(120 * ct.SLOW), 0, d2.log_tail())
        d3 = AzureDaemon(self, self.home, base=d2.base, data_dir=d2.data_dir, socket_path=d2.socket_path,
                         args=["--backend", self.url()], env=d2.extra_env)
        d3.start()
        self.assert_docs(d3, docs)


class ReadCache(AzureCase):
    def test_second_read_needs_no_request(self):
        proxy = azurefixture.FaultProxy(self.srv).start()
        self.addCleanup(proxy.stop)
        d = self.daemon(url=self.url(endpoint=proxy.endpoint))
        d.start()
        data = os.urandom(5 * 1024 * 1024 + 123)
        with d.connect() as c:
            r = c.add(data, name="doc")
        self.assertIs(r.get("ok"), True, r)
        d.stop()
        # a new cairnd: its memory caches are empty; the first read goes to the service
        d.start()
        proxy.reset_counters()
        self.assert_docs(d, {r["hash"]: data})
        self.assertGreater(proxy.methods.get("GET", 0), 0, "the first read asked the service nothing")
        s = d.status()
        self.assertGreaterEqual(s["read_cache_fetched"], len(data))
        d.stop()
        # another: the slice files on disk serve the read, no Get Blob
        d.start()
        proxy.reset_counters()
        self.assert_docs(d, {r["hash"]: data})
        self.assertEqual(proxy.methods.get("GET", 0), 0, "the second read went to the service: %r" % proxy.methods)
        s = d.status()
        self.assertEqual((s["read_cache_misses"], s["read_cache_fetched"]), (0, 0), s)
        self.assertGreater(s["read_cache_hits"], 0)


class Shared(SharedChecks, AzureCase):
    """Several daemons on one container (test_shared.py's checks): what one
    writes reaches the others at a refresh, whose listings start after keys
    they make up themselves (the backend's markers, and the scan when it
    has none); a gc waits for the others, then deletes."""

    def shared(self, n):
        ds = []
        env = {"AZURE_STORAGE_ACCOUNT": self.srv.account, "AZURE_STORAGE_KEY": self.srv.key,
               "CAIRN_TEST_AZURE_LIST_PAGE": "2"}
        for i in range(n):
            conf = os.path.join(self.base, "cairn-%d.conf" % i)
            with open(conf, "w") as f:
                f.write("[store]\nrefresh_interval = 300ms\ngc_grace = 60s\nrepack_threshold = 60\n")
            ds.append(self.daemon(env=env, args=["--config", conf]))
        for d in ds:
            d.start()
        return ds

    def test_adds_deletes_and_gc_reach_every_daemon(self):
        ds = self.shared(3)
        docs = {}
        for i, d in enumerate(ds):
            for k in range(4):
                content = os.urandom(3000 + k)
                docs["d%d/%d" % (i, k)] = (self.add_ok(d, content, name="d%d/%d" % (i, k)), content)
        self.refresh_all(ds)
        for d in ds:
            self.get_all(d, {h: c for h, c in docs.values()}, "after a refresh")
        doomed = {docs["d0/%d" % k][0] for k in range(4)}
        for k in range(4):
            self.assertEqual(ds[1].cli("rm", "d0/%d" % k).returncode, 0)
        self.refresh_all(ds)
        keep = {h: c for h, c in docs.values() if h not in doomed}
        for d in ds:
            self.gone_all(d, doomed, "after the deletes")
            self.get_all(d, keep, "after the deletes")
        # a's gc: the others let go at their refreshes (well within the grace period), then it deletes
        deadline = time.monotonic() + 60 * ct.SLOW
        reclaimed = 0
        while time.monotonic() < deadline:
            reclaimed += self.gc(ds[0]).get("bytes_reclaimed", 0)
            if reclaimed:
                break
            self.refresh_all(ds)
            time.sleep(0.5)
        self.assertGreater(reclaimed, 0, ds[0].log_tail())
        self.refresh_all(ds)
        for d in ds:
            self.get_all(d, keep, "after gc")
            self.gone_all(d, doomed, "after gc")
            self.verify(d, "after gc")


class Secrets(AzureCase):
    def test_key_in_config_is_not_shown(self):
        conf = os.path.join(self.base, "cairn.conf")
        with open(conf, "w") as f:
            f.write("[backend]\nurl = %s\naccount_key = %s\n" % (self.url(), self.srv.key))
        os.chmod(conf, 0o644)
        d = self.daemon(env={}, args=["--config", conf])
        self.assert_start_refused(d, "chmod 600")
        os.chmod(conf, 0o600)
        d = self.daemon(env={}, args=["--config", conf])
        d.start()
        self.add_docs(d, 1)
        st = d.status()
        self.assertNotIn(self.srv.key, repr(st))
        self.assertIn("azure://%s/%s" % (self.srv.account, self.container), st.get("backend", ""))
        d.stop()
        self.assertNotIn(self.srv.key, daemon_output(d))
        self.assertNotIn(self.srv.key[:20], daemon_output(d))
        out = subprocess.run([ct.CAIRND, "--config", conf, "--print-config"], capture_output=True, text=True,
                             env=d.env(), timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn(self.srv.key[:20], out.stdout + out.stderr)
        self.assertIn("account_key", out.stdout)


if __name__ == "__main__":
    ct.main()
