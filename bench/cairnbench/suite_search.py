"""search: full-text search over the man pages of this machine.

The corpus is every page under /usr/share/man, decompressed into a temporary
directory (an even spread of them in the smaller tiers). cairn ingests it
with one `cairn add -r` (every document durable before the next) and indexes
it as it adds; Xapian's `omindex` builds its index from the same files (every
file as text/plain; it commits with fsync); ripgrep needs no index and scans
the files at every query.

Queries are a fixed list of 20 (words and two-word phrases), run as whole
commands: `cairn search QUERY` (top 10 by BM25), `quest -d DB QUERY` (top 10,
Xapian's BM25) and `rg -l -i -F QUERY DIR` (every matching file). Phrases are
quoted for cairn and quest, fixed strings for rg, so all three look for the
same words in the same order.

Then the quality of the rankings (search_quality.py): a judged set of queries
a person would type (judged_queries.json), and a typo variant of each, run
through `cairn search` (with and without `--fuzzy`), quest (with and without
Xapian's spelling correction, on a second database built with `omindex
--spelling`) and rg (files ordered by their count of matching lines), scored
by MRR and nDCG@10.
"""

import os
import re

from . import charts, common, corpus, procs, report, search_quality
from .procs import check_ok, run_timed

QUERIES = [
    "socket", '"file descriptor"', "signal", '"regular expression"', "permission",
    '"environment variable"', "locale", "timeout", '"configuration file"', "compression",
    "checksum", "terminal", '"symbolic link"', "password", "mount", "thread", "unicode", "kernel",
    '"exit status"', '"standard output"',
]


def _quest_matches(text):
    m = re.search(r"(?:Exactly|About|Between \d+ and) (\d+) matches", text)
    return int(m.group(1)) if m else None


def run(ctx, result, log):
    s = ctx.sizes
    queries = QUERIES[:s["search_queries"]]
    log("search: preparing the man page corpus")
    cp = corpus.build_corpus(ctx, s["man_pages"])
    if cp["files"] == 0:
        raise procs.Skip("search: no man pages under %s on this machine" % corpus.MAN_ROOT)
    result.data["corpus"] = {"files": cp["files"], "bytes": cp["bytes"]}
    have_xapian = ctx.have("omindex") and ctx.have("quest")
    have_rg = ctx.have("rg")
    if not have_xapian:
        result.note("xapian-omega / xapian-tools are not installed: no omindex/quest comparison")
    if not have_rg:
        result.note("ripgrep is not installed: no rg comparison")

    ingest = {}
    samples = {}  # (tool, query) -> [ms]
    hits = {}
    with procs.Cairnd(ctx, "search") as daemon:
        log("search: cairn add -r of %d pages" % cp["files"])
        r = check_ok(run_timed(daemon.cli("add", "-r", cp["dir"])), "cairn add -r")
        ingest["cairn"] = {"seconds": r.seconds, "index_bytes": None,
                           "index_what": "cairn.db after a clean stop (metadata and FTS5 index)",
                           "peak_rss_kib": daemon.peak_rss_kib(),
                           "db_with_wal_bytes": daemon.db_bytes()}
        available, why = common.search_support(daemon)
        if not available:
            result.note(why)
        xdb = os.path.join(ctx.mkdtemp("xapian"), "db")
        if have_xapian:
            log("search: omindex")
            r = run_timed(["omindex", "--db", xdb, "--url", "/", "-G", "*:text/plain", cp["dir"]],
                          rss=True)
            if r.returncode != 0:
                result.note("omindex failed (%s): %s" % (r.returncode, r.stderr.strip()[-200:]))
                have_xapian = False
            else:
                ingest["xapian omindex"] = {"seconds": r.seconds,
                                            "index_bytes": procs.du_bytes(xdb),
                                            "index_what": "the Xapian database directory",
                                            "peak_rss_kib": r.maxrss_kib}
        if have_rg:
            ingest["rg"] = {"seconds": None, "index_bytes": 0, "index_what": "no index",
                            "peak_rss_kib": None}

        # Warm-up: one query each, so the first timed one does not load the binaries.
        if available:
            run_timed(daemon.cli("search", "warmup"))
        if have_xapian:
            run_timed(["quest", "-d", xdb, "warmup"])
        log("search: %d queries x %d runs" % (len(queries), s["search_runs"]))
        for _ in range(s["search_runs"]):
            for q in queries:
                phrase = q.strip('"')
                if available:
                    r = check_ok(run_timed(daemon.cli("search", q), capture=True),
                                 "cairn search " + q)
                    samples.setdefault(("cairn search", q), []).append(r.ms)
                    hits[("cairn search", q)] = len(r.stdout.splitlines())
                if have_xapian:
                    r = run_timed(["quest", "-d", xdb, q], capture=True)
                    if r.returncode == 0:
                        samples.setdefault(("quest", q), []).append(r.ms)
                        hits[("quest", q)] = _quest_matches(r.stdout)
                if have_rg:
                    r = run_timed(["rg", "-l", "-i", "-F", "--", phrase, cp["dir"]], capture=True)
                    if r.returncode in (0, 1):
                        samples.setdefault(("rg", q), []).append(r.ms)
                        hits[("rg", q)] = len(r.stdout.splitlines())
        daemon.check_alive()

        xdb_spelling = None
        if have_xapian:
            log("search: omindex --spelling, for the quality table")
            xdb_spelling, secs = search_quality.build_spelling_db(ctx, cp["dir"], result)
            result.data["xapian_spelling_db_seconds"] = secs
        quality_state = search_quality.run(ctx, result, daemon, cp["dir"], available,
                                           xdb_spelling, have_rg, log)
        # A clean stop checkpoints the WAL into cairn.db: what remains is the index's size.
        daemon.stop()
        ingest["cairn"]["index_bytes"] = daemon.db_bytes()
    _report(ctx, result, cp, queries, ingest, samples, hits, available, why)
    search_quality.report(result, quality_state)


