#!/usr/bin/env python3
"""`cairn mcp`: the MCP server on stdio (newline-delimited JSON-RPC 2.0) in
front of a real cairnd.

SdkClient drives it with the official MCP TypeScript SDK
(tests/mcp/client.mjs, @modelcontextprotocol/sdk pinned by
tests/mcp/package-lock.json; `tests/mcp/setup.sh` installs it): every tool,
every resource method, bad arguments, an unknown tool, and a client that goes
away while gets of a large document run. Those cases are skipped, with the
reason, without node or tests/mcp/node_modules.

RawStdio writes bytes to the server's stdin itself: version negotiation,
requests before initialize, unknown methods and bad params, malformed JSON,
10,000 levels of nesting, a 20 MiB line, invalid UTF-8, batches (an error
since 2025-06-18, supported in 2025-03-26), notifications (never answered),
pipelined requests, a daemon that goes away, and the end of stdin. The
server must answer every request with the right id, stay up, keep its
memory bounded (peak RSS under 100 MiB after a 20 MiB line; not checked
with CAIRN_SANITIZED=1) and exit 0 when stdin closes. Every line it writes
must be valid UTF-8 JSON."""

import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

MCP_DIR = os.path.join(ct.REPO_ROOT, "tests", "mcp")
CLIENT_JS = os.path.join(MCP_DIR, "client.mjs")
SDK_PACKAGE = os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk", "package.json")
NODE = shutil.which("node")

SUPPORTED_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
LATEST = "2025-06-18"
REPLY_TIMEOUT = 30 * ct.SLOW
EXIT_TIMEOUT = 10 * ct.SLOW
HWM_LIMIT_MIB = 100

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

SANITIZER_MARKS = (b"AddressSanitizer", b"LeakSanitizer", b"runtime error:")


def mcp_argv(sock):
    return [ct.CAIRN, "--socket", sock, "--no-autostart", "mcp"]


def process_alive(pid):
    """True if `pid` is a live (not zombie) process."""
    try:
        st = ct.process_status(pid)
    except OSError:
        return False
    return not st.get("State", "").startswith("Z")


# --------------------------------------------------------------------------
# a raw stdio connection
# --------------------------------------------------------------------------


