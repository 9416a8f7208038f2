"""shared: several cairnd on one bucket (README "Several machines, one
bucket"), against one cairnd alone, on the S3 test server at rtt20 and
rtt50 (cairnbench/s3.py: s3rver behind a proxy that waits before forwarding
each request).

Every daemon has its own data directory and its own config file
(`[store] refresh_interval`, REFRESH_INTERVAL here, and the same `[backend]
url`); the shared ones write to one prefix of the bucket, each under its own
writer id, and every refresh interval each lists what the others wrote since
it last looked and replays it.

    throughput   cairn-loadgen --profile add (4 KiB of random bytes per add:
                 incompressible, unique) against one daemon alone on a prefix
                 of its own, then against each of 3 daemons on one prefix at
                 once, the same load on each; the aggregate of the 3 over one
                 daemon alone
    lag          an add on one daemon (a connection kept open), then a get of
                 its hash on another every POLL_S until it succeeds; no
                 `cairn refresh`: the background refresh is what is measured
    idle         the 3 daemons with nothing to do for a measured window: the
                 requests the S3 server received (its counters), per minute
                 and daemon
"""

import json
import os
import random
import signal
import subprocess
import time

from . import procs, report, s3

KIB = 1024
REFRESH_INTERVAL = 1.0  # seconds: [store] refresh_interval of every daemon here
DAEMONS = 3
DOC_SIZE = 4 * KIB
RATIO_TARGET = 2.5
LAG_SLACK = 1.0  # the lag target: p95 within the refresh interval plus this
POLL_S = 0.025  # how often the other daemon is asked for the document
LAG_TIMEOUT = 30.0  # a document not visible after this is counted as never seen
SETTLE_S = 2.0  # quiet before the idle window: the last adds' work is done
# The backend's stall_timeout (default 30 s), as in the mount suite: an idle
# cairnd on s3 exits only once the no-progress watchdog (every stall_timeout /
# 4) has ticked, and the suite stops 3 daemons several times.
STALL_TIMEOUT = 2


def _config(url, interval=REFRESH_INTERVAL):
    """The config file of every daemon here; interval None: cairnd's default."""
    store = "[store]\nrefresh_interval = %gs\n" % interval if interval is not None else ""
    return "%s[backend]\nurl = %s\n" % (store, url)


def _restart_default_interval(daemons):
    """Every daemon stopped, its config file without refresh_interval (cairnd's
    default), and started again on the same data directory."""
    _stop(daemons)
    for d in daemons:
        conf = os.path.join(d.dir, "cairn.conf")
        with open(conf) as f:
            text = f.read()
        with open(conf, "w") as f:
            f.write("".join(line for line in text.splitlines(True)
                            if not line.startswith("refresh_interval")))
    for d in daemons:
        d.start()


def _start(ctx, server, prefix, n, label):
    """n cairnd on one prefix of the bucket, each with its own data directory."""
    url, env = server.backend("s3", prefix, stall_timeout=STALL_TIMEOUT)
    daemons = []
    try:
        for i in range(n):
            daemons.append(procs.Cairnd(ctx, "%s%d" % (label, i), config=_config(url), env=env))
    except BaseException:
        _stop(daemons, check=False)
        raise
    return daemons


def _stop(daemons, check=True, grace=30):
    """SIGTERM to every daemon at once, then waits for each (an idle cairnd on
    s3 may take seconds to exit: one at a time, they would add up). With
    `check`, an unclean exit is a SuiteError."""
    running = []
    for d in daemons:
        proc, d.proc = d.proc, None
        procs.unregister_server(d)
        if proc is None:
            continue
        died_before = proc.poll() is not None
        if not died_before:
            proc.send_signal(signal.SIGTERM)
        running.append((d, proc, died_before))
    bad = []
    deadline = time.monotonic() + grace
    for d, proc, died_before in running:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            bad.append("%s did not stop within %d s of SIGTERM" % (d.dir, grace))
            continue
        if died_before or proc.returncode != 0:
            bad.append("cairnd %s %s (exit status %s): %s" % (
                d.dir, "died" if died_before else "stopped uncleanly", proc.returncode,
                procs._tail(d.log_path)))
    if check and bad:
        raise procs.SuiteError("; ".join(bad))


