"""The training corpus's rename tasks (tools/train/corpus.py): the data the embedded models learn from.

Standard library only, so it runs in CI without torch."""
import ast
import io
import os
import random
import sys
import tempfile
import tokenize
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "train"))
import corpus  # noqa: E402
from common import IM_END, IM_START, render_chatml, site_flags  # noqa: E402

SOURCE = '''"""Module docstring that mentions total."""
import os

TOTAL_LIMIT = 3


def total(values):
    # total of the values; the word total stays in this comment
    total = 0
    for value in values:
        total += value
    return total  # "total" in a string stays too: "total"


@staticmethod
def uses_total():
    return total([1, 2]) + TOTAL_LIMIT


class Counter:
    """Counts with total()."""

    def __init__(self):
        self.total = 0
'''


def name_strings(source):
    return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]


class RenameTest(unittest.TestCase):
    def test_only_name_tokens_change(self):
        tokens = corpus.name_tokens(SOURCE)
        renamed, spans = corpus.rename_identifier(SOURCE, tokens, "total", "grand_sum")
        before, after = name_strings(SOURCE), name_strings(renamed)
        self.assertEqual(len(spans), before.count("total"))
        self.assertEqual({renamed[a:b] for a, b in spans}, {"grand_sum"})
        self.assertEqual(len(before), len(after))
        for old, new in zip(before, after):
            self.assertEqual(new, "grand_sum" if old == "total" else old)
        # comments, strings and docstrings keep the old name, word for word
        self.assertIn("# total of the values; the word total stays in this comment", renamed)
        self.assertIn('"total" in a string stays too: "total"', renamed)
        self.assertIn('"""Counts with total()."""', renamed)
        self.assertIn("TOTAL_LIMIT", renamed)  # a longer name that contains it is another name
        ast.parse(renamed)

    def test_task_puts_the_request_first_and_its_answer_in_the_reply(self):
        rng = random.Random(5)
        task = None
        while task is None or task["old_name"] != "total":
            task = corpus.make_rename_task(SOURCE, rng, corpus.BUILTIN_NAMES, ["grand_sum", "other_name"])
        request = task["messages"][0]["content"]
        self.assertEqual(request, f"Rename total to {task['new_name']} in this file:\n\n{SOURCE}")
        self.assertEqual(task["messages"][1]["content"], task["answer"])
        self.assertEqual(task["text"], render_chatml(task["messages"]))
        self.assertTrue(task["text"].startswith(f"{IM_START}user\n") and task["text"].endswith(f"{IM_END}\n"))
        self.assertNotIn("total", [t.string for t in corpus.name_tokens(task["answer"])])
        # the rename sites index the rendered text: every one is the new name, inside the reply
        reply_start = task["text"].index(f"{IM_START}assistant\n") + len(f"{IM_START}assistant\n")
        sites = task["rename_sites"]
        self.assertEqual(len(sites), name_strings(SOURCE).count("total"))
        for a, b in sites:
            self.assertGreaterEqual(a, reply_start)
            self.assertEqual(task["text"][a:b], task["new_name"])

    def test_site_flags_mark_the_tokens_that_overlap_a_site(self):
        offsets = [(0, 0), (0, 3), (3, 5), (5, 9), (9, 12), (12, 15), (15, 20)]
        self.assertEqual(site_flags(offsets, [(4, 10), (16, 17)]), [0, 0, 1, 1, 1, 0, 1])
        self.assertEqual(site_flags(offsets, []), [0] * len(offsets))

    def test_candidates_exclude_builtins_dunders_and_names_seen_once(self):
        source = "def __init__(self):\n    print(len(x))\n    once = 1\n"
        rng = random.Random(1)
        self.assertIsNone(corpus.make_rename_task(source, rng, corpus.BUILTIN_NAMES, ["new_name"]))

    def test_a_file_that_does_not_tokenize_gives_no_task(self):
        self.assertIsNone(corpus.make_rename_task("def f(:\n  '''open", random.Random(0), corpus.BUILTIN_NAMES, ["n"]))


