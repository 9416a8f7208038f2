"""A private S3 server on loopback for the S3 backend's tests (Python 3
standard library only).

    srv = S3Server(base_dir, buckets=["cairn"]).start()
    url = srv.url("cairn", "store/")        # for cairnd --backend
    env = srv.env()                         # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
    srv.control(fault_rate=0.1, faults=["503", "reset"], latency="rtt50")
    srv.counters()["faults"]                # {"503": n, "reset": m}
    srv.down(); srv.up()
    srv.kill9(); srv.start(s3_port=srv.s3_port)   # a crash, back on the same port
    srv.stop()

start() runs tests/s3/server.js (one node process): s3rver, a real S3
implementation keeping its objects in base_dir/data/store, behind a proxy on
127.0.0.1 that checks every request's AWS SigV4 signature (with the main key
pair, or temporary keys it issued), checks x-amz-content-sha256 against the
body, implements `If-None-Match: *` on PUT, and injects faults and latency
as control() says. The same process serves, on its control port, a stand-in
for Cloudflare's R2 temp-access-credentials API (api_url, api_token,
account_id). Its stderr (rejections with the canonical request the server
computed) goes to base_dir/server.log.

Every server a fixture starts is stopped by its pid: stop() (SIGTERM, then
SIGKILL), kill9(), and an atexit hook for whatever is still running when the
test process exits.

Skips (unittest.SkipTest) when node is not installed or tests/s3/node_modules
is missing (tests/s3/setup.sh installs it; scripts/check runs that).
"""

import os
import shutil
import signal
import unittest
import urllib.parse

import serverproc
from serverproc import ServerProcess

S3_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "s3"))
SERVER_JS = os.path.join(S3_DIR, "server.js")
NODE_MODULES = os.path.join(S3_DIR, "node_modules")
START_TIMEOUT = 30
STOP_TIMEOUT = 10
CONTROL_TIMEOUT = 30

DEFAULT_ACCESS_KEY = "CAIRNTESTACCESSKEY01"
DEFAULT_SECRET_KEY = "cairn/test+secret=key0123456789abcdefghij"
DEFAULT_API_TOKEN = "cairn-test-api-token"
DEFAULT_ACCOUNT_ID = "0123456789abcdef0123456789abcdef"

_LIVE = serverproc.live_set()  # S3Server instances with a running server


def node_path():
    """The node binary ($CAIRN_TEST_NODE, else the one on PATH), or None."""
    return os.environ.get("CAIRN_TEST_NODE") or shutil.which("node") or shutil.which("nodejs")


def require_tools():
    """Raises unittest.SkipTest unless node and tests/s3/node_modules are there."""
    if node_path() is None:
        raise unittest.SkipTest("node is not installed (Debian package nodejs)")
    for mod in ("s3rver", os.path.join("@smithy", "signature-v4"), os.path.join("@smithy", "hash-node"),
                os.path.join("@smithy", "protocol-http")):
        if not os.path.isdir(os.path.join(NODE_MODULES, mod)):
            raise unittest.SkipTest("%s is missing: run tests/s3/setup.sh (npm ci)" % os.path.join(NODE_MODULES, mod))