def _cleanup(daemons):
    for d in daemons:
        procs.remove_tree(d.dir)


# --- throughput ---------------------------------------------------------------


def _loadgen_all(ctx, daemons, clients, pipeline, seconds):
    """One cairn-loadgen per daemon, all started at once; their JSON, each with
    `window` (start and end of its measured phase on this process's clock)."""
    runs = []
    timeout = seconds + 120
    for i, d in enumerate(daemons):
        path = os.path.join(d.dir, "loadgen.json")
        err = open(os.path.join(d.dir, "loadgen.err"), "w+b")
        argv = [ctx.bin["loadgen"], "--socket", d.socket, "--clients", str(clients),
                "--duration", str(seconds), "--profile", "add", "--files", "0",
                "--file-size", str(DOC_SIZE), "--content", "random", "--pipeline", str(pipeline),
                "--seed", str(i + 1), "--json", path, "--quiet"]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err)
        runs.append((d, p, path, err))
    # Every process watched at once, so each one's end is seen when it comes.
    ends = {}
    deadline = time.monotonic() + timeout
    while len(ends) < len(runs) and time.monotonic() < deadline:
        for _, p, _, _ in runs:
            if p not in ends and p.poll() is not None:
                ends[p] = time.monotonic()
        time.sleep(0.005)
    out, failed = [], []
    for d, p, path, err in runs:
        if p not in ends:
            p.kill()
            p.wait()
            err.close()
            failed.append("cairn-loadgen did not finish within %d s" % timeout)
            continue
        end = ends[p]
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip()
        err.close()
        if p.returncode != 0:
            failed.append("cairn-loadgen against %s failed (exit %s): %s"
                          % (d.dir, p.returncode, stderr[-400:]))
            continue
        with open(path) as f:
            data = json.load(f)
        if data.get("schema") != "cairn-loadgen/1":
            failed.append("cairn-loadgen wrote an unknown schema: %r" % data.get("schema"))
            continue
        # The measured phase ended just before the process did.
        data["window"] = (end - data["elapsed_s"], end)
        out.append(data)
    if failed:
        raise procs.SuiteError("; ".join(failed))
    for d in daemons:
        d.check_alive()
    return out


def _catch_up(daemons, since, limit):
    """A `refresh` request to every daemon at once, right after the load: it
    answers once the daemon has read everything the others had acknowledged.
    Per daemon, seconds from `since` (the load's end) to its answer, or None
    when there was none within `limit` s, and its `writers` (packs read of
    each other writer, and the newest) from `status` then."""
    ct = _ct()
    conns = [ct.Conn(d.socket, timeout=60) for d in daemons]
    try:
        ids = [c.send_request("refresh") for c in conns]
        out = []
        for d, c, rid in zip(daemons, conns, ids):
            try:
                r = c.recv_for(rid, timeout=max(0.01, since + limit - time.monotonic()))
            except OSError:  # socket.timeout: still reading the others' packs
                r = None
            if r is not None and r.get("ok") is not True:
                raise procs.SuiteError("refresh on %s failed: %s" % (d.dir, ct.short(r)))
            seconds = time.monotonic() - since if r is not None else None
            with ct.Conn(d.socket, timeout=60) as sc:
                st = sc.call("status")
            out.append({"seconds": seconds, "writers": st.get("writers") or []})
        return out
    finally:
        for c in conns:
            c.close()


def _behind(c):
    """"12.3", or "> 30" for a daemon that had not caught up within the limit."""
    if c["seconds"] is not None:
        return report.fmt(c["seconds"])
    return "> %s" % report.fmt(c["limit"])


def _proc_cpu_s(pid):
    """User + system seconds of a running process, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_cpu():
    """(busy, total) jiffies of every CPU, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is counted in user already
    return total - idle, total