class PiecesTest(unittest.TestCase):
    def big_file(self, n_functions=60):
        parts = ['"""A long module."""\nimport os\n']
        for i in range(n_functions):
            decorator = "@functools.lru_cache\n" if i % 3 == 0 else ""
            parts.append(f"\n\n{decorator}def step_{i}(value, scale={i}):\n    result = value * scale\n"
                         f"    return result + step_{max(i - 1, 0)}(value)\n")
        parts.append("\n\nclass Holder:\n" + "".join(f"    field_{i} = {i}\n" for i in range(400)))  # > max alone
        return "".join(parts)

    def test_pieces_are_whole_statements_in_order_within_the_sizes(self):
        text = self.big_file()
        min_bytes, max_bytes = 300, 1500
        pieces = corpus.rename_sources(text, random.Random(3), min_bytes, max_bytes)
        self.assertGreater(len(pieces), 3)
        position = 0
        for piece in pieces:
            ast.parse(piece)  # whole top-level statements: every piece parses on its own
            self.assertGreaterEqual(len(piece.encode()), min_bytes)
            self.assertLessEqual(len(piece.encode()), max_bytes)
            found = text.find(piece, position)
            self.assertGreaterEqual(found, position, "pieces keep the file's order and do not overlap")
            self.assertTrue(found == 0 or text[found - 1] == "\n")
            self.assertFalse(piece.startswith((" ", "\t")))
            position = found + len(piece)
        self.assertFalse(any("class Holder" in p for p in pieces), "a statement over max_bytes is skipped")
        self.assertTrue(any(p.startswith("@functools.lru_cache") for p in pieces), "decorators start a piece")

    def test_a_small_file_is_one_piece_and_a_broken_one_none(self):
        self.assertEqual(corpus.rename_sources(SOURCE, random.Random(0), 300, 6000), [SOURCE])
        self.assertEqual(corpus.rename_sources("def f(:\n" * 2000, random.Random(0), 300, 6000), [])

    def test_tasks_of_a_file_depend_on_the_file_not_on_the_worker(self):
        corpus._init_worker(["fresh_name", "other_name", "third_name"])
        job = (7, "pkg", "pkg/mod.py", self.big_file(), 1.0, 300, 1500)
        first, again = corpus.tasks_of_file(job), corpus.tasks_of_file(job)
        self.assertEqual(first, again)
        self.assertGreater(len(first), 3)
        for task in first:
            self.assertEqual((task["package"], task["path"]), ("pkg", "pkg/mod.py"))


class CollectTest(unittest.TestCase):
    def test_walk_dedups_skips_and_names_packages(self):
        with tempfile.TemporaryDirectory() as root:
            def write(relative, text):
                path = os.path.join(root, relative)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            write("lib/site/alpha/__init__.py", "x = 1\n")
            write("lib/site/alpha/copy.py", "x = 1\n")  # same bytes: kept once
            write("lib/site/beta.py", "y = 2\n")
            write("lib/site/huge/big.py", "z = 0\n" * 1000)  # over max_file_bytes
            write("lib/site/tests/test_a.py", "t = 1\n")  # test suites are left out
            write("lib/gamma/g.py", "g = 3\n")
            write("lib/site/alpha/nested.py", "n = 4\n")
            # site-packages inside the standard library's folder is its own root, walked once
            roots = [os.path.join(root, "lib"), os.path.join(root, "lib", "site")]
            packages = corpus.collect_sources(roots, max_file_bytes=1000, max_total_bytes=0)
        self.assertEqual(sorted(packages), ["alpha", "beta", "gamma"])
        self.assertEqual(sorted(t for _, t in packages["alpha"]), ["n = 4\n", "x = 1\n"])  # the copy dropped
        self.assertEqual([path for path, _ in packages["beta"]], ["beta.py"])

    def test_a_package_larger_than_the_held_out_share_stays_in_training(self):
        packages = {"giant": [("giant/a.py", "a" * 5000)]}
        packages.update({f"p{i}": [(f"p{i}/m.py", "b" * 100)] for i in range(20)})
        split_of, sizes = corpus.assign_splits(packages, held_out_fraction=0.1, seed=1)
        self.assertEqual(split_of["giant"], "train")
        for split in ("val", "test"):
            held = sum(sizes[n] for n, s in split_of.items() if s == split)
            self.assertLessEqual(held, 0.1 * sum(sizes.values()))
            self.assertGreater(held, 0)


if __name__ == "__main__":
    unittest.main()
