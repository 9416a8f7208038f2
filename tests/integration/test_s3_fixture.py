#!/usr/bin/env python3
"""The S3 test server itself (tests/s3/server.js through s3fixture.py),
driven by curl's own SigV4 signer (`curl --aws-sigv4`), so that the S3
backend's tests can trust it:

  Signatures    a PUT and GET signed with the main key pair work; a wrong
                secret is 403 SignatureDoesNotMatch (logged with the
                canonical request) and stores nothing; an unknown key is
                InvalidAccessKeyId; a body that does not match its
                x-amz-content-sha256 is refused and stores nothing; a request
                without x-amz-content-sha256 or a signature is refused
  Keys          keys with spaces, unicode, + : = and / round-trip when the
                path is encoded once, the AWS way; '=' sent unencoded but
                signed that way is refused, as S3 does
  Conditional   PUT with If-None-Match: * is 412 PreconditionFailed when the
                key exists, and the object keeps its first contents
  Faults        at rate 1.0 each kind does what it says (503 SlowDown with
                Retry-After, 500 InternalError, reset, reset_request, stall,
                truncate = curl error 18) and is counted; fault_limit and
                fault_methods bound them; latency profiles delay requests;
                down refuses connections and up brings the same port back
  TempCreds     the Cloudflare temp-access-credentials stand-in: the right
                bearer token gets a key that works with its session token and
                only inside its bucket and prefix; a wrong token is 403
                success:false; a key past its TTL is 400 ExpiredToken
  Process       SIGTERM ends the server with status 0 and frees its ports
"""

import hashlib
import os
import re
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import s3fixture  # noqa: E402

BUCKET = "cairn-test"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CURL_TIMEOUT = 30


def aws_path(bucket, key):
    """/BUCKET/KEY encoded once the AWS way: every byte but A-Za-z0-9-._~ and '/'."""
    return "/%s/%s" % (bucket, urllib.parse.quote(key, safe="/-_.~"))


