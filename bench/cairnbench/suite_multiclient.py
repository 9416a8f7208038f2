"""multiclient: cairn-loadgen at 1 to 64 clients in every profile, against
redis-benchmark on a redis-server measured in the same run, and the same
profiles over MCP (`cairn-loadgen --transport mcp`: one `cairn mcp` process
per client, each request a tools/call) beside native IPC at fewer client
counts (the tier's mc_mcp_clients).

Every (profile, clients) run gets a fresh cairnd, so one run's documents do
not slow the next. Each run is closed-loop with one request in flight per
client (pipeline 1, as redis-benchmark's default -P 1) and stops after its
ops or its time limit, whichever comes first.

The s3 and azure runs: `add` only, against a cairnd whose backend is s3://
on the S3 test server (cairnbench/s3.py: s3rver behind a SigV4-checking
proxy), then one whose backend is azure:// on Azurite behind the azure
fixture's proxy (cairnbench/azure.py), at the rtt50 latency profile,
without faults and with 10% of the requests failing (s3: 503, 500, reset,
stall, truncate; azure: the same and lost). One code path serves both
(_run_remote, _report_remote), over the fixtures' common interface:
profile(), backend(), reset_counters(), counters().

redis-server listens on a Unix socket only, with `appendonly yes` and
`appendfsync always`, so a SET is acknowledged after an fsync, as a cairn add
is. Values are 8 KiB, as are cairn's documents; GET reads keys that exist
(they are SET beforehand), as cairn's gets read seeded documents.
"""

import csv
import io
import json
import os

from . import azure, charts, common, procs, report, s3
from .procs import run_timed

PROFILES = ["get", "add", "search", "mixed", "external_agent_churn"]
FILE_SIZE = 8192