class _CpuSpan:
    """CPU time of the daemons and the S3 server, and the machine's busy share,
    from start() to stop()."""

    def __init__(self, daemons, server):
        self.pids = [d.pid for d in daemons]
        self.server_pid = server.pid

    def _sample(self):
        return ([_proc_cpu_s(p) for p in self.pids], _proc_cpu_s(self.server_pid),
                _machine_cpu())

    def start(self):
        self.before = self._sample()
        self.t0 = time.monotonic()

    def stop(self):
        (d0, s0, m0), (d1, s1, m1) = self.before, self._sample()
        busy = None
        if m0 and m1 and m1[1] > m0[1]:
            busy = (m1[0] - m0[0]) / (m1[1] - m0[1])
        return {"cairnd_s": sum(b - a for a, b in zip(d0, d1)
                                if a is not None and b is not None),
                "s3_server_s": s1 - s0 if s0 is not None and s1 is not None else None,
                "machine_busy": busy, "seconds": time.monotonic() - self.t0}


def _acked(data):
    add = data["op_types"].get("add") or {"count": 0, "failures": 0}
    return add["count"] - add["failures"]


def _aggregate(runs):
    """Acknowledged adds over the union of the measured phases (conservative:
    a client that started late stretches the window), the sum of each run's own
    rate, failures, and the add latency percentiles of each run."""
    acked = sum(_acked(d) for d in runs)
    start = min(d["window"][0] for d in runs)
    end = max(d["window"][1] for d in runs)
    return {
        "daemons": len(runs), "acked": acked,
        "failures": sum(d["failures"] for d in runs),
        "window_s": end - start,
        "adds_per_s": acked / (end - start) if end > start else 0.0,
        "sum_of_rates": sum(_acked(d) / d["elapsed_s"] for d in runs if d["elapsed_s"]),
        "errors": _errors(runs),
        "p50": [(d["op_types"].get("add") or {}).get("latency_ms", {}).get("p50") for d in runs],
        "p95": [(d["op_types"].get("add") or {}).get("latency_ms", {}).get("p95") for d in runs],
    }


def _errors(runs):
    errs = {}
    for d in runs:
        for code, n in ((d["op_types"].get("add") or {}).get("errors") or {}).items():
            errs[code] = errs.get(code, 0) + n
    return errs


def _throughput(ctx, server, log, profile, clients, pipeline):
    """One daemon alone, then 3 on one prefix, the same load on each."""
    s = ctx.sizes
    tag = "%s-c%d-p%d" % (profile, clients, pipeline)
    out = {}
    for n, what in ((1, "solo"), (DAEMONS, "shared")):
        log("shared: %s, %d daemon%s, %d clients each, %d in flight each"
            % (profile, n, "s" if n > 1 else "", clients, pipeline))
        prefix = "%s-%s/store" % (what, tag)
        daemons = _start(ctx, server, prefix, n, what[:2])
        try:
            server.srv.control(reset_counters=True)
            span = _CpuSpan(daemons, server)
            span.start()
            runs = _loadgen_all(ctx, daemons, clients, pipeline, s["sh_seconds"])
            cpu = span.stop()
            counters = server.srv.counters()
            agg = _aggregate(runs)
            agg["cpu"] = cpu
            # What the others wrote is replayed while the load runs; how far
            # behind that left each daemon (a stop would wait for it too).
            agg["catch_up"] = []
            if n > 1:
                limit = s["sh_catch_up_s"]
                agg["catch_up"] = _catch_up(daemons, max(d["window"][1] for d in runs), limit)
                for c in agg["catch_up"]:
                    c["limit"] = limit
            agg["s3_requests"] = counters.get("requests", {})
            agg["packs"] = len([k for k in server.srv.list_keys(s3.BUCKET, prefix)
                                if "/packs/" in "/" + k[len(prefix):]])
            agg["runs"] = runs
            agg["cairnd_peak_rss_kib"] = [d.peak_rss_kib() for d in daemons]
            out[what] = agg
        except BaseException:
            _stop(daemons, check=False)
            raise
        # A daemon still reading the others' packs would finish that pass before
        # it exits: it is killed (its data directory goes anyway; a kill at any
        # point loses nothing acknowledged), the others must stop cleanly.
        behind = [d for d, c in zip(daemons, agg["catch_up"]) if c["seconds"] is None]
        _stop(behind, check=False, grace=2)
        _stop([d for d in daemons if d not in behind])
        _cleanup(daemons)
        server.check_alive()
    return out