class S3Case(unittest.TestCase):
    def setUp(self):
        s3fixture.require_tools()
        self.base = ct.make_tempdir(self, prefix="cairn-s3fix-")
        self.srv = s3fixture.S3Server(os.path.join(self.base, "s3"), buckets=[BUCKET])
        self.addCleanup(self.srv.kill9)  # a no-op after a clean stop
        self.srv.start()
        self.ncurl = 0

    def curl(self, method, path, body=None, user=None, headers=(), sha256=None, max_time=CURL_TIMEOUT,
             token=None, raw_path=False):
        """One signed request with curl --aws-sigv4. path is sent as given.
        Returns (curl exit status, HTTP status, response body, curl stderr)."""
        self.ncurl += 1
        out = os.path.join(self.base, "curl-%d.out" % self.ncurl)
        key, secret = user or (self.srv.access_key, self.srv.secret_key)
        if sha256 is None:
            sha256 = hashlib.sha256(body or b"").hexdigest()
        args = ["curl", "-sS", "--max-time", str(max_time), "-X", method, "-o", out, "-w", "%{http_code}",
                "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "%s:%s" % (key, secret)]
        if sha256 is not False:
            args += ["-H", "x-amz-content-sha256: " + sha256]
        if token is not None:
            args += ["-H", "x-amz-security-token: " + token]
        for h in headers:
            args += ["-H", h]
        if body is not None:
            args += ["--data-binary", "@-", "-H", "Content-Type: application/octet-stream"]
        if raw_path:
            args += ["--path-as-is"]
        args.append(self.srv.endpoint + path)
        p = subprocess.run(args, input=body or b"", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=max_time + 30)
        try:
            with open(out, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        code = int(p.stdout or b"0")
        return p.returncode, code, data, p.stderr.decode("utf-8", "replace")

    def put(self, key, body, **kw):
        return self.curl("PUT", aws_path(kw.pop("bucket", BUCKET), key), body=body, **kw)

    def get(self, key, **kw):
        return self.curl("GET", aws_path(kw.pop("bucket", BUCKET), key), **kw)

    def assertOk(self, result, what):
        rc, code, data, err = result
        self.assertEqual((rc, code), (0, 200), "%s: curl %d, HTTP %d, %r %s\n%s"
                         % (what, rc, code, data[:500], err, self.srv.log_tail()))
        return data

    def assertS3Error(self, result, status, code):
        rc, http, data, err = result
        self.assertEqual(rc, 0, "curl failed: %s" % err)
        self.assertEqual(http, status, data)
        self.assertIn(b"<Code>%s</Code>" % code.encode(), data)

    def stored(self, key):
        path = self.srv.object_path(BUCKET, key)
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            return f.read()


class Signatures(S3Case):
    def test_put_then_get_with_the_right_key(self):
        body = os.urandom(100000)
        self.assertOk(self.put("docs/one", body), "PUT")
        self.assertEqual(self.assertOk(self.get("docs/one"), "GET"), body)
        self.assertEqual(self.stored("docs/one"), body)
        c = self.srv.counters()
        self.assertEqual(c["forwarded"].get("PUT"), 1, c)
        self.assertEqual(c["forwarded"].get("GET"), 1, c)
        self.assertEqual(c["rejected"], {}, c)

    def test_wrong_secret_is_signature_does_not_match(self):
        self.assertOk(self.put("k", b"first"), "PUT")
        wrong = (self.srv.access_key, self.srv.secret_key + "x")
        self.assertS3Error(self.get("k", user=wrong), 403, "SignatureDoesNotMatch")
        self.assertS3Error(self.put("k", b"second", user=wrong), 403, "SignatureDoesNotMatch")
        self.assertS3Error(self.put("never", b"x", user=wrong), 403, "SignatureDoesNotMatch")
        self.assertEqual(self.stored("k"), b"first")
        self.assertIsNone(self.stored("never"))
        self.assertEqual(self.srv.counters()["rejected"].get("SignatureDoesNotMatch"), 3)
        self.assertEqual(self.srv.counters()["forwarded"], {"PUT": 1})  # only the first PUT reached s3rver
        self.assertIn("--- canonical request (server) ---\nPUT\n/%s/never\n" % BUCKET, self.srv.log_text())
        self.assertNotIn(self.srv.secret_key, self.srv.log_text())

    def test_unknown_access_key(self):
        self.assertS3Error(self.get("k", user=("NOSUCHKEY", self.srv.secret_key)), 403, "InvalidAccessKeyId")

    def test_tampered_body_is_refused(self):
        self.assertS3Error(self.put("t", b"the real body", sha256=hashlib.sha256(b"another body").hexdigest()),
                           400, "XAmzContentSHA256Mismatch")
        self.assertIsNone(self.stored("t"))
        self.assertEqual(self.srv.counters()["forwarded"], {})

    def test_unsigned_payload_is_accepted(self):
        self.assertOk(self.put("u", b"unsigned", sha256="UNSIGNED-PAYLOAD"), "PUT UNSIGNED-PAYLOAD")
        self.assertEqual(self.stored("u"), b"unsigned")

    def test_missing_content_sha256_or_signature(self):
        self.assertS3Error(self.get("k", sha256=False), 400, "InvalidRequest")
        p = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", self.srv.endpoint + aws_path(BUCKET, "k")],
                           stdout=subprocess.PIPE, timeout=CURL_TIMEOUT)
        self.assertTrue(p.stdout.endswith(b"\n403"), p.stdout)
        self.assertIn(b"<Code>AccessDenied</Code>", p.stdout)


class Keys(S3Case):
    KEYS = ["with space", "unicode/ü-ß-€-日本", "plus+sign", "colon:key", "equals=key", "a/b/c d+e:f=g/ü",
            "tilde~dot.dash-under_score", "percent%25literal", "brackets[1]&amp;(x)!*'"]

    def test_special_keys_round_trip(self):
        for i, key in enumerate(self.KEYS):
            body = ("body of %r #%d" % (key, i)).encode()
            self.assertOk(self.put(key, body), "PUT %r" % key)
            self.assertEqual(self.assertOk(self.get(key), "GET %r" % key), body)
        self.assertEqual(self.srv.list_keys(BUCKET), sorted(self.KEYS))
        listing = self.assertOk(self.curl("GET", "/%s?list-type=2&prefix=a%%2Fb%%2F" % BUCKET), "LIST")
        self.assertIn("<Key>a/b/c d+e:f=g/ü</Key>".encode(), listing)

    def test_listing_a_prefix_that_ends_inside_a_name(self):
        # The listing walks only the directories that can hold keys under the
        # prefix: one cut inside a name must still find that name's file and
        # the directories it begins, and nothing outside.
        keys = ["p/ab/x", "p/abc", "p/abd/y/z", "p/b/ab", "q/ab/w", "pab"]
        for key in keys:
            self.assertOk(self.put(key, key.encode()), "PUT %r" % key)

        def listed(prefix):
            body = self.assertOk(self.curl("GET", "/%s?list-type=2&prefix=%s"
                                           % (BUCKET, prefix.replace("/", "%2F"))), "LIST")
            return re.findall(r"<Key>([^<]*)</Key>", body.decode())

        self.assertEqual(listed("p/ab"), ["p/ab/x", "p/abc", "p/abd/y/z"])
        self.assertEqual(listed("p/"), ["p/ab/x", "p/abc", "p/abd/y/z", "p/b/ab"])
        self.assertEqual(listed("p"), ["p/ab/x", "p/abc", "p/abd/y/z", "p/b/ab", "pab"])
        self.assertEqual(listed(""), sorted(keys))

    def test_unencoded_equals_is_refused_as_s3_does(self):
        # S3 decodes the path and encodes it once for the canonical request,
        # so '=' becomes %3D there; curl 7.88 signs the path as given
        self.assertS3Error(self.curl("PUT", "/%s/k=v" % BUCKET, body=b"x", raw_path=True), 403,
                           "SignatureDoesNotMatch")
        self.assertIn("\nPUT\n/%s/k%%3Dv\n" % BUCKET, self.srv.log_text())
        self.assertOk(self.curl("PUT", "/%s/k%%3Dv" % BUCKET, body=b"x"), "PUT k%3Dv")
        self.assertEqual(self.stored("k=v"), b"x")


class Conditional(S3Case):
    def test_if_none_match_star(self):
        self.assertOk(self.put("c", b"first", headers=["If-None-Match: *"]), "first conditional PUT")
        self.assertS3Error(self.put("c", b"second", headers=["If-None-Match: *"]), 412, "PreconditionFailed")
        self.assertEqual(self.assertOk(self.get("c"), "GET"), b"first")
        self.assertEqual(self.srv.counters()["precondition_failed"], 1)
        self.assertOk(self.put("c", b"third"), "unconditional PUT")
        self.assertEqual(self.stored("c"), b"third")


class Faults(S3Case):
    BODY = os.urandom(64 * 1024)

    def setUp(self):
        super().setUp()
        self.assertOk(self.put("obj", self.BODY), "PUT")

    def faulted(self, kind):
        return self.srv.counters()["faults"].get(kind, 0)

    def test_503_slowdown(self):
        self.srv.faults(1.0, ["503"], retry_after=2)
        rc, code, data, err = self.get("obj")
        self.assertEqual((rc, code), (0, 503), err)
        self.assertIn(b"<Code>SlowDown</Code>", data)
        self.assertEqual(self.faulted("503"), 1)
        # the header: HEAD-less check with -i
        p = subprocess.run(["curl", "-sS", "-i", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                            "%s:%s" % (self.srv.access_key, self.srv.secret_key), "-H",
                            "x-amz-content-sha256: " + EMPTY_SHA256, self.srv.endpoint + aws_path(BUCKET, "obj")],
                           stdout=subprocess.PIPE, timeout=CURL_TIMEOUT)
        self.assertIn(b"\r\nretry-after: 2\r\n", p.stdout.lower())

    def test_500_internal_error(self):
        self.srv.faults(1.0, ["500"])
        self.assertS3Error(self.put("new", b"x"), 500, "InternalError")
        self.assertIsNone(self.stored("new"))
        self.assertEqual(self.faulted("500"), 1)

    def test_reset_mid_body(self):
        self.srv.faults(1.0, ["reset"])
        rc, code, data, err = self.get("obj")
        self.assertIn(rc, (18, 56), "curl should fail with a reset: %d %s" % (rc, err))
        self.assertLess(len(data), len(self.BODY))
        self.assertEqual(self.faulted("reset"), 1)

    def test_reset_request_is_not_applied(self):
        self.srv.faults(1.0, ["reset_request"])
        rc, code, data, err = self.put("lost", b"never stored")
        self.assertIn(rc, (52, 55, 56), "curl should fail: %d %s" % (rc, err))
        self.assertIsNone(self.stored("lost"))
        self.assertEqual(self.faulted("reset_request"), 1)

    def test_lost_answer_after_the_write(self):
        """`lost`: the put is carried out, and no byte of its answer comes;
        a create-only put refused then is lost the same way."""
        self.srv.faults(1.0, ["lost"])
        rc, code, data, err = self.put("orphan", b"stored, never answered", max_time=2)
        self.assertEqual(rc, 28, err)  # operation timed out
        rc, code, data, err = self.put("orphan", b"again", max_time=2,
                                       headers=["If-None-Match: *"])
        self.assertEqual(rc, 28, err)
        self.assertEqual(self.faulted("lost"), 2)
        self.srv.control(clear_faults=True)
        self.assertEqual(self.stored("orphan"), b"stored, never answered")

    def test_truncate_is_curl_error_18(self):
        self.srv.faults(1.0, ["truncate"])
        rc, code, data, err = self.get("obj")
        self.assertEqual(rc, 18, err)
        self.assertEqual(data, self.BODY[:len(self.BODY) // 2])
        self.assertEqual(self.faulted("truncate"), 1)

    def test_stall_until_the_client_gives_up(self):
        self.srv.faults(1.0, ["stall"])
        t0 = time.monotonic()
        rc, code, data, err = self.get("obj", max_time=2)
        self.assertEqual(rc, 28, err)  # operation timed out
        self.assertGreaterEqual(time.monotonic() - t0, 1.9)
        self.assertEqual(self.faulted("stall"), 1)
        # with a short cap the server closes the stalled connection itself
        self.srv.control(stall_max_s=1)
        t0 = time.monotonic()
        rc, code, data, err = self.get("obj", max_time=20)
        self.assertEqual(rc, 18, err)
        self.assertLess(time.monotonic() - t0, 10)

    def test_fault_limit_and_methods(self):
        self.srv.faults(1.0, ["500"], fault_limit=1)
        self.assertS3Error(self.get("obj"), 500, "InternalError")
        self.assertEqual(self.assertOk(self.get("obj"), "GET after the limit"), self.BODY)
        self.srv.faults(1.0, ["503"], fault_limit=None, fault_methods=["PUT"])
        self.assertEqual(self.assertOk(self.get("obj"), "GET, faults on PUT only"), self.BODY)
        self.assertS3Error(self.put("p", b"x"), 503, "SlowDown")
        c = self.srv.counters()
        self.assertEqual(c["faults"], {"500": 1, "503": 1}, c)
        self.assertEqual(c["faults_total"], 2, c)

    def test_rate_is_a_rate(self):
        self.srv.faults(0.5, ["503"], seed=7)
        n = 40
        failed = sum(self.get("obj")[1] == 503 for _ in range(n))
        self.assertEqual(failed, self.faulted("503"))
        self.assertTrue(5 <= failed <= 35, failed)

    def test_latency_profile(self):
        def timed(k=5):
            t0 = time.monotonic()
            for _ in range(k):
                self.assertOk(self.get("obj"), "GET")
            return (time.monotonic() - t0) / k
        # The injected delay is a floor, whatever the machine's load: no
        # comparison of two timings, which a busy machine could reverse.
        self.srv.control(latency="rtt100")
        self.assertGreaterEqual(timed(), 0.1)
        self.assertEqual(self.srv.state()["settings"]["latency"], "rtt100")
        self.srv.control(latency="clean")
        self.assertEqual(self.srv.state()["settings"]["latency"], "clean")

    def test_down_and_up(self):
        port = self.srv.s3_port
        self.srv.down()
        rc, code, data, err = self.get("obj", max_time=5)
        self.assertEqual(rc, 7, err)  # connection refused
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        self.srv.up()
        self.assertEqual(self.srv.s3_port, port)
        self.assertEqual(self.assertOk(self.get("obj"), "GET after up"), self.BODY)
        self.srv.down(mode="reset")
        rc, code, data, err = self.get("obj", max_time=5)
        # the reset can come while curl still checks its connect, or while
        # it sends or waits; the counter shows the port accepted it
        self.assertIn(rc, (7, 52, 55, 56), err)
        self.assertGreaterEqual(self.srv.counters()["connections_refused"], 1)
        self.srv.up()
        self.assertOk(self.get("obj"), "GET after the second up")


class TempCreds(S3Case):
    def issue(self, **kw):
        status, reply = self.srv.temp_credentials(BUCKET, **kw)
        self.assertEqual(status, 200, reply)
        self.assertEqual((reply["success"], reply["errors"], reply["messages"]), (True, [], []), reply)
        r = reply["result"]
        return r["accessKeyId"], r["secretAccessKey"], r["sessionToken"]

    def test_issue_and_use(self):
        key, secret, token = self.issue(prefix="store/", ttl=600)
        self.assertOk(self.put("store/a", b"temp", user=(key, secret), token=token), "PUT with the temp key")
        self.assertEqual(self.assertOk(self.get("store/a", user=(key, secret), token=token), "GET"), b"temp")
        self.assertS3Error(self.put("elsewhere/a", b"x", user=(key, secret), token=token), 403, "AccessDenied")
        self.assertS3Error(self.get("store/a", user=(key, secret)), 403, "InvalidAccessKeyId")
        self.assertS3Error(self.get("store/a", user=(key, secret), token=token + "x"), 400, "InvalidToken")
        self.assertS3Error(self.get("store/a", user=(key, secret + "x"), token=token), 403, "SignatureDoesNotMatch")
        self.assertIsNone(self.stored("elsewhere/a"))
        self.assertEqual(self.srv.counters()["temp_credentials_issued"], 1)

    def test_wrong_bearer_token(self):
        status, reply = self.srv.temp_credentials(BUCKET, token="not-the-token")
        self.assertEqual(status, 403, reply)
        self.assertIs(reply["success"], False)
        self.assertTrue(reply["errors"], reply)
        self.assertIsNone(reply["result"])
        status, reply = self.srv.temp_credentials(BUCKET, parent="NOTTHEPARENT")
        self.assertEqual(status, 400, reply)
        status, reply = self.srv.temp_credentials("no-such-bucket")
        self.assertEqual(status, 404, reply)
        c = self.srv.counters()
        self.assertEqual((c["temp_credentials_issued"], c["temp_credentials_refused"]), (0, 3), c)

    def test_expired_key_is_refused(self):
        key, secret, token = self.issue(ttl=2)
        self.assertOk(self.put("e", b"in time", user=(key, secret), token=token), "PUT before expiry")
        time.sleep(2.5)
        self.assertS3Error(self.get("e", user=(key, secret), token=token), 400, "ExpiredToken")
        # a cap shortens a long TTL; expire_temp_keys ends every key at once
        self.srv.control(temp_ttl_cap=1)
        key, secret, token = self.issue(ttl=3600)
        time.sleep(1.5)
        self.assertS3Error(self.get("e", user=(key, secret), token=token), 400, "ExpiredToken")
        self.srv.control(temp_ttl_cap=None)
        key, secret, token = self.issue(ttl=3600)
        self.assertOk(self.get("e", user=(key, secret), token=token), "GET with a fresh key")
        self.srv.expire_temp_keys()
        self.assertS3Error(self.get("e", user=(key, secret), token=token), 400, "ExpiredToken")

    def test_min_ttl(self):
        self.srv.control(min_ttl=900)
        status, reply = self.srv.temp_credentials(BUCKET, ttl=60)
        self.assertEqual(status, 400, reply)
        self.assertIs(reply["success"], False)


class Process(S3Case):
    def test_sigterm_exits_cleanly(self):
        ports = (self.srv.s3_port, self.srv.control_port)
        self.assertEqual(self.srv.stop(), 0, self.srv.log_tail())
        for port in ports:
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def test_restart_keeps_the_objects(self):
        self.assertOk(self.put("kept", b"across restarts"), "PUT")
        self.srv.restart()
        self.assertEqual(self.assertOk(self.get("kept"), "GET after restart"), b"across restarts")

    def test_kill9_and_start_on_the_same_port(self):
        self.assertOk(self.put("kept", b"across a crash"), "PUT")
        port = self.srv.s3_port
        self.srv.kill9()
        self.srv.start(s3_port=port)
        self.assertEqual(self.srv.s3_port, port)
        self.assertEqual(self.assertOk(self.get("kept"), "GET after kill -9"), b"across a crash")

    def test_url_and_env(self):
        url = self.srv.url(BUCKET, "pre fix/", part_size=8 << 20)
        self.assertTrue(url.startswith("s3://%s/pre%%20fix/?endpoint=http%%3A%%2F%%2F127.0.0.1%%3A%d&region=us-east-1"
                                       "&path_style=1&allow_http=1&part_size=8388608" % (BUCKET, self.srv.s3_port)), url)
        self.assertEqual(self.srv.env(), {"AWS_ACCESS_KEY_ID": self.srv.access_key,
                                          "AWS_SECRET_ACCESS_KEY": self.srv.secret_key})


if __name__ == "__main__":
    ct.main()
