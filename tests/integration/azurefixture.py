"""A private Azure Blob Storage emulator on loopback for the azure backend's
tests (Python 3 standard library only).

    srv = AzureServer(base_dir, containers=["cairn"]).start()
    url = srv.url("cairn", "store/")        # for cairnd --backend (account_key in the URL)
    env = srv.env()                         # AZURE_STORAGE_CONNECTION_STRING
    srv.list_blobs("cairn", "store/")       # [(name, size)], through the REST API
    srv.account_sas("rl")                   # an account SAS token with those permissions
    srv.stop()

    proxy = FaultProxy(srv).start()         # in front of it, a node process
    proxy.endpoint                          # http://127.0.0.1:PORT/devstoreaccount1
    proxy.set(rate=0.1, kinds=["503", "500", "reset", "lost", "truncate"])
    proxy.counts                            # {"503": n, ...}
    proxy.stop()

start() runs Azurite (npm azurite, pinned by tests/azure/package-lock.json)
on 127.0.0.1 with --disableTelemetry (it reports usage otherwise) and
--inMemoryPersistence, so nothing is left behind (with persist=True its
blobs are files under base_dir/data instead, so that a kill9() and a start()
on the same port keep them); Azurite checks SharedKey
and SAS signatures itself. Its output goes to base_dir/azurite.log.
Containers are made, and blobs listed, with requests this module signs on
its own (SharedKey, written from the documented rules), so that the tests do
not trust the signer under test to check it.

Every server is stopped by its pid: stop() (SIGTERM, then SIGKILL), kill9(),
and an atexit hook for whatever is still running when the test process ends.

Skips (unittest.SkipTest) when node or tests/azure/node_modules is missing
(tests/azure/setup.sh installs it; scripts/check runs that).
"""

import base64
import email.utils
import hashlib
import hmac
import os
import re
import shutil
import socket
import subprocess
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import serverproc
from serverproc import ServerProcess

AZ_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "azure"))
NODE_MODULES = os.path.join(AZ_DIR, "node_modules")
AZURITE_JS = os.path.join(NODE_MODULES, "azurite", "dist", "src", "blob", "main.js")
PROXY_JS = os.path.join(AZ_DIR, "proxy.js")
START_TIMEOUT = 30
STOP_TIMEOUT = 10
VERSION = "2021-12-02"

# Azurite's documented development account and key (public by design).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_LIVE = serverproc.live_set()


def node_path():
    return os.environ.get("CAIRN_TEST_NODE") or shutil.which("node") or shutil.which("nodejs")


def require_tools():
    """Raises unittest.SkipTest unless node and Azurite are there."""
    if node_path() is None:
        raise unittest.SkipTest("node is not installed (Debian package nodejs)")
    if not os.path.isfile(AZURITE_JS):
        raise unittest.SkipTest("%s is missing: run tests/azure/setup.sh (npm ci)" % AZURITE_JS)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_key_string(method, path, query, headers, account=ACCOUNT):
    """The Blob service's SharedKey string-to-sign (for versions since
    2015-02-21): `path` as sent, `query` a list of (name, value) decoded."""
    h = {k.lower(): v for k, v in headers.items()}
    length = h.get("content-length", "")
    std = [h.get("content-encoding", ""), h.get("content-language", ""), "" if length in ("", "0") else length,
           h.get("content-md5", ""), h.get("content-type", ""), h.get("date", ""), h.get("if-modified-since", ""),
           h.get("if-match", ""), h.get("if-none-match", ""), h.get("if-unmodified-since", ""), h.get("range", "")]
    xms = sorted((k, re.sub(r"\s+", " ", v.strip())) for k, v in h.items() if k.startswith("x-ms-"))
    res = "/" + account + path
    params = {}
    for k, v in query:
        params.setdefault(k.lower(), []).append(v)
    for k in sorted(params):
        res += "\n%s:%s" % (k, ",".join(sorted(params[k])))
    return method + "\n" + "\n".join(std) + "\n" + "".join("%s:%s\n" % kv for kv in xms) + res


