"""ingest: adding a tree of files, and adding it again (dedup).

The data is the man page corpus of the search suite plus two large files:
random bytes and text (man page lines in random order, so neither chunk
dedup nor a compressor window can shortcut it), 1 GiB each in the full tier.
Each tool gets the same two paths twice:

- cairn: `cairn add -r` into a fresh cairnd (durable, indexed for search);
- restic 0.14: `restic backup --compression auto` into a repository made
  with `restic init --repository-version 2`;
- `tar -c | zstd -3` into a file, then `sync` of that file (counted), so its
  output is as durable as the others'. A tar archive has no dedup: the second
  pass writes a second archive.

Stored bytes are what the tool left on disk: cairn's whole data directory
(objects and metadata database, after a clean stop), restic's repository,
the archives.
"""

import os

from . import charts, common, corpus, procs, report
from .procs import check_ok, run_timed


def _prepare(ctx, log):
    s = ctx.sizes
    cp = corpus.build_corpus(ctx, s["man_pages"])
    big = ctx.mkdtemp("big")
    log("ingest: writing 2 x %s of large files" % report.fmt_bytes(s["ingest_big"]))
    corpus.write_random_file(os.path.join(big, "random.bin"), s["ingest_big"])
    corpus.write_text_file(os.path.join(big, "text.txt"), corpus.text_lines(ctx),
                           s["ingest_big"], seed=11)
    paths = [cp["dir"], big]
    total = cp["bytes"] + procs.tree_bytes(big)
    files = cp["files"] + 2
    return paths, total, files


def _cairn(ctx, paths, log):
    out = {}
    with procs.Cairnd(ctx, "ingest") as daemon:
        for n in (1, 2):
            log("ingest: cairn pass %d" % n)
            r = check_ok(run_timed(daemon.cli("add", "-r", *paths), rss=True), "cairn add -r")
            # Adds are acknowledged before they are indexed; a search waits for the index
            # to hold every add before it, so this measures when all of it is searchable.
            s = check_ok(run_timed(daemon.cli("search", "-l", "1", "the")), "cairn search")
            st = daemon.status()
            out["pass%d" % n] = {"seconds": r.seconds, "client_peak_rss_kib": r.maxrss_kib,
                                 "searchable_seconds": r.seconds + s.seconds,
                                 "daemon_peak_rss_kib": daemon.peak_rss_kib(),
                                 "stored_bytes_status": st.get("stored_bytes"),
                                 "disk_bytes": daemon.disk_bytes()}
        daemon.check_alive()
        daemon.stop()
        out["final_disk_bytes"] = daemon.disk_bytes()
        out["sizes"] = _sizes(daemon.data_dir)
        out["breakdown"] = _breakdown(daemon.data_dir)
    return out


def _sizes(data_dir):
    """Bytes on disk of the objects (packs), the metadata database and the search
    index of a stopped cairnd's data directory."""
    objects = os.path.join(data_dir, "objects")
    sizes = {"objects": procs.du_bytes(objects) if os.path.isdir(objects) else 0}
    for key, name in (("database", "cairn.db"), ("index", "search.db")):
        sizes[key] = sum(os.stat(p).st_blocks * 512
                         for p in (os.path.join(data_dir, name + s) for s in ("", "-wal"))
                         if os.path.exists(p))
    return sizes


def _breakdown(data_dir):
    """Where cairn's bytes are: the packs (files, bytes on disk) and each
    database with its largest tables (SQLite's dbstat, when this Python's
    SQLite has it)."""
    parts = []
    objects = os.path.join(data_dir, "objects")
    for kind in sorted(os.listdir(objects)) if os.path.isdir(objects) else []:
        path = os.path.join(objects, kind)
        if os.path.isdir(path) and not kind.startswith("."):
            files = sum(len(f) for _, _, f in os.walk(path))
            parts.append(("objects/" + kind, files, procs.du_bytes(path)))
    for name in ("cairn.db", "search.db"):
        db = os.path.join(data_dir, name)
        if not os.path.exists(db):
            continue
        parts.append((name, 1, os.stat(db).st_blocks * 512))
        try:
            import sqlite3
            conn = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
            try:
                rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name "
                                    "ORDER BY 2 DESC LIMIT 4").fetchall()
            finally:
                conn.close()
            for table, size in rows:
                parts.append(("  %s table %s" % (name, table), None, size))
        except Exception:  # no dbstat in this SQLite build: the total is still there
            pass
    return parts


