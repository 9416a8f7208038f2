"""Tests of quality.py: the metrics, the typo variants, the mapping of each
tool's output to page names, and the judged set's own rules.

    python3 bench/cairnbench/test_quality.py
"""

import math
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True

from cairnbench import quality  # noqa: E402


class Metrics(unittest.TestCase):
    def test_answer_first_is_perfect(self):
        m = quality.metrics(["a", "x", "y"], {"a": 2})
        self.assertEqual(m["rr"], 1.0)
        self.assertAlmostEqual(m["ndcg"], 1.0)
        self.assertTrue(m["answer_at_1"])
        self.assertEqual(m["first"], 1)

    def test_rank_three(self):
        m = quality.metrics(["x", "y", "a"], {"a": 2})
        self.assertAlmostEqual(m["rr"], 1 / 3)
        # gain 3 at rank 3 over gain 3 at rank 1: log2(2) / log2(4)
        self.assertAlmostEqual(m["ndcg"], 0.5)
        self.assertFalse(m["answer_at_1"])
        self.assertTrue(m["answer_in_top"])

    def test_grade_one_counts_for_rr_not_as_answer(self):
        m = quality.metrics(["r", "a"], {"a": 2, "r": 1})
        self.assertEqual(m["rr"], 1.0)
        self.assertFalse(m["answer_at_1"])
        ideal = 3 + 1 / math.log2(3)
        self.assertAlmostEqual(m["ndcg"], (1 + 3 / math.log2(3)) / ideal)

    def test_beyond_the_cutoff_counts_nothing(self):
        ranked = ["x%d" % i for i in range(quality.CUTOFF)] + ["a"]
        m = quality.metrics(ranked, {"a": 2})
        self.assertEqual((m["rr"], m["ndcg"], m["first"]), (0.0, 0.0, None))
        self.assertFalse(m["answer_in_top"])

    def test_no_results(self):
        m = quality.metrics([], {"a": 2})
        self.assertEqual((m["rr"], m["ndcg"], m["hits"]), (0.0, 0.0, 0))
        self.assertEqual(quality.mean_metrics([m])["no_hits"], 1)

    def test_mean(self):
        ms = [quality.metrics(["a"], {"a": 2}), quality.metrics(["x", "a"], {"a": 2})]
        mean = quality.mean_metrics(ms)
        self.assertAlmostEqual(mean["mrr"], 0.75)
        self.assertAlmostEqual(mean["answer_at_1"], 0.5)
        self.assertIsNone(quality.mean_metrics([])["mrr"])


class Typos(unittest.TestCase):
    def test_deterministic(self):
        self.assertEqual(quality.typo("list open files"), quality.typo("list open files"))

    def test_one_edit_in_a_long_word(self):
        for item in quality.load_judged():
            q = item["q"]
            got = quality.typo(q)
            words = re.findall(r"[A-Za-z]{%d,}" % quality.TYPO_MIN_LETTERS, q)
            if not words:
                self.assertIsNone(got)
                continue
            variant, what = got
            self.assertNotEqual(variant, q)
            kind, change = what.split(": ")
            old, new = change.split(" -> ")
            self.assertIn(old, words)
            self.assertEqual(old[0], new[0], "the first letter stays")
            self.assertEqual(variant.replace(new, old, 1), q)
            if kind == "swap":
                self.assertEqual(sorted(old), sorted(new))
                diff = [i for i in range(len(old)) if old[i] != new[i]]
                self.assertEqual(len(diff), 2)
                self.assertEqual(diff[1], diff[0] + 1)
            elif kind == "drop":
                self.assertEqual(len(new), len(old) - 1)
                self.assertTrue(any(new == old[:i] + old[i + 1:] for i in range(len(old))))
            else:
                self.assertEqual(kind, "double")
                self.assertTrue(any(new == old[:i + 1] + old[i] + old[i + 1:]
                                    for i in range(len(old))))

    def test_short_words_only(self):
        self.assertIsNone(quality.typo("set uid bits"))

    def test_kinds_all_occur(self):
        kinds = {quality.typo(q["q"])[1].split(":")[0] for q in quality.load_judged()
                 if quality.typo(q["q"])}
        self.assertEqual(kinds, {"swap", "drop", "double"})


class Outputs(unittest.TestCase):
    root = "/tmp/cb-x/corpus-y"

    def test_cairn(self):
        out = ('{"hash":"aa","name":"tmp/cb-x/corpus-y/man1/chown.1","score":2}\n'
               '{"hash":"bb","name":"/tmp/cb-x/corpus-y/man3/Dpkg::Arch.3perl","score":1}\n')
        self.assertEqual(quality.cairn_ranking(out, self.root),
                         ["man1/chown.1", "man3/Dpkg::Arch.3perl"])

    def test_quest(self):
        out = ("Did you mean: list open files\n\nParsed Query: Query(Zlist@1)\n"
               "Exactly 2 matches\nMSet:\n1: [1.5]\nurl=/man8/lsof.8\nsample=url=/nope\n"
               "type=text/plain\n\n2: [1.2]\nurl=/man3/Dpkg%3A%3AArch.3perl\nsample=x\n")
        self.assertEqual(quality.quest_ranking(out), ["man8/lsof.8", "man3/Dpkg::Arch.3perl"])
        self.assertEqual(quality.quest_correction(out), "list open files")
        self.assertIsNone(quality.quest_correction("Parsed Query: Query()\nMSet:\n"))

    def test_rg_most_matches_first_then_by_name(self):
        out = ("/tmp/cb-x/corpus-y/man1/b.1:3\n/tmp/cb-x/corpus-y/man3/Dpkg::Arch.3perl:7\n"
               "/tmp/cb-x/corpus-y/man1/a.1:3\n")
        self.assertEqual(quality.rg_ranking(out, self.root),
                         ["man3/Dpkg::Arch.3perl", "man1/a.1", "man1/b.1"])

    def test_query_words(self):
        self.assertEqual(quality.query_words("a file A of file"), ["a", "file", "of"])


class JudgedSet(unittest.TestCase):
    def test_rules(self):
        judged = quality.load_judged()
        self.assertGreaterEqual(len(judged), 60)
        self.assertEqual(len({q["q"] for q in judged}), len(judged))
        for q in judged:
            self.assertIn(q["kind"], ("identifier", "words"))
            self.assertTrue(set(q["docs"].values()) <= {1, 2}, q["q"])
            # Words the query languages would read as syntax are not in the set.
            self.assertNotRegex(q["q"], r"[\"():*+\-]|\b(OR|AND|NOT)\b", q["q"])

    def test_usable_drops_what_the_corpus_lacks(self):
        judged = [{"q": "a", "kind": "words", "docs": {"p": 2, "r": 1}},
                  {"q": "b", "kind": "words", "docs": {"s": 2}},
                  {"q": "c", "kind": "words", "docs": {"r": 1, "t": 2}}]
        kept, left_out = quality.usable(judged, {"p", "t"})
        self.assertEqual([q["q"] for q in kept], ["a", "c"])
        self.assertEqual(kept[0]["docs"], {"p": 2})
        self.assertEqual(left_out, 1)
        kept, left_out = quality.usable(judged, {"p", "t", "s"}, limit=1)
        self.assertEqual(([q["q"] for q in kept], left_out), (["a"], 2))


if __name__ == "__main__":
    unittest.main()
