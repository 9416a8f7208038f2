"""The s3 and r2 rows: cairn's S3 backend against a bare libcurl client and
rclone, all talking to one S3 server on 127.0.0.1.

The server is the integration tests' fixture, tests/integration/s3fixture.py
(reused as it is): tests/s3/server.js, s3rver behind a proxy that checks
every request's SigV4 signature and x-amz-content-sha256, and adds a delay
before forwarding each request - the latency profiles clean, rtt20, rtt50
and rtt100 (0, 20, 50, 100 ms) - or injects faults. The runner keeps it on
its list of servers, so it is stopped by pid at the end of the suite, on an
error, on Ctrl-C or SIGTERM (and by the fixture's exit hook).

Per operation, at every profile (1 MiB objects; the last 64 KiB of one; a
HEAD; a list of 50 objects of 1 KiB; a delete):

    cairn      bench/backend-bench --url s3://... (or r2://...): storage's
               backend_* API, the backend opened before the clock starts
    libcurl    bench/s3-raw: one curl easy handle, kept alive, signing with
               CURLOPT_AWS_SIGV4; the same requests, nothing around them
    rclone     whole commands against an s3 remote configured only through
               RCLONE_CONFIG_CBS3_* variables: copyto, cat --offset --count,
               lsf FILE, lsjson --no-modtime --no-mimetype DIR, deletefile

r2 rows: the backend in r2 mode (r2://...?account=..&api_base=..), which
takes temporary credentials from the fixture's stand-in for Cloudflare's API
and signs every request with them and their session token; the peers get
temporary credentials from the same API (outside the timing) and use them
the same way (x-amz-security-token).
"""

import json
import os
import unittest

from . import procs
from .procs import run_timed

KIB = 1024
MIB = 1024 * KIB

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "integration", "s3fixture.py")
BUCKET = "cairnbench"
SIZE = 1 * MIB
RANGE = 64 * KIB
LIST_N = 50
LIST_OBJECT_SIZE = 1 * KIB
OPS = ["put", "get", "range", "head", "list_50", "delete"]
BACKENDS = ["s3", "r2"]
RCLONE_REMOTE = "cbs3"
# The backend's stall and request timeouts in the runs with injected faults:
# a stalled answer must be given up on quickly, as the issue asks.
FAULT_STALL_TIMEOUT = 2
FAULT_TIMEOUT = 30
# What the suites' captions call the server, and the kinds of fault the
# multiclient suite's runs with faults inject.
SERVER = "the S3 test server (s3rver behind a SigV4-checking proxy, cairnbench/s3.py)"
FAULTS = ["503", "500", "reset", "stall", "truncate"]


def _fixture():
    """tests/integration/s3fixture.py, loaded from its path (no sys.path change)."""
    return procs.fixture_module(FIXTURE)


def unavailable():
    """Why no S3 server can be started here (for "not measured: ..."), or None."""
    if not os.path.isfile(FIXTURE):
        return "no %s in this tree" % os.path.relpath(FIXTURE, REPO)
    try:
        _fixture().require_tools()
    except unittest.SkipTest as e:
        return str(e)
    return None


