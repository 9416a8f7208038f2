"""encryption: an encrypted store (README "Encryption at rest") against a
plain one, in the same run, on the local backend.

Two daemons, one with `[store] encryption = on`, one without, otherwise the
same; every measurement alternates between them so drift hits both alike.

- ingest: `cairn add -r` of a directory of files (half text, half random),
  MB/s of the files' bytes;
- durable add: `cairn add` of one 8 KiB random file per command, the
  latency of the whole command (acknowledged only once synced);
- get: `cairn get` of one large random document to /dev/null, MB/s, after a
  warm-up read (both stores then read from the page cache and their block
  cache as alike as they can);
- multiclient: cairn-loadgen at 8 clients, `add` (durable, 8 KiB) and `get`,
  operations acknowledged per second, as the multiclient suite runs them;
- s3: the same durable adds (8 clients, 8 in flight each) through a cairnd on
  the S3 test server at rtt20 (cairnbench/s3.py), one prefix per store: what
  a remote backend sees of encryption is its records, a little larger.

Targets (issue 26): throughput at least 0.9x of the plain store (ingest,
multiclient, s3), durable add latency (median) within 10%, `cairn get` of a
large document at least 0.9x.
"""

import os
import random

from . import common, corpus, procs, report, s3, suite_multiclient
from .procs import check_ok, run_timed

KIB, MIB = 1024, 1024 * 1024
# files and their size for ingest, adds, the large document, runs of ingest, runs of get
SIZES = {"smoke": (4, 64 * KIB, 5, 4 * MIB, 1, 1), "quick": (48, 512 * KIB, 40, 64 * MIB, 5, 9),
         "full": (128, 1 * MIB, 100, 256 * MIB, 7, 15)}
PASS = "bench passphrase, not a secret"
# loadgen runs per mode and profile, and seconds each
MC = {"smoke": (1, 1.0), "quick": (3, 3.0), "full": (5, 5.0)}
MC_CLIENTS = 8
S3_PROFILE = "rtt20"
S3_PIPELINE = 8


def _rate(data, op):
    """Acknowledged operations of `op` per second in a loadgen run."""
    o = data["op_types"].get(op) or {"count": 0, "failures": 0}
    if o["failures"]:
        raise procs.SuiteError("cairn-loadgen %s: %d failures" % (op, o["failures"]))
    return o["count"] / data["elapsed_s"] if data["elapsed_s"] else 0.0


def _loadgen_rounds(ctx, daemons, samples, key, profile, reps, seconds, pipeline=1):
    for r in range(reps):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            d = daemons[mode]
            data = suite_multiclient._loadgen(ctx, d, profile, MC_CLIENTS,
                                              os.path.join(d.dir, "loadgen-%s-%d.json" % (key, r)),
                                              seconds=seconds, files=20, pipeline=pipeline)
            samples[mode][key].append(_rate(data, profile))


def _s3_rounds(ctx, conf, samples, log, reps, seconds):
    """The durable adds on the S3 test server; the reason when it cannot run, else None."""
    why = s3.unavailable()
    if why:
        return why
    try:
        server = s3.S3Fixture(ctx)
    except procs.Skip as e:
        return str(e)
    daemons = {}
    with server:
        try:
            for mode in ("off", "on"):
                url, env = server.backend("s3", "enc-%s/store" % mode)
                daemons[mode] = procs.Cairnd(ctx, "enc-s3-" + mode, env=env,
                                             config="[backend]\nurl = %s\n%s" % (url, conf[mode]))
            server.profile(S3_PROFILE)
            log("encryption: durable adds on s3 at %s" % S3_PROFILE)
            _loadgen_rounds(ctx, daemons, samples, "s3_add", "add", reps, seconds, S3_PIPELINE)
            for d in daemons.values():
                d.check_alive()
        finally:
            for d in daemons.values():
                d.stop()
    return None


def _files(d, n, size, lines):
    rng = random.Random(26)
    os.makedirs(d)
    for i in range(n):
        with open(os.path.join(d, "f%03d" % i), "wb") as f:
            f.write(corpus.text_bytes(lines, size, rng) if i % 2 == 0 else os.urandom(size))


