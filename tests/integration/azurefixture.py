"""A private Azure Blob Storage emulator on loopback for the azure backend's
tests (Python 3 standard library only).

    srv = AzureServer(base_dir, containers=["cairn"]).start()
    url = srv.url("cairn", "store/")        # for cairnd --backend (account_key in the URL)
    env = srv.env()                         # AZURE_STORAGE_CONNECTION_STRING
    srv.list_blobs("cairn", "store/")       # [(name, size)], through the REST API
    srv.account_sas("rl")                   # an account SAS token with those permissions
    srv.stop()

    proxy = FaultProxy(srv).start()         # in front of it, in this process
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
import http.client
import http.server
import random
import threading
import email.utils
import hashlib
import hmac
import os
import re
import shutil
import signal
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

    def stop(self):
        return self._end(signal.SIGTERM)

    def kill9(self):
        return self._end(signal.SIGKILL)

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



_FAULT_BODY = ('<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code>'
               '<Message>injected by the test proxy\nRequestId:0</Message></Error>')


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of an AzureServer, in a thread of
    the test process, that injects faults into a share `rate` of the
    requests, of the kinds given: "503" (ServerBusy, Retry-After: 1), "500"
    (InternalError), "reset" (the connection closed before the request is
    forwarded), "lost" (forwarded and carried out, then the connection closed
    without an answer), "truncate" (half of a GET's body, then closed) and
    "stall" (forwarded and carried out, then nothing more is sent - for a GET
    after the headers and half of the body - until the client closes the
    connection or stall_max_s pass). profile(name) sets the latency profile
    (PROFILES: clean, rtt20, rtt50, rtt100).
    The signature covers no Host, so requests pass through unchanged. Azurite
    does not check the request's time; the proxy does, as Azure does (403
    AuthenticationFailed beyond 15 minutes), against its clock moved by
    clock_offset seconds. delay_ms is added to every request (a round trip
    of that much more); `methods` counts the requests per method."""

    KINDS = ("503", "500", "reset", "lost", "truncate", "stall")
    PROFILES = {"clean": 0, "rtt20": 20, "rtt50": 50, "rtt100": 100}

    def __init__(self, srv, seed=1):
        self.srv = srv
        self.rate = 0.0
        self.kinds = ["503"]
        self.counts = {k: 0 for k in self.KINDS}
        self.requests = 0
        self.clock_offset = 0  # seconds the "server clock" is ahead of this machine's
        self.delay_ms = 0  # added before every answer (rtt20: 20)
        self.methods = {}  # requests per method
        self.stall_max_s = 30  # a stalled connection is closed by the proxy after this
        self.stopping = threading.Event()
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.httpd = None
        self.thread = None

    def set(self, rate, kinds=("503",)):
        with self.lock:
            self.rate = rate
            self.kinds = list(kinds)

    def profile(self, name):
        """Latency profile `name` (PROFILES): that many ms before every answer."""
        self.delay_ms = self.PROFILES[name]

    def snapshot(self):
        """A consistent copy of the counters: {"requests": methods, "faults":
        counts, "total": requests}."""
        with self.lock:
            return {"requests": dict(self.methods), "faults": dict(self.counts), "total": self.requests}

    def _pick(self, method):
        with self.lock:
            self.requests += 1
            self.methods[method] = self.methods.get(method, 0) + 1
            if self.rng.random() >= self.rate:
                return None
            kinds = [k for k in self.kinds if k != "truncate" or method == "GET"]
            if not kinds:
                return None
            kind = self.rng.choice(kinds)
            self.counts[kind] += 1
            return kind

    def start(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _hold(self):
                """Sends nothing more until the client closes, stall_max_s pass
                or the proxy stops; then closes the connection."""
                self.close_connection = True
                try:
                    self.wfile.flush()
                    self.connection.settimeout(0.2)
                except OSError:
                    return
                deadline = time.monotonic() + proxy.stall_max_s
                while time.monotonic() < deadline and not proxy.stopping.is_set():
                    try:
                        if self.connection.recv(4096) == b"":
                            break  # the client gave up
                    except socket.timeout:
                        continue
                    except OSError:
                        break
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                stamp = self.headers.get("x-ms-date")  # a SAS request may carry none
                when = email.utils.parsedate_to_datetime(stamp).timestamp() if stamp else None
                if when is not None and abs(time.time() + proxy.clock_offset - when) > 15 * 60:
                    # what Azure answers a request dated more than 15 minutes off its clock
                    doc = (_FAULT_BODY.replace("injected by the test proxy", "Request date header too old: '%s'")
                           % ("AuthenticationFailed", self.headers.get("x-ms-date"))).encode()
                    self.send_response(403)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(doc)))
                    self.send_header("x-ms-error-code", "AuthenticationFailed")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(doc)
                    return
                kind = proxy._pick(self.command)
                if proxy.delay_ms:
                    time.sleep(proxy.delay_ms / 1000.0)
                if kind in ("503", "500"):
                    doc = (_FAULT_BODY % ("ServerBusy" if kind == "503" else "InternalError")).encode()
                    self.send_response(int(kind))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(doc)))
                    self.send_header("x-ms-error-code", "ServerBusy" if kind == "503" else "InternalError")
                    if kind == "503":
                        self.send_header("Retry-After", "1")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(doc)
                    return
                if kind == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                conn = http.client.HTTPConnection(proxy.srv.host, proxy.srv.port, timeout=60)
                try:
                    hdrs = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                    conn.request(self.command, self.path, body=body if self.command in ("PUT", "POST") else None,
                                 headers=hdrs)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                if kind == "lost":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if kind == "stall" and (self.command != "GET" or len(data) < 2):
                    self._hold()  # carried out, and no answer comes
                    return
                self.send_response(resp.status)
                head = self.command == "HEAD"
                for k, v in resp.getheaders():
                    # a HEAD's Content-Length is the blob's size, not that of its (empty) body
                    if k.lower() not in ("connection", "keep-alive", "transfer-encoding") and (
                            head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if kind == "stall":
                    self.wfile.write(data[:len(data) // 2])
                    self._hold()
                    return
                if kind == "truncate" and len(data) > 1:
                    self.wfile.write(data[:len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _any

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d/%s" % (self.port, self.srv.account)

    def stop(self):
        self.stopping.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
