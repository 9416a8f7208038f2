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
  cache as alike as they can).

Targets (issue 26): throughput at least 0.9x of the plain store, durable add
latency (median) within 10%, `cairn get` of a large document at least 0.9x.
"""

import os
import random

from . import common, corpus, procs, report
from .procs import check_ok, run_timed

KIB, MIB = 1024, 1024 * 1024
# files and their size for ingest, adds, the large document, runs of ingest, runs of get
SIZES = {"smoke": (4, 64 * KIB, 5, 4 * MIB, 1, 1), "quick": (48, 512 * KIB, 40, 64 * MIB, 5, 9),
         "full": (128, 1 * MIB, 100, 256 * MIB, 7, 15)}
PASS = "bench passphrase, not a secret"


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

    samples = {m: {"ingest": [], "add": [], "get": []} for m in ("off", "on")}
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
        for mode in ("off", "on"):
            daemons[mode].check_alive()
    finally:
        for d in daemons.values():
            d.stop()

    med = {m: {k: report.median(v) for k, v in s.items()} for m, s in samples.items()}
    add_stats = {m: common.summarize(samples[m]["add"]) for m in samples}
    t = result.table(
        "Encrypted store (aes-256-gcm) against a plain one, local backend",
        ["measurement", "plain", "encrypted", "encrypted ÷ plain"],
        "Medians of runs alternating between the two daemons. Ingest: `cairn add -r` of "
        "%d files of %d KiB (half text, half random), %d runs; add: %d commands of one 8 KiB "
        "file each; get: %d MiB, %d runs after a warm-up." % (nfiles, fsize // KIB, reps, nadds,
                                                               big // MIB, get_reps))
    rows = (("ingest MB/s", "ingest"), ("durable add, median ms", "add"),
            ("get of a large document MB/s", "get"))
    for label, key in rows:
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
    result.data["samples"] = samples