def _report(ctx, result, cp, queries, ingest, samples, hits, available, why):
    tools = [t for t in ("cairn search", "quest", "rg")
             if any((t, q) in samples for q in queries)]
    it = result.table(
        "Ingest and index (%s pages, %s)" % (report.fmt(cp["files"]),
                                             report.fmt_bytes(cp["bytes"])),
        ["tool", "ingest s", "pages/s", "MB/s", "index size", "index ÷ corpus", "peak RSS",
         "what the size counts"],
        "cairn: one `cairn add -r` (each page durable and indexed before the next); Xapian: "
        "omindex. Peak RSS: cairnd's, and omindex's.")
    for tool, d in ingest.items():
        secs = d["seconds"]
        it.add(tool, secs if secs is not None else "-",
               cp["files"] / secs if secs else "-",
               cp["bytes"] / secs / 1e6 if secs else "-",
               report.fmt_bytes(d["index_bytes"]),
               "%.2f" % (d["index_bytes"] / cp["bytes"]) if cp["bytes"] else "-",
               report.fmt_bytes((d["peak_rss_kib"] or 0) * 1024) if d["peak_rss_kib"] else "-",
               d["index_what"])

    overall = {t: common.summarize([x for q in queries for x in samples.get((t, q), [])])
               for t in tools}
    qt = result.table("Query latency over all queries (whole commands)",
                      ["tool", "runs", "median ms", "p95 ms", "mean ms", "tool ÷ cairn (median)"])
    base = overall.get("cairn search")
    for t in tools:
        st = overall[t]
        qt.add(t, st["n"], st["median"], st["p95"], st["mean"],
               report.fmt_ratio(report.ratio(st["median"], base["median"])) if base else "n/a")
    if not available:
        qt.add("cairn search", 0, "n/a", "n/a", "n/a", why)

    per = result.table("Per query: median ms (results)",
                       ["query"] + tools,
                       "Results: hits printed by cairn (at most 10), quest's match count, "
                       "files rg found.")
    for q in queries:
        cells = []
        for t in tools:
            st = common.summarize(samples.get((t, q), []))
            cells.append("%s (%s)" % (report.fmt(st["median"]), report.fmt(hits.get((t, q)))))
        per.add(q, *cells)

    if not available:
        result.target("search: `cairn search` per query no slower than `quest` (median)",
                      "not available in this build", None)
    elif "quest" not in overall:
        result.target("search: `cairn search` per query no slower than `quest` (median)",
                      "quest not measured", None)
    else:
        r = report.ratio(base["median"], overall["quest"]["median"])
        slower = [q for q in queries
                  if (report.median(samples.get(("cairn search", q), [])) or 0) >
                  (report.median(samples.get(("quest", q), [])) or 0)]
        result.target("search: `cairn search` per query no slower than `quest` (median)",
                      "%s of quest (%s vs %s ms); slower on %d of %d queries" % (
                          report.fmt_ratio(r), report.fmt(base["median"]),
                          report.fmt(overall["quest"]["median"]), len(slower), len(queries)),
                      r <= 1.0)
    result.data["ingest"] = ingest
    result.data["samples_ms"] = {"%s|%s" % k: v for k, v in samples.items()}
    result.data["hits"] = {"%s|%s" % k: v for k, v in hits.items()}
    series = {t: [report.median(samples.get((t, q), [])) for q in queries] for t in tools}
    common.chart(result, ctx, "search-queries.svg", charts.bar_chart,
                 "search: median latency per query (%d pages)" % cp["files"], "ms",
                 [q.strip('"') for q in queries], series, logy=True)