def clean_env():
    """The runner's environment without AWS_* and CLOUDFLARE_* variables, so the
    user's credentials, profile or CA bundle (rclone's AWS SDK refuses a plain
    HTTP transport when AWS_CA_BUNDLE is set) never apply."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("AWS_") and not k.startswith("CLOUDFLARE_")}


class S3Fixture(procs.Server):
    """One tests/s3/server.js for the suite; `srv` is the fixture's S3Server."""

    name = "s3 server (tests/s3/server.js)"

    def __init__(self, ctx):
        super().__init__()
        why = unavailable()
        if why:
            raise procs.Skip(why)
        base = ctx.mkdtemp("s3")
        self.srv = _fixture().S3Server(base, buckets=[BUCKET])
        self.log_path = self.srv.log_path
        procs.register_server(self)
        try:
            self.srv.start()
        except unittest.SkipTest as e:
            self.stop(check=False)
            raise procs.Skip(str(e))
        except AssertionError as e:  # the fixture's way of saying it did not start
            self.stop(check=False)
            raise RuntimeError("the S3 server did not start: %s" % str(e)[-400:])

    @property
    def pid(self):
        return self.srv.pid if self.srv else None

    def check_alive(self):
        if self.srv is not None and not self.srv.running():
            raise RuntimeError("the S3 server died: " + self.srv.log_tail(600))

    def stop(self, check=True):
        procs.unregister_server(self)
        srv, self.srv = self.srv, None
        if srv is not None:
            srv.stop()  # SIGTERM to its pid, SIGKILL after 10 s

    def profile(self, latency, **faults):
        """Latency profile `latency`, and no faults unless given."""
        self.srv.control(clear_faults=True, down=False)
        self.srv.control(latency=latency, **faults)

    # -- the server's counters (azure.Fixture has the same three)

    def reset_counters(self):
        self.srv.control(reset_counters=True)

    def counters(self):
        """{"requests": {method: n}, "faults": {kind: n}, ...} since reset_counters()."""
        return self.srv.counters()

    def gets(self):
        """GET requests the proxy saw since reset_counters()."""
        return self.counters().get("requests", {}).get("GET", 0)

    # -- what each tool needs to reach a prefix of the bucket

    def backend(self, kind, prefix, **params):
        """(URL, environment) of cairn's backend keeping its objects under `prefix`."""
        srv = self.srv
        env = clean_env()
        if kind == "s3":
            env.update(srv.env())
            return srv.url(BUCKET, prefix, **params), env
        url = srv.url(BUCKET, prefix, account=srv.account_id, api_base=srv.api_url,
                      temp_ttl=3600, **params)
        env.update(AWS_ACCESS_KEY_ID=srv.access_key, CLOUDFLARE_API_TOKEN=srv.api_token)
        return "r2" + url[2:], env

    def peer_keys(self, kind, prefix):
        """(access key, secret, session token or None) for a peer under `prefix`: the
        main key pair for s3; for r2 temporary credentials limited to the prefix,
        from the fixture's stand-in for Cloudflare's API, as the backend gets its own."""
        srv = self.srv
        if kind == "s3":
            return srv.access_key, srv.secret_key, None
        status, reply = srv.temp_credentials(BUCKET, prefix, ttl=3600)
        if status != 200 or not reply.get("success"):
            raise RuntimeError("temporary credentials refused: %s %r" % (status, reply))
        c = reply["result"]
        return c["accessKeyId"], c["secretAccessKey"], c["sessionToken"]


Fixture = S3Fixture  # the name suite_backends looks for, as in azure.py


class PeerError(RuntimeError):
    """A peer (rclone) failed: its comparison is not measured."""