def _restic(ctx, paths, log):
    repo = os.path.join(ctx.mkdtemp("restic"), "repo")
    env = dict(os.environ, RESTIC_REPOSITORY=repo, RESTIC_PASSWORD="cairn-bench",
               RESTIC_CACHE_DIR=ctx.mkdtemp("restic-cache"))
    r = run_timed(["restic", "init", "--repository-version", "2"], env=env)
    if r.returncode != 0:
        raise RuntimeError("restic init: " + r.stderr.strip()[-200:])
    out = {}
    for n in (1, 2):
        log("ingest: restic pass %d" % n)
        r = run_timed(["restic", "backup", "--compression", "auto", "-q"] + paths, env=env,
                      rss=True)
        if r.returncode != 0:
            raise RuntimeError("restic backup: " + r.stderr.strip()[-200:])
        out["pass%d" % n] = {"seconds": r.seconds, "client_peak_rss_kib": r.maxrss_kib,
                             "disk_bytes": procs.du_bytes(repo)}
    out["final_disk_bytes"] = out["pass2"]["disk_bytes"]
    return out


def _tar_zstd(ctx, paths, log):
    d = ctx.mkdtemp("tar")
    out, total = {}, 0
    for n in (1, 2):
        log("ingest: tar | zstd -3 pass %d" % n)
        archive = os.path.join(d, "pass%d.tar.zst" % n)
        with open(archive, "wb") as f:
            secs, codes, rss = procs.run_pipeline_timed(["tar", "-cf", "-"] + paths,
                                                        ["zstd", "-3", "-q", "-c"], stdout=f)
        if any(codes):
            raise RuntimeError("tar | zstd exited %s" % codes)
        sync = check_ok(run_timed(["sync", archive]), "sync")
        total += os.stat(archive).st_blocks * 512
        out["pass%d" % n] = {"seconds": secs + sync.seconds, "client_peak_rss_kib": rss,
                             "disk_bytes": total}
    out["final_disk_bytes"] = total
    return out


def run(ctx, result, log):
    paths, total, files = _prepare(ctx, log)
    result.data["input"] = {"bytes": total, "files": files}
    tools = {"cairn": _cairn(ctx, paths, log)}
    for name, fn, needs in (("restic", _restic, ["restic"]),
                            ("tar | zstd -3", _tar_zstd, ["tar", "zstd"])):
        if not all(ctx.have(t) for t in needs):
            result.note("%s is not installed: not compared" % " / ".join(needs))
            continue
        try:
            tools[name] = fn(ctx, paths, log)
        except RuntimeError as e:
            result.note("%s failed, not compared: %s" % (name, e))
    _report(ctx, result, tools, total, files)


