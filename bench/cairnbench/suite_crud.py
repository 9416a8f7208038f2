"""crud: end-to-end latency of whole CLI commands on 8 KiB files.

Each command is one process, timed from spawn to exit, so a `cairn` command
pays for its connect and request and a peer pays for its own start-up; the
floor every tool shares is shown by timing `true` the same way. Content is
compressible text (lines of man pages) or incompressible random bytes.
cairnd's configuration has no switch that turns compression off, so the two
contents stand in for compressed and raw storage: zstd keeps a compressed
chunk only when it saves at least 3%, so random chunks are stored raw.

Peers: `git hash-object -w` (with core.fsync=all and core.fsyncMethod=fsync,
so git makes its objects durable as cairn does) and `git cat-file -p` on the
same files; `cat`. For search and delete, `grep -rlw` and `rm` on the same
files are shown as a reference; they are not what the targets compare.
"""

import os
import random
import re

from . import charts, common, corpus, procs, report
from .procs import check_ok, run_timed

FILE_SIZE = 8192


def _write_files(d, n, content, lines):
    rng = random.Random(42)
    paths = []
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        p = os.path.join(d, "doc%03d.%s" % (i, "txt" if content == "text" else "bin"))
        with open(p, "wb") as f:
            f.write(corpus.text_bytes(lines, FILE_SIZE, rng) if content == "text"
                    else os.urandom(FILE_SIZE))
        paths.append(p)
    return paths


def _query_words(paths, n):
    """Words (5+ letters) that appear in the files, one from each of n files."""
    words = []
    for p in paths:
        with open(p, "rb") as f:
            text = f.read().decode(errors="ignore")
        candidates = sorted(set(w.lower() for w in re.findall(r"\b[A-Za-z]{5,12}\b", text)))
        if candidates:
            words.append(random.Random(p).choice(candidates))
        if len(words) == n:
            break
    return words


def _picks(items, n):
    """n items spread evenly over the list."""
    if n >= len(items):
        return list(items)
    step = len(items) / float(n)
    return [items[int(i * step)] for i in range(n)]


def _git_repo(d):
    repo = os.path.join(d, "git")
    check_ok(run_timed(["git", "init", "-q", repo]), "git init")
    for key, value in (("core.fsync", "all"), ("core.fsyncMethod", "fsync")):
        check_ok(run_timed(["git", "-C", repo, "config", key, value]), "git config")
    return repo


def _one_content(ctx, result, log, content, lines, stats):
    n_files, n_ops = ctx.sizes["crud_files"], ctx.sizes["crud_ops"]
    work = ctx.mkdtemp("crud-" + content)
    paths = _write_files(os.path.join(work, "files"), n_files, content, lines)
    have_git = ctx.have("git")
    samples = {}

    def add(key, ms):
        samples.setdefault(key, []).append(ms)

    with procs.Cairnd(ctx, "crud-" + content) as daemon:
        # Warm the page cache for every binary involved, outside the timing.
        check_ok(run_timed(daemon.cli("status")), "cairn status")
        run_timed(["true"])
        run_timed(["cat", "/dev/null"])
        repo = _git_repo(work) if have_git else None
        copies = os.path.join(work, "copies")
        os.makedirs(copies)

        # Store: every file once per tool, interleaved so drift hits all alike.
        hashes, oids = {}, {}
        for p in paths:
            r = check_ok(run_timed(daemon.cli("add", p), capture=True), "cairn add")
            hashes[p] = r.stdout.split()[0]
            add("store/cairn add", r.ms)
            if repo:
                r = check_ok(run_timed(["git", "-C", repo, "hash-object", "-w", p], capture=True),
                             "git hash-object")
                oids[p] = r.stdout.strip()
                add("store/git hash-object -w", r.ms)
            with open(os.path.join(copies, os.path.basename(p)), "wb") as out:
                add("store/cat > file", check_ok(run_timed(["cat", p], stdout=out), "cat").ms)
            add("floor/true", run_timed(["true"]).ms)

        # Every file in turn, as many times over as it takes.
        for p in [paths[i % len(paths)] for i in range(ctx.sizes["crud_gets"])]:
            add("retrieve/cairn get",
                check_ok(run_timed(daemon.cli("get", hashes[p])), "cairn get").ms)
            if repo:
                add("retrieve/git cat-file -p",
                    check_ok(run_timed(["git", "-C", repo, "cat-file", "-p", oids[p]]),
                             "git cat-file").ms)
            add("retrieve/cat", check_ok(run_timed(["cat", p]), "cat").ms)

        if content == "text":
            ok, why = common.search_support(daemon)
            if ok:
                for word in _query_words(_picks(paths, n_ops), n_ops):
                    r = check_ok(run_timed(daemon.cli("search", word), capture=True),
                                 "cairn search")
                    add("search/cairn search", r.ms)
                    add("search/hits", len(r.stdout.splitlines()))
                    add("search/grep -rlw (reference)",
                        run_timed(["grep", "-rlw", word, os.path.dirname(paths[0])]).ms)
            else:
                result.note(why)
                stats["search_unavailable"] = why

        for p in _picks(paths, n_ops):
            add("delete/cairn rm", check_ok(run_timed(daemon.cli("rm", hashes[p])), "cairn rm").ms)
            add("delete/rm (reference)",
                check_ok(run_timed(["rm", os.path.join(copies, os.path.basename(p))]), "rm").ms)
        daemon.check_alive()

    if not have_git:
        result.note("git is not installed: the git comparisons are not measured")
    stats[content] = {k: common.summarize(v) for k, v in samples.items() if k != "search/hits"}
    if "search/hits" in samples:
        stats[content]["search/hits"] = {"mean": report.mean(samples["search/hits"])}
    result.data.setdefault("samples_ms", {})[content] = samples
    return stats[content]


