"""growth: how adds, gets and searches behave as one store fills up.

One cairnd (local backend) receives the tier's number of documents (quick:
100,000) in ten equal steps, each by one `cairn-loadgen --profile add` of
durable 1 KiB text adds at 16 clients with 8 in flight each (128 adds in
flight). After each step the runner waits until the search index has taken
in every document (`index_pending` of `cairn status` at 0; the wait is a
column of its own), then measures, on the store as it now is:

- get: `cairn-loadgen --profile get` at 8 clients (it seeds a few documents
  of its own first, which the store keeps);
- search: `cairn-loadgen --profile search` at 4 clients: one or two words of
  the load generator's Zipf vocabulary, so a common word matches most of the
  store and BM25 ranks many rows;
- sizes: cairn.db and search.db (each with its WAL), and the packs.

There is no peer: the comparison is the store against itself when it was
smaller. Targets (issue 27): adds and gets of the last step at least 0.9x of
the first step's; every step's adds at least 20,000/s; search p95 under 10 ms
at the final size; cairn.db under 250 B a document; the search index under
half the text it indexes.
"""

import os
import sqlite3
import time

from . import charts, common, procs, report, suite_multiclient

DOC_SIZE = 1024
ADD_CLIENTS, ADD_PIPELINE = 16, 8
GET_CLIENTS, SEARCH_CLIENTS = 8, 4
SEARCH_FILES = 16
# documents added in all, in how many steps; seconds of each get and search run;
# documents the get runs seed (and read); longest wait for the index, seconds
SIZES = {"smoke": (600, 3, 0.3, 20, 60), "quick": (100000, 10, 3.0, 100, 300),
         "full": (1000000, 10, 5.0, 100, 1800)}
# No add step of the full tier should need this long; minutes more mean it hangs.
ADD_STEP_MAX_S = 900


def _db_bytes(path):
    """(bytes of the database's pages, bytes of its WAL file): the pages as
    SQLite counts them, committed WAL frames included, which is the size of
    the file once checkpointed; read-only, beside the running daemon."""
    try:
        wal = os.stat(path + "-wal").st_size
    except FileNotFoundError:
        wal = 0
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=10)
    try:
        pages = con.execute("PRAGMA page_count").fetchone()[0]
        size = con.execute("PRAGMA page_size").fetchone()[0]
    finally:
        con.close()
    return pages * size, wal


def _wait_indexed(daemon, limit_s):
    """Seconds until the index has no documents pending; SuiteError past limit_s."""
    t0 = time.monotonic()
    while True:
        pending = daemon.status().get("index_pending", 0)
        if pending == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit_s:
            raise procs.SuiteError("the search index still had %d documents pending %d s after "
                                   "the adds" % (pending, limit_s))
        time.sleep(0.2)


def _run(ctx, daemon, profile, clients, path, **kw):
    data = suite_multiclient._loadgen(ctx, daemon, profile, clients, path, file_size=DOC_SIZE,
                                      **kw)
    op = data["op_types"].get(profile) or {"count": 0, "failures": 0, "latency_ms": {}}
    if op["failures"]:
        raise procs.SuiteError("cairn-loadgen %s: %d of %d failed (%s)" % (
            profile, op["failures"], op["count"],
            ", ".join("%s %d" % kv for kv in sorted(op.get("errors", {}).items()))))
    return op


