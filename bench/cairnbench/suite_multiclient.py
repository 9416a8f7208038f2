"""multiclient: cairn-loadgen at 1 to 64 clients in every profile, against
redis-benchmark on a redis-server measured in the same run.

Every (profile, clients) run gets a fresh cairnd, so one run's documents do
not slow the next. Each run is closed-loop with one request in flight per
client (pipeline 1, as redis-benchmark's default -P 1) and stops after its
ops or its time limit, whichever comes first.

redis-server listens on a Unix socket only, with `appendonly yes` and
`appendfsync always`, so a SET is acknowledged after an fsync, as a cairn add
is. Values are 8 KiB, as are cairn's documents; GET reads keys that exist
(they are SET beforehand), as cairn's gets read seeded documents.
"""

import csv
import io
import json
import os

from . import charts, common, procs, report
from .procs import run_timed

PROFILES = ["get", "add", "search", "mixed", "external_agent_churn"]
FILE_SIZE = 8192


def _loadgen(ctx, daemon, profile, clients, json_path):
    s = ctx.sizes
    ops_per_client = max(10, s["mc_ops"] // clients)
    argv = [ctx.bin["loadgen"], "--socket", daemon.socket, "--clients", str(clients),
            "--ops-per-client", str(ops_per_client), "--duration", str(s["mc_seconds"]),
            "--profile", profile, "--files", str(s["mc_files"]), "--file-size", str(FILE_SIZE),
            "--json", json_path, "--quiet"]
    # Seeding, connecting and the run itself take seconds; minutes mean it hangs.
    r = run_timed(argv, capture=True, timeout=s["mc_seconds"] + 120)
    if r.returncode != 0:
        kind = ("killed by signal %d" % -r.returncode if r.returncode < 0
                else "exit %d" % r.returncode)
        raise procs.SuiteError("cairn-loadgen %s at %d clients failed (%s): %s"
                               % (profile, clients, kind, r.stderr.strip()[-400:]))
    with open(json_path) as f:
        data = json.load(f)
    if data.get("schema") != "cairn-loadgen/1":
        raise procs.SuiteError("cairn-loadgen wrote an unknown schema: %r" % data.get("schema"))
    return data


def _redis_benchmark(redis, test, clients, requests, keys):
    argv = ["redis-benchmark", "-s", redis.socket, "-c", str(clients), "-n", str(requests),
            "-d", str(FILE_SIZE), "-r", str(keys), "-t", test, "--csv"]
    r = run_timed(argv, capture=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("redis-benchmark failed: " + r.stderr.strip()[-300:])
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    for row in rows:
        if row.get("test", "").upper() == test.upper():
            return {k: float(v) for k, v in row.items() if k != "test"}
    raise RuntimeError("redis-benchmark printed no %s row: %r" % (test, r.stdout[:200]))


def run(ctx, result, log):
    s = ctx.sizes
    runs = {}
    for profile in PROFILES:
        for clients in s["mc_clients"]:
            log("multiclient: %s at %d clients" % (profile, clients))
            with procs.Cairnd(ctx, "mc") as daemon:
                data = _loadgen(ctx, daemon, profile, clients,
                                os.path.join(daemon.dir, "loadgen.json"))
                data["cairnd_peak_rss_kib"] = daemon.peak_rss_kib()
                daemon.check_alive()
            procs.remove_tree(daemon.dir)
            runs[(profile, clients)] = data

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


def _op(data, op):
    return data["op_types"].get(op)


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
    bad = [(p, c, d["failures"]) for (p, c), d in runs.items() if d["failures"]]
    result.target("multiclient: 0 failures in every profile at every client count",
                  "%d of %d runs had failures%s" % (
                      len(bad), len(runs),
                      (": " + ", ".join("%s@%d: %d" % b for b in sorted(bad)[:6])) if bad else ""),
                  not bad)
    at = 8 if 8 in clients_list else None
    if at is None:
        for name in ("`get` at 8 clients ≥ 0.5x redis GET",
                     "durable `add` at 8 clients ≥ 0.5x redis SET (appendfsync always)",
                     "search p95 < 2 ms at 8 clients"):
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
            r = report.ratio(_op(mine, op)["ops_per_s"], theirs["rps"])
            result.target("multiclient: " + label, "%s (%s vs %s ops/s)" % (
                report.fmt_ratio(r), report.fmt(_op(mine, op)["ops_per_s"]),
                report.fmt(theirs["rps"])), r >= 0.5)
        srch = _op(runs[("search", at)], "search")
        if srch["failures"] == srch["count"]:
            result.target("multiclient: search p95 < 2 ms at 8 clients",
                          "every search failed (%s)" % ", ".join(srch["errors"]) or "?", False)
        else:
            p95 = srch["latency_ms"]["p95"]
            result.target("multiclient: search p95 < 2 ms at 8 clients",
                          "%s ms" % report.fmt(p95), p95 < 2.0)

    result.data["runs"] = {"%s@%d" % k: v for k, v in runs.items()}
    result.data["redis"] = {"%s@%d" % k: v for k, v in redis.items()}

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