def run(ctx, result, log):
    nfiles, fsize, nadds, big, reps, get_reps = SIZES.get(ctx.tier, SIZES["quick"])
    work = ctx.mkdtemp("enc")
    pw = os.path.join(work, "pw")
    with open(pw, "w") as f:
        f.write(PASS + "\n")
    os.chmod(pw, 0o600)
    lines = corpus.text_lines(ctx)
    small = os.path.join(work, "small")
    os.makedirs(small)
    for i in range(nadds):
        with open(os.path.join(small, "s%03d" % i), "wb") as f:
            f.write(os.urandom(8 * KIB))
    bigfile = os.path.join(work, "big")
    with open(bigfile, "wb") as f:
        for _ in range(big // MIB):
            f.write(os.urandom(MIB))
    trees = []
    for r in range(reps):
        d = os.path.join(work, "tree%d" % r)
        _files(d, nfiles, fsize, lines)
        trees.append(d)

    mc_reps, mc_seconds = MC.get(ctx.tier, MC["quick"])
    samples = {m: {"ingest": [], "add": [], "get": [], "mc_add": [], "mc_get": [], "s3_add": []}
               for m in ("off", "on")}
    conf = {"off": "", "on": "[store]\nencryption = on\npassword_file = %s\n" % pw}
    daemons = {}
    try:
        for mode in ("off", "on"):
            daemons[mode] = procs.Cairnd(ctx, "enc-" + mode, config=conf[mode] or None)
        for mode in ("off", "on"):
            check_ok(run_timed(daemons[mode].cli("status")), "cairn status")
        log("encryption: ingest")
        for r in range(reps):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                t = check_ok(run_timed(daemons[mode].cli("add", "-r", trees[r]),
                                       timeout=1200), "cairn add -r")
                samples[mode]["ingest"].append(nfiles * fsize / MIB / (t.ms / 1000.0))
        log("encryption: durable adds")
        for i in range(nadds):
            p = os.path.join(small, "s%03d" % i)
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                samples[mode]["add"].append(
                    check_ok(run_timed(daemons[mode].cli("add", "-n", "s%d" % i, p)),
                             "cairn add").ms)
        log("encryption: get of a large document")
        for mode in ("off", "on"):
            check_ok(run_timed(daemons[mode].cli("add", "-n", "big", bigfile), timeout=1200),
                     "cairn add big")
            check_ok(run_timed(daemons[mode].cli("get", "big")), "cairn get (warm-up)")
        for r in range(get_reps):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                t = check_ok(run_timed(daemons[mode].cli("get", "big"), timeout=1200),
                             "cairn get")
                samples[mode]["get"].append(big / MIB / (t.ms / 1000.0))
        log("encryption: cairn-loadgen add and get at %d clients" % MC_CLIENTS)
        _loadgen_rounds(ctx, daemons, samples, "mc_add", "add", mc_reps, mc_seconds)
        _loadgen_rounds(ctx, daemons, samples, "mc_get", "get", mc_reps, mc_seconds)
        for mode in ("off", "on"):
            daemons[mode].check_alive()
    finally:
        for d in daemons.values():
            d.stop()
    s3_why = _s3_rounds(ctx, conf, samples, log, mc_reps, mc_seconds)

    med = {m: {k: report.median(v) if v else None for k, v in s.items()} for m, s in samples.items()}
    add_stats = {m: common.summarize(samples[m]["add"]) for m in samples}
    t = result.table(
        "Encrypted store (aes-256-gcm) against a plain one, local backend",
        ["measurement", "plain", "encrypted", "encrypted ÷ plain"],
        "Medians of runs alternating between the two daemons. Ingest: `cairn add -r` of "
        "%d files of %d KiB (half text, half random), %d runs; add: %d commands of one 8 KiB "
        "file each; get: %d MiB, %d runs after a warm-up; multiclient: cairn-loadgen at %d "
        "clients, one request in flight each, %d runs of %.0f s per profile; s3: the same adds "
        "with %d in flight per client, through the S3 test server at %s." % (
            nfiles, fsize // KIB, reps, nadds, big // MIB, get_reps, MC_CLIENTS, mc_reps,
            mc_seconds, S3_PIPELINE, S3_PROFILE))
    rows = (("ingest MB/s", "ingest"), ("durable add, median ms", "add"),
            ("get of a large document MB/s", "get"),
            ("multiclient durable adds/s, %d clients" % MC_CLIENTS, "mc_add"),
            ("multiclient gets/s, %d clients" % MC_CLIENTS, "mc_get"),
            ("s3 durable adds/s, %d clients, %s" % (MC_CLIENTS, S3_PROFILE), "s3_add"))
    for label, key in rows:
        if med["off"][key] is None:
            continue
        t.add(label, med["off"][key], med["on"][key],
              report.fmt_ratio(report.ratio(med["on"][key], med["off"][key])))
    t.add("durable add, p95 ms", add_stats["off"]["p95"], add_stats["on"]["p95"],
          report.fmt_ratio(report.ratio(add_stats["on"]["p95"], add_stats["off"]["p95"])))
    spread = "; ".join("%s %s: %.0f to %.0f MB/s" % (what, m, min(samples[m][k]), max(samples[m][k]))
                       for what, k in (("ingest", "ingest"), ("get", "get")) for m in ("off", "on"))
    result.note("The samples' spread (off: plain, on: encrypted), to judge the medians by on a "
                "busy machine: " + spread + ".")
    r = report.ratio(med["on"]["ingest"], med["off"]["ingest"])
    result.target("encryption: ingest throughput ≥ 0.9x of a plain store",
                  report.fmt_ratio(r), r >= 0.9)
    r = report.ratio(med["on"]["add"], med["off"]["add"])
    result.target("encryption: durable add latency within 10% of a plain store (median)",
                  report.fmt_ratio(r), r <= 1.1)
    r = report.ratio(med["on"]["get"], med["off"]["get"])
    result.target("encryption: `cairn get` of a large document ≥ 0.9x of a plain store",
                  report.fmt_ratio(r), r >= 0.9)
    for key, what in (("mc_add", "multiclient durable adds/s at %d clients" % MC_CLIENTS),
                      ("mc_get", "multiclient gets/s at %d clients" % MC_CLIENTS),
                      ("s3_add", "durable adds/s through the s3 backend (%s)" % S3_PROFILE)):
        name = "encryption: %s ≥ 0.9x of a plain store" % what
        if med["off"][key] is None:
            result.target(name, "not measured: " + (s3_why or "?"), None)
            continue
        r = report.ratio(med["on"][key], med["off"][key])
        result.target(name, "%s (%s vs %s)" % (report.fmt_ratio(r), report.fmt(med["on"][key]),
                                               report.fmt(med["off"][key])), r >= 0.9)
    if s3_why:
        result.note("s3: not measured: " + s3_why)
    result.data["samples"] = samples
