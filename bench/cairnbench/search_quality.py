"""search suite, quality part: how good each tool's top 10 is for the judged
queries (quality.py), in three modes, reported as MRR and nDCG@10.

- exact: the queries as judged. `cairn search Q`, `quest -d DB Q`, and
  `rg -c -i -w -F -e WORD... DIR` with files ordered by their count of
  matching lines.
- typo: each query with one typo (quality.typo). `cairn search --fuzzy T`
  against Xapian's own spelling correction: `quest -f
  default,spelling_correction T` on a database built with `omindex
  --spelling`, then quest again with the query it suggests ("Did you mean:
  C"), or T's results when it suggests none. For reference, both without
  their tolerance, and rg on T.
- exact, tolerant: `cairn search --fuzzy Q` and quest with spelling
  correction on the exact queries, to show tolerance costs a correct query
  nothing.

Quality does not depend on the machine's load, so these commands are not
timed.
"""

import os
import statistics

from . import quality
from .procs import check_ok, run_timed

EXACT, TYPO, TOLERANT = "exact", "typo", "exact, tolerant"

CAIRN, CAIRN_FUZZY = "cairn search", "cairn search --fuzzy"
QUEST, QUEST_CORRECTED = "quest", "quest, spelling corrected"
RG = "rg -c"

# (mode, tool) rows of the tables, in order; rows of tools that did not run are left out.
ROWS = [(EXACT, CAIRN), (EXACT, QUEST), (EXACT, RG),
        (TYPO, CAIRN_FUZZY), (TYPO, QUEST_CORRECTED), (TYPO, CAIRN), (TYPO, QUEST), (TYPO, RG),
        (TOLERANT, CAIRN_FUZZY), (TOLERANT, QUEST_CORRECTED)]

# The targets: in each mode, cairn's row against Xapian's.
PAIRS = [(EXACT, CAIRN, QUEST, "exact queries: `cairn search` at or above Xapian (`quest`)"),
         (TYPO, CAIRN_FUZZY, QUEST_CORRECTED,
          "typo queries: `cairn search --fuzzy` at or above Xapian with its spelling correction"),
         (TOLERANT, CAIRN_FUZZY, QUEST_CORRECTED,
          "exact queries, typo tolerance on: `cairn search --fuzzy` at or above Xapian with "
          "its spelling correction")]

EPS = 1e-9


class _Tools:
    """Runs one query through each tool and returns its ranking of page names."""

    def __init__(self, daemon, root, xdb, result):
        self.daemon, self.root, self.xdb, self.result = daemon, root, xdb, result
        self.corrections = {}  # query -> what quest suggested
        self.cairn_ms = {False: [], True: []}  # fuzzy -> whole-command times

    def cairn(self, q, fuzzy):
        argv = self.daemon.cli("--json", "search", *(["--fuzzy"] if fuzzy else []), q)
        r = check_ok(run_timed(argv, capture=True),
                     "cairn search%s %s" % (" --fuzzy" if fuzzy else "", q))
        self.cairn_ms[fuzzy].append(r.seconds * 1000)
        return quality.cairn_ranking(r.stdout, self.root)

    def _quest(self, q, flags=None):
        argv = ["quest", "-d", self.xdb] + (["-f", flags] if flags else []) + [q]
        r = run_timed(argv, capture=True)
        if r.returncode != 0:
            self.result.note("quality: quest failed on %r (exit %s): %s"
                             % (q, r.returncode, r.stderr.strip()[-200:]))
            return None
        return r.stdout

    def quest(self, q, correct):
        if not correct:
            return quality.quest_ranking(self._quest(q) or "")
        out = self._quest(q, "default,spelling_correction") or ""
        suggested = quality.quest_correction(out)
        self.corrections[q] = suggested
        if suggested and suggested != q:
            out = self._quest(suggested) or ""
        return quality.quest_ranking(out)

    def rg(self, q):
        argv = ["rg", "-c", "--with-filename", "-i", "-w", "-F"]
        for word in quality.query_words(q):
            argv += ["-e", word]
        r = run_timed(argv + ["--", self.root], capture=True)
        if r.returncode not in (0, 1):
            self.result.note("quality: rg failed on %r (exit %s): %s"
                             % (q, r.returncode, r.stderr.strip()[-200:]))
            return []
        return quality.rg_ranking(r.stdout, self.root)


def build_spelling_db(ctx, corpus_dir, result):
    """A second Xapian database, with spelling data; not part of the ingest table."""
    xdb = os.path.join(ctx.mkdtemp("xapian-spelling"), "db")
    r = run_timed(["omindex", "--spelling", "--db", xdb, "--url", "/", "-G", "*:text/plain",
                   corpus_dir])
    if r.returncode != 0:
        result.note("quality: omindex --spelling failed (%s): %s"
                    % (r.returncode, r.stderr.strip()[-200:]))
        return None, r.seconds
    return xdb, r.seconds