def _report(ctx, result, tools, total, files):
    t = result.table(
        "Ingest %s in %s files, twice" % (report.fmt_bytes(total), report.fmt(files)),
        ["tool", "pass", "seconds", "MB/s", "÷ cairn MB/s", "searchable after s",
         "stored after pass", "stored ÷ input", "peak RSS (client)", "peak RSS (cairnd)"],
        "MB/s is input bytes over wall time until every add is acknowledged (durable). cairn "
        "indexes for search beside the adds, after acknowledging them: *searchable after* "
        "is when a search, which waits for the index to hold every earlier add, returned. "
        "Pass 2 adds the same paths again: cairn and restic find everything stored already; "
        "tar writes a second archive.")
    base = tools["cairn"]
    for name, d in tools.items():
        for n in (1, 2):
            p = d["pass%d" % n]
            mbs = total / p["seconds"] / 1e6
            bmbs = total / base["pass%d" % n]["seconds"] / 1e6
            t.add(name, n, p["seconds"], mbs, report.fmt_ratio(report.ratio(mbs, bmbs)),
                  "%.2f" % p["searchable_seconds"] if "searchable_seconds" in p else "-",
                  report.fmt_bytes(p["disk_bytes"]), "%.3f" % (p["disk_bytes"] / total),
                  report.fmt_bytes(p["client_peak_rss_kib"] * 1024)
                  if p.get("client_peak_rss_kib") else "n/a",
                  report.fmt_bytes(p["daemon_peak_rss_kib"] * 1024)
                  if p.get("daemon_peak_rss_kib") else "-")
    st = result.table("Final stored bytes", ["tool", "on disk", "÷ input", "÷ cairn"],
                      "cairn: the data directory after a clean stop (objects, metadata and "
                      "search index); cairn's own count of chunk bytes after pass 2: %s."
                      % report.fmt_bytes(base["pass2"]["stored_bytes_status"]))
    for name, d in tools.items():
        st.add(name, report.fmt_bytes(d["final_disk_bytes"]),
               "%.3f" % (d["final_disk_bytes"] / total),
               report.fmt_ratio(report.ratio(d["final_disk_bytes"], base["final_disk_bytes"])))

    bd = result.table("Where cairn's bytes are (after pass 2 and a clean stop)",
                      ["part", "files", "on disk", "÷ input"],
                      "objects/packs: the packs (chunks in compressed blocks, manifests, the "
                      "journal); cairn.db: metadata and record locations; search.db: the "
                      "full-text index, which keeps no copy of the text.")
    for part, nfiles, size in base.get("breakdown", []):
        bd.add(part, nfiles if nfiles is not None else "-", report.fmt_bytes(size),
               "%.3f" % (size / total))

    if "restic" in tools:
        rs = tools["restic"]
        for n in (1, 2):
            mine = total / base["pass%d" % n]["seconds"] / 1e6
            theirs = total / rs["pass%d" % n]["seconds"] / 1e6
            result.target("ingest: faster than restic (pass %d%s)" % (n, ", dedup" if n == 2
                                                                      else ""),
                          "%s MB/s vs %s MB/s (%s)" % (report.fmt(mine), report.fmt(theirs),
                                                      report.fmt_ratio(mine / theirs)),
                          mine > theirs)
        mine = total / base["pass1"]["searchable_seconds"] / 1e6
        theirs = total / rs["pass1"]["seconds"] / 1e6
        result.note("cairn pass 1 until everything is searchable: %s MB/s, %s of restic's speed"
                    % (report.fmt(mine), report.fmt_ratio(mine / theirs)))
        theirs = rs["final_disk_bytes"]
        sizes = base["sizes"]
        mine = sizes["objects"]
        result.target("ingest: objects no larger than restic's repository (after both passes)",
                      "%s vs %s (%s)" % (report.fmt_bytes(mine), report.fmt_bytes(theirs),
                                         report.fmt_ratio(report.ratio(mine, theirs))),
                      mine <= theirs)
        mine = sizes["objects"] + sizes["database"] + sizes["index"]
        result.target("ingest: objects + database + search index at most 1.6x restic's "
                      "repository",
                      "%s vs %s (%s)" % (report.fmt_bytes(mine), report.fmt_bytes(theirs),
                                         report.fmt_ratio(report.ratio(mine, theirs))),
                      mine <= 1.6 * theirs)
    else:
        result.target("ingest: faster than restic, no more stored bytes", "restic not measured",
                      None)
    result.data["tools"] = tools
    names = list(tools)
    for key, title, ylabel, fn in (
            ("mbs", "ingest: throughput", "MB/s",
             lambda d, n: total / d["pass%d" % n]["seconds"] / 1e6),
            ("stored", "ingest: stored bytes after each pass", "MiB",
             lambda d, n: d["pass%d" % n]["disk_bytes"] / 1048576.0)):
        series = {"pass 1": [fn(tools[n], 1) for n in names],
                  "pass 2": [fn(tools[n], 2) for n in names]}
        common.chart(result, ctx, "ingest-%s.svg" % key, charts.bar_chart,
                     "%s (%s input)" % (title, report.fmt_bytes(total)), ylabel, names, series)
