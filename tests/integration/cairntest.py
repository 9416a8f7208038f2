"""Harness for cairn's integration tests (Python 3 standard library only).

The tests drive the real binaries: `cairnd` from $CAIRND and `cairn` from
$CAIRN (meson sets both; run by hand they default to build/daemon/cairnd and
build/client/cairn in the source tree). Every daemon a test starts is stopped
by the test (addCleanup), and every temporary directory lives under $TMPDIR
and is removed afterwards.

Contents:
  packb / unpackb      a small msgpack encoder and strict decoder
  Conn                 a raw protocol connection (frames, ids, streams)
  Daemon               start / stop (SIGTERM, exit 0 asserted) / kill9 / restart
  BACKEND, sftp_server the object backend the tests run against: the local
                       one, or with CAIRN_TEST_BACKEND=sftp an SFTP server
                       (sshfixture.py, one per test process) where every
                       Daemon gets a store of its own
  run_cli / spawn_wait a `cairn` invocation, with or without rusage
  main()               unittest runner; `--tap` (or CAIRN_TAP=1) prints TAP for
                       meson so skipped and failed cases stay visible
"""

import atexit
import hashlib
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))

CAIRND = os.environ.get("CAIRND") or os.path.join(REPO_ROOT, "build", "daemon", "cairnd")
CAIRN = os.environ.get("CAIRN") or os.path.join(REPO_ROOT, "build", "client", "cairn")

# ASan/UBSan builds are slower and use more memory; see scripts/check.
SANITIZED = os.environ.get("CAIRN_SANITIZED") == "1"
SLOW = 3 if SANITIZED else 1

MAX_FRAME = 1024 * 1024
MAX_DATA = 256 * 1024
MiB = 1024 * 1024
GiB = 1024 * MiB

STARTUP_TIMEOUT = 30 * SLOW
STOP_TIMEOUT = 60 * SLOW
IO_TIMEOUT = 60 * SLOW

# The object backend of every Daemon that does not pass its own --backend:
# "local" (the default, DATA_DIR/objects), or "sftp": a private sshd on
# 127.0.0.1 (sshfixture.py), started on first use and stopped at exit, with
# the store of each Daemon in <its base dir>/remote on that server.
# "s3" and "r2": a private S3 server (s3fixture.py: s3rver behind the
# signature-checking proxy), one per test process, each Daemon's packs under
# a prefix of its own in one bucket; r2 mode takes temporary credentials from
# the fixture's stand-in for Cloudflare's API, with a TTL short enough that
# they are renewed during the tests.
# "azure": a private Azurite (azurefixture.py), one per test process, each
# Daemon's packs under a prefix of its own in one container, the credentials
# in AZURE_STORAGE_CONNECTION_STRING (with BlobEndpoint) as blob-test has them.
BACKEND = os.environ.get("CAIRN_TEST_BACKEND") or "local"
if BACKEND not in ("local", "sftp", "s3", "r2", "azure"):
    raise SystemExit("CAIRN_TEST_BACKEND=%r: expected local, sftp, s3, r2 or azure" % BACKEND)
SFTP = BACKEND == "sftp"
S3 = BACKEND in ("s3", "r2")
AZURE = BACKEND == "azure"
REMOTE = SFTP or S3 or AZURE
AZURE_CONTAINER = "cairn-test"
S3_BUCKET = "cairn-test"
R2_TEMP_TTL = 6  # seconds: renewed after 4


# --------------------------------------------------------------------------
# msgpack
# --------------------------------------------------------------------------


class MsgpackError(ValueError):
    pass


class Raw:
    """Bytes inserted verbatim by packb(), to build malformed payloads."""

    def __init__(self, data):
        self.data = bytes(data)


class ExtType:
    def __init__(self, code, data):
        self.code = code
        self.data = data

    def __eq__(self, other):
        return isinstance(other, ExtType) and (self.code, self.data) == (other.code, other.data)

    def __repr__(self):
        return "ExtType(%d, %r)" % (self.code, self.data)


def packb(obj):
    out = bytearray()
    _pack(obj, out)
    return bytes(out)


def _pack(obj, out):
    if obj is None:
        out.append(0xC0)
    elif obj is False:
        out.append(0xC2)
    elif obj is True:
        out.append(0xC3)
    elif isinstance(obj, Raw):
        out += obj.data
    elif isinstance(obj, int):
        _pack_int(obj, out)
    elif isinstance(obj, float):
        out.append(0xCB)
        out += struct.pack(">d", obj)
    elif isinstance(obj, str):
        raw = obj.encode("utf-8")
        n = len(raw)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 0x100:
            out += struct.pack(">BB", 0xD9, n)
        elif n < 0x10000:
            out += struct.pack(">BH", 0xDA, n)
        else:
            out += struct.pack(">BI", 0xDB, n)
        out += raw
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        n = len(obj)
        if n < 0x100:
            out += struct.pack(">BB", 0xC4, n)
        elif n < 0x10000:
            out += struct.pack(">BH", 0xC5, n)
        else:
            out += struct.pack(">BI", 0xC6, n)
        out += obj
    elif isinstance(obj, (list, tuple)):
        n = len(obj)
        if n < 16:
            out.append(0x90 | n)
        elif n < 0x10000:
            out += struct.pack(">BH", 0xDC, n)
        else:
            out += struct.pack(">BI", 0xDD, n)
        for item in obj:
            _pack(item, out)
    elif isinstance(obj, dict):
        n = len(obj)
        if n < 16:
            out.append(0x80 | n)
        elif n < 0x10000:
            out += struct.pack(">BH", 0xDE, n)
        else:
            out += struct.pack(">BI", 0xDF, n)
        for k, v in obj.items():
            _pack(k, out)
            _pack(v, out)
    else:
        raise TypeError("cannot msgpack %r" % type(obj))