def run(ctx, result, daemon, corpus_dir, have_cairn, xdb, have_rg, log):
    """Runs every judged query (and its typo variant) through every tool.

    Returns what report() needs, or None when no judged query fits this corpus.
    """
    judged = quality.load_judged()
    queries, left_out = quality.usable(judged, quality.corpus_pages(corpus_dir),
                                       ctx.sizes.get("quality_queries"))
    if not queries:
        result.note("quality: no judged query has its answer in this corpus")
        return None
    tools = _Tools(daemon, corpus_dir, xdb, result)
    typos = {q["q"]: quality.typo(q["q"]) for q in queries}
    runs = {}  # (mode, tool) -> {query: ranking}

    def record(mode, tool, q, ranking):
        runs.setdefault((mode, tool), {})[q] = ranking

    log("search: quality, %d judged queries" % len(queries))
    for item in queries:
        q = item["q"]
        t = typos[q][0] if typos[q] else None
        if have_cairn:
            record(EXACT, CAIRN, q, tools.cairn(q, False))
            record(TOLERANT, CAIRN_FUZZY, q, tools.cairn(q, True))
            if t:
                record(TYPO, CAIRN_FUZZY, q, tools.cairn(t, True))
                record(TYPO, CAIRN, q, tools.cairn(t, False))
        if xdb:
            record(EXACT, QUEST, q, tools.quest(q, False))
            record(TOLERANT, QUEST_CORRECTED, q, tools.quest(q, True))
            if t:
                record(TYPO, QUEST_CORRECTED, q, tools.quest(t, True))
                record(TYPO, QUEST, q, tools.quest(t, False))
        if have_rg:
            record(EXACT, RG, q, tools.rg(q))
            if t:
                record(TYPO, RG, q, tools.rg(t))
    daemon.check_alive()
    return {"queries": queries, "left_out": left_out, "typos": typos, "runs": runs,
            "corrections": tools.corrections, "cairn_ms": tools.cairn_ms}


def _scores(queries, runs, mode, tool):
    """{query: metrics} for the queries that row ran."""
    got = runs.get((mode, tool), {})
    return {q["q"]: quality.metrics(got[q["q"]], q["docs"]) for q in queries if q["q"] in got}


def _p95(values):
    v = sorted(values)
    return v[min(len(v) - 1, int(0.95 * len(v)))]


def _pct(x):
    return "n/a" if x is None else "%.0f%%" % (100 * x)


def _cell(m):
    if m is None:
        return "n/a"
    return "%s (%.2f)" % (m["first"] if m["first"] else "-", m["ndcg"])