def _tables(result, content, s, n_files):
    store = result.table(
        "Store %d files of 8 KiB, %s content" % (n_files, content),
        ["tool", "files/s", "mean ms", "median ms", "p95 ms", "cairn ÷ tool (median)"],
        "One command per file. `cat > file` does not fsync; cairn and git (core.fsync=all) do.")
    cairn = s.get("store/cairn add")
    for key in ("store/cairn add", "store/git hash-object -w", "store/cat > file"):
        st = s.get(key)
        if not st:
            continue
        files_s = 1000.0 * st["n"] / (st["mean"] * st["n"]) if st["mean"] else None
        store.add(key.split("/", 1)[1], files_s, st["mean"], st["median"], st["p95"],
                  report.fmt_ratio(report.ratio(cairn["median"], st["median"])))
    ops = result.table(
        "Retrieve, search, delete (%s content)" % content,
        ["operation", "tool", "runs", "mean ms", "median ms", "p95 ms", "cairn ÷ tool (median)"],
        "`true` is the cost of spawning any process from the runner, included in every row.")
    for op, first in (("retrieve", "retrieve/cairn get"), ("search", "search/cairn search"),
                      ("delete", "delete/cairn rm")):
        base = s.get(first)
        for key in sorted(k for k in s if k.startswith(op + "/") and k != "search/hits"):
            st = s[key]
            ops.add(op, key.split("/", 1)[1], st["n"], st["mean"], st["median"], st["p95"],
                    report.fmt_ratio(report.ratio(base["median"], st["median"])) if base else "n/a")
    if "search/hits" in s:
        ops.note += (" cairn search returned %.1f hits per query on average."
                     % s["search/hits"]["mean"])
    floor = s.get("floor/true")
    if floor:
        ops.add("(floor)", "true", floor["n"], floor["mean"], floor["median"], floor["p95"], "")


def _targets(result, content, s):
    get, cat, catfile = s.get("retrieve/cairn get"), s.get("retrieve/cat"), \
        s.get("retrieve/git cat-file -p")
    add, hashobj = s.get("store/cairn add"), s.get("store/git hash-object -w")
    r = report.ratio(get["median"], cat["median"])
    result.target("crud %s: `cairn get` 8 KiB ≤ 1.3x `cat` (median)" % content,
                  report.fmt_ratio(r) + " of cat", r <= 1.3)
    if catfile:
        r = report.ratio(get["median"], catfile["median"])
        result.target("crud %s: `cairn get` no slower than `git cat-file -p` (median)" % content,
                      report.fmt_ratio(r) + " of git", r <= 1.0)
    else:
        result.target("crud %s: `cairn get` no slower than `git cat-file -p`" % content,
                      "git not installed", None)
    if hashobj:
        r = report.ratio(add["median"], hashobj["median"])
        result.target("crud %s: `cairn add` 8 KiB no slower than `git hash-object -w` "
                      "with fsync (median)" % content, report.fmt_ratio(r) + " of git", r <= 1.0)
    else:
        result.target("crud %s: `cairn add` no slower than `git hash-object -w`" % content,
                      "git not installed", None)


def run(ctx, result, log):
    lines = corpus.text_lines(ctx)
    stats = {}
    for content in ("text", "random"):
        log("crud: %s content" % content)
        _one_content(ctx, result, log, content, lines, stats)
    for content in ("text", "random"):
        _tables(result, content, stats[content], ctx.sizes["crud_files"])
    for content in ("text", "random"):
        _targets(result, content, stats[content])
    result.data["stats"] = stats

    cats = []
    series = {"cairn": [], "git": [], "cat / rm / grep": []}
    for content in ("text", "random"):
        s = stats[content]
        for op, keys in (("store", ("store/cairn add", "store/git hash-object -w",
                                    "store/cat > file")),
                         ("retrieve", ("retrieve/cairn get", "retrieve/git cat-file -p",
                                       "retrieve/cat")),
                         ("search", ("search/cairn search", None, "search/grep -rlw (reference)")),
                         ("delete", ("delete/cairn rm", None, "delete/rm (reference)"))):
            if keys[0] not in s:
                continue
            cats.append("%s (%s)" % (op, content))
            for name, key in zip(series, keys):
                series[name].append(s[key]["median"] if key and key in s else None)
    common.chart(result, ctx, "crud-latency.svg", charts.bar_chart,
                 "crud: median latency of one command, 8 KiB files", "ms", cats, series)
