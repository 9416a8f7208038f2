"""The azure rows: cairn's azure backend against a bare libcurl client and
rclone's azureblob backend, all talking to one Azurite on 127.0.0.1.

The server is the integration tests' fixture, tests/integration/azurefixture.py
(reused as it is): Azurite (which checks every SharedKey signature) behind
the fixture's proxy, which adds a delay before forwarding each request - the
latency profiles clean, rtt20, rtt50 and rtt100 (0, 20, 50, 100 ms). The
runner keeps it on its list of servers, so Azurite is stopped by pid at the
end of the suite, on an error, on Ctrl-C or SIGTERM (and by the fixture's
exit hook).

Per operation, at every profile (1 MiB objects; the last 64 KiB of one; a
head; a list of 50 blobs of 1 KiB; a delete):

    cairn      bench/backend-bench --url azure://...: storage's backend_*
               API, the backend opened before the clock starts
    libcurl    bench/az-raw: one curl easy handle, kept alive, signing with
               storage/azure's SharedKey signer; the same requests, nothing
               around them
    rclone     whole commands against an azureblob remote configured only
               through RCLONE_CONFIG_CBAZ_* variables (a SAS URL: rclone
               1.60 reaches no other path-style endpoint): copyto, cat
               --offset --count, lsf FILE, lsjson --no-modtime --no-mimetype
               DIR, deletefile

The mount and multiclient suites use Fixture too, through the interface it
shares with s3.S3Fixture: profile(latency, fault_rate=, faults=,
stall_max_s=), backend("azure", prefix, **params) -> (cairnd's URL,
environment), reset_counters(), counters() and gets() (the proxy's counts of
requests per method and of faults per kind since reset_counters()).
"""

import json
import os
import unittest
import urllib.parse

from . import procs, s3
from .procs import run_timed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "integration", "azurefixture.py")
CONTAINER = "cairnbench"
SIZE, RANGE, OPS, LIST_N, LIST_OBJECT_SIZE = s3.SIZE, s3.RANGE, s3.OPS, s3.LIST_N, s3.LIST_OBJECT_SIZE
BACKENDS = ["azure"]
RCLONE_REMOTE = "cbaz"
# What the suites' captions call the server; the kinds of fault the
# multiclient suite's runs with faults inject (the proxy's every kind), and
# the backend's timeouts there, as for s3.
SERVER = "Azurite behind the azure fixture's proxy (cairnbench/azure.py)"
FAULTS = ["503", "500", "reset", "stall", "truncate", "lost"]
FAULT_STALL_TIMEOUT, FAULT_TIMEOUT = s3.FAULT_STALL_TIMEOUT, s3.FAULT_TIMEOUT
PeerError = s3.PeerError
LIBCURL = "libcurl (bench/az-raw)"
RCLONE = "rclone (azureblob remote)"


def _fixture():
    return procs.fixture_module(FIXTURE)


def unavailable():
    """Why no Azurite can be started here (for "not measured: ..."), or None."""
    if not os.path.isfile(FIXTURE):
        return "no %s in this tree" % os.path.relpath(FIXTURE, REPO)
    try:
        _fixture().require_tools()
    except unittest.SkipTest as e:
        return str(e)
    return None