# --- visibility lag -----------------------------------------------------------


def _ct():
    """tests/integration/cairntest.py: its protocol client (Conn) and msgpack."""
    return procs.fixture_module(os.path.join(s3.REPO, "tests", "integration", "cairntest.py"))


def _lag(ctx, daemons, log, profile, samples, rng):
    """`samples` adds, each on one daemon and awaited on the next; per sample
    the add's latency, the lag from its acknowledgement to the first
    successful get on the other daemon, and the gets that answered not_found
    before it."""
    ct = _ct()
    conns = [ct.Conn(d.socket, timeout=60) for d in daemons]
    out = []
    try:
        for i in range(samples):
            a, b = i % len(daemons), (i + 1) % len(daemons)
            # A random phase against the refresh timers of the daemons.
            time.sleep(rng.uniform(0, REFRESH_INTERVAL))
            content = os.urandom(DOC_SIZE)
            t0 = time.monotonic()
            r = conns[a].add(content, name="lag/%s/%d" % (profile, i))
            t_ack = time.monotonic()
            if r.get("ok") is not True:
                raise procs.SuiteError("add on daemon %d failed: %s" % (a, ct.short(r)))
            h = r["hash"]
            polls, seen, other = 0, None, None
            while time.monotonic() - t_ack < LAG_TIMEOUT:
                polls += 1
                frames, got = conns[b].get(h)
                if got is not None:
                    if got != content:
                        raise procs.SuiteError("daemon %d returned other bytes for %s"
                                               % (b, h[:12]))
                    seen = time.monotonic()
                    break
                code = ct.error_code(frames[-1])
                if code != "not_found":
                    other = code
                time.sleep(POLL_S)
            sample = {"from": a, "to": b, "add_ms": (t_ack - t0) * 1000.0, "polls": polls,
                      "lag_ms": (seen - t_ack) * 1000.0 if seen else None,
                      "total_ms": (seen - t0) * 1000.0 if seen else None,
                      "other_error": other}
            out.append(sample)
            if seen is None:
                log("shared: %s: a document added on daemon %d was not readable on daemon %d "
                    "after %d s" % (profile, a, b, LAG_TIMEOUT))
    finally:
        for c in conns:
            c.close()
    for d in daemons:
        d.check_alive()
    return out


# --- idle ---------------------------------------------------------------------


def _idle(server, daemons, seconds):
    """The S3 server's counters over `seconds` with the daemons idle."""
    time.sleep(SETTLE_S)
    server.srv.control(reset_counters=True)
    t0 = time.monotonic()
    time.sleep(seconds)
    counters = server.srv.counters()
    elapsed = time.monotonic() - t0
    reqs = server.srv.requests()
    for d in daemons:
        d.check_alive()
    kinds = {}
    for r in reqs:
        kind = r.get("method", "?")
        if kind == "GET" and not r.get("key"):
            kind = "LIST"
        kinds[kind] = kinds.get(kind, 0) + 1
    total = counters.get("requests_total", sum(counters.get("requests", {}).values()))
    return {"seconds": elapsed, "requests_total": total,
            "requests": counters.get("requests", {}), "kinds": kinds,
            "kinds_of_last": len(reqs),
            "per_minute_per_daemon": total * 60.0 / elapsed / len(daemons)}


# --- the suite ----------------------------------------------------------------