def _step(ctx, daemon, log, i, per_step):
    _, _, seconds, get_files, index_limit = SIZES[ctx.tier]
    d = daemon.dir
    add = _run(ctx, daemon, "add", ADD_CLIENTS, os.path.join(d, "add-%d.json" % i), files=0,
               pipeline=ADD_PIPELINE, seconds=ADD_STEP_MAX_S,
               ops_per_client=per_step // ADD_CLIENTS)
    wait_s = _wait_indexed(daemon, index_limit)
    get = _run(ctx, daemon, "get", GET_CLIENTS, os.path.join(d, "get-%d.json" % i),
               files=get_files, seconds=seconds, ops_per_client=10 ** 7)
    srch = _run(ctx, daemon, "search", SEARCH_CLIENTS, os.path.join(d, "search-%d.json" % i),
                files=SEARCH_FILES, seconds=seconds, ops_per_client=10 ** 7)
    _wait_indexed(daemon, index_limit)  # the seeds of the two runs above
    st = daemon.status()
    row = {"documents": st["documents"], "text_bytes": st["logical_bytes"],
           "pack_bytes": st["pack_bytes"], "add": add, "index_wait_s": wait_s, "get": get,
           "search": srch,
           "cairn_db": _db_bytes(os.path.join(daemon.data_dir, "cairn.db")),
           "search_db": _db_bytes(os.path.join(daemon.data_dir, "search.db"))}
    log("growth: %d documents: add %.0f/s, get %.0f/s, search %.0f/s p95 %.2f ms" % (
        row["documents"], add["ops_per_s"], get["ops_per_s"], srch["ops_per_s"],
        srch["latency_ms"]["p95"]))
    daemon.check_alive()
    return row


def run(ctx, result, log):
    total, steps = SIZES[ctx.tier][:2]
    per_step = total // steps
    rows = []
    with procs.Cairnd(ctx, "growth") as daemon:
        ok, why = common.search_support(daemon)
        if not ok:
            raise procs.Skip(why)
        for i in range(steps):
            rows.append(_step(ctx, daemon, log, i, per_step))
        rss = daemon.peak_rss_kib()
    procs.remove_tree(daemon.dir)
    result.data["steps"] = rows
    result.data["cairnd_peak_rss_kib"] = rss
    _report(ctx, result, rows, per_step)


def _per_doc(n, docs):
    return n / docs if docs else None


def _report(ctx, result, rows, per_step):
    t = result.table(
        "Each step (a tenth of the store in the quick and full tiers)",
        ["documents", "adds/s", "add p50 ms", "add p95 ms", "index wait s", "gets/s",
         "get p95 ms", "searches/s", "search p50 ms", "search p95 ms", "cairn.db (+WAL)",
         "B a document", "search.db (+WAL)", "÷ text", "packs"],
        "Adds: %d clients x %d in flight, durable 1 KiB text documents, %d per step. Gets at %d "
        "clients and searches at %d clients, each for %s s, once the index has caught up "
        "(*index wait*: from the step's last acknowledged add). Database sizes are SQLite's "
        "page count times page size (what the file holds once its WAL is checkpointed), with "
        "the WAL file's own size in brackets; *B a document* is cairn.db's, *÷ text* search.db's "
        "over the bytes of text stored."
        % (ADD_CLIENTS, ADD_PIPELINE, per_step, GET_CLIENTS, SEARCH_CLIENTS,
           report.fmt(SIZES[ctx.tier][2])))
    for r in rows:
        a, g, s = r["add"], r["get"], r["search"]
        t.add(r["documents"], a["ops_per_s"], a["latency_ms"]["p50"], a["latency_ms"]["p95"],
              r["index_wait_s"], g["ops_per_s"], g["latency_ms"]["p95"], s["ops_per_s"],
              s["latency_ms"]["p50"], s["latency_ms"]["p95"],
              "%s (+%s)" % (report.fmt_bytes(r["cairn_db"][0]), report.fmt_bytes(r["cairn_db"][1])),
              _per_doc(r["cairn_db"][0], r["documents"]),
              "%s (+%s)" % (report.fmt_bytes(r["search_db"][0]),
                            report.fmt_bytes(r["search_db"][1])),
              report.fmt_ratio(report.ratio(r["search_db"][0], r["text_bytes"])),
              report.fmt_bytes(r["pack_bytes"]))

    first, last = rows[0], rows[-1]
    for op, what in (("add", "durable adds"), ("get", "gets")):
        a, b = first[op]["ops_per_s"], last[op]["ops_per_s"]
        rt = report.ratio(b, a)
        result.target("growth: %s at %s documents ≥ 0.9x at %s" % (
                          what, report.fmt(last["documents"]), report.fmt(first["documents"])),
                      "%s (%s vs %s ops/s)" % (report.fmt_ratio(rt), report.fmt(b), report.fmt(a)),
                      rt >= 0.9)
    slow = min(rows, key=lambda r: r["add"]["ops_per_s"])
    result.target("growth: durable adds ≥ 20,000/s with %d in flight, every step"
                  % (ADD_CLIENTS * ADD_PIPELINE),
                  "slowest %s/s (at %s documents)" % (report.fmt(slow["add"]["ops_per_s"]),
                                                      report.fmt(slow["documents"])),
                  slow["add"]["ops_per_s"] >= 20000)
    p95 = last["search"]["latency_ms"]["p95"]
    result.target("growth: search p95 < 10 ms at %s documents (%d clients)"
                  % (report.fmt(last["documents"]), SEARCH_CLIENTS),
                  "%s ms" % report.fmt(p95), p95 < 10)
    per = _per_doc(last["cairn_db"][0], last["documents"])
    result.target("growth: cairn.db < 250 B a document", "%s B (%s for %s documents)" % (
                      report.fmt(per), report.fmt_bytes(last["cairn_db"][0]),
                      report.fmt(last["documents"])), per < 250)
    ix = report.ratio(last["search_db"][0], last["text_bytes"])
    result.target("growth: search index < 0.5x the text it indexes",
                  "%s (%s for %s of text)" % (report.fmt_ratio(ix),
                                              report.fmt_bytes(last["search_db"][0]),
                                              report.fmt_bytes(last["text_bytes"])), ix < 0.5)

    docs = [r["documents"] for r in rows]
    series = {name: list(zip(docs, [r[op]["ops_per_s"] for r in rows]))
              for name, op in (("adds/s", "add"), ("gets/s", "get"), ("searches/s", "search"))}
    common.chart(result, ctx, "growth-throughput.svg", charts.line_chart,
                 "growth: throughput as the store fills", "documents", "ops/s", series,
                 logy=True)
    lat = {"%s p95" % op: list(zip(docs, [r[op]["latency_ms"]["p95"] for r in rows]))
           for op in ("add", "get", "search")}
    common.chart(result, ctx, "growth-p95.svg", charts.line_chart,
                 "growth: p95 latency as the store fills", "documents", "ms", lat, logy=True)