class McpProc:
    """`cairn mcp` with pipes. A reader thread splits stdout into lines;
    every line must be UTF-8 JSON (an object, or an array for a batch
    reply) with "jsonrpc": "2.0"."""

    _count = 0

    def __init__(self, testcase, sock, argv=None, read=True):
        McpProc._count += 1
        self.tc = testcase
        base = ct.make_tempdir(testcase, prefix="cairn-mcp-")
        self.stderr_path = os.path.join(base, "mcp-stderr-%d.log" % McpProc._count)
        argv = argv or mcp_argv(sock)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=ct.cli_env())
        ct._LIVE.add(self.proc)
        testcase.addCleanup(self.kill)
        self.lines = queue.Queue()
        self.next_id = 1
        self.reader = None
        if read:  # without a reader the test may close stdout itself
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()

    @property
    def pid(self):
        return self.proc.pid

    def _read(self):
        try:
            for line in iter(self.proc.stdout.readline, b""):
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        ct._LIVE.discard(self.proc)
        if self.reader is not None:
            self.reader.join(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (OSError, ValueError):
                pass

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def diag(self):
        rc = self.proc.poll()
        return "(cairn mcp %s)\n--- its stderr ---\n%s" % (
            "running" if rc is None else "exited with %d" % rc,
            self.stderr()[-4000:].decode("utf-8", "replace"))

    # -- sending

    def send_raw(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise AssertionError("cairn mcp closed its stdin %s" % self.diag())

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode("utf-8") + b"\n")

    def send_in_thread(self, data, timeout):
        """Writes `data` from a thread; fails if it is not all taken within
        `timeout` (a server that stops reading its stdin). Returns an error
        the write ended with (EPIPE: the server closed its stdin), or None."""
        result = {}

        def write():
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ConnectionResetError, ValueError) as e:
                result["error"] = e

        t = threading.Thread(target=write, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            self.proc.kill()
            raise AssertionError("cairn mcp did not read %d bytes of stdin within %ds %s"
                                 % (len(data), timeout, self.diag()))
        return result.get("error")

    def request(self, method, params=None, rid=None, timeout=REPLY_TIMEOUT):
        """Sends a request; returns its reply (any message before it fails
        the test, except notifications from the server)."""
        if rid is None:
            rid = self.next_id
            self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.reply_to(rid, timeout)

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    # -- receiving

    def recv(self, timeout=REPLY_TIMEOUT):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message from cairn mcp within %ds %s" % (timeout, self.diag()))
        if line is None:
            self.lines.put(None)  # stays at EOF
            self.proc.poll()
            raise AssertionError("cairn mcp closed its stdout %s" % self.diag())
        return self.parse(line)

    def parse(self, line):
        tc = self.tc
        tc.assertTrue(line.endswith(b"\n"), "a message not ended by a newline: %r" % line[:200])
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise AssertionError("cairn mcp wrote invalid UTF-8 (%s): %r" % (e, line[:300]))
        tc.assertNotIn("\n", text[:-1].rstrip("\r"), "a message with an embedded newline")
        try:
            msg = json.loads(text)
        except ValueError as e:
            raise AssertionError("cairn mcp wrote a line that is not JSON (%s): %r" % (e, line[:300]))
        for m in (msg if isinstance(msg, list) else [msg]):
            tc.assertIsInstance(m, dict, "a message that is not an object: %r" % (msg,))
            tc.assertEqual(m.get("jsonrpc"), "2.0", "a message without jsonrpc 2.0: %r" % (m,))
            if "id" in m and "method" not in m:
                tc.assertEqual(("result" in m) + ("error" in m), 1,
                               "a response needs exactly one of result and error: %r" % (m,))
            if "error" in m:
                err = m["error"]
                tc.assertIsInstance(err, dict, "error is not an object: %r" % (m,))
                tc.assertIsInstance(err.get("code"), int, "error without an integer code: %r" % (m,))
                tc.assertIsInstance(err.get("message"), str, "error without a message: %r" % (m,))
        return msg

    def reply_to(self, rid, timeout=REPLY_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if isinstance(msg, dict) and "method" in msg and "id" not in msg:
                continue  # a notification from the server (logging, list_changed)
            if isinstance(msg, dict) and msg.get("id") == rid and type(msg.get("id")) is type(rid):
                return msg
            raise AssertionError("expected the reply to id %r, got %s" % (rid, ct.short(trim(msg))))

    def until_reply(self, rid, timeout=REPLY_TIMEOUT):
        """Every message up to and including the reply to `rid`."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if isinstance(msg, dict) and "method" in msg and "id" not in msg:
                continue
            out.append(msg)
            if isinstance(msg, dict) and msg.get("id") == rid:
                return out

    def probe(self, rid, timeout=REPLY_TIMEOUT):
        """Sends a ping with id `rid`; returns every message up to its reply
        (what the server said about the lines sent before it)."""
        self.send({"jsonrpc": "2.0", "id": rid, "method": "ping"})
        return self.until_reply(rid, timeout)

    def ping(self, rid):
        r = self.request("ping", rid=rid)
        self.tc.assertEqual(r.get("result"), {}, "ping: %r" % (r,))

    def initialize(self, version=LATEST, initialized=True):
        r = self.request("initialize", {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "cairn-raw-test", "version": "1"},
        })
        self.tc.assertIn("result", r, "initialize failed: %r" % (r,))
        if initialized:
            self.notify("notifications/initialized")
        return r["result"]

    def call_tool(self, name, arguments, timeout=REPLY_TIMEOUT):
        r = self.request("tools/call", {"name": name, "arguments": arguments}, timeout=timeout)
        self.tc.assertIn("result", r, "tools/call %s gave a JSON-RPC error: %r" % (name, r))
        return r["result"]

    # -- state

    def assert_alive(self):
        if self.proc.poll() is not None:
            raise AssertionError("cairn mcp died %s" % self.diag())

    def vm_hwm_kib(self):
        return ct.proc_kib(self.pid, "VmHWM")

    def close(self, timeout=EXIT_TIMEOUT, expect=0):
        """Closes stdin; the server must exit with `expect` within `timeout`."""
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("cairn mcp still ran %ds after its stdin closed %s" % (timeout, self.diag()))
        ct._LIVE.discard(self.proc)
        err = self.stderr()
        for mark in SANITIZER_MARKS:
            self.tc.assertNotIn(mark, err, "sanitizer report %s" % self.diag())
        if expect is not None:
            self.tc.assertEqual(rc, expect, "cairn mcp exit status after stdin closed %s" % self.diag())
        return rc


def trim(msg):
    if isinstance(msg, dict):
        return {k: trim(v) for k, v in msg.items()}
    if isinstance(msg, list):
        return [trim(v) for v in msg[:5]]
    if isinstance(msg, str) and len(msg) > 300:
        return msg[:300] + "...<%d chars>" % len(msg)
    return msg


class McpTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = ct.make_tempdir(self)
        self.d = ct.Daemon(self)
        self.d.start()

    def mcp(self, init=True, version=LATEST):
        m = McpProc(self, self.d.socket_path)
        if init:
            m.initialize(version)
        return m

    def finish(self, *procs):
        for m in procs:
            m.assert_alive()
            m.close()
        self.d.assert_healthy()
        self.d.stop()

    def assertError(self, msg, codes, rid="any"):
        if isinstance(codes, int):
            codes = (codes,)
        self.assertIsInstance(msg, dict, "expected one error object, got %r" % (trim(msg),))
        self.assertIn("error", msg, "expected an error, got %r" % (trim(msg),))
        if codes:
            self.assertIn(msg["error"]["code"], codes, "error code: %r" % (trim(msg),))
        if rid != "any":
            self.assertIn("id", msg, "an error reply without id: %r" % (msg,))
            self.assertEqual(msg["id"], rid, "error reply id: %r" % (trim(msg),))

    def assertToolError(self, result, what):
        self.assertIs(result.get("isError"), True, "%s: expected isError: %r" % (what, trim(result)))


# --------------------------------------------------------------------------
# the official SDK client
# --------------------------------------------------------------------------


def sdk_skip_reason():
    if NODE is None:
        return "node not found (install nodejs and npm, then run tests/mcp/setup.sh)"
    if not os.path.isfile(SDK_PACKAGE):
        return "tests/mcp/node_modules lacks @modelcontextprotocol/sdk (run tests/mcp/setup.sh)"
    return None


class SdkClient(McpTestCase):
    @classmethod
    def setUpClass(cls):
        reason = sdk_skip_reason()
        if reason:
            raise unittest.SkipTest(reason)

    def run_node(self, cfg, timeout=300 * ct.SLOW):
        """Runs client.mjs with `cfg`; returns its JSON summary. The node
        process and everything it starts share a new process group, killed
        on a timeout; a cairn mcp that outlives it fails the test."""
        # add {path} reads the files of the test's own directory only.
        cfg = dict(cfg, cairn=ct.CAIRN, socket=self.d.socket_path,
                   mcp_args=["--allow-path", self.tmp])
        path = os.path.join(self.tmp, "client-%s.json" % cfg["scenario"])
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.Popen([NODE, CLIENT_JS, path], cwd=MCP_DIR, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=ct.cli_env(), start_new_session=True)
        ct._LIVE.add(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise AssertionError("client.mjs %s did not finish within %ds\nstdout: %s\nstderr: %s" % (
                cfg["scenario"], timeout, out[-3000:].decode("utf-8", "replace"),
                err[-3000:].decode("utf-8", "replace")))
        finally:
            ct._LIVE.discard(p)
        lines = out.decode("utf-8", "replace").strip().splitlines()
        try:
            summary = json.loads(lines[-1])
        except (IndexError, ValueError):
            raise AssertionError("client.mjs %s printed no summary (exit %d)\nstdout: %s\nstderr: %s" % (
                cfg["scenario"], p.returncode, out[-3000:].decode("utf-8", "replace"),
                err[-3000:].decode("utf-8", "replace")))
        pid = summary.get("server_pid")
        if pid and process_alive(pid):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    ours = b"mcp" in f.read()
            except OSError:
                ours = False
            if ours:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError("cairn mcp (pid %d) outlived the SDK client" % pid)
        sys.stderr.write("client.mjs %s: %d checks, notes: %s\n"
                         % (cfg["scenario"], summary.get("checks", 0), json.dumps(summary.get("notes"))))
        self.assertEqual(summary.get("failures"), [],
                         "client.mjs %s: %d of %d checks failed:\n  %s\n--- cairn mcp stderr ---\n%s\n--- node stderr ---\n%s"
                         % (cfg["scenario"], len(summary.get("failures", [])), summary.get("checks", 0),
                            "\n  ".join(summary.get("failures", [])), summary.get("server_stderr", ""),
                            err[-2000:].decode("utf-8", "replace")))
        self.assertTrue(summary.get("ok"), "client.mjs exited %d: %r" % (p.returncode, summary))
        self.assertEqual(p.returncode, 0)
        return summary

    def test_every_tool_and_resource(self):
        bin_path = os.path.join(self.tmp, "blob.bin")
        bin_size = 3 * ct.MiB + 12345
        bin_sha = ct.write_random_file(bin_path, bin_size)
        text_path = os.path.join(self.tmp, "plain.txt")
        with open(text_path, "wb") as f:
            f.write(b"a plain text file added by path\n")
        s = self.run_node({"scenario": "full", "bin_path": bin_path, "bin_size": bin_size,
                           "bin_sha256": bin_sha, "text_path": text_path})
        h = s["hashes"]
        # What the MCP server did, seen through the CLI.
        out = os.path.join(self.tmp, "blob.out")
        self.d.cli("get", "-o", out, "bin/blob.bin")
        self.assertEqual(ct.sha256_file(out), bin_sha)
        self.assertEqual(self.d.cli("get", "utf8.txt").stdout, "ééé-ünïcödé ✓\n".encode())
        for gone in h["deleted"]:
            self.d.cli("stat", gone, check_exit=1)
        listed = {name for _, _, name in ct.parse_ls(self.d.cli("ls", "--docs").stdout)}
        self.assertEqual(len(listed), 9, listed)
        self.assertIn("bin/blob.bin", listed)
        self.assertNotIn("page/03.txt", listed)
        kv = ct.parse_kv(self.d.cli("stat", "page/04.txt").stdout)
        self.assertEqual(kv["hash"], h["pages"]["page/04.txt"])
        self.finish()

    def add_big(self, size=64 * ct.MiB):
        path = os.path.join(self.tmp, "big.bin")
        digest = ct.write_random_file(path, size)
        [(h, _)] = ct.parse_add(self.d.cli("add", "-n", "big.bin", path).stdout)
        self.assertEqual(h, digest)
        os.unlink(path)
        return h, size

    def wait_connections(self, at_most, timeout=10 * ct.SLOW):
        deadline = time.monotonic() + timeout
        while True:
            st = self.d.assert_healthy()
            if st.get("connections", 0) <= at_most:
                return
            if time.monotonic() > deadline:
                self.fail("cairnd still has %r connections %ds after the MCP server went away"
                          % (st.get("connections"), timeout))
            time.sleep(0.1)

    def check_big_intact(self, h):
        out = os.path.join(self.tmp, "big.out")
        self.d.cli("get", "-o", out, h)
        self.assertEqual(ct.sha256_file(out), h)
        os.unlink(out)

    def test_client_closes_mid_get(self):
        """The SDK transport closes (stdin ends) while 32 gets of 1 MiB and a
        resources/read of a 64 MiB document run: cairn mcp exits 0 by itself
        within 2 s, and cairnd serves on."""
        h, size = self.add_big()
        s = self.run_node({"scenario": "disconnect", "mode": "close", "big_hash": h,
                           "big_size": size, "timeout": 30 * ct.SLOW})
        self.assertLess(s["notes"]["completed_before_disconnect"], s["notes"]["requests"],
                        "every get had finished before the disconnect: nothing was cut")
        self.wait_connections(1)  # only our own status connection
        self.check_big_intact(h)
        self.finish()

    def test_client_vanishes_mid_get(self):
        """Both pipes of the server are closed under it (EPIPE on its next
        write) while gets of a 64 MiB document run: it exits by itself, without
        crashing, and cairnd serves on."""
        h, size = self.add_big()
        s = self.run_node({"scenario": "disconnect", "mode": "destroy", "big_hash": h,
                           "big_size": size, "timeout": 30 * ct.SLOW})
        self.assertLess(s["notes"]["completed_before_disconnect"], s["notes"]["requests"])
        self.wait_connections(1)
        self.check_big_intact(h)
        self.finish()


# --------------------------------------------------------------------------
# raw stdio
# --------------------------------------------------------------------------


class Lifecycle(McpTestCase):
    def test_version_negotiation(self):
        procs = []
        for asked, want in [(v, v) for v in SUPPORTED_VERSIONS] + [("1999-01-01", LATEST), ("2099-12-31", LATEST)]:
            with self.subTest(asked=asked):
                m = McpProc(self, self.d.socket_path)
                procs.append(m)
                res = m.initialize(asked)
                self.assertEqual(res.get("protocolVersion"), want, res)
                self.assertEqual(res.get("serverInfo", {}).get("name"), "cairn", res)
                self.assertIsInstance(res.get("serverInfo", {}).get("version"), str, res)
                caps = res.get("capabilities", {})
                self.assertIsInstance(caps.get("tools"), dict, res)
                self.assertIsInstance(caps.get("resources"), dict, res)
                r = m.request("tools/list")
                self.assertIn("result", r, r)
        self.finish(*procs)

    def test_requests_before_initialize(self):
        m = self.mcp(init=False)
        m.ping(1)  # ping is allowed before initialize
        for rid, method in ((2, "tools/list"), (3, "resources/list"), (4, "tools/call")):
            r = m.request(method, {"name": "list", "arguments": {}} if method == "tools/call" else None, rid=rid)
            self.assertError(r, (), rid=rid)  # refused; -32600 or a server-defined code
            sys.stderr.write("%s before initialize: error %d\n" % (method, r["error"]["code"]))
        m.initialize()
        r = m.request("tools/list")
        self.assertIn("result", r, r)
        self.finish(m)

    def test_stdin_closed_at_once(self):
        m = self.mcp(init=False)
        m.close()
        self.finish()

    def test_stdin_closed_after_initialize(self):
        m = self.mcp()
        m.ping(1)
        m.close()
        self.finish()

    def test_stdin_closed_inside_a_line(self):
        m = self.mcp()
        m.send_raw(b'{"jsonrpc":"2.0","id":9,"method":"pi')
        m.close()
        self.finish()

    def test_stdin_closed_with_requests_in_flight(self):
        h = ct.parse_add(self.d.cli("add", "-n", "r.bin", "-", input=os.urandom(4 * ct.MiB)).stdout)[0][0]
        m = self.mcp()
        for i in range(8):
            m.send({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
                    "params": {"name": "get", "arguments": {"ref": h, "offset": (i % 4) * ct.MiB}}})
        m.close(timeout=30 * ct.SLOW)
        answered = 0
        while True:
            line = m.lines.get(timeout=5)
            if line is None:
                break
            msg = m.parse(line)
            self.assertIn(msg.get("id"), range(100, 108), trim(msg))
            answered += 1
        sys.stderr.write("requests answered after stdin closed: %d of 8\n" % answered)
        self.finish()

    def test_stdout_closed(self):
        """The client stops reading (closes its end of stdout): the server's
        writes fail with EPIPE; it must exit on its own (0 or 1, or SIGPIPE),
        not hang or crash."""
        h = ct.parse_add(self.d.cli("add", "-n", "s.bin", "-", input=os.urandom(2 * ct.MiB)).stdout)[0][0]
        m = McpProc(self, self.d.socket_path, read=False)
        m.proc.stdout.close()
        m.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        m.notify("notifications/initialized")
        deadline = time.monotonic() + 20 * ct.SLOW
        i = 0
        while m.proc.poll() is None and time.monotonic() < deadline:
            i += 1
            try:
                m.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                    "name": "get", "arguments": {"ref": h}}}).encode() + b"\n")
                m.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                break
            time.sleep(0.01)
        try:
            rc = m.proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("cairn mcp kept running after its stdout broke %s" % m.diag())
        self.assertTrue(rc in (0, 1) or rc == -signal.SIGPIPE, "exit status %d %s" % (rc, m.diag()))
        for mark in SANITIZER_MARKS:
            self.assertNotIn(mark, m.stderr())
        self.finish()

    def test_no_daemon(self):
        """No cairnd on the socket: cairn mcp either exits with a message
        (3, unreachable) or serves and fails tool calls with isError; it
        never hangs."""
        m = McpProc(self, os.path.join(self.tmp, "nobody-home.sock"))
        try:
            res = m.initialize()
        except AssertionError:
            rc = m.proc.wait(EXIT_TIMEOUT)
            self.assertEqual(rc, 3, m.diag())
            self.assertIn(b"cairn: ", m.stderr())
            sys.stderr.write("no daemon: cairn mcp exits 3 at once\n")
            self.finish()
            return
        self.assertIn("protocolVersion", res)
        self.assertToolError(m.call_tool("list", {}), "list without a daemon")
        sys.stderr.write("no daemon: cairn mcp serves, tool calls fail\n")
        self.finish(m)

    def test_daemon_restarts(self):
        """cairnd stops under a running cairn mcp: a tool call fails with
        isError (no hang, no crash); once cairnd is back, calls work again
        (the server reconnects, as each CLI command connects anew)."""
        m = self.mcp()
        self.assertIsNot(m.call_tool("list", {}).get("isError"), True)
        self.d.stop()
        self.assertToolError(m.call_tool("list", {}), "list while cairnd is down")
        m.ping(77)
        self.d.start()
        r = m.call_tool("add", {"content": "after restart", "name": "again.txt"})
        self.assertIsNot(r.get("isError"), True, "no reconnect after cairnd restarted: %r" % trim(r))
        self.finish(m)


class Errors(McpTestCase):
    def test_unknown_method(self):
        m = self.mcp()
        self.assertError(m.request("no/such/method", rid=5), METHOD_NOT_FOUND, rid=5)
        self.assertError(m.request("tools/frobnicate", {}, rid="s-1"), METHOD_NOT_FOUND, rid="s-1")
        self.finish(m)

    def test_invalid_params(self):
        m = self.mcp()
        self.assertError(m.request("tools/call", {}), INVALID_PARAMS)
        self.assertError(m.request("tools/call", {"name": "no_such_tool", "arguments": {}}), INVALID_PARAMS)
        self.assertError(m.request("tools/call", {"name": 5}), INVALID_PARAMS)
        self.assertError(m.request("tools/call", {"name": "get", "arguments": "not-an-object"}), INVALID_PARAMS)
        self.assertError(m.request("resources/read", {}), INVALID_PARAMS)
        self.assertError(m.request("resources/read", {"uri": 5}), INVALID_PARAMS)
        self.assertError(m.request("tools/list", [1, 2]), (INVALID_PARAMS, INVALID_REQUEST))
        self.assertError(m.request("tools/call", "string-params"), (INVALID_PARAMS, INVALID_REQUEST))
        self.finish(m)

    def test_ids_are_echoed(self):
        m = self.mcp()
        for rid in ("abc", "ünï-✓", "", 0, -5, 2 ** 53 - 1, 2 ** 62):
            with self.subTest(rid=rid):
                m.ping(rid)
        self.finish(m)

    def test_malformed_json(self):
        m = self.mcp()
        cases = [
            (b"{not json", PARSE_ERROR),
            (b'{"jsonrpc":"2.0","id":1,"method":"ping"', PARSE_ERROR),
            (b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing', PARSE_ERROR),
            (b"42", INVALID_REQUEST),
            (b'"a string"', INVALID_REQUEST),
            (b"null", INVALID_REQUEST),
            (b'{"id":3,"method":"ping"}', INVALID_REQUEST),
            (b'{"jsonrpc":"1.0","id":4,"method":"ping"}', INVALID_REQUEST),
            (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', INVALID_REQUEST),
            (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', INVALID_REQUEST),
            (b'{"jsonrpc":"2.0","id":5,"method":7}', INVALID_REQUEST),
            (b'{"jsonrpc":"2.0","id":6}', INVALID_REQUEST),
        ]
        for i, (line, code) in enumerate(cases):
            with self.subTest(line=line):
                m.send_raw(line + b"\n")
                msgs = m.probe("after-%d" % i)
                self.assertEqual(len(msgs), 2, "expected one error, then the ping's reply: %r" % (msgs,))
                self.assertError(msgs[0], code)
                if code == PARSE_ERROR:
                    self.assertIsNone(msgs[0].get("id", "missing"), "a parse error has id null: %r" % (msgs[0],))
        # blank lines: nothing or an error, and the server goes on
        m.send_raw(b"\n   \n\r\n")
        msgs = m.probe("after-blank")
        for msg in msgs[:-1]:
            self.assertError(msg, (PARSE_ERROR, INVALID_REQUEST))
        self.finish(m)

    def test_deep_nesting(self):
        m = self.mcp()
        n = 10000
        lines = [
            b"[" * n + b"]" * n,
            b'{"a":' * n + b"1" + b"}" * n,
            b'{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"add","arguments":'
            b'{"content":"deep","meta":' + b'{"a":' * n + b'"x"' + b"}" * n + b"}}}",
            b'{"jsonrpc":"2.0","id":78,"method":"ping","params":' + b"[" * n + b"]" * n + b"}",
        ]
        for i, line in enumerate(lines):
            with self.subTest(case=i):
                m.send_raw(line + b"\n")
                msgs = m.probe("after-%d" % i)
                self.assertLessEqual(len(msgs), 2, [trim(x) for x in msgs])
                if i < 2:
                    self.assertEqual(len(msgs), 2, "no error for %d levels of nesting" % n)
                    self.assertError(msgs[0], (PARSE_ERROR, INVALID_REQUEST))
                elif len(msgs) == 2 and "error" in msgs[0]:
                    self.assertIn(msgs[0].get("id"), (None, 77 + i - 2), trim(msgs[0]))
                elif len(msgs) == 2:
                    # accepted: a tool result (an add with nested meta must fail)
                    self.assertEqual(msgs[0].get("id"), 77 + i - 2)
                    if i == 2:
                        self.assertToolError(msgs[0]["result"], "add with 10000-deep meta")
                else:
                    self.fail("no reply for a request with %d levels of nesting" % n)
        self.d.cli("stat", ct.sha256_hex(b"deep"), check_exit=1)
        self.finish(m)

    def test_invalid_utf8(self):
        m = self.mcp()
        bad = [
            b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"add","arguments":'
            b'{"content":"bad \xff\xfe bytes","name":"bad-utf8-1"}}}',
            b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add","arguments":'
            b'{"content":"overlong \xc0\xaf","name":"bad-utf8-2"}}}',
            b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"add","arguments":'
            b'{"content":"surrogate \xed\xa0\x80","name":"bad-utf8-3"}}}',
            b'{"jsonrpc":"2.0","id":11,"method":"pi\xffng"}',
            b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"add","arguments":'
            b'{"content":"cut \xe2\x82","name":"bad-utf8-4"}}}',
        ]
        for i, line in enumerate(bad):
            with self.subTest(case=i):
                m.send_raw(line + b"\n")
                msgs = m.probe("after-%d" % i)
                self.assertEqual(len(msgs), 2, "expected one error for invalid UTF-8: %r" % ([trim(x) for x in msgs],))
                if "result" in msgs[0]:
                    self.assertToolError(msgs[0]["result"], "add of invalid UTF-8")
                else:
                    self.assertError(msgs[0], (PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS))
        for i in range(1, 5):
            self.d.cli("stat", "bad-utf8-%d" % i, check_exit=1)
        # a lone surrogate as a JSON escape: refused, or stored as something
        # that is valid UTF-8 JSON when read back (the reader checks)
        m.send_raw(b'{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"add","arguments":'
                   b'{"content":"lone \\ud800 escape","name":"lone-surrogate"}}}\n')
        msgs = m.probe("after-surrogate")
        self.assertEqual(len(msgs), 2, [trim(x) for x in msgs])
        r = msgs[0]
        if "error" in r:
            self.assertIn(r.get("id"), (20, None), trim(r))
        else:
            self.assertEqual(r.get("id"), 20, trim(r))
        if "result" in r and not r["result"].get("isError"):
            got = m.call_tool("get", {"ref": "lone-surrogate"})
            sys.stderr.write("a lone \\ud800 escape was stored; get gives %r\n" % (trim(got),))
        else:
            sys.stderr.write("a lone \\ud800 escape is refused\n")
        self.finish(m)

    def huge_line(self, m):
        """A 20 MiB string in one line: an add, answered with a result or an
        error (a server may refuse lines over a limit); then 20 MiB of
        garbage. The server answers a ping after each."""
        content = b"y" * (20 * ct.MiB)
        line = (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":'
                b'{"content":"' + content + b'","name":"huge"}}}\n')
        err = m.send_in_thread(line, 120 * ct.SLOW)
        self.assertIsNone(err, "cairn mcp closed its stdin during a 20 MiB line %s" % m.diag())
        msgs = m.probe("after-huge", timeout=120 * ct.SLOW)
        self.assertEqual(len(msgs), 2, "expected one reply to the 20 MiB line, then the ping's: %r"
                         % ([trim(x) for x in msgs],))
        first = msgs[0]
        if "error" in first:
            self.assertIn(first.get("id"), (7, None), trim(first))
            outcome = "error %d: %s" % (first["error"]["code"], first["error"]["message"][:200])
        else:
            self.assertEqual(first.get("id"), 7)
            res = first["result"]
            if res.get("isError"):
                outcome = "isError"
            else:
                self.assertEqual(res["structuredContent"]["hash"], hashlib.sha256(content).hexdigest())
                self.assertEqual(res["structuredContent"]["size"], len(content))
                outcome = "stored"
        err = m.send_in_thread(b"z" * (20 * ct.MiB) + b"\n", 120 * ct.SLOW)
        self.assertIsNone(err, "cairn mcp closed its stdin during 20 MiB of garbage %s" % m.diag())
        msgs = m.probe("after-garbage", timeout=120 * ct.SLOW)
        self.assertEqual(len(msgs), 2, [trim(x) for x in msgs])
        self.assertError(msgs[0], (), rid=None)
        return outcome

    def test_huge_line(self):
        m = self.mcp()
        outcome = self.huge_line(m)
        sys.stderr.write("a 20 MiB line: %s\n" % outcome)
        self.finish(m)

    def test_huge_line_memory_bound(self):
        if ct.SANITIZED:
            self.skipTest("RSS bound not meaningful under ASan (CAIRN_SANITIZED=1)")
        m = self.mcp()
        self.huge_line(m)
        hwm = m.vm_hwm_kib() / 1024
        sys.stderr.write("cairn mcp VmHWM after two 20 MiB lines: %.1f MiB\n" % hwm)
        self.assertLess(hwm, HWM_LIMIT_MIB, "cairn mcp peaked at %.1f MiB reading two 20 MiB lines" % hwm)
        self.finish(m)

    def test_huge_line_then_eof(self):
        m = self.mcp()
        m.send_in_thread(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"q" * (20 * ct.MiB),
                         120 * ct.SLOW)
        m.close(timeout=30 * ct.SLOW)
        self.finish()


class Resources(McpTestCase):
    def test_name_uri_means_a_name(self):
        """cairn://name/{name} never reads another document than the one
        under that name, also when the name looks like a hash or a hash
        prefix of another document (a bare ref would resolve those as hashes
        first): such a name is refused with an error that says why."""
        target = b"the document whose hash the name looks like\n"
        th = ct.sha256_hex(target)
        self.d.cli("add", "-n", "target.txt", "-", input=target)
        m = self.mcp()
        for i, name in enumerate((th[:16], th)):
            with self.subTest(name=name):
                content = "named %d like a hash\n" % i
                r = m.call_tool("add", {"content": content, "name": name})
                self.assertIsNot(r.get("isError"), True, trim(r))
                got = m.request("resources/read", {"uri": "cairn://name/" + name})
                if "error" in got:
                    self.assertEqual(got["error"]["code"], -32602, trim(got))
                    self.assertIn("hash", got["error"]["message"], trim(got))
                    continue
                self.assertEqual(got["result"]["contents"][0].get("text"), content,
                                 "cairn://name/%s read the document with that hash, not the one with that name"
                                 % name)
        self.finish(m)

    def test_far_offset_costs_no_more_than_near(self):
        """A get of the last MiB of a 512 MiB document takes about as long as
        one of its first MiB: a range is read, not everything before it."""
        path = os.path.join(self.tmp, "far.bin")
        size = 512 * ct.MiB
        h = ct.write_random_file(path, size)
        self.d.cli("add", "-n", "far.bin", path)
        os.unlink(path)
        m = self.mcp()

        def timed(offset):
            best = None
            for _ in range(3):
                t0 = time.monotonic()
                r = m.call_tool("get", {"ref": h, "offset": offset}, timeout=300 * ct.SLOW)
                dt = time.monotonic() - t0
                self.assertIsNot(r.get("isError"), True, trim(r))
                self.assertEqual(r["structuredContent"]["length"], ct.MiB)
                best = dt if best is None else min(best, dt)
            return best

        near = timed(0)
        far = timed(size - ct.MiB)
        sys.stderr.write("get of 1 MiB at offset 0: %.3f s, at offset 511 MiB: %.3f s\n" % (near, far))
        self.assertLess(far, 4 * near + 0.25 * ct.SLOW,
                        "a get at offset 511 MiB took %.3f s, at offset 0 %.3f s: the range costs what "
                        "comes before it" % (far, near))
        self.finish(m)


class ListNames(McpTestCase):
    def test_prefix_lists_names_not_newest_names(self):
        """list with prefix lists the names that start with it, also a name
        that is not its document's newest (it was left out), each item with
        `named`, paged by a cursor that is a name."""
        m = self.mcp()
        shared = m.call_tool("add", {"content": "one content, two names\n", "name": "notes/old"})
        self.assertIsNot(shared.get("isError"), True, trim(shared))
        time.sleep(1.1)  # the newer name is newer by the clock too
        r = m.call_tool("add", {"content": "one content, two names\n", "name": "zz-newer"})
        self.assertIsNot(r.get("isError"), True, trim(r))
        for i in range(3):
            r = m.call_tool("add", {"content": "note %d\n" % i, "name": "notes/n%d" % i})
            self.assertIsNot(r.get("isError"), True, trim(r))
        seen, cursor = [], None
        for _ in range(5):
            args = {"prefix": "notes/", "limit": 2}
            if cursor:
                args["cursor"] = cursor
            r = m.call_tool("list", args)
            self.assertIsNot(r.get("isError"), True, trim(r))
            items = r["structuredContent"]["items"]
            self.assertLessEqual(len(items), 2)
            for it in items:
                self.assertIsInstance(it.get("named"), int, it)
                seen.append(it["name"])
            cursor = r["structuredContent"].get("nextCursor")
            if not cursor:
                break
        self.assertEqual(seen, ["notes/n0", "notes/n1", "notes/n2", "notes/old"])
        self.finish(m)


class Batches(McpTestCase):
    def batch(self):
        return [{"jsonrpc": "2.0", "id": "b1", "method": "ping"},
                {"jsonrpc": "2.0", "id": "b2", "method": "tools/list"},
                {"jsonrpc": "2.0", "method": "notifications/progress",
                 "params": {"progressToken": "x", "progress": 1}}]

    def test_batch_refused_in_2025_06_18(self):
        m = self.mcp(version="2025-06-18")
        m.send(self.batch())
        msgs = m.probe("after")
        self.assertEqual(len(msgs), 2, "expected one error for a batch, then the ping's reply: %r"
                         % ([trim(x) for x in msgs],))
        self.assertError(msgs[0], (INVALID_REQUEST, PARSE_ERROR), rid=None)
        self.finish(m)

    def test_batch_in_2025_03_26(self):
        """2025-03-26 has batches: served (an array with a reply to each
        request), or refused as a whole with one error (the README says
        batches are refused in every revision); nothing in between."""
        m = self.mcp(version="2025-03-26")
        m.send(self.batch())
        msgs = m.probe("after")
        self.assertEqual(len(msgs), 2, [trim(x) for x in msgs])
        reply = msgs[0]
        if isinstance(reply, list):
            self.assertEqual(sorted(r.get("id") for r in reply), ["b1", "b2"], trim(reply))
            for r in reply:
                self.assertIn("result", r, trim(r))
            sys.stderr.write("a batch in 2025-03-26: served\n")
        else:
            self.assertError(reply, INVALID_REQUEST, rid=None)
            sys.stderr.write("a batch in 2025-03-26: refused (%s)\n" % reply["error"]["message"])
        self.finish(m)

    def test_empty_batch(self):
        for version in ("2025-06-18", "2025-03-26"):
            with self.subTest(version=version):
                m = self.mcp(version=version)
                m.send_raw(b"[]\n")
                msgs = m.probe("after")
                self.assertEqual(len(msgs), 2, [trim(x) for x in msgs])
                self.assertError(msgs[0], INVALID_REQUEST, rid=None)
                m.close()
        self.finish()


class Notifications(McpTestCase):
    def test_notifications_get_no_reply(self):
        m = self.mcp(init=False)
        m.initialize(initialized=False)
        m.notify("notifications/initialized")
        m.notify("notifications/cancelled", {"requestId": 12345, "reason": "no such request"})
        m.notify("notifications/no-such-thing", {"x": 1})
        m.notify("ping")
        m.notify("tools/list")
        m.notify("tools/call", {"name": "add", "arguments": {"content": "sent as a notification"}})
        m.notify("tools/call", {"name": "no_such_tool"})
        m.notify("notifications/initialized", "bad params")
        m.send_raw(b'{"jsonrpc":"2.0","method":"no/such/method"}\n')
        r = m.request("ping", rid=500)
        self.assertEqual(r.get("result"), {}, r)
        # nothing else arrives either
        with self.assertRaises(queue.Empty):
            line = m.lines.get(timeout=1)
            if line is None:
                raise AssertionError("cairn mcp closed stdout")
            raise AssertionError("unexpected message: %r" % line[:300])
        self.finish(m)

    def test_pipelined_requests(self):
        """50 requests in one write: 50 replies, each id once."""
        h = ct.parse_add(self.d.cli("add", "-n", "p.txt", "-", input=b"pipelined text\n").stdout)[0][0]
        m = self.mcp()
        out = bytearray()
        want = set()
        for i in range(50):
            kind = i % 5
            if kind == 0:
                msg = {"method": "ping"}
            elif kind == 1:
                msg = {"method": "tools/call", "params": {"name": "get", "arguments": {"ref": "p.txt"}}}
            elif kind == 2:
                msg = {"method": "tools/call", "params": {"name": "stat", "arguments": {"ref": h}}}
            elif kind == 3:
                msg = {"method": "resources/read", "params": {"uri": "cairn://doc/" + h}}
            else:
                msg = {"method": "tools/call", "params": {"name": "list", "arguments": {}}}
            msg.update(jsonrpc="2.0", id=1000 + i)
            want.add(1000 + i)
            out += json.dumps(msg).encode() + b"\n"
        m.send_raw(bytes(out))
        got = []
        while len(got) < 50:
            msg = m.recv()
            if "method" in msg and "id" not in msg:
                continue
            self.assertIn("result", msg, trim(msg))
            got.append(msg["id"])
            if msg["id"] % 5 == 1:
                self.assertEqual(msg["result"]["content"][0].get("text"), "pipelined text\n", trim(msg))
        self.assertEqual(sorted(got), sorted(want))
        self.finish(m)


    def test_piped_script_gets_every_answer(self):
        """Requests piped in and stdin closed at once (`... | cairn mcp`): the
        end of input is seen at once, yet every request read before it is
        answered (within the grace after the end), then the server exits 0."""
        ct.parse_add(self.d.cli("add", "-n", "s.txt", "-", input=b"scripted\n").stdout)
        lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}]
        for i in range(1, 11):
            lines.append({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                          "params": {"name": "get", "arguments": {"ref": "s.txt"}}})
        data = b"".join(json.dumps(m).encode() + b"\n" for m in lines)
        p = subprocess.run(mcp_argv(self.d.socket_path), input=data, capture_output=True,
                           env=ct.cli_env(), timeout=30 * ct.SLOW)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        replies = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual([r["id"] for r in replies], list(range(11)), trim(replies))
        for r in replies[1:]:
            self.assertEqual(r["result"]["content"][0].get("text"), "scripted\n", trim(r))
        self.finish()


if __name__ == "__main__":
    ct.main()