class AzureServer(ServerProcess):
    """One Azurite blob service on 127.0.0.1. Attributes: host, port,
    endpoint, account, key, log_path, pid."""

    LOG_NAME = "azurite"
    LIVE = _LIVE

    def __init__(self, base_dir, containers=(), persist=False):
        self.base = os.path.abspath(base_dir)
        # persist: blobs on disk in base_dir/data (kept across kill9() and start()), else in memory
        self.persist = persist
        self.host = "127.0.0.1"
        self.account = ACCOUNT
        self.key = KEY
        self.containers = list(containers)
        self.log_path = os.path.join(self.base, "azurite.log")
        self.port = None
        self.proc = None

    def start(self, timeout=START_TIMEOUT):
        assert not self.running()
        require_tools()
        os.makedirs(self.base, exist_ok=True)
        if self.port is None:
            self.port = _free_port()
        args = [node_path(), AZURITE_JS, "--blobHost", self.host, "--blobPort", str(self.port),
                "--disableTelemetry"]
        if self.persist:
            args += ["--location", os.path.join(self.base, "data")]
        else:
            args += ["--inMemoryPersistence"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=self.base, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         close_fds=True)
        _LIVE.add(self)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill9()
                    raise AssertionError("Azurite did not start\n" + self.log_tail())
                time.sleep(0.1)
        for c in self.containers:
            self.create_container(c)
        return self

    # -- addresses

    @property
    def endpoint(self):
        """http://127.0.0.1:PORT/devstoreaccount1, the blob service (path style)."""
        return "http://%s:%d/%s" % (self.host, self.port, self.account)

    def url(self, container, prefix="", key=True, **params):
        """azure://ACCOUNT/CONTAINER/PREFIX?endpoint=..&allow_http=1[&account_key=..]&PARAMS."""
        q = [("endpoint", self.endpoint), ("allow_http", "1")]
        if key:
            q.append(("account_key", self.key))
        q = [(k, v) for k, v in q if k not in params] + sorted(params.items())
        query = "&".join("%s=%s" % (urllib.parse.quote(str(k), safe=""), urllib.parse.quote(str(v), safe=""))
                         for k, v in q)
        return "azure://%s/%s/%s?%s" % (self.account, container, urllib.parse.quote(prefix, safe="/"), query)

    def connection_string(self):
        return "DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;" % (
            self.account, self.key, self.endpoint)

    def env(self):
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}

    # -- requests of our own

    def request(self, method, container, blob=None, query=(), body=b"", headers=None, timeout=30):
        """(status, headers, body) of one SharedKey-signed request."""
        path = "/%s/%s" % (self.account, container)
        if blob is not None:
            path += "/" + urllib.parse.quote(blob, safe="/")
        h = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": VERSION}
        h.update(headers or {})
        if method in ("PUT", "POST"):
            h["Content-Length"] = str(len(body))
            h.setdefault("Content-Type", "application/octet-stream")
        sts = shared_key_string(method, path, list(query), h, self.account)
        sig = base64.b64encode(hmac.new(base64.b64decode(self.key), sts.encode(), hashlib.sha256).digest())
        h["Authorization"] = "SharedKey %s:%s" % (self.account, sig.decode())
        qs = urllib.parse.urlencode(list(query), quote_via=urllib.parse.quote)
        url = "http://%s:%d%s%s" % (self.host, self.port, path, "?" + qs if qs else "")
        req = urllib.request.Request(url, data=body if method in ("PUT", "POST") else None, method=method,
                                     headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def create_container(self, name):
        st, _, body = self.request("PUT", name, query=[("restype", "container")])
        assert st in (201, 409), (st, body)

    def list_blobs(self, container, prefix=""):
        """[(name, size)] of the container's blobs under prefix, all pages."""
        out, marker = [], ""
        while True:
            q = [("restype", "container"), ("comp", "list"), ("prefix", prefix)]
            if marker:
                q.append(("marker", marker))
            st, _, body = self.request("GET", container, query=q)
            assert st == 200, (st, body)
            root = ET.fromstring(body)
            for b in root.iter("Blob"):
                out.append((b.findtext("Name"), int(b.find("Properties").findtext("Content-Length"))))
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return out

    def get_blob(self, container, name):
        st, _, body = self.request("GET", container, name)
        assert st == 200, (st, body)
        return body

    def block_list(self, container, name):
        """(committed, uncommitted) block counts of a blob."""
        st, _, body = self.request("GET", container, name, query=[("comp", "blocklist"), ("blocklisttype", "all")])
        assert st == 200, (st, body)
        root = ET.fromstring(body)
        count = lambda tag: len(root.findall("./%s/Block" % tag))
        return count("CommittedBlocks"), count("UncommittedBlocks")

    def account_sas(self, permissions, expiry="2099-01-01T00:00:00Z", version="2019-12-12"):
        """An account SAS token for the blob service (ss=b, srt=sco)."""
        sts = "\n".join([self.account, permissions, "b", "sco", "", expiry, "", "", version, ""])
        sig = base64.b64encode(hmac.new(base64.b64decode(self.key), sts.encode(), hashlib.sha256).digest()).decode()
        return urllib.parse.urlencode([("sv", version), ("ss", "b"), ("srt", "sco"), ("sp", permissions),
                                       ("se", expiry), ("sig", sig)], quote_via=urllib.parse.quote)



def _setting(name, doc):
    """A FaultProxy setting, read from and written to the proxy."""
    return property(lambda self: self.state()[name], lambda self, v: self.control(**{name: v}), doc=doc)


class FaultProxy(ServerProcess):
    """An HTTP proxy on 127.0.0.1 in front of an AzureServer, a node process
    of its own (tests/azure/proxy.js, which says what each fault does), that
    injects faults into a share `rate` of the requests, of the kinds given:
    "503" (ServerBusy, Retry-After: 1), "500" (InternalError), "reset" (the
    connection closed before the request is forwarded), "lost" (forwarded
    and carried out, then the connection closed without an answer),
    "truncate" (half of a GET's body, then closed) and "stall" (forwarded and
    carried out, then nothing more is sent - for a GET after the headers and
    half of the body - until the client closes the connection or stall_max_s
    pass). profile(name) sets the latency profile (PROFILES: clean, rtt20,
    rtt50, rtt100). The signature covers no Host, so requests pass through
    unchanged, streamed on kept-alive connections. Azurite does not check the
    request's time; the proxy does, as Azure does (403 AuthenticationFailed
    beyond 15 minutes), against its clock moved by clock_offset seconds.
    delay_ms is added to every request (a round trip of that much more).
    Reading counts, requests or methods asks the proxy; reset_counters()
    zeroes them."""

    KINDS = ("503", "500", "reset", "lost", "truncate", "stall")
    PROFILES = {"clean": 0, "rtt20": 20, "rtt50": 50, "rtt100": 100}
    LOG_NAME = "fault proxy"
    LIVE = _LIVE

    def __init__(self, srv, seed=1):
        self.srv = srv
        self.seed = seed
        self.log_path = os.path.join(srv.base, "faultproxy.log")
        self.port = None
        self.control_port = None
        self.proc = None

    def start(self, timeout=START_TIMEOUT):
        assert not self.running()
        require_tools()
        args = [node_path(), PROXY_JS, "--upstream-port", str(self.srv.port), "--seed", str(self.seed)]
        ready = self.spawn_ready(args, AZ_DIR, timeout, "proxy.js")
        self.port, self.control_port = ready["port"], ready["control_port"]
        return self

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d/%s" % (self.port, self.srv.account)

    # -- the control port

    def control(self, **change):
        """POSTs the change (fields of tests/azure/proxy.js) and returns the new state."""
        st, reply = serverproc.json_request("POST", "http://127.0.0.1:%d/control" % self.control_port, change)
        if st != 200:
            raise AssertionError("proxy control %r refused: %s %r" % (change, st, reply))
        return reply

    def state(self):
        st, reply = serverproc.json_request("GET", "http://127.0.0.1:%d/control" % self.control_port)
        assert st == 200, (st, reply)
        return reply

    def set(self, rate, kinds=("503",)):
        self.control(rate=rate, kinds=list(kinds))

    def profile(self, name):
        """Latency profile `name` (PROFILES): that many ms before every answer."""
        self.delay_ms = self.PROFILES[name]

    def reset_counters(self):
        self.control(reset_counters=True)

    def snapshot(self):
        """A consistent copy of the counters: {"requests": methods, "faults":
        counts, "total": requests}."""
        s = self.state()
        return {"requests": s["requests"], "faults": s["faults"], "total": s["total"]}

    counts = property(lambda self: self.state()["faults"], doc="faults injected, per kind")
    requests = property(lambda self: self.state()["total"], doc="requests seen")
    methods = property(lambda self: self.state()["requests"], doc="requests seen, per method")
    delay_ms = _setting("delay_ms", "ms added before every answer (rtt20: 20)")
    clock_offset = _setting("clock_offset", "seconds the proxy's clock is ahead of this machine's")
    stall_max_s = _setting("stall_max_s", "seconds after which a stalled connection is closed")