def run(ctx, result, log):
    s = ctx.sizes
    why = s3.unavailable()
    if why:
        raise procs.Skip("not measured: " + why)
    rng = random.Random(24)
    data = {"refresh_interval_s": REFRESH_INTERVAL, "profiles": {}}
    with s3.S3Fixture(ctx) as server:
        for profile in s["sh_profiles"]:
            server.profile(profile)
            pd = {"loads": {}}
            for clients, pipeline in s["sh_loads"]:
                pd["loads"]["%d/%d" % (clients, pipeline)] = _throughput(
                    ctx, server, log, profile, clients, pipeline)
            log("shared: %s, visibility lag, %d samples" % (profile, s["sh_lag_samples"]))
            daemons = _start(ctx, server, "lag-%s/store" % profile, DAEMONS, "lg")
            try:
                # Every daemon has read the others' (empty) history before the clock starts.
                for d in daemons:
                    procs.check_ok(procs.run_timed(d.cli("refresh"), capture=True, timeout=120),
                                   "cairn refresh")
                pd["lag"] = _lag(ctx, daemons, log, profile, s["sh_lag_samples"], rng)
                log("shared: %s, idle for %g s" % (profile, s["sh_idle_seconds"]))
                pd["idle"] = _idle(server, daemons, s["sh_idle_seconds"])
                pd["idle"]["interval"] = "%gs" % REFRESH_INTERVAL
                if s["sh_idle_default"] and profile == s["sh_profiles"][0]:
                    log("shared: %s, idle for %g s at the default refresh_interval"
                        % (profile, s["sh_idle_default"]))
                    _restart_default_interval(daemons)
                    pd["idle_default"] = _idle(server, daemons, s["sh_idle_default"])
                    pd["idle_default"]["interval"] = "default"
                pd["status"] = [d.status() for d in daemons]
            except BaseException:
                _stop(daemons, check=False)
                raise
            _stop(daemons)
            _cleanup(daemons)
            server.check_alive()
            data["profiles"][profile] = pd
            server.profile("clean")
    _report(ctx, result, data)


def _fmt_list(xs):
    return " / ".join(report.fmt(x) for x in xs)


def _ratio_target(result, profile, key, load):
    clients, pipeline = (int(x) for x in key.split("/"))
    name = ("shared %s: %d daemons' durable adds/s ≥ %gx one daemon's (%d clients each, %d "
            "in flight each)" % (profile, DAEMONS, RATIO_TARGET, clients, pipeline))
    solo, shared = load["solo"], load["shared"]
    failed = solo["failures"] + shared["failures"]
    errors = _errors(solo["runs"] + shared["runs"])
    result.target(name, "%s (%s vs %s adds/s)%s" % (
        report.fmt_ratio(load["ratio"]), report.fmt(shared["adds_per_s"]),
        report.fmt(solo["adds_per_s"]),
        "; %d adds failed: %s" % (failed, ", ".join("%s %d" % kv for kv in sorted(errors.items())))
        if failed else ""),
        load["ratio"] is not None and load["ratio"] >= RATIO_TARGET and failed == 0)