class S3Server(ServerProcess):
    """One tests/s3/server.js on 127.0.0.1. Attributes: host, s3_port,
    control_port, endpoint, access_key, secret_key, region, api_token,
    account_id, api_url, data_dir, store_dir, log_path, pid."""

    LOG_NAME = "server.js"
    LIVE = _LIVE

    def __init__(self, base_dir, access_key=DEFAULT_ACCESS_KEY, secret_key=DEFAULT_SECRET_KEY, buckets=(),
                 region="us-east-1", api_token=DEFAULT_API_TOKEN, account_id=DEFAULT_ACCOUNT_ID, min_ttl=1):
        self.base = os.path.abspath(base_dir)
        self.host = "127.0.0.1"
        self.access_key = access_key
        self.secret_key = secret_key
        self.buckets = list(buckets)
        self.region = region
        self.api_token = api_token
        self.account_id = account_id
        self.min_ttl = min_ttl
        self.data_dir = os.path.join(self.base, "data")
        self.store_dir = os.path.join(self.data_dir, "store")
        self.log_path = os.path.join(self.base, "server.log")
        self.s3_port = None
        self.control_port = None
        self.proc = None
        self.starts = 0

    # -- the process

    def start(self, timeout=START_TIMEOUT, s3_port=0):
        """Starts server.js and waits for its ready line; returns self.
        s3_port: the S3 port to listen on (0: a free one), e.g. the old one
        after kill9(), so that a running cairnd finds the server again.
        Settings given to control() do not survive a restart."""
        assert not self.running(), "server already running (pid %d)" % self.pid
        require_tools()
        os.makedirs(self.data_dir, exist_ok=True)
        args = [node_path(), SERVER_JS, "--data", self.data_dir, "--region", self.region,
                "--account-id", self.account_id, "--min-ttl", str(self.min_ttl), "--s3-port", str(s3_port)]
        for b in self.buckets:
            args += ["--bucket", b]
        env = dict(os.environ)
        env.update(S3FIX_ACCESS_KEY=self.access_key, S3FIX_SECRET_KEY=self.secret_key,
                   S3FIX_API_TOKEN=self.api_token)
        banner = b"=== start %d\n" % self.starts
        self.starts += 1
        ready = self.spawn_ready(args, S3_DIR, timeout, "server.js", env=env, banner=banner)
        self.s3_port = ready["s3_port"]
        self.control_port = ready["control_port"]
        assert ready["pid"] == self.proc.pid, ready
        return self

    def stop(self):
        """SIGTERM (the server exits 0), SIGKILL after STOP_TIMEOUT; returns
        the exit status."""
        return self._end(signal.SIGTERM)

    def kill9(self):
        """kill -9 of the server (s3rver and proxy are one process)."""
        return self._end(signal.SIGKILL)

    def restart(self):
        """Stops and starts again on the same data (new ports, temporary keys
        forgotten)."""
        if self.running():
            self.stop()
        return self.start()

    # -- addresses

    @property
    def endpoint(self):
        """http://127.0.0.1:PORT, the S3 endpoint (the proxy)."""
        return "http://%s:%d" % (self.host, self.s3_port)

    @property
    def control_url(self):
        return "http://%s:%d/control" % (self.host, self.control_port)

    @property
    def api_url(self):
        """The Cloudflare API base for the temp credentials stand-in:
        http://127.0.0.1:CONTROL_PORT/client/v4"""
        return "http://%s:%d/client/v4" % (self.host, self.control_port)

    def url(self, bucket, prefix="", **params):
        """s3://BUCKET/PREFIX?endpoint=..&region=..&path_style=1&allow_http=1&PARAMS
        for cairnd --backend; values percent-encoded, params sorted after the
        fixed four (a param given here replaces the fixed one)."""
        fixed = [("endpoint", self.endpoint), ("region", self.region), ("path_style", "1"), ("allow_http", "1")]
        q = [(k, v) for k, v in fixed if k not in params] + sorted(params.items())
        query = "&".join("%s=%s" % (urllib.parse.quote(str(k), safe=""), urllib.parse.quote(str(v), safe=""))
                         for k, v in q)
        return "s3://%s/%s?%s" % (urllib.parse.quote(bucket, safe=""), urllib.parse.quote(prefix, safe="/"), query)

    def env(self):
        """The daemon's credentials: {AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY}."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    # -- control

    def _json(self, method, url, body=None, headers=None, timeout=CONTROL_TIMEOUT):
        """(status, parsed JSON or raw bytes) of one request to the control port."""
        return serverproc.json_request(method, url, body, headers, timeout)

    def control(self, **settings):
        """POSTs the settings (tests/s3/README.md lists them) and returns the new
        state {settings, counters, ...}; a refused setting raises."""
        status, reply = self._json("POST", self.control_url, settings)
        if status != 200:
            raise AssertionError("control %r refused: %s %r" % (settings, status, reply))
        return reply

    def state(self):
        """GET /control: {settings, counters, temp_keys, ...}."""
        status, reply = self._json("GET", self.control_url)
        assert status == 200, (status, reply)
        return reply

    def counters(self):
        """The counters: requests/forwarded per method, rejected per error
        code, faults per kind, temp_credentials_issued, ..."""
        return self.state()["counters"]

    def requests(self):
        """The last 500 requests on the S3 port: [{method, path, key, status,
        fault, error}], oldest first."""
        status, reply = self._json("GET", self.control_url + "/requests")
        assert status == 200, (status, reply)
        return reply

    def faults(self, rate=1.0, kinds=("503",), **more):
        """Shorthand: control(fault_rate=rate, faults=[kinds...], **more)."""
        return self.control(fault_rate=rate, faults=list(kinds), **more)

    def clean(self):
        """No faults, no latency, server up."""
        return self.control(clear_faults=True, down=False)

    def down(self, mode="refuse"):
        """The S3 port goes away: "refuse" closes the listener (connection
        refused), "reset" accepts and resets every connection. Open
        connections are cut either way."""
        return self.control(down_mode=mode, down=True)

    def up(self):
        """The S3 port is back (the same port)."""
        return self.control(down=False)

    def expire_temp_keys(self):
        """Every temporary key issued so far expires now."""
        return self.control(expire_temp_keys=True)

    def temp_credentials(self, bucket, prefix="", ttl=3600, permission="object-read-write", token=None,
                         parent=None, account_id=None):
        """Calls the credentials API as cairnd would; returns (HTTP status,
        parsed reply)."""
        url = "%s/accounts/%s/r2/temp-access-credentials" % (
            self.api_url, urllib.parse.quote(account_id or self.account_id, safe=""))
        body = {"bucket": bucket, "prefix": prefix, "permission": permission, "ttlSeconds": ttl,
                "parentAccessKeyId": parent or self.access_key}
        return self._json("POST", url, body, {"Authorization": "Bearer " + (token or self.api_token)})

    # -- the store on disk (s3rver's file system layout)

    def object_path(self, bucket, key):
        """The file s3rver keeps the object's bytes in (it may not exist)."""
        parts = key.split("/")
        return os.path.join(self.store_dir, bucket, *parts[:-1], parts[-1] + "._S3rver_object")

    def list_keys(self, bucket, prefix=""):
        """The keys of the bucket's objects on disk, sorted."""
        suffix = "._S3rver_object"
        root = os.path.join(self.store_dir, bucket)
        out = []
        for dirpath, _, files in os.walk(root):
            for f in files:
                if f.endswith(suffix):
                    key = os.path.relpath(os.path.join(dirpath, f[:-len(suffix)]), root).replace(os.sep, "/")
                    if key.startswith(prefix):
                        out.append(key)
        return sorted(out)

    # -- logs