def _pack_int(n, out):
    if 0 <= n < 0x80:
        out.append(n)
    elif 0 <= n < 0x100:
        out += struct.pack(">BB", 0xCC, n)
    elif 0 <= n < 0x10000:
        out += struct.pack(">BH", 0xCD, n)
    elif 0 <= n < 0x100000000:
        out += struct.pack(">BI", 0xCE, n)
    elif 0 <= n < 1 << 64:
        out += struct.pack(">BQ", 0xCF, n)
    elif -32 <= n < 0:
        out += struct.pack(">b", n)
    elif -0x80 <= n < 0:
        out += struct.pack(">Bb", 0xD0, n)
    elif -0x8000 <= n < 0:
        out += struct.pack(">Bh", 0xD1, n)
    elif -0x80000000 <= n < 0:
        out += struct.pack(">Bi", 0xD2, n)
    elif -(1 << 63) <= n < 0:
        out += struct.pack(">Bq", 0xD3, n)
    else:
        raise OverflowError("integer out of msgpack range: %d" % n)


_FIXED = {
    0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
    0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
    0xCA: ">f", 0xCB: ">d",
}


class _Unpacker:
    def __init__(self, data, pos=0):
        self.data = memoryview(data)
        self.pos = pos

    def take(self, n):
        if n > len(self.data) - self.pos:
            raise MsgpackError("truncated: need %d bytes at offset %d" % (n, self.pos))
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack_fmt(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def value(self, depth=0):
        if depth > 64:
            raise MsgpackError("nested too deeply")
        b = self.take(1)[0]
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if 0x90 <= b <= 0x9F:
            return self.array(b & 0x0F, depth)
        if 0xA0 <= b <= 0xBF:
            return self.str(b & 0x1F)
        if b == 0xC0:
            return None
        if b == 0xC2:
            return False
        if b == 0xC3:
            return True
        if b in _FIXED:
            return self.unpack_fmt(_FIXED[b])
        if b in (0xC4, 0xC5, 0xC6):
            n = self.unpack_fmt({0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[b])
            return bytes(self.take(n))
        if b in (0xD9, 0xDA, 0xDB):
            return self.str(self.unpack_fmt({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[b]))
        if b in (0xDC, 0xDD):
            return self.array(self.unpack_fmt(">H" if b == 0xDC else ">I"), depth)
        if b in (0xDE, 0xDF):
            return self.map(self.unpack_fmt(">H" if b == 0xDE else ">I"), depth)
        if b in (0xC7, 0xC8, 0xC9):
            n = self.unpack_fmt({0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[b])
            code = self.unpack_fmt(">b")
            return ExtType(code, bytes(self.take(n)))
        if 0xD4 <= b <= 0xD8:
            n = 1 << (b - 0xD4)
            code = self.unpack_fmt(">b")
            return ExtType(code, bytes(self.take(n)))
        raise MsgpackError("invalid type byte 0x%02x at offset %d" % (b, self.pos - 1))

    def str(self, n):
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as e:
            raise MsgpackError("invalid UTF-8 in str: %s" % e)

    def array(self, n, depth):
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise MsgpackError("array announces %d elements, too few bytes" % n)
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n, depth):
        if 2 * n > len(self.data) - self.pos:
            raise MsgpackError("map announces %d entries, too few bytes" % n)
        out = {}
        for _ in range(n):
            k = self.value(depth + 1)
            if isinstance(k, list):
                k = tuple(k)
            if isinstance(k, dict):
                raise MsgpackError("map as map key")
            out[k] = self.value(depth + 1)
        return out


def unpackb(data):
    """Decodes exactly one msgpack value; trailing bytes are an error."""
    u = _Unpacker(data)
    v = u.value()
    if u.pos != len(u.data):
        raise MsgpackError("%d trailing bytes" % (len(u.data) - u.pos))
    return v


def frame(obj):
    """One wire frame: uint32 BE length + msgpack payload."""
    payload = obj.data if isinstance(obj, Raw) else packb(obj)
    return struct.pack(">I", len(payload)) + payload


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def colliding_pair(digits=8):
    """Two distinct contents whose SHA-256 hex digests share the first
    `digits` digits (a birthday search: about 80k hashes for 8 digits)."""
    seen = {}
    i = 0
    while True:
        c = b"cairn-collision-%d" % i
        prefix = hashlib.sha256(c).hexdigest()[:digits]
        if prefix in seen:
            return seen[prefix], c
        seen[prefix] = c
        i += 1


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(MiB)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def write_random_file(path, size):
    """Writes `size` random bytes in 1 MiB pieces; returns their sha256 hex."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            piece = os.urandom(min(MiB, left))
            h.update(piece)
            f.write(piece)
            left -= len(piece)
    return h.hexdigest()


# --------------------------------------------------------------------------
# raw connections
# --------------------------------------------------------------------------


class ConnectionClosed(Exception):
    pass


class ProtocolViolation(AssertionError):
    pass


def connect_unix(path, timeout=IO_TIMEOUT):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except BaseException:
        s.close()
        raise
    return s


class Conn:
    """One protocol connection. Frames for ids other than the one being
    waited for are kept, so pipelined and interleaved replies can be matched
    by id."""

    def __init__(self, path, timeout=IO_TIMEOUT, sock=None):
        self.sock = sock if sock is not None else connect_unix(path, timeout)
        self.timeout = timeout
        self.buf = bytearray()
        self.stash = {}
        self._next_id = 1

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def next_id(self):
        i = self._next_id
        self._next_id += 1
        return i

    # -- sending

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, obj):
        self.sock.sendall(frame(obj))

    def send_request(self, op, **fields):
        """Sends a request with a fresh id and returns that id."""
        rid = fields.pop("id", None) or self.next_id()
        msg = {"id": rid, "op": op}
        msg.update(fields)
        self.send(msg)
        return rid

    # -- receiving

    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("no frame within the timeout")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(max(65536, n - len(self.buf)))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ConnectionClosed("daemon closed the connection (%d bytes pending)" % len(self.buf))
            self.buf += chunk

    def recv_frame(self, timeout=None):
        """Next frame from the wire, decoded (no stash lookup)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._fill(4, deadline)
        (length,) = struct.unpack(">I", self.buf[:4])
        if length == 0 or length > MAX_FRAME:
            raise ProtocolViolation("daemon sent a frame of length %d" % length)
        self._fill(4 + length, deadline)
        payload = bytes(self.buf[4:4 + length])
        del self.buf[:4 + length]
        try:
            msg = unpackb(payload)
        except MsgpackError as e:
            raise ProtocolViolation("daemon sent invalid msgpack: %s" % e)
        if not isinstance(msg, dict):
            raise ProtocolViolation("daemon sent a non-map frame: %r" % (msg,))
        if not isinstance(msg.get("id"), int) or isinstance(msg.get("id"), bool):
            raise ProtocolViolation("reply without integer id: %r" % (short(msg),))
        return msg

    def recv_for(self, rid, timeout=None):
        """Next frame carrying id `rid`."""
        q = self.stash.get(rid)
        if q:
            return q.pop(0)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            msg = self.recv_frame(max(0.001, deadline - time.monotonic()))
            if msg["id"] == rid:
                return msg
            self.stash.setdefault(msg["id"], []).append(msg)

    def expect_closed(self, timeout=None):
        """Reads until EOF; returns the frames that came before it.
        Fails if the connection stays open for `timeout` seconds."""
        frames = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                frames.append(self.recv_frame(max(0.001, deadline - time.monotonic())))
            except ConnectionClosed:
                return frames
            except socket.timeout:
                raise AssertionError("daemon did not close the connection within the timeout; got %r"
                                     % [short(f) for f in frames[:10]])
            if len(frames) > 100:
                raise AssertionError("daemon keeps sending instead of closing the connection; first "
                                     "frames: %r" % [short(f) for f in frames[:3]])

    # -- operations

    def call(self, op, timeout=None, **fields):
        """A single-frame request/reply."""
        rid = self.send_request(op, **fields)
        return self.recv_for(rid, timeout)

    def add(self, content, chunk=MAX_DATA, timeout=None, **fields):
        """Adds `content` (bytes), streaming it in `chunk`-sized frames."""
        content = memoryview(content)
        rid = self.next_id()
        first = content[:chunk]
        more = len(content) > chunk
        msg = {"id": rid, "op": "add", "data": first, "more": more}
        msg.update(fields)
        self.send(msg)
        pos = len(first)
        while pos < len(content):
            piece = content[pos:pos + chunk]
            pos += len(piece)
            self.send({"id": rid, "op": "data", "data": piece, "more": pos < len(content)})
        return self.recv_for(rid, timeout)

    def get(self, ref, timeout=None):
        """Returns (frames, content). Raises AssertionError on a failed get."""
        rid = self.send_request("get", ref=ref)
        return self.collect_stream(rid, timeout)

    def collect_stream(self, rid, timeout=None):
        frames = []
        parts = []
        while True:
            msg = self.recv_for(rid, timeout)
            frames.append(msg)
            if msg.get("ok") is False:
                return frames, None
            if msg.get("ok") is not True:  # every reply frame carries ok
                raise ProtocolViolation("stream frame without ok: true: %r" % short(msg))
            data = msg.get("data")
            if not isinstance(data, bytes):
                raise ProtocolViolation("stream frame without bin data: %r" % short(msg))
            if len(data) > MAX_DATA:
                raise ProtocolViolation("daemon sent %d data bytes in one frame" % len(data))
            parts.append(data)
            if not msg.get("more"):
                return frames, b"".join(parts)

    def list_all(self, **fields):
        """All items of a `list`, across its frames."""
        rid = self.send_request("list", **fields)
        items = []
        while True:
            msg = self.recv_for(rid)
            if msg.get("ok") is False:
                raise AssertionError("list failed: %r" % short(msg))
            if len(msg.get("items", [])) > 500:
                raise ProtocolViolation("list frame with %d items" % len(msg["items"]))
            items.extend(msg.get("items", []))
            if not msg.get("more"):
                return items


def short(obj, limit=200):
    """repr() without megabytes of content."""
    if isinstance(obj, dict):
        return {k: short(v, limit) for k, v in obj.items()}
    if isinstance(obj, (bytes, bytearray, memoryview)) and len(obj) > 32:
        return "<%d bytes>" % len(obj)
    if isinstance(obj, list) and len(obj) > 10:
        return [short(v, limit) for v in obj[:10]] + ["... %d more" % (len(obj) - 10)]
    return obj


def error_code(reply):
    err = reply.get("error")
    if reply.get("ok") is not False or not isinstance(err, dict):
        return None
    return err.get("code")


# --------------------------------------------------------------------------
# temp dirs and processes
# --------------------------------------------------------------------------

_LIVE = set()


def _kill_leftovers():
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


atexit.register(_kill_leftovers)


def make_tempdir(testcase=None, prefix="cairn-it-"):
    """A fresh directory under $TMPDIR; removed by the testcase's cleanup."""
    path = tempfile.mkdtemp(prefix=prefix)
    if testcase is not None:
        testcase.addCleanup(shutil.rmtree, path, True)
    return path


_SSH_SERVER = None


def sftp_server():
    """The SSH server this test process shares among its sftp-backed
    daemons (started on first use, stopped at exit). Raises
    unittest.SkipTest when sshd is not installed."""
    global _SSH_SERVER
    if _SSH_SERVER is None or not _SSH_SERVER.running():
        import sshfixture

        if _SSH_SERVER is None:
            base = tempfile.mkdtemp(prefix="cairn-sshd-")

            def stop():
                _kill_leftovers()  # the daemons first: they are the clients
                if _SSH_SERVER is not None:
                    _SSH_SERVER.stop()
                shutil.rmtree(base, True)

            atexit.register(stop)
            _SSH_SERVER = sshfixture.SshServer(base)
        _SSH_SERVER.start()
    return _SSH_SERVER


_S3_SERVER = None


def s3_server():
    """The S3 server this test process shares among its s3- and r2-backed
    daemons (started on first use, stopped at exit). Raises
    unittest.SkipTest without node or tests/s3/node_modules."""
    global _S3_SERVER
    if _S3_SERVER is None or not _S3_SERVER.running():
        import s3fixture

        s3fixture.require_tools()
        if _S3_SERVER is None:
            base = tempfile.mkdtemp(prefix="cairn-s3-")

            def stop():
                _kill_leftovers()  # the daemons first: they are the clients
                if _S3_SERVER is not None:
                    _S3_SERVER.stop()
                shutil.rmtree(base, True)

            atexit.register(stop)
            _S3_SERVER = s3fixture.S3Server(base, buckets=[S3_BUCKET])
        _S3_SERVER.start()
    return _S3_SERVER


def s3_backend(prefix, **params):
    """(--backend URL, environment) of a daemon keeping its packs under
    `prefix` on the shared S3 server: s3:// with the fixture's key in
    AWS_*, or with CAIRN_TEST_BACKEND=r2 an r2:// URL whose temporary
    credentials come from the fixture's stand-in for Cloudflare's API."""
    srv = s3_server()
    params.setdefault("stall_timeout", 5)
    params.setdefault("timeout", 30)
    if BACKEND != "r2":
        return srv.url(S3_BUCKET, prefix, **params), srv.env()
    params.setdefault("temp_ttl", R2_TEMP_TTL)
    url = srv.url(S3_BUCKET, prefix, account=srv.account_id, api_base=srv.api_url, **params)
    env = {"AWS_ACCESS_KEY_ID": srv.access_key, "CLOUDFLARE_API_TOKEN": srv.api_token}
    return "r2" + url[2:], env


_AZURE_SERVER = None


def azure_server():
    """The Azurite this test process shares among its azure-backed daemons
    (started on first use, stopped at exit). Raises unittest.SkipTest
    without node or tests/azure/node_modules."""
    global _AZURE_SERVER
    if _AZURE_SERVER is None or not _AZURE_SERVER.running():
        import azurefixture

        azurefixture.require_tools()
        if _AZURE_SERVER is None:
            base = tempfile.mkdtemp(prefix="cairn-azurite-")

            def stop():
                _kill_leftovers()  # the daemons first: they are the clients
                if _AZURE_SERVER is not None:
                    _AZURE_SERVER.stop()
                shutil.rmtree(base, True)

            atexit.register(stop)
            _AZURE_SERVER = azurefixture.AzureServer(base, containers=[AZURE_CONTAINER])
        _AZURE_SERVER.start()
    return _AZURE_SERVER


def azure_backend(prefix, **params):
    """(--backend URL, environment) of a daemon keeping its packs under
    `prefix` on the shared Azurite: the key in AZURE_STORAGE_CONNECTION_STRING,
    whose BlobEndpoint is the emulator's."""
    srv = azure_server()
    params.setdefault("stall_timeout", 5)
    params.setdefault("timeout", 30)
    query = "&".join("%s=%s" % kv for kv in sorted(params.items()))
    env = srv.env()
    # pages of a few blobs: every listing follows markers (and the backend's cursor memory)
    env["CAIRN_TEST_AZURE_LIST_PAGE"] = "3"
    return "azure://%s/%s/%s?allow_http=1&%s" % (srv.account, AZURE_CONTAINER, prefix, query), env


def skip_if_remote(reason):
    """Decorator: skips a test (or class) with a remote backend (sftp, s3,
    r2), e.g. one that looks at DATA_DIR/objects itself."""
    return unittest.skipIf(REMOTE, "not with CAIRN_TEST_BACKEND=%s: %s" % (BACKEND, reason))



def _check_exe(path, what, env):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise AssertionError("%s not found at %s (set $%s or build into build/)" % (what, path, env))


def process_status(pid):
    """/proc/PID/status as a dict; values in kB stay strings like '1234 kB'."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def proc_kib(pid, field):
    return int(process_status(pid)[field].split()[0])



def run_clients(testcase, d, threads, ops, size, prefix="t"):
    """`threads` clients each doing `ops` adds and gets at random; returns
    (docs, counts, failures). For the fault tests of the remote backends
    (test_s3_backend.py, test_azure_backend.py)."""
    docs = {}
    lock = threading.Lock()
    failures = []
    counts = {"add": 0, "get": 0}

    def worker(k):
        rng = random.Random(k)
        mine = []
        try:
            with d.connect(timeout=300 * SLOW) as c:
                for i in range(ops):
                    if not mine or rng.random() < 0.5:
                        content = os.urandom(rng.choice((size, size, 5 * size, 300 * 1024)))
                        r = c.add(content, name="%s%d-%d" % (prefix, k, i), tags=["t%d" % k])
                        if r.get("ok") is not True or r.get("hash") != sha256_hex(content):
                            failures.append("add %s%d-%d: %r" % (prefix, k, i, short(r)))
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
                            failures.append("get %s: %r" % (h, short(frames[-1])))
                        with lock:
                            counts["get"] += 1
        except Exception as e:
            failures.append("thread %d: %r" % (k, e))

    ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600 * SLOW)
        testcase.assertFalse(t.is_alive(), "a client hangs\n%s" % d.log_tail())
    return docs, counts, failures


class StoreChecks:
    """Checks shared by the tests of the remote backends (test_sftp.py,
    test_s3_backend.py); mixed into a unittest.TestCase."""

    STARTUP_REFUSAL_TIMEOUT = 60 * SLOW

    def assert_start_refused(self, d, *needles):
        """cairnd exits non-zero at start, in bounded time, not by a signal,
        and its output names one of `needles` (case-insensitive). Returns
        the output of that start."""
        d.start(wait=False)
        rc = d.wait(self.STARTUP_REFUSAL_TIMEOUT)
        text = d.log_text()
        this_start = text[text.rfind("=== start"):]
        self.assertNotEqual(rc, 0, "cairnd started (and exited 0) although it should refuse\n%s"
                            % d.log_tail())
        self.assertFalse(rc < 0, "cairnd died of signal %d instead of refusing\n%s" % (-rc, d.log_tail()))
        low = this_start.lower()
        self.assertTrue(any(n.lower() in low for n in needles),
                        "cairnd's output names none of %r\n%s" % (needles, d.log_tail()))
        return this_start

    def add_docs(self, d, n, size=2000, prefix="doc"):
        """n random documents through the protocol; {hash: content}."""
        out = {}
        with d.connect() as c:
            for i in range(n):
                content = os.urandom(size) + b"%s-%d" % (prefix.encode(), i)
                r = c.add(content, name="%s-%d" % (prefix, i))
                self.assertIs(r.get("ok"), True, "add: %r\n%s" % (short(r), d.log_tail()))
                self.assertEqual(r.get("hash"), sha256_hex(content))
                out[r["hash"]] = content
        return out

    def assert_docs(self, d, docs):
        """Every document of {hash: content} reads back whole."""
        with d.connect() as c:
            for h, content in docs.items():
                frames, got = c.get(h)
                self.assertIsNotNone(got, "document %s lost: %r\n%s" % (h, short(frames[-1]), d.log_tail()))
                self.assertEqual(sha256_hex(got), h)
                self.assertEqual(got, content)

    def assert_verify_ok(self, d):
        """cairn verify reads every chunk and finds nothing wrong."""
        p = d.cli("--json", "verify", check_exit=None, timeout=300 * SLOW)
        self.assertEqual(p.returncode, 0, "verify failed: %s %s\n%s"
                         % (p.stdout[-2000:], p.stderr[-2000:], d.log_tail()))
        [v] = parse_json_lines(p.stdout)
        self.assertEqual(v.get("bad_count"), 0, v)
        self.assertGreater(v.get("chunks_checked", 0), 0, v)
        return v


class Daemon:
    """A real cairnd on a private socket and data dir.

    Created with a testcase, it registers a cleanup that kills a daemon still
    running at the end (tests that care about a clean exit call stop(), which
    asserts exit status 0) and removes its temp dir."""

    def __init__(self, testcase=None, base=None, socket_path=None, data_dir=None,
                 args=(), env=None, cwd=None):
        self.testcase = testcase
        self.cwd = cwd  # the daemon's working directory (a relative data_dir is below it)
        self.base = base or make_tempdir(testcase)
        self.socket_path = socket_path or os.path.join(self.base, "run", "cairnd.sock")
        self.data_dir = data_dir or os.path.join(self.base, "data")
        self.log_path = os.path.join(self.base, "cairnd-%d.log" % id(self))
        self.args = list(args)
        self.extra_env = dict(env or {})
        self.proc = None
        self.starts = 0
        # with CAIRN_TEST_BACKEND=sftp: this daemon's store on the SSH server
        self.remote_dir = os.path.join(os.path.abspath(self.base), "remote") if SFTP else None
        # with CAIRN_TEST_BACKEND=s3, r2 or azure: this daemon's prefix in the shared bucket
        self.s3_prefix = "d-%s/store" % os.path.basename(os.path.abspath(self.base)) if S3 or AZURE else None
        if testcase is not None:
            testcase.addCleanup(self.cleanup)

    def env(self):
        env = dict(os.environ)
        env["CAIRN_SOCKET"] = self.socket_path
        env["CAIRN_DATA_DIR"] = self.data_dir
        if S3 and not self.names_backend():
            env.update(s3_backend(self.s3_prefix)[1])
        if AZURE and not self.names_backend():
            env.update(azure_backend(self.s3_prefix)[1])
        env.update(self.extra_env)
        return env

    def command(self):
        return [CAIRND, "--socket", self.socket_path, "--data-dir", self.data_dir] + self.args \
            + self.backend_args()

    def names_backend(self):
        return any(a == "--backend" or a.startswith("--backend=") for a in self.args)

    def backend_args(self):
        """--backend for CAIRN_TEST_BACKEND=sftp, s3, r2 or azure, unless args name one."""
        if not REMOTE or self.names_backend():
            return []
        if S3:
            return ["--backend", s3_backend(self.s3_prefix)[0]]
        if AZURE:
            return ["--backend", azure_backend(self.s3_prefix)[0]]
        return ["--backend", sftp_server().url(self.remote_dir)]

    def start(self, wait=True, timeout=STARTUP_TIMEOUT):
        _check_exe(CAIRND, "cairnd", "CAIRND")
        assert self.proc is None or self.proc.poll() is not None, "daemon already running"
        with open(self.log_path, "ab") as log:
            log.write(b"=== start %d: %s\n" % (self.starts, " ".join(self.command()).encode()))
            log.flush()
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env(), cwd=self.cwd)
        _LIVE.add(self.proc)
        self.starts += 1
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=STARTUP_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError("cairnd exited with %d during startup\n%s" % (rc, self.log_tail()))
            try:
                connect_unix(self.socket_path, 5).close()
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("cairnd did not accept on %s within %ds\n%s"
                                     % (self.socket_path, timeout, self.log_tail()))
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT):
        """Waits for exit; returns the exit status. Kills and fails on timeout."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("cairnd did not exit within %ds\n%s" % (timeout, self.log_tail()))
        _LIVE.discard(self.proc)
        return rc

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Sends `sig` and asserts that the daemon exits with status 0."""
        assert self.running(), "cairnd is not running (exit status %r)\n%s" % (
            self.proc and self.proc.returncode, self.log_tail())
        self.proc.send_signal(sig)
        rc = self.wait(timeout)
        if rc != 0:
            raise AssertionError("cairnd exited with status %d after %s, expected 0\n%s"
                                 % (rc, signal.Signals(sig).name, self.log_tail()))

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        _LIVE.discard(self.proc)

    def restart(self):
        if self.running():
            self.stop()
        return self.start()

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None:
            _LIVE.discard(self.proc)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, limit=6000):
        text = self.log_text()
        return "--- cairnd log (%s) ---\n%s" % (self.log_path, text[-limit:])

    def connect(self, timeout=IO_TIMEOUT):
        return Conn(self.socket_path, timeout)

    def status(self):
        with self.connect() as c:
            r = c.call("status")
        if r.get("ok") is not True:
            raise AssertionError("status failed: %r" % short(r))
        return r

    def vm_hwm_kib(self):
        return proc_kib(self.pid, "VmHWM")

    def vm_rss_kib(self):
        return proc_kib(self.pid, "VmRSS")

    def cli(self, *args, **kw):
        kw.setdefault("socket", self.socket_path)
        return run_cli(*args, **kw)

    def assert_healthy(self, testcase=None):
        """The daemon is alive and answers a new connection."""
        if not self.running():
            raise AssertionError("cairnd died (status %r)\n%s" % (self.proc.returncode, self.log_tail()))
        st = self.status()
        for key in ("documents", "uptime"):
            if key not in st:
                raise AssertionError("status reply lacks %r: %r" % (key, short(st)))
        return st


def cli_env(extra=None, unset=()):
    env = dict(os.environ)
    for k in unset:
        env.pop(k, None)
    env.update(extra or {})
    return env


def run_cli(*args, socket=None, autostart=False, input=None, stdin=None, stdout=None,
            check_exit=0, env=None, timeout=300 * SLOW):
    """Runs `cairn [--socket S] [--no-autostart] ARGS...`.

    check_exit: the expected exit status (None: don't check).
    Returns a CompletedProcess with bytes stdout/stderr (stdout is None when
    redirected with `stdout=`)."""
    _check_exe(CAIRN, "cairn", "CAIRN")
    cmd = [CAIRN]
    if socket is not None:
        cmd += ["--socket", socket]
    if not autostart:
        cmd.append("--no-autostart")
    cmd += [str(a) for a in args]
    if input is not None and stdin is not None:
        raise ValueError("input and stdin both given")
    try:
        p = subprocess.run(cmd, input=input,
                           stdin=stdin if stdin is not None else
                           (None if input is not None else subprocess.DEVNULL),
                           stdout=stdout if stdout is not None else subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env if env is not None else cli_env(),
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("%r did not finish within %ds (stderr: %r)" % (cmd, timeout, e.stderr))
    if check_exit is not None and p.returncode != check_exit:
        raise AssertionError("%s exited with %d, expected %d\nstdout: %s\nstderr: %s" % (
            " ".join(cmd), p.returncode, check_exit,
            (p.stdout or b"")[:2000].decode("utf-8", "replace"),
            p.stderr[:4000].decode("utf-8", "replace")))
    return p


def _drain_pty(master):
    """What the terminal got, up to the child's side closing."""
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child's side is closed and drained
            return got
        if not chunk:
            return got
        got += chunk


def run_on_tty(cmd, env=None, timeout=300 * SLOW):
    """Runs cmd with stdout and stderr on one pseudo-terminal, as in a shell.
    Returns (returncode, what the terminal got) in bytes."""
    import pty
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                                env=env if env is not None else cli_env())
        os.close(slave)
        slave = -1
        out = _drain_pty(master)
        proc.wait(timeout)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return proc.returncode, out


def run_stderr_on_tty(cmd, env=None, timeout=300 * SLOW):
    """Runs cmd with stderr on a pseudo-terminal (progress is drawn only on a
    terminal) and stdout on a pipe. Returns (returncode, stdout, stderr) in
    bytes; stderr is what was written to the terminal."""
    import pty
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=slave, env=env if env is not None else cli_env())
        os.close(slave)
        slave = -1
        out, _ = proc.communicate(timeout=timeout)
        err = _drain_pty(master)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return proc.returncode, out, err


# Runs argv[1:] as its child and writes "<exit status> <ru_maxrss>" to fd 3.
# It exists because Linux carries the parent's peak RSS into a child's
# ru_maxrss across fork/vfork + exec (exec_mmap folds the old mm's high-water
# mark into the new process's maxrss): measured straight from the test
# process, the CLI would inherit the test's own peak. This small interpreter
# (-S -E: a few MiB) is the parent instead, so the figure is
# max(its own few MiB, the program's real peak).
_RUSAGE_HELPER = """
import os, sys
argv = sys.argv[1:]
pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_CLOSE, 3)])
_, status, ru = os.wait4(pid, 0)
code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
os.write(3, b"%d %d" % (code, ru.ru_maxrss))
"""


def spawn_wait(argv, stdin_path=None, stdout_path=None, env=None, timeout=900 * SLOW):
    """Runs argv with stdin/stdout from/to files and returns (exit_status,
    max_rss_kib, stderr_bytes), where max_rss_kib is the program's peak RSS
    (see _RUSAGE_HELPER; it is never below the helper's few MiB)."""
    import threading

    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, err_w, 2), (os.POSIX_SPAWN_DUP2, res_w, 3)]
    opened = []
    for path, fd, flags in ((stdin_path or os.devnull, 0, os.O_RDONLY),
                            (stdout_path or os.devnull, 1, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        f = os.open(path, flags, 0o600)
        opened.append(f)
        actions.append((os.POSIX_SPAWN_DUP2, f, fd))
    helper = [sys.executable, "-S", "-E", "-c", _RUSAGE_HELPER] + list(argv)
    try:
        pid = os.posix_spawn(sys.executable, helper, env if env is not None else dict(os.environ),
                             file_actions=actions, setpgroup=0)
    finally:
        os.close(err_w)
        os.close(res_w)
        for f in opened:
            os.close(f)
    out = {}

    def drain(fd, key):
        with os.fdopen(fd, "rb") as f:
            out[key] = f.read()

    threads = [threading.Thread(target=drain, args=(fd, key), daemon=True)
               for fd, key in ((err_r, "err"), (res_r, "res"))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    while True:
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid == pid:
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)  # the helper and the program
            os.waitpid(pid, 0)
            raise AssertionError("%r did not finish within %ds" % (argv, timeout))
        time.sleep(0.05)
    for t in threads:
        t.join(30)
    fields = out.get("res", b"").split()
    if len(fields) != 2 or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise AssertionError("rusage helper failed (status %r) for %r: %r"
                             % (status, argv, out.get("err", b"")[-2000:]))
    return int(fields[0]), int(fields[1]), out.get("err", b"")


# --------------------------------------------------------------------------
# CLI output parsing
# --------------------------------------------------------------------------

HEX = set("0123456789abcdef")


def is_hash(s):
    return len(s) == 64 and set(s) <= HEX


def parse_add(stdout):
    """`<hash>  <name>` lines -> [(hash, name)]."""
    out = []
    for line in stdout.decode("utf-8").splitlines():
        h, sep, name = line.partition("  ")
        if not sep or not is_hash(h):
            raise AssertionError("add printed %r, expected '<hash>  <name>'" % line)
        out.append((h, name))
    return out


def parse_ls(stdout):
    """`<hash>  <size>  <name>` lines -> [(hash, size, name)]."""
    out = []
    for line in stdout.decode("utf-8").splitlines():
        parts = line.split("  ", 2)
        if len(parts) != 3 or not is_hash(parts[0]) or not parts[1].strip().isdigit():
            raise AssertionError("ls printed %r, expected '<hash>  <size>  <name>'" % line)
        out.append((parts[0], int(parts[1]), parts[2]))
    return out


def parse_kv(stdout):
    """`key: value` lines -> {key: value} (a repeated key keeps every value
    in a list under key + '[]'). A list or a map is `key:` and then an item
    a line, indented two spaces: its items in key + '[]', joined by ", "
    under key."""
    out = {}
    k = None
    for line in stdout.decode("utf-8").splitlines():
        if not line.strip():
            continue
        if line.startswith("  ") and k is not None:
            items = out.setdefault(k + "[]", [])
            if items == [""]:
                items.clear()
            items.append(line[2:])
            out[k] = ", ".join(items)
            continue
        k, sep, v = line.partition(":")
        if not sep:
            raise AssertionError("expected 'key: value', got %r" % line)
        k = k.strip()
        v = v.strip()
        out.setdefault(k + "[]", []).append(v)
        out[k] = v
    return out


def parse_json_lines(stdout):
    import json

    out = []
    for line in stdout.decode("utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise AssertionError("--json printed a line that is not JSON: %r (%s)" % (line, e))
        if not isinstance(obj, dict):
            raise AssertionError("--json printed %r, expected one JSON object per line" % line)
        out.append(obj)
    return out


def assert_cli_error(testcase, proc):
    """Errors go to stderr as `cairn: <message>`."""
    lines = proc.stderr.decode("utf-8", "replace").splitlines()
    testcase.assertTrue(any(l.startswith("cairn: ") and len(l) > len("cairn: ") for l in lines),
                        "stderr has no 'cairn: <message>' line: %r" % proc.stderr)


def raise_nofile(want):
    """Raises RLIMIT_NOFILE to at least `want`; returns False if impossible."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return True
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return True
        except (ValueError, OSError):
            return False
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return True


# --------------------------------------------------------------------------
# runner
# --------------------------------------------------------------------------


class _TapResult(unittest.TextTestResult):
    """Human output on stderr, one TAP line per test on `tap`."""

    def __init__(self, stream, descriptions, verbosity, tap):
        super().__init__(stream, descriptions, verbosity)
        self.tap = tap
        self.count = 0
        self.outcome = None

    def _emit(self, ok, name, directive="", detail=""):
        self.count += 1
        line = "%s %d - %s" % ("ok" if ok else "not ok", self.count, name)
        if directive:
            line += " # " + directive
        self.tap.write(line + "\n")
        for d in detail.splitlines():
            self.tap.write("# " + d + "\n")
        self.tap.flush()

    def _worse(self, kind, detail=""):
        rank = {"ok": 0, "skip": 1, "fail": 2}
        if self.outcome is None or rank[kind] > rank[self.outcome[0]]:
            self.outcome = (kind, detail)

    def startTest(self, test):
        super().startTest(test)
        self.outcome = None

    def stopTest(self, test):
        super().stopTest(test)
        kind, detail = self.outcome or ("fail", "test recorded no outcome")
        name = test.id().split(".", 1)[-1]
        if kind == "ok":
            self._emit(True, name)
        elif kind == "skip":
            self._emit(True, name, "SKIP " + detail.replace("\n", " "))
        else:
            self._emit(False, name, "", detail)
        self.outcome = None

    def addSuccess(self, test):
        super().addSuccess(test)
        self._worse("ok")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if not isinstance(test, unittest.TestCase):
            # setUpClass raised SkipTest (e.g. no sshd for CAIRN_TEST_BACKEND=sftp)
            self._emit(True, str(test), "SKIP " + reason.replace("\n", " "))
            return
        self._worse("skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._worse("ok")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._worse("fail", "unexpected success")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._worse("fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        if not isinstance(test, unittest.TestCase):
            # setUpClass/tearDownClass/module fixtures: no startTest/stopTest.
            self._emit(False, str(test), "", self._exc_info_to_string(err, test))
            return
        self._worse("fail", self._exc_info_to_string(err, test))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._worse("fail", "%s: %s" % (subtest, self._exc_info_to_string(err, test)))


def main():
    """Runs the tests of the calling module; exits non-zero on any failure."""
    argv = list(sys.argv)
    tap = "--tap" in argv or os.environ.get("CAIRN_TAP") == "1"
    argv = [a for a in argv if a != "--tap"]
    module = sys.modules["__main__"]
    loader = unittest.TestLoader()
    if len(argv) > 1:
        suite = loader.loadTestsFromNames(argv[1:], module)
    else:
        suite = loader.loadTestsFromModule(module)
    if not tap:
        result = unittest.TextTestRunner(verbosity=2).run(suite)
        sys.exit(0 if result.wasSuccessful() else 1)
    tap_out = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the TAP stream
    tap_out.write("TAP version 13\n")
    tap_out.flush()
    runner = unittest.TextTestRunner(
        stream=sys.stderr, verbosity=2,
        resultclass=lambda stream, desc, verb: _TapResult(stream, desc, verb, tap_out))
    try:
        result = runner.run(suite)
    except BaseException:
        tap_out.write("Bail out! %s\n" % traceback.format_exc().splitlines()[-1])
        tap_out.flush()
        raise
    tap_out.write("1..%d\n" % result.count)
    tap_out.flush()
    sys.exit(0 if result.wasSuccessful() else 1)