def _report(ctx, result, data):
    s = ctx.sizes
    profiles = data["profiles"]
    t = result.table(
        "Durable adds: %d daemons on one bucket vs one alone" % DAEMONS,
        ["profile", "clients per daemon", "in flight per client", "1 daemon adds/s",
         "%d daemons adds/s" % DAEMONS, "%d ÷ 1" % DAEMONS, "per daemon adds/s",
         "failed (1 / %d)" % DAEMONS, "add p50 ms (1 / each of %d)" % DAEMONS,
         "add p95 ms (1 / each of %d)" % DAEMONS],
        "cairn-loadgen --profile add, %d-byte documents of random bytes (incompressible, "
        "unique), %g s per run, against one cairnd alone on a prefix of its own, then "
        "against each of %d cairnd on one prefix at once (their own data directories, "
        "[store] refresh_interval = %gs), one load generator per daemon, all started "
        "together. adds/s counts acknowledged adds; for the %d daemons it is every "
        "acknowledged add over the span from the first measured phase's start to the last "
        "one's end (a run that started late stretches it), *per daemon* each run over its "
        "own phase. An add is acknowledged once the pack holding it is in the bucket."
        % (DOC_SIZE, s["sh_seconds"], DAEMONS, REFRESH_INTERVAL, DAEMONS))
    w = result.table(
        "Durable adds: the bucket, the CPUs, and catching up",
        ["profile", "clients per daemon", "in flight per client", "daemons", "S3 PUTs",
         "S3 GETs", "packs in the bucket", "cairnd CPU s", "cairnd CPU ms per add",
         "S3 server CPU s", "machine CPU busy", "caught up after the load, s"],
        "The same runs. The S3 counters cover the load generators' run (a LIST is a GET: "
        "the daemons reading each other's packs). CPU: user + system time of the cairnd "
        "processes (summed) and of the S3 server (one node process: s3rver and the proxy) "
        "over the same span, and the share of the machine's CPU time (%d CPUs) not idle "
        "then, other processes' included: near 100%%, the %d daemons, their load generators "
        "and the server share CPUs that one daemon alone had more of. *Caught up*: from the "
        "end of the load to the answer of a `refresh` sent to every daemon then (it answers "
        "once the daemon has read what the others had acknowledged): how far behind "
        "replaying the others' packs left each; `> N`: not within the tier's limit."
        % (os.cpu_count() or 0, DAEMONS))
    for profile, pd in profiles.items():
        for key, load in pd["loads"].items():
            clients, pipeline = (int(x) for x in key.split("/"))
            solo, shared = load["solo"], load["shared"]
            r = report.ratio(shared["adds_per_s"], solo["adds_per_s"])
            load["ratio"] = r
            t.add(profile, clients, pipeline, solo["adds_per_s"], shared["adds_per_s"],
                  report.fmt_ratio(r),
                  _fmt_list(_acked(d) / d["elapsed_s"] for d in shared["runs"]),
                  "%d / %d" % (solo["failures"], shared["failures"]),
                  "%s / %s" % (report.fmt(solo["p50"][0]), _fmt_list(shared["p50"])),
                  "%s / %s" % (report.fmt(solo["p95"][0]), _fmt_list(shared["p95"])))
            for agg in (solo, shared):
                cpu = agg["cpu"]
                w.add(profile, clients, pipeline, agg["daemons"],
                      agg["s3_requests"].get("PUT", 0), agg["s3_requests"].get("GET", 0),
                      agg["packs"], cpu["cairnd_s"],
                      report.ratio(cpu["cairnd_s"] * 1000.0, agg["acked"]), cpu["s3_server_s"],
                      "%.0f%%" % (100.0 * cpu["machine_busy"]) if cpu["machine_busy"] is not None
                      else "n/a",
                      " / ".join(_behind(c) for c in agg["catch_up"]) or "-")
    for profile, pd in profiles.items():
        for key, load in pd["loads"].items():
            for agg in (load["solo"], load["shared"]):
                srv = agg["cpu"]["s3_server_s"]
                wall = agg["cpu"]["seconds"]
                if srv is not None and wall and srv >= 0.9 * wall:
                    result.note("shared %s, %s clients/in flight, %d daemon%s: the S3 server "
                                "used %.2f CPU s per s of the run (one node process, whose "
                                "JavaScript runs on one CPU): it may be what bounds the adds/s, "
                                "not cairnd" % (profile, key, agg["daemons"],
                                                "s" if agg["daemons"] > 1 else "", srv / wall))
    # One target per profile and load: with one add in flight per client a
    # daemon is bound by the round trips, with 8 by what the bucket takes.
    for profile, pd in profiles.items():
        for key, load in pd["loads"].items():
            _ratio_target(result, profile, key, load)

    bound = (REFRESH_INTERVAL + LAG_SLACK) * 1000.0
    lt = result.table(
        "Visibility lag: an add on one daemon to a successful get on another",
        ["profile", "samples", "never seen", "add ms p50", "ack → get p50 ms",
         "ack → get p95 ms", "ack → get max ms", "add → get p50 ms", "add → get p95 ms",
         "gets per sample (median)"],
        "%d cairnd on one prefix, refresh_interval %gs, each with a protocol connection kept "
        "open. A %d-byte document of random bytes is added on one (the add returns once it is "
        "durable in the bucket), then the next one is asked for it by hash every %d ms until "
        "it returns the same bytes; no `cairn refresh`: the daemons' background refresh is "
        "measured. Before each add a random pause of up to one refresh interval, so the adds "
        "fall at any point of the other daemons' refresh cycles. *ack → get*: from the add's "
        "answer to the first successful get; *add → get*: from sending the add (what the "
        "target judges). A document not readable after %d s counts as never seen."
        % (DAEMONS, REFRESH_INTERVAL, DOC_SIZE, POLL_S * 1000, LAG_TIMEOUT))
    for profile, pd in profiles.items():
        lag = pd["lag"]
        seen = [x for x in lag if x["lag_ms"] is not None]
        never = len(lag) - len(seen)
        ack = [x["lag_ms"] for x in seen]
        total = [x["total_ms"] for x in seen]
        pd["lag_summary"] = {"samples": len(lag), "never_seen": never,
                             "ack_p50": report.median(ack), "ack_p95": report.percentile(ack, 95),
                             "p50": report.median(total), "p95": report.percentile(total, 95)}
        lt.add(profile, len(lag), never, report.median([x["add_ms"] for x in lag]),
               report.median(ack), report.percentile(ack, 95), max(ack) if ack else None,
               report.median(total), report.percentile(total, 95),
               report.median([x["polls"] for x in seen]))
        others = sorted({x["other_error"] for x in lag if x["other_error"]})
        if others:
            result.note("shared %s: gets that failed otherwise than not_found while waiting: %s"
                        % (profile, ", ".join(others)))
        ls = pd["lag_summary"]
        name = ("shared %s: visibility lag p95 ≤ refresh_interval + %g s (%g s)"
                % (profile, LAG_SLACK, bound / 1000.0))
        if not seen:
            result.target(name, "no document became visible (%d samples)" % len(lag), False)
        else:
            result.target(name, "p95 %s ms, p50 %s ms (add → get; ack → get p95 %s ms), "
                                "%d of %d never seen" % (
                                    report.fmt(ls["p95"]), report.fmt(ls["p50"]),
                                    report.fmt(ls["ack_p95"]), never, len(lag)),
                          ls["p95"] <= bound and never == 0)

    it = result.table(
        "Refresh on an idle bucket: requests the S3 server received",
        ["profile", "refresh_interval", "window s", "requests", "per minute",
         "per minute per daemon", "by method", "of the last requests (up to 500)"],
        "The %d daemons of the lag rows, %g s after their last add (or after a restart), doing "
        "nothing for the window: every request the S3 server's proxy received (its counters), "
        "per minute, and per minute divided by the %d daemons. At %gs, the suite's interval; "
        "*default*: the same daemons restarted with no refresh_interval in their config "
        "files (cairnd's default, 5s), first profile only. The last column classifies the "
        "server's list of recent requests (a GET without a key is a LIST)."
        % (DAEMONS, SETTLE_S, DAEMONS, REFRESH_INTERVAL))
    for profile, pd in profiles.items():
        for idle in (pd["idle"], pd.get("idle_default")):
            if not idle:
                continue
            it.add(profile, idle["interval"], idle["seconds"], idle["requests_total"],
                   idle["requests_total"] * 60.0 / idle["seconds"],
                   idle["per_minute_per_daemon"],
                   ", ".join("%s %d" % kv for kv in sorted(idle["requests"].items())) or "-",
                   ", ".join("%s %d" % kv for kv in sorted(idle["kinds"].items())) or "-")
    result.note("Refresh cost has no target in the issue; it is reported as requests per minute "
                "per daemon.")
    result.data.update(data)