def _loadgen(ctx, daemon, profile, clients, json_path, seconds=None, files=None, fail_ok=False,
             pipeline=1, transport="ipc", ops_per_client=None, file_size=FILE_SIZE):
    """One loadgen run; its JSON. With `fail_ok`, a run that could not happen
    (seeding failed) returns {"error": stderr} instead of failing the suite.
    Defaults: the tier's mc_seconds, mc_files and mc_ops spread over the clients."""
    s = ctx.sizes
    seconds = seconds or s["mc_seconds"]
    ops_per_client = ops_per_client or max(10, s["mc_ops"] // clients)
    files = s["mc_files"] if files is None else files
    argv = [ctx.bin["loadgen"], "--socket", daemon.socket, "--clients", str(clients),
            "--ops-per-client", str(ops_per_client), "--duration", str(seconds),
            "--profile", profile, "--files", str(files),
            "--file-size", str(file_size), "--pipeline", str(pipeline), "--json", json_path,
            "--quiet"]
    if transport != "ipc":
        argv += ["--transport", transport, "--cairn", ctx.bin["cairn"]]
    # Seeding, connecting and the run itself take seconds; minutes mean it hangs.
    r = run_timed(argv, capture=True, timeout=seconds + 120)
    if r.returncode == 1 and fail_ok:
        return {"error": r.stderr.strip()[-400:]}
    if r.returncode != 0:
        kind = ("killed by signal %d" % -r.returncode if r.returncode < 0
                else "exit %d" % r.returncode)
        raise procs.SuiteError("cairn-loadgen %s at %d clients over %s failed (%s): %s"
                               % (profile, clients, transport, kind, r.stderr.strip()[-400:]))
    with open(json_path) as f:
        data = json.load(f)
    if data.get("schema") != "cairn-loadgen/1":
        raise procs.SuiteError("cairn-loadgen wrote an unknown schema: %r" % data.get("schema"))
    if data.get("transport", "ipc") != transport:
        raise procs.SuiteError("cairn-loadgen ran over %r, not %s" % (data.get("transport"),
                                                                    transport))
    return data


def _redis_benchmark(redis, test, clients, requests, keys, pipeline=1):
    argv = ["redis-benchmark", "-s", redis.socket, "-c", str(clients), "-n", str(requests),
            "-d", str(FILE_SIZE), "-r", str(keys), "-t", test, "-P", str(pipeline), "--csv"]
    r = run_timed(argv, capture=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("redis-benchmark failed: " + r.stderr.strip()[-300:])
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    for row in rows:
        if row.get("test", "").upper() == test.upper():
            return {k: float(v) for k, v in row.items() if k != "test"}
    raise RuntimeError("redis-benchmark printed no %s row: %r" % (test, r.stdout[:200]))


def _measure(ctx, log, profile, clients, transport, pipeline=1):
    """One loadgen run against a fresh cairnd; its JSON with cairnd's peak RSS."""
    log("multiclient: %s at %d clients%s%s" % (
        profile, clients, " over mcp" if transport == "mcp" else "",
        ", %d in flight each" % pipeline if pipeline > 1 else ""))
    with procs.Cairnd(ctx, "mc") as daemon:
        data = _loadgen(ctx, daemon, profile, clients, os.path.join(daemon.dir, "loadgen.json"),
                        transport=transport, pipeline=pipeline)
        data["cairnd_peak_rss_kib"] = daemon.peak_rss_kib()
        daemon.check_alive()
    procs.remove_tree(daemon.dir)
    return data


def run(ctx, result, log):
    s = ctx.sizes
    runs = {(profile, clients): _measure(ctx, log, profile, clients, "ipc")
            for profile in PROFILES for clients in s["mc_clients"]}
    mcp_runs = {(profile, clients): _measure(ctx, log, profile, clients, "mcp")
                for profile in PROFILES for clients in s["mc_mcp_clients"]}
    # Durable adds by client count (one in flight each), then several in flight each.
    adds = {(c, 1): runs.get(("add", c)) or _measure(ctx, log, "add", c, "ipc")
            for c in s["mc_add_clients"]}
    pc, pd = s["mc_add_pipeline"]
    adds[(pc, pd)] = _measure(ctx, log, "add", pc, "ipc", pipeline=pd)

    redis = {}
    if ctx.have("redis-server") and ctx.have("redis-benchmark"):
        with procs.Redis(ctx) as server:
            keys = s["mc_files"]
            server.populate(keys, FILE_SIZE)
            for clients in s["mc_clients"]:
                log("multiclient: redis-benchmark at %d clients" % clients)
                try:
                    redis[("GET", clients)] = _redis_benchmark(
                        server, "get", clients, s["redis_get_requests"], keys)
                    redis[("SET", clients)] = _redis_benchmark(
                        server, "set", clients,
                        min(s["redis_set_per_client"] * clients, 20 * s["redis_set_per_client"]),
                        keys)
                except RuntimeError as e:
                    result.note(str(e))
            for clients, pipeline in sorted(adds):
                if pipeline == 1 and ("SET", clients) in redis:
                    continue
                log("multiclient: redis-benchmark SET at %d clients, -P %d" % (clients, pipeline))
                try:
                    redis[("SET", clients, pipeline)] = _redis_benchmark(
                        server, "set", clients,
                        max(20 * s["redis_set_per_client"], s["redis_set_per_client"] * clients),
                        keys, pipeline)
                except RuntimeError as e:
                    result.note(str(e))
            server.check_alive()
    else:
        result.note("redis-server or redis-benchmark is not installed: no redis comparison")

    search_missing = any(
        r["op_types"].get("search", {}).get("errors", {}).get("unknown_op")
        for r in runs.values())
    if search_missing:
        result.note("search: not available in this build (cairnd answers unknown_op); the "
                    "search requests of every profile count as failures")

    _report(ctx, result, runs, redis)
    _report_adds(result, adds, redis)
    _report_mcp(ctx, result, runs, mcp_runs)
    for mod in REMOTES:
        _report_remote(ctx, result, mod, _run_remote(ctx, log, mod))


def _report_adds(result, adds, redis):
    """Durable adds by client count and in flight, beside redis SET with appendfsync always."""
    t = result.table(
        "Durable adds by clients and requests in flight",
        ["clients", "in flight each", "cairn add ops/s", "p50 ms", "p95 ms", "÷ 1 client",
         "redis SET rps", "cairn ÷ redis"],
        "cairn-loadgen --profile add (8 KiB documents, a fresh cairnd each); redis-benchmark -d "
        "8192 -t set with -P as many in flight, appendfsync always, in the same run.")
    one = adds.get((1, 1))
    one_rate = one and _op(one, "add")["ops_per_s"]
    for (clients, pipeline), d in sorted(adds.items()):
        a = _op(d, "add")
        rs = redis.get(("SET", clients, pipeline)) or (
            redis.get(("SET", clients)) if pipeline == 1 else None)
        t.add(clients, pipeline, a["ops_per_s"], a["latency_ms"]["p50"], a["latency_ms"]["p95"],
              report.fmt_ratio(report.ratio(a["ops_per_s"], one_rate)) if pipeline == 1 else "",
              rs and rs["rps"], report.fmt_ratio(report.ratio(a["ops_per_s"], rs and rs["rps"])))
    name = "multiclient: durable `add` at 64 clients ≥ 10x one client"
    if (64, 1) not in adds or not one_rate:
        result.target(name, "64 clients not run in this tier", None)
    else:
        _ratio_target(result, name, _op(adds[(64, 1)], "add")["ops_per_s"], one_rate, 10)
    for (clients, pipeline), d in sorted(adds.items()):
        if pipeline == 1:
            continue
        name = ("multiclient: durable `add` at %d clients, %d in flight each ≥ 1.0x redis SET "
                "-P %d" % (clients, pipeline, pipeline))
        rs = redis.get(("SET", clients, pipeline))
        if not rs:
            result.target(name, "redis not measured", None)
            continue
        _ratio_target(result, name, _op(d, "add")["ops_per_s"], rs["rps"], 1.0)
    result.data["adds"] = {"%d@%d" % k: v for k, v in adds.items()}


def _ratio_target(result, name, mine, theirs, at_least):
    """A target met when mine ÷ theirs (ops/s) is at least `at_least`, shown as
    "RATIO (MINE vs THEIRS ops/s)"."""
    r = report.ratio(mine, theirs)
    result.target(name, "%s (%s vs %s ops/s)" % (report.fmt_ratio(r), report.fmt(mine),
                                                 report.fmt(theirs)), r >= at_least)


def _op(data, op):
    return data["op_types"].get(op)


def _no_failures_target(result, name, runs, what):
    """The target that no run of `runs` ({(profile, clients): data}) had a failure."""
    bad = [(p, c, d["failures"]) for (p, c), d in runs.items() if d["failures"]]
    result.target(name, "%d of %d %s had failures%s" % (
                      len(bad), len(runs), what,
                      (": " + ", ".join("%s@%d: %d" % b for b in sorted(bad)[:6])) if bad else ""),
                  not bad)


def _report(ctx, result, runs, redis):
    s = ctx.sizes
    clients_list = s["mc_clients"]
    t = result.table(
        "Throughput and failures per profile",
        ["profile", "clients", "ops/s", "ops", "failed", "fail rate", "seconds",
         "cairnd peak RSS"],
        "Closed loop, one request in flight per client, 8 KiB documents; %d documents seeded "
        "before the clock starts. external_agent_churn counts each connect as an op."
        % s["mc_files"])
    for (profile, clients), d in sorted(runs.items(), key=lambda kv: (PROFILES.index(kv[0][0]),
                                                                      kv[0][1])):
        t.add(profile, clients, d["ops_per_s"], d["ops"], d["failures"],
              "%.2f%%" % (100.0 * d["fail_rate"]), d["elapsed_s"],
              report.fmt_bytes((d.get("cairnd_peak_rss_kib") or 0) * 1024))

    lat = result.table("Latency per op type (ms)",
                       ["profile", "clients", "op", "count", "failed", "ops/s", "p50", "p95",
                        "p99", "max", "errors"])
    for (profile, clients), d in sorted(runs.items(), key=lambda kv: (PROFILES.index(kv[0][0]),
                                                                      kv[0][1])):
        for op, st in sorted(d["op_types"].items()):
            L = st["latency_ms"]
            errs = ", ".join("%s %d" % kv for kv in sorted(st["errors"].items())) or "-"
            lat.add(profile, clients, op, st["count"], st["failures"], st["ops_per_s"],
                    L["p50"], L["p95"], L["p99"], L["max"], errs)

    if redis:
        cmp_t = result.table(
            "cairn vs redis (same run, same machine)",
            ["clients", "cairn get ops/s", "redis GET rps", "cairn ÷ redis (get)",
             "cairn add ops/s", "redis SET rps (fsync always)", "cairn ÷ redis (add)"],
            "redis-benchmark -d 8192 against redis-server with appendonly yes, appendfsync "
            "always, on a Unix socket.")
        for clients in clients_list:
            g, a = runs.get(("get", clients)), runs.get(("add", clients))
            rg, rs = redis.get(("GET", clients)), redis.get(("SET", clients))
            cmp_t.add(clients, g and _op(g, "get")["ops_per_s"], rg and rg["rps"],
                      report.fmt_ratio(report.ratio(g and _op(g, "get")["ops_per_s"],
                                                    rg and rg["rps"])),
                      a and _op(a, "add")["ops_per_s"], rs and rs["rps"],
                      report.fmt_ratio(report.ratio(a and _op(a, "add")["ops_per_s"],
                                                    rs and rs["rps"])))

    # Targets.
    _no_failures_target(result, "multiclient: 0 failures in every profile at every client count",
                        runs, "runs")
    at = 8 if 8 in clients_list else None
    if at is None:
        for name in ("`get` at 8 clients ≥ 0.5x redis GET",
                     "durable `add` at 8 clients ≥ 0.5x redis SET (appendfsync always)",
                     "search p95 < 2 ms at 8 clients", "search p95 < 5 ms at 8 clients"):
            result.target("multiclient: " + name, "8 clients not run in this tier", None)
    else:
        for op, rtest, label in (("get", "GET", "`get` at 8 clients ≥ 0.5x redis GET"),
                                 ("add", "SET", "durable `add` at 8 clients ≥ 0.5x redis SET "
                                                "(appendfsync always)")):
            mine = runs.get((op, at))
            theirs = redis.get((rtest, at))
            if not theirs:
                result.target("multiclient: " + label, "redis not measured", None)
                continue
            _ratio_target(result, "multiclient: " + label, _op(mine, op)["ops_per_s"],
                          theirs["rps"], 0.5)
        srch = _op(runs[("search", at)], "search")
        for bound in (2, 5):
            name = "multiclient: search p95 < %d ms at 8 clients" % bound
            if srch["failures"] == srch["count"]:
                result.target(name, "every search failed (%s)" % (", ".join(srch["errors"]) or "?"),
                              False)
            else:
                p95 = srch["latency_ms"]["p95"]
                result.target(name, "%s ms" % report.fmt(p95), p95 < bound)
    name = "multiclient: search p50 < 1 ms at 1 client"
    if ("search", 1) not in runs:
        result.target(name, "1 client not run in this tier", None)
    else:
        p50 = _op(runs[("search", 1)], "search")["latency_ms"]["p50"]
        result.target(name, "%s ms" % report.fmt(p50), p50 < 1.0)

    result.data["runs"] = {"%s@%d" % k: v for k, v in runs.items()}
    result.data["redis"] = {"@".join(map(str, k)): v for k, v in redis.items()}

    series = {}
    for profile in PROFILES:
        series["cairn " + profile] = [(c, runs[(profile, c)]["ops_per_s"])
                                      for c in clients_list if (profile, c) in runs]
    for test in ("GET", "SET"):
        pts = [(c, redis[(test, c)]["rps"]) for c in clients_list if (test, c) in redis]
        if pts:
            series["redis " + test + (" (fsync always)" if test == "SET" else "")] = pts
    common.chart(result, ctx, "multiclient-throughput.svg", charts.line_chart,
                 "multiclient: throughput by clients (8 KiB, pipeline 1)", "clients", "ops/s",
                 series, logx=True, logy=True)
    p95 = {}
    for profile in PROFILES:
        for op in ("get", "add", "search"):
            pts = [(c, (_op(runs[(profile, c)], op) or {}).get("latency_ms", {}).get("p95"))
                   for c in clients_list if (profile, c) in runs and profile == op]
            if pts:
                p95["cairn %s p95" % op] = pts
    common.chart(result, ctx, "multiclient-p95.svg", charts.line_chart,
                 "multiclient: p95 latency by clients", "clients", "ms", p95, logx=True,
                 logy=True)


def _report_mcp(ctx, result, runs, mcp_runs):
    t = result.table(
        "ipc vs mcp (same profiles, same run)",
        ["profile", "clients", "ipc ops/s", "mcp ops/s", "mcp ÷ ipc", "ipc p50", "mcp p50",
         "ipc p95", "mcp p95", "mcp failed", "connect p50 ipc / mcp"],
        "The same loadgen runs over native IPC and over MCP: each mcp client drives its own "
        "`cairn mcp` process (spawned with --socket, initialize, then one tools/call per "
        "request; seeding goes over IPC). Latencies in ms over every request of the run "
        "(connects excluded). Under external_agent_churn each session of the mcp run is a new "
        "`cairn mcp` process: its connect is spawn to the initialize answer, and the process "
        "connects to cairnd at its first tool call.")
    for (profile, clients), m in sorted(mcp_runs.items(),
                                        key=lambda kv: (PROFILES.index(kv[0][0]), kv[0][1])):
        i = runs.get((profile, clients))
        il, ml = (i or {}).get("latency_ms", {}), m.get("latency_ms", {})
        connect = "-"
        if "connect" in m["op_types"]:
            ic = (i or {}).get("op_types", {}).get("connect")
            connect = "%s / %s" % (report.fmt(ic and ic["latency_ms"]["p50"]),
                                   report.fmt(m["op_types"]["connect"]["latency_ms"]["p50"]))
        t.add(profile, clients, i and i["ops_per_s"], m["ops_per_s"],
              report.fmt_ratio(report.ratio(m["ops_per_s"], i and i["ops_per_s"])),
              il.get("p50"), ml.get("p50"), il.get("p95"), ml.get("p95"), m["failures"], connect)
    _no_failures_target(result, "multiclient: 0 failures over mcp in every profile", mcp_runs,
                        "mcp runs")
    result.data["mcp_runs"] = {"%s@%d" % k: v for k, v in mcp_runs.items()}


# --- s3 and azure ------------------------------------------------------------

# The fixture modules of the remote backends these runs use (each with
# unavailable(), Fixture, BACKENDS, SERVER, FAULTS, FAULT_STALL_TIMEOUT,
# FAULT_TIMEOUT).
REMOTES = [s3, azure]
REMOTE_PROFILE = "rtt50"
REMOTE_FAULT_RATE = 0.1
REMOTE_FILES = 20  # the add profile reads no seeded documents; a few are enough
REMOTE_ADD_TARGET = 500.0
# Besides one request in flight per client (the suite's rule, and the target's
# run): a run at 8 in flight per client, which shows what the packer makes of
# a load that allows batching.
REMOTE_PIPELINE = 8


def _run_remote(ctx, log, mod):
    """{"why": reason or None, "runs": {(faults?, clients, pipeline): loadgen JSON +
    the proxy's counters}} for the backend of fixture module `mod`."""
    s = ctx.sizes
    kind = mod.BACKENDS[0]
    out = {"why": mod.unavailable(), "runs": {}}
    if out["why"]:
        log("multiclient: %s not measured: %s" % (kind, out["why"]))
        return out
    try:
        server = mod.Fixture(ctx)
    except procs.Skip as e:
        out["why"] = str(e)
        return out
    # (faults?, clients, requests in flight per client)
    plan = ([(False, c, 1) for c in s["s3_mc_clients"]] +
            [(False, c, REMOTE_PIPELINE) for c in s["s3_mc_clients"] if c >= 8] +
            [(True, c, 1) for c in s["s3_mc_fault_clients"]])
    with server:
        for faulty, clients, pipeline in plan:
            log("multiclient: %s add at %s, %d clients, pipeline %d%s" % (
                kind, REMOTE_PROFILE, clients, pipeline,
                ", %d%% faults" % (100 * REMOTE_FAULT_RATE) if faulty else ""))
            prefix = "mc-%s-%d-%d/store" % ("faults" if faulty else "clean", clients, pipeline)
            params = {"stall_timeout": mod.FAULT_STALL_TIMEOUT,
                      "timeout": mod.FAULT_TIMEOUT} if faulty else {}
            url, env = server.backend(kind, prefix, **params)
            server.profile(REMOTE_PROFILE)
            with procs.Cairnd(ctx, "mc-" + kind, config="[backend]\nurl = %s\n" % url,
                              env=env) as daemon:
                # Faults start once cairnd is up: opening the backend is not under test here.
                if faulty:
                    server.profile(REMOTE_PROFILE, fault_rate=REMOTE_FAULT_RATE,
                                   faults=mod.FAULTS, stall_max_s=10)
                server.reset_counters()
                data = _loadgen(ctx, daemon, "add", clients,
                                os.path.join(daemon.dir, "loadgen.json"),
                                seconds=s["s3_mc_seconds"], files=REMOTE_FILES, fail_ok=True,
                                pipeline=pipeline)
                counters = server.counters()
                server.profile(REMOTE_PROFILE)
                data["cairnd_peak_rss_kib"] = daemon.peak_rss_kib()
                data["requests"] = counters.get("requests", {})
                data["faults"] = counters.get("faults", {})
                daemon.check_alive()
            procs.remove_tree(daemon.dir)
            server.check_alive()
            out["runs"][(faulty, clients, pipeline)] = data
    return out


def _report_remote(ctx, result, mod, so):
    s = ctx.sizes
    kind = mod.BACKENDS[0]
    names = {"add": "multiclient %s: durable `add` at 8 clients (%d in flight each), %s, ≥ %d "
                    "acknowledged/s with 0 failures" % (kind, REMOTE_PIPELINE, REMOTE_PROFILE,
                                                        REMOTE_ADD_TARGET),
             "faults": "multiclient %s: 0 failures with %d%% injected faults (%s) at %s clients"
                       % (kind, 100 * REMOTE_FAULT_RATE, ",".join(mod.FAULTS), " and ".join(
                           str(c) for c in s["s3_mc_fault_clients"]))}
    if so["why"]:
        result.note("%s: not measured: %s" % (kind, so["why"]))
        for name in names.values():
            result.target(name, "not measured: " + so["why"], None)
        return
    t = result.table(
        "%s: durable adds through cairnd with the %s backend (%s)" % (kind, kind, REMOTE_PROFILE),
        ["faults", "clients", "in flight per client", "adds/s (acknowledged)", "adds", "failed",
         "p50 ms", "p95 ms", "max ms", "errors", "PUTs", "faults injected", "cairnd peak RSS"],
        "cairn-loadgen --profile add (8 KiB of unique text per add; one in flight per client, "
        "and in one run at 8 clients %d in flight each: --pipeline %d) "
        "against a cairnd whose [backend] url is %s://... on %s, whose proxy "
        "waits 50 ms (%s) before forwarding each request. An add is acknowledged once the pack "
        "holding it is stored. With faults, %d%% of the requests the proxy accepts fail, kind "
        "picked uniformly from %s (a stalled answer is closed by the proxy after 10 s; the "
        "backend's stall_timeout is %d s). adds/s counts acknowledged adds only; *PUTs* "
        "and *faults injected* are the proxy's counters for the measured phase (seeding %d "
        "documents included)." % (REMOTE_PIPELINE, REMOTE_PIPELINE, kind, mod.SERVER,
                                   REMOTE_PROFILE, 100 * REMOTE_FAULT_RATE, ", ".join(mod.FAULTS),
                                   mod.FAULT_STALL_TIMEOUT, REMOTE_FILES))
    for (faulty, clients, pipeline), d in sorted(so["runs"].items()):
        if "error" in d:
            t.add("10%" if faulty else "none", clients, pipeline, "-", "-", "-", "-", "-", "-",
                  "loadgen could not run: " + d["error"], "-", "-", "-")
            continue
        add = d["op_types"].get("add") or {"count": 0, "failures": 0, "latency_ms": {},
                                           "errors": {}}
        ok_rate = (add["count"] - add["failures"]) / d["elapsed_s"] if d["elapsed_s"] else 0.0
        L = add["latency_ms"]
        t.add("10%" if faulty else "none", clients, pipeline, ok_rate, add["count"], add["failures"],
              L.get("p50"), L.get("p95"), L.get("max"),
              ", ".join("%s %d" % kv for kv in sorted(add["errors"].items())) or "-",
              d["requests"].get("PUT", 0),
              ", ".join("%s %d" % kv for kv in sorted(d["faults"].items())) or "0",
              report.fmt_bytes((d.get("cairnd_peak_rss_kib") or 0) * 1024))
        d["acknowledged_adds_per_s"] = ok_rate

    # Judged with 8 adds in flight per client (agents that keep a connection
    # open): with one in flight, no client can do more than one add per PUT
    # round trip, so 8 clients at rtt50 could never pass 160/s, batched or not.
    clean8 = so["runs"].get((False, 8, REMOTE_PIPELINE))
    single = so["runs"].get((False, 8, 1))
    if clean8 is None:
        result.target(names["add"], "8 clients not run in this tier", None)
    elif "error" in clean8:
        result.target(names["add"], "loadgen could not run: " + clean8["error"], False)
    else:
        rate, failed = clean8["acknowledged_adds_per_s"], clean8["failures"]
        detail = ""
        if single and "acknowledged_adds_per_s" in single:
            p50 = (single["op_types"].get("add") or {}).get("latency_ms", {}).get("p50")
            detail = ("; one in flight per client: %s adds/s (add p50 %s ms: at most %s/s for 8 "
                      "clients)" % (report.fmt(single["acknowledged_adds_per_s"]),
                                    report.fmt(p50), report.fmt(8000.0 / p50) if p50 else "n/a"))
        result.target(names["add"], "%s adds/s, %d failed%s" % (report.fmt(rate), failed, detail),
                      rate >= REMOTE_ADD_TARGET and failed == 0)
    faulty = {c: d for (f, c, _), d in so["runs"].items() if f}
    if not faulty:
        result.target(names["faults"], "not run in this tier", None)
    else:
        parts, ok = [], True
        for c, d in sorted(faulty.items()):
            if "error" in d:
                parts.append("%d clients: loadgen could not run" % c)
                ok = False
            else:
                parts.append("%d clients: %d failed of %d (%d faults injected)" % (
                    c, d["failures"], d["ops"], sum(d["faults"].values())))
                ok = ok and d["failures"] == 0
        missing = [c for c in s["s3_mc_fault_clients"] if c not in faulty]
        result.target(names["faults"], "; ".join(parts) + (
            "; not run: %s clients" % missing if missing else ""), ok and not missing)
    result.data[kind] = {"%s@%d/pipeline%d" % ("faults" if f else "clean", c, p): d
                         for (f, c, p), d in so["runs"].items()}
