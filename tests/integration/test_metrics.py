#!/usr/bin/env python3
"""Metrics in the Prometheus text format: `cairn status --format prometheus`
(the protocol's `metrics` op) and the optional loopback listener
([daemon] metrics_listen) that serves the same text at GET /metrics. The
text is checked with promtool (tests/metrics/setup.sh puts it in
tests/metrics/bin) and by the format's own rules here; its counters are
checked against the requests the test made."""

import os
import re
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

PROMTOOL = os.environ.get("CAIRN_TEST_PROMTOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "metrics", "bin", "promtool")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+-]+|\+Inf|NaN)$')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    """{(name, labels): value}, checking each line's shape and that every
    sample's family has HELP and TYPE lines before it."""
    samples, typed = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            typed[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in typed else name
        assert family in typed, "no TYPE for %s" % name
        samples[(name, labels or "")] = float(value)
    return samples


class Metrics(unittest.TestCase):
    def promtool(self, text):
        if not os.access(PROMTOOL, os.X_OK):
            self.skipTest("no promtool: run tests/metrics/setup.sh")
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def check_histograms(self, s):
        for (name, labels), count in s.items():
            if name != "cairn_request_duration_seconds_count":
                continue
            op = labels
            buckets = sorted((float(re.search(r'le="([^"]+)"', l).group(1).replace("+Inf", "inf")), v)
                             for (n, l), v in s.items()
                             if n == "cairn_request_duration_seconds_bucket" and l.startswith(op[:-1]))
            values = [v for _, v in buckets]
            self.assertEqual(values, sorted(values), "buckets of %s are not cumulative" % op)
            self.assertEqual(buckets[-1], (float("inf"), count), op)
            self.assertEqual(count, s[("cairn_requests_total", op)], op)

    def test_status_format_prometheus(self):
        d = ct.Daemon(self).start()
        for i in range(5):
            d.cli("add", "-n", "secret-name-%d.txt" % i, "-", input=b"metrics content %d\n" % i)
        d.cli("get", "secret-name-1.txt")
        d.cli("stat", "nosuch", check_exit=1)
        text = d.cli("status", "--format", "prometheus").stdout.decode()
        self.promtool(text)
        s = parse(text)
        self.assertEqual(s[("cairn_documents", "")], 5)
        self.assertEqual(s[("cairn_requests_total", '{op="add"}')], 5)
        self.assertEqual(s[("cairn_requests_total", '{op="get"}')], 1)
        self.assertGreaterEqual(s[("cairn_errors_total", '{code="not_found"}')], 1)
        self.assertGreater(s[("cairn_received_bytes_total", "")], 5 * len(b"metrics content 0\n"))
        self.assertGreater(s[("cairn_backend_requests_total", '{kind="append"}')]
                           + s[("cairn_backend_requests_total", '{kind="put"}')], 0)
        self.check_histograms(s)
        # counts only: no names, no content, no paths
        for leak in ("secret-name", "metrics content", d.data_dir, d.base):
            self.assertNotIn(leak, text)
        # the same through the protocol; bad --format values are usage errors
        with d.connect() as c:
            r = c.call("metrics")
        self.assertIs(r.get("ok"), True, r)
        self.assertIn("cairn_requests_total", r["text"])
        p = d.cli("status", "--format", "yaml", check_exit=2)
        self.assertIn(b"--format wants text, json or prometheus", p.stderr)
        d.cli("--json", "status", "--format", "prometheus", check_exit=2)
        self.assertEqual(d.cli("status", "--format", "json").stdout[:1], b"{")
        d.stop()


class Listener(unittest.TestCase):
    def daemon(self, listen):
        self.port = free_port()
        base = ct.make_tempdir(self)
        conf = os.path.join(base, "cairn.conf")
        with open(os.open(conf, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("[daemon]\nmetrics_listen = %s\n" % (listen % self.port if "%d" in listen else listen))
        return ct.Daemon(self, base=base, args=["--config", conf])

    def get(self, path="/metrics", method="GET"):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def test_scrape(self):
        d = self.daemon("127.0.0.1:%d").start()
        d.cli("add", "-n", "a.txt", "-", input=b"scraped\n")
        st, headers, body = self.get()
        self.assertEqual(st, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers)
        text = body.decode()
        Metrics.promtool(self, text)
        s = parse(text)
        self.assertEqual(s[("cairn_documents", "")], 1)
        self.assertEqual(self.get("/metrics?x=1")[0], 200)
        st, headers, body = self.get(method="HEAD")
        self.assertEqual((st, body), (200, b""))
        self.assertGreater(int(headers["Content-Length"]), 1000)
        self.assertEqual(self.get("/")[0], 404)
        self.assertEqual(self.get("/metrics/../x")[0], 404)
        self.assertEqual(self.get(method="POST")[0], 405)
        d.stop()
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()

    def raw(self, data, timeout=10):
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    return out
                out += b

    def test_hostile_clients(self):
        d = self.daemon("localhost:%d").start()
        self.assertTrue(self.raw(b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400 "))
        # a head past 4 KiB: answered 431 and closed (the rest of it unread, so the
        # close may reach the client as a reset before the answer)
        try:
            out = self.raw(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 8000 + b"\r\n\r\n")
            self.assertTrue(out.startswith(b"HTTP/1.1 431 "), out[:100])
        except ConnectionResetError:
            pass
        self.assertTrue(self.raw(b"\0\xff\r\n\r\n").startswith(b"HTTP/1.1 400 "))
        # one that never finishes its request is closed unanswered
        t0 = time.monotonic()
        self.assertEqual(self.raw(b"GET /metr", timeout=30), b"")
        self.assertLess(time.monotonic() - t0, 25)
        # at most 8 at once: a ninth is closed unanswered, the others are served
        held = [socket.create_connection(("127.0.0.1", self.port), timeout=10) for _ in range(8)]
        try:
            time.sleep(0.3)
            self.assertEqual(self.raw(b"GET /metrics HTTP/1.1\r\n\r\n"), b"")
            held[0].sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            self.assertTrue(held[0].recv(100).startswith(b"HTTP/1.1 200 "))
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)
        self.assertEqual(self.get()[0], 200)
        d.assert_healthy(self)
        # a stop does not wait for an idle scrape connection
        idle = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.addCleanup(idle.close)
        d.stop()

    def test_only_loopback_addresses(self):
        for listen, why in (("0.0.0.0:%d", "loopback"), ("192.0.2.1:%d", "loopback"),
                            ("[::]:%d", "loopback"), ("127.0.0.1", "HOST:PORT"),
                            ("127.0.0.1:0x%d", "HOST:PORT"), ("127.0.0.1:99999%d", "HOST:PORT")):
            with self.subTest(listen=listen):
                d = self.daemon(listen)
                d.start(wait=False)
                self.assertEqual(d.wait(), 1, d.log_tail())
                self.assertIn("metrics_listen must be", d.log_tail())
                self.assertIn(why, d.log_tail())

    def test_port_in_use_is_refused_at_start(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            d = self.daemon("127.0.0.1:%d")
            port = s.getsockname()[1]
            with open(d.args[1], "w") as f:
                f.write("[daemon]\nmetrics_listen = 127.0.0.1:%d\n" % port)
            d.start(wait=False)
            self.assertNotEqual(d.wait(), 0)
            self.assertIn("metrics_listen 127.0.0.1:%d" % port, d.log_tail())
            self.assertIn("address already in use", d.log_tail())


if __name__ == "__main__":
    unittest.main(verbosity=2)