def clean_env():
    """The runner's environment without AZURE_* and RCLONE_CONFIG_* variables."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("AZURE_") and not k.startswith("RCLONE_CONFIG_")}


class Fixture(procs.Server):
    """One Azurite for the suite and the latency proxy in front of it."""

    name = "azurite (tests/integration/azurefixture.py)"

    def __init__(self, ctx):
        super().__init__()
        why = unavailable()
        if why:
            raise procs.Skip(why)
        fx = _fixture()
        self.srv = fx.AzureServer(ctx.mkdtemp("azurite"), containers=[CONTAINER])
        self.proxy = None
        self.log_path = self.srv.log_path
        procs.register_server(self)
        try:
            self.srv.start()
        except unittest.SkipTest as e:
            self.stop(check=False)
            raise procs.Skip(str(e))
        except AssertionError as e:
            self.stop(check=False)
            raise RuntimeError("Azurite did not start: %s" % str(e)[-400:])
        self.proxy = fx.FaultProxy(self.srv).start()
        self._stall_max_s = self.proxy.stall_max_s
        self.reset_counters()

    @property
    def pid(self):
        return self.srv.pid if self.srv else None

    def check_alive(self):
        if self.srv is not None and not self.srv.running():
            raise RuntimeError("Azurite died: " + self.srv.log_tail(600))

    def stop(self, check=True):
        procs.unregister_server(self)
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        srv, self.srv = self.srv, None
        if srv is not None:
            srv.stop()

    def profile(self, latency, fault_rate=0.0, faults=("503",), stall_max_s=None):
        """Latency profile `latency` (the proxy's PROFILES), and no faults unless
        given: `fault_rate` of the requests fail, kind picked from `faults`; a
        stalled answer is closed by the proxy after `stall_max_s` (its default
        when None), as S3Fixture.profile() takes them."""
        self.proxy.set(fault_rate, faults)
        self.proxy.profile(latency)
        self.proxy.stall_max_s = stall_max_s or self._stall_max_s

    def env(self):
        env = clean_env()
        env.update(AZURE_STORAGE_ACCOUNT=self.srv.account, AZURE_STORAGE_KEY=self.srv.key)
        return env

    def backend(self, kind, prefix, **params):
        """(URL, environment) of cairn's azure backend keeping its blobs under
        `prefix`, through the proxy; `params` (stall_timeout, timeout, ...) are
        appended to the URL. The key is in the environment, not the URL."""
        assert kind == "azure", kind
        q = [("endpoint", self.proxy.endpoint), ("allow_http", "1")] + sorted(params.items())
        query = "&".join("%s=%s" % (urllib.parse.quote(str(k), safe=""),
                                    urllib.parse.quote(str(v), safe="")) for k, v in q)
        return "azure://%s/%s/%s?%s" % (self.srv.account, CONTAINER,
                                        urllib.parse.quote(prefix, safe="/"), query), self.env()

    # -- the proxy's counters, as S3Fixture has the S3 server's

    def reset_counters(self):
        """Counts from now on."""
        self.proxy.reset_counters()

    def counters(self):
        """{"requests": {method: n}, "faults": {kind: n}} since reset_counters()."""
        now = self.proxy.snapshot()
        return {part: {k: n for k, n in now[part].items() if n} for part in ("requests", "faults")}

    def gets(self):
        """GET requests the proxy saw since reset_counters()."""
        return self.counters()["requests"].get("GET", 0)


def backend_round(ctx, server, kind, prefix, n):
    """One backend-bench process against the azure URL; {op: [ms]}, peak RSS."""
    url, env = server.backend(kind, prefix)
    argv = [ctx.bin["backend-bench"], "--url", url, "--size", str(SIZE), "--iterations", str(n),
            "--range", str(RANGE), "--list=50"]
    r = run_timed(argv, capture=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise procs.SuiteError("backend-bench --url azure://... failed (%s): %s"
                               % (r.returncode, r.stderr.strip()[-400:]))
    data = json.loads(r.stdout)
    return data["modes"]["backend"], data["peak_rss_kib"]


def raw_round(ctx, server, kind, prefix, n):
    """One az-raw process (libcurl); {op: [ms]}, peak RSS."""
    argv = [ctx.bin["az-raw"], "--endpoint", server.proxy.endpoint, "--account", server.srv.account,
            "--container", CONTAINER, "--prefix", prefix, "--size", str(SIZE), "--iterations",
            str(n), "--range", str(RANGE), "--list=50"]
    r = run_timed(argv, capture=True, env=server.env(), timeout=1800)
    if r.returncode != 0:
        raise procs.SuiteError("az-raw failed (%s): %s" % (r.returncode, r.stderr.strip()[-400:]))
    data = json.loads(r.stdout)
    return data["modes"]["libcurl"], data["peak_rss_kib"]


def rclone_env(ctx, server, kind, prefix):
    """An azureblob remote named cbaz, all from the environment (an empty config
    file, so the user's own rclone.conf does not apply), on the proxy."""
    conf = os.path.join(ctx.tmp, "rclone-azure.conf")
    open(conf, "w").close()
    pre = "RCLONE_CONFIG_%s_" % RCLONE_REMOTE.upper()
    env = clean_env()
    env["RCLONE_CONFIG"] = conf
    # rclone 1.60 takes `endpoint` as a host suffix (https://ACCOUNT.ENDPOINT) and
    # use_emulator as port 10000; a container SAS URL reaches the proxy's path-style
    # address, with an account SAS token that allows everything.
    sas = server.srv.account_sas("racwdl")
    env.update({pre + "TYPE": "azureblob",
                pre + "SAS_URL": "%s/%s?%s" % (server.proxy.endpoint, CONTAINER, sas)})
    return env


def _remote(prefix):
    return "%s:%s/%s" % (RCLONE_REMOTE, CONTAINER, prefix)


def rclone_prepare(ctx, env, prefix):
    return s3.rclone_prepare(ctx, env, prefix, remote=_remote(prefix))


def rclone_round(ctx, env, prefix, src, n):
    return s3.rclone_round(ctx, env, prefix, src, n, remote=_remote(prefix))


def caption(kind):
    return ("All against one Azurite on 127.0.0.1 (tests/integration/azurefixture.py: Azurite "
            "3.35.0, which checks every SharedKey signature) behind the fixture's proxy, which "
            "waits 0, 20, 50 or 100 ms (clean, rtt20, rtt50, rtt100) before forwarding each "
            "request; tools alternate round by round. cairn: backend-bench --url azure://... "
            "(storage's backend_* API, opened before the clock starts). libcurl: bench/az-raw, "
            "one curl easy handle kept alive, signed with storage/azure's SharedKey signer. "
            "rclone: whole commands (its start-up included) with an azureblob remote set up "
            "through RCLONE_CONFIG_CBAZ_* with a SAS URL (an account SAS token; rclone 1.60 "
            "reaches no other path-style endpoint): `copyto`, `cat`, `cat --offset --count`, `lsf FILE`, "
            "`lsjson --no-modtime --no-mimetype DIR`, `deletefile`.")