def backend_round(ctx, server, kind, prefix, n):
    """One backend-bench process against the s3 or r2 URL; {op: [ms]}, peak RSS."""
    url, env = server.backend(kind, prefix)
    argv = [ctx.bin["backend-bench"], "--url", url, "--size", str(SIZE), "--iterations", str(n),
            "--range", str(RANGE), "--list=50"]
    r = run_timed(argv, capture=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise procs.SuiteError("backend-bench --url %s://... failed (%s): %s"
                               % (kind, r.returncode, r.stderr.strip()[-400:]))
    data = json.loads(r.stdout)
    return data["modes"]["backend"], data["peak_rss_kib"]


def raw_round(ctx, server, kind, prefix, n):
    """One s3-raw process (libcurl); {op: [ms]}, peak RSS."""
    key, secret, token = server.peer_keys(kind, prefix)
    env = clean_env()
    env.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    if token:
        env["AWS_SESSION_TOKEN"] = token
    argv = [ctx.bin["s3-raw"], "--endpoint", server.srv.endpoint, "--bucket", BUCKET,
            "--prefix", prefix, "--region", server.srv.region, "--size", str(SIZE),
            "--iterations", str(n), "--range", str(RANGE), "--list=50"]
    r = run_timed(argv, capture=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise procs.SuiteError("s3-raw failed (%s): %s" % (r.returncode, r.stderr.strip()[-400:]))
    data = json.loads(r.stdout)
    return data["modes"]["libcurl"], data["peak_rss_kib"]


def rclone_env(ctx, server, kind, prefix):
    """An s3 remote named cbs3, all from the environment (an empty config file, so
    the user's own rclone.conf does not apply): provider Other, the proxy as
    endpoint, path style; rclone does not create or check the bucket (neither
    does the backend)."""
    conf = os.path.join(ctx.tmp, "rclone-s3.conf")
    open(conf, "w").close()
    key, secret, token = server.peer_keys(kind, prefix)
    pre = "RCLONE_CONFIG_%s_" % RCLONE_REMOTE.upper()
    env = clean_env()
    env["RCLONE_CONFIG"] = conf
    env.update({pre + "TYPE": "s3", pre + "PROVIDER": "Other",
                pre + "ENDPOINT": server.srv.endpoint, pre + "REGION": server.srv.region,
                pre + "ACCESS_KEY_ID": key, pre + "SECRET_ACCESS_KEY": secret,
                pre + "FORCE_PATH_STYLE": "true", pre + "NO_CHECK_BUCKET": "true"})
    if token:
        env[pre + "SESSION_TOKEN"] = token
    return env


def _rclone(argv, env, what):
    r = run_timed(["rclone"] + argv, env=env, timeout=600)
    if r.returncode != 0:
        raise PeerError("rclone %s failed (exit %s): %s" % (what, r.returncode,
                                                            r.stderr.strip()[-300:]))
    return r


def rclone_prepare(ctx, env, prefix, remote=None):
    """The 50 objects of 1 KiB for rclone's list, with one untimed `rclone copy`;
    `remote` (the azure rows') is the remote path of the prefix."""
    d = ctx.mkdtemp("rclone-la")
    blob = os.urandom(LIST_OBJECT_SIZE)
    for i in range(LIST_N):
        with open(os.path.join(d, "o%06d" % i), "wb") as f:
            f.write(blob)
    _rclone(["copy", d, (remote or "%s:%s/%s" % (RCLONE_REMOTE, BUCKET, prefix)) + "la"], env,
            "copy")
    procs.remove_tree(d)


def rclone_round(ctx, env, prefix, src, n, remote=None):
    """rclone, whole commands, one per operation; {op: [ms]}. `remote` (the azure
    rows') is the remote path of the prefix."""
    remote = remote or "%s:%s/%s" % (RCLONE_REMOTE, BUCKET, prefix)
    out = {op: [] for op in OPS}
    part = os.path.join(ctx.tmp, "rclone-range")
    for i in range(n):
        out["put"].append(_rclone(["copyto", src, "%sobj/o%06d" % (remote, i)], env,
                                  "copyto").ms)
    for i in range(n):
        out["get"].append(_rclone(["cat", "%sobj/o%06d" % (remote, i)], env, "cat").ms)
    for i in range(n):
        with open(part, "wb") as f:
            r = run_timed(["rclone", "cat", "--offset", str(SIZE - RANGE), "--count", str(RANGE),
                           "%sobj/o%06d" % (remote, i)], stdout=f, env=env, timeout=600)
        if r.returncode != 0 or os.path.getsize(part) != RANGE:
            raise PeerError("rclone cat --offset --count failed (exit %s): %s"
                            % (r.returncode, r.stderr.strip()[-300:]))
        out["range"].append(r.ms)
    with open(src, "rb") as a, open(part, "rb") as b:
        a.seek(SIZE - RANGE)
        if a.read() != b.read():
            raise PeerError("rclone cat --offset --count returned other bytes")
    os.unlink(part)
    for i in range(n):
        r = run_timed(["rclone", "lsf", "%sobj/o%06d" % (remote, i)], env=env, capture=True,
                      timeout=600)
        if r.returncode != 0 or r.stdout.strip() != "o%06d" % i:
            raise PeerError("rclone lsf FILE failed (exit %s): %s"
                            % (r.returncode, (r.stderr or r.stdout).strip()[-300:]))
        out["head"].append(r.ms)
    for i in range(n):
        r = run_timed(["rclone", "lsjson", "--no-modtime", "--no-mimetype", remote + "la"],
                      env=env, capture=True, timeout=600)
        if r.returncode != 0 or len(json.loads(r.stdout or "[]")) != LIST_N:
            raise PeerError("rclone lsjson failed (exit %s): %s"
                            % (r.returncode, r.stderr.strip()[-300:]))
        out["list_50"].append(r.ms)
    for i in range(n):
        out["delete"].append(_rclone(["deletefile", "%sobj/o%06d" % (remote, i)], env,
                                     "deletefile").ms)
    return out