def report(result, state):
    """The quality tables and targets, from what run() returned."""
    if state is None:
        return
    queries, left_out, typos = state["queries"], state["left_out"], state["typos"]
    runs, corrections = state["runs"], state["corrections"]
    rows = [(mode, tool) for mode, tool in ROWS if (mode, tool) in runs]
    scores = {row: _scores(queries, runs, *row) for row in rows}
    n_typo = sum(1 for q in queries if typos[q["q"]])
    kinds = sorted({q["kind"] for q in queries})
    kind_of = {q["q"]: q["kind"] for q in queries}

    typo_qs = [q["q"] for q in queries if typos[q["q"]]]
    suggested = [q for q in typo_qs if corrections.get(typos[q][0])]
    restored = [q for q in suggested if corrections[typos[q][0]] == q]
    changed_exact = [q for q in (x["q"] for x in queries) if corrections.get(q)]
    notes = ["%d judged queries (%s)%s; %d typo variants. MRR: mean over the queries of 1/rank "
             "of the first page graded 1 or 2 in the top 10 (0 if none). nDCG@10: DCG of the "
             "top 10 with gain 2^grade - 1 and discount log2(rank + 1), over the DCG of the "
             "judged pages in grade order. Answer first / in top 10: queries whose first "
             "result, or one of the top 10, is graded 2. No results: queries with no hits."
             % (len(queries),
                ", ".join("%d %s" % (sum(1 for q in queries if q["kind"] == k), k)
                          for k in kinds),
                " (%d left out at this tier or corpus)" % left_out if left_out else "",
                n_typo)]
    if (TYPO, QUEST_CORRECTED) in runs:
        notes.append("Xapian suggested a correction for %d of %d typo queries (%d of them the "
                     "query as it was before the typo), and for %d of %d exact queries."
                     % (len(suggested), n_typo, len(restored), len(changed_exact),
                        len(queries)))
    t = result.table("Search quality: MRR and nDCG@10 of the top 10",
                     ["mode", "tool", "queries", "MRR", "nDCG@10", "answer first",
                      "answer in top 10", "no results"], " ".join(notes))
    for row in rows:
        m = quality.mean_metrics(list(scores[row].values()))
        t.add(row[0], row[1], m["n"], m["mrr"], m["ndcg"], _pct(m["answer_at_1"]),
              _pct(m["answer_in_top"]), m["no_hits"])

    kt = result.table("Search quality by kind of query",
                      ["mode", "tool"] + ["%s: %s" % (k, what) for k in kinds
                                          for what in ("queries", "MRR", "nDCG@10")],
                      "identifier: a function or system call name (epoll_wait, tgkill); "
                      "words: what a person types to describe the need (list open files).")
    for row in rows:
        cells = []
        for k in kinds:
            m = quality.mean_metrics([v for q, v in scores[row].items() if kind_of[q] == k])
            cells += [m["n"], m["mrr"], m["ndcg"]]
        kt.add(row[0], row[1], *cells)

    per_cols = [(EXACT, CAIRN), (EXACT, QUEST), (EXACT, RG),
                (TYPO, CAIRN_FUZZY), (TYPO, QUEST_CORRECTED), (TYPO, RG)]
    per_cols = [c for c in per_cols if c in runs]
    pt = result.table("Search quality per query: rank of the first relevant page (nDCG@10)",
                      ["query", "typo"] + ["%s: %s" % c for c in per_cols],
                      "- : no relevant page in the top 10. Typo: the variant and, in "
                      "brackets, what quest suggested for it.")
    for item in queries:
        q = item["q"]
        if typos[q]:
            t_q = typos[q][0]
            sug = corrections.get(t_q)
            typo_cell = t_q + (" (%s)" % sug if sug else "")
        else:
            typo_cell = "(no word of %d+ letters)" % quality.TYPO_MIN_LETTERS
        pt.add(q, typo_cell, *[_cell(scores[c].get(q)) for c in per_cols])

    for mode, ours, theirs, what in PAIRS:
        name = "search quality, " + what + " on MRR and nDCG@10"
        if (mode, ours) not in runs or (mode, theirs) not in runs:
            result.target(name, "not measured (%s did not run)"
                          % (ours if (mode, ours) not in runs else theirs), None)
            continue
        a = quality.mean_metrics(list(scores[(mode, ours)].values()))
        b = quality.mean_metrics(list(scores[(mode, theirs)].values()))
        lower = [q for q in scores[(mode, ours)]
                 if scores[(mode, ours)][q]["ndcg"] + EPS < scores[(mode, theirs)][q]["ndcg"]]
        higher = [q for q in scores[(mode, ours)]
                  if scores[(mode, ours)][q]["ndcg"] > scores[(mode, theirs)][q]["ndcg"] + EPS]
        result.target(name,
                      "MRR %.3f vs %.3f, nDCG@10 %.3f vs %.3f (%d queries); nDCG@10 lower on "
                      "%d, higher on %d" % (a["mrr"], b["mrr"], a["ndcg"], b["ndcg"], a["n"],
                                            len(lower), len(higher)),
                      a["mrr"] + EPS >= b["mrr"] and a["ndcg"] + EPS >= b["ndcg"])

    name = ("search quality: `--fuzzy` never makes an exact query worse (nDCG@10 and first "
            "relevant rank, per query, against `cairn search`)")
    if (TOLERANT, CAIRN_FUZZY) in runs and (EXACT, CAIRN) in runs:
        worse = []
        for q, f in scores[(TOLERANT, CAIRN_FUZZY)].items():
            e = scores[(EXACT, CAIRN)][q]
            if f["ndcg"] + EPS < e["ndcg"] or f["rr"] + EPS < e["rr"]:
                worse.append(q)
        result.target(name, "worse on %d of %d queries%s" % (
            len(worse), len(scores[(EXACT, CAIRN)]),
            (": " + ", ".join(worse[:10])) if worse else ""), not worse)
    else:
        result.target(name, "not measured (cairn search did not run)", None)

    name = ("search: `cairn search --fuzzy` within 2x of `cairn search` (median over the judged "
            "queries and their typo variants, whole commands)")
    exact_ms, fuzzy_ms = state["cairn_ms"][False], state["cairn_ms"][True]
    if exact_ms and fuzzy_ms:
        e, f = statistics.median(exact_ms), statistics.median(fuzzy_ms)
        result.target(name, "%.2fx (%.2f vs %.2f ms; p95 %.2f vs %.2f ms)"
                      % (f / e, f, e, _p95(fuzzy_ms), _p95(exact_ms)), f <= 2 * e)
    else:
        result.target(name, "not measured (cairn search did not run)", None)

    result.data["quality"] = {
        "judged": os.path.relpath(quality.JUDGED_PATH, os.path.dirname(os.path.dirname(
            os.path.dirname(quality.JUDGED_PATH)))),
        "cutoff": quality.CUTOFF,
        "typo_seed": quality.TYPO_SEED,
        "queries_left_out": left_out,
        "queries": [{"q": q["q"], "kind": q["kind"], "docs": q["docs"],
                     "typo": typos[q["q"]][0] if typos[q["q"]] else None,
                     "typo_what": typos[q["q"]][1] if typos[q["q"]] else None}
                    for q in queries],
        "quest_suggestions": corrections,
        "summary": {"%s|%s" % row: quality.mean_metrics(list(scores[row].values()))
                    for row in rows},
        "rankings": {"%s|%s" % row: runs[row] for row in rows},
    }
