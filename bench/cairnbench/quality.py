"""Search quality: the judged query set, its typo variants, each tool's
output mapped to page names, and MRR and nDCG@10 against the judgments.

Pages are named by their path in the corpus directory (`man1/chown.1`,
`de/man1/chown.1`), which is their path under /usr/share/man without `.gz`.
cairn prints the name it was given by `cairn add -r DIR` (DIR/man1/chown.1),
quest prints omindex's url (`/man1/chown.1`, percent-encoded) and rg prints
the path it searched (DIR/man1/chown.1): all three are mapped to that name.
"""

import json
import math
import os
import random
import re
import urllib.parse

JUDGED_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "judged_queries.json")

# Everything is measured over each tool's first 10 results: cairn and quest
# print 10 by default, and rg's files are cut to the 10 with the most matches.
CUTOFF = 10

# The typo variants are drawn from this seed and the query's text, so a query
# gets the same typo in every run and on every machine, whatever the other
# queries are.
TYPO_SEED = 13
TYPO_MIN_LETTERS = 5


def load_judged(path=JUDGED_PATH):
    """The judged queries: [{"q", "kind", "docs": {page: grade}}], in file order."""
    with open(path) as f:
        data = json.load(f)
    queries = data["queries"]
    for q in queries:
        if not any(g == 2 for g in q["docs"].values()):
            raise ValueError("judged query %r has no page graded 2" % q["q"])
    return queries


def corpus_pages(root):
    """The names of every page in a corpus directory."""
    pages = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            pages.add(os.path.relpath(os.path.join(dirpath, name), root))
    return pages


def usable(judged, pages, limit=None):
    """The queries this corpus can answer, with their judgments cut to its pages.

    A query is kept when at least one page graded 2 is in the corpus; judged
    pages that are not in it are dropped, so they count neither as found nor
    in the ideal ranking. `limit` keeps the first N kept queries (the smoke
    tier). Returns (queries, number of queries left out).
    """
    kept = []
    for q in judged:
        docs = {d: g for d, g in q["docs"].items() if d in pages}
        if any(g == 2 for g in docs.values()):
            kept.append(dict(q, docs=docs))
    left_out = len(judged) - len(kept)
    if limit is not None:
        left_out += max(0, len(kept) - limit)
        kept = kept[:limit]
    return kept, left_out


def typo(query, seed=TYPO_SEED):
    """One typo in a word of 5 letters or more, drawn from `seed` and the query.

    The word is a run of 5+ letters (in an identifier like sched_setaffinity,
    `sched` or `setaffinity`); the typo is a swap of two adjacent different
    letters, a dropped letter or a doubled letter, never in the word's first
    letter (where people rarely make them). Returns (variant, description),
    or None when the query has no such word.
    """
    rng = random.Random("%d|%s" % (seed, query))
    runs = [m.span() for m in re.finditer(r"[A-Za-z]{%d,}" % TYPO_MIN_LETTERS, query)]
    if not runs:
        return None
    start, end = rng.choice(runs)
    word = query[start:end]
    kind = rng.choice(["swap", "drop", "double"])
    swaps = [i for i in range(1, len(word) - 1) if word[i] != word[i + 1]]
    if kind == "swap" and not swaps:
        kind = "drop"
    if kind == "swap":
        i = rng.choice(swaps)
        new = word[:i] + word[i + 1] + word[i] + word[i + 2:]
    elif kind == "drop":
        i = rng.randrange(1, len(word))
        new = word[:i] + word[i + 1:]
    else:
        i = rng.randrange(1, len(word))
        new = word[:i + 1] + word[i] + word[i + 1:]
    return query[:start] + new + query[end:], "%s: %s -> %s" % (kind, word, new)


def query_words(query):
    """The words of a query as rg gets them: one pattern each, in order, once."""
    seen = []
    for w in query.split():
        if w.lower() not in (s.lower() for s in seen):
            seen.append(w)
    return seen


def _page_name(path, root):
    """A tool's path for a page, mapped to the page's name under `root`."""
    path = path.lstrip("/")
    prefix = root.strip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path


def _unique(names):
    out = []
    for n in names:
        if n not in out:
            out.append(n)
    return out


def cairn_ranking(stdout, root):
    """Page names from `cairn --json search`, best first."""
    names = []
    for line in stdout.splitlines():
        line = line.strip()
        if line:
            names.append(_page_name(json.loads(line)["name"], root))
    return _unique(names)[:CUTOFF]


def quest_ranking(stdout):
    """Page names from quest's MSet, best first: the url= line after each `N: [w]`."""
    names, want_url = [], False
    for line in stdout.splitlines():
        if re.match(r"^\d+: \[", line):
            want_url = True
        elif want_url and line.startswith("url="):
            names.append(urllib.parse.unquote(line[4:]).lstrip("/"))
            want_url = False
    return _unique(names)[:CUTOFF]


def quest_correction(stdout):
    """The corrected query quest suggests ("Did you mean: ..."), or None."""
    m = re.search(r"^Did you mean: (.*)$", stdout, re.M)
    return m.group(1).strip() if m and m.group(1).strip() else None


def rg_ranking(stdout, root):
    """Page names from `rg -c --with-filename`: most matching lines first, then by name."""
    counts = []
    for line in stdout.splitlines():
        path, sep, count = line.rpartition(":")
        if sep and count.isdigit():
            counts.append((-int(count), _page_name(path, root)))
    counts.sort()
    return [name for _, name in counts][:CUTOFF]


def metrics(ranked, grades):
    """Reciprocal rank and nDCG@10 of one ranking against one query's grades.

    rr: 1/rank of the first page graded 1 or 2 within the top 10, 0 if none.
    ndcg: DCG@10 / ideal DCG@10, DCG = sum of (2^grade - 1) / log2(rank + 1);
    the ideal ranking is the judged pages sorted by grade.
    Also: the rank of the first relevant page (None if none), whether the
    first result is an answer (graded 2), and whether an answer is in the top 10.
    """
    top = ranked[:CUTOFF]
    first = next((i + 1 for i, d in enumerate(top) if grades.get(d, 0) >= 1), None)
    dcg = sum((2 ** grades.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sorted(grades.values(), reverse=True)[:CUTOFF]
    idcg = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return {"rr": 1.0 / first if first else 0.0,
            "ndcg": dcg / idcg if idcg else 0.0,
            "first": first,
            "answer_at_1": bool(top) and grades.get(top[0], 0) == 2,
            "answer_in_top": any(grades.get(d, 0) == 2 for d in top),
            "hits": len(top)}


def mean_metrics(per_query):
    """Means over a list of metrics() results."""
    n = len(per_query)
    if not n:
        return {"n": 0, "mrr": None, "ndcg": None, "answer_at_1": None,
                "answer_in_top": None, "no_hits": 0}
    return {"n": n,
            "mrr": sum(m["rr"] for m in per_query) / n,
            "ndcg": sum(m["ndcg"] for m in per_query) / n,
            "answer_at_1": sum(m["answer_at_1"] for m in per_query) / n,
            "answer_in_top": sum(m["answer_in_top"] for m in per_query) / n,
            "no_hits": sum(1 for m in per_query if m["hits"] == 0)}
