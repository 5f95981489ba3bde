"""Held-out evaluation prompts for the speculation receipts, cut from the corpus's test split.

Three kinds, all from packages the target never saw:
  code    the file up to the end of a function's docstring; the answer is the function's body
  prose   the file up to the first words of a long docstring; the answer is the rest of it
  rename  a whole file with "Rename X to Y" (Python's tokenize module gives the right answer)
Writes one JSON object per line: kind, package, path, prompt (raw text; for rename the user message,
to be rendered with the chat template) and answer.
"""
import argparse
import ast
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import read_jsonl, split_path  # noqa: E402
from corpus import identifier_pool, make_rename_task  # noqa: E402
import builtins  # noqa: E402

CONTEXT_CHARS = 3000  # preceding file text kept in a prompt, cut at a line start


def tail_at_line(text, limit):
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    newline = cut.find("\n")
    return cut[newline + 1:] if newline >= 0 else cut


def line_offsets(text):
    offsets, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        offsets.append(total)
    return offsets


def functions_with_docstrings(text):
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node) \
                and len(node.body) >= 2:
            found.append(node)
    return found


def code_and_prose_cases(text, rng):
    """(code, prose) case lists for one file."""
    offsets = line_offsets(text)
    code, prose = [], []
    for node in functions_with_docstrings(text):
        doc = node.body[0]
        body_start = offsets[doc.end_lineno]  # the line after the docstring
        body_end = offsets[node.end_lineno]
        answer = text[body_start:body_end]
        if answer.count("\n") >= 3:
            code.append({"prompt": tail_at_line(text[:body_start], CONTEXT_CHARS), "answer": answer})
        docstring = ast.get_docstring(node, clean=False)
        doc_text = text[offsets[doc.lineno - 1]:offsets[doc.end_lineno]]
        if len(docstring) >= 240:
            # the first words of the docstring, then the model writes the rest of the prose
            head = offsets[doc.lineno - 1] + doc_text.find(docstring[:20]) + min(60, len(docstring) // 4)
            head = text.rfind(" ", 0, head) if text.rfind(" ", 0, head) > offsets[doc.lineno - 1] else head
            prose.append({"prompt": tail_at_line(text[:head], CONTEXT_CHARS),
                          "answer": text[head:offsets[doc.end_lineno]]})
    rng.shuffle(code)
    rng.shuffle(prose)
    return code, prose


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", required=True, help="folder with test.jsonl from corpus.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-kind", type=int, default=24)
    parser.add_argument("--per-file", type=int, default=2)
    parser.add_argument("--min-rename-bytes", type=int, default=1000)
    parser.add_argument("--max-rename-bytes", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=4321)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    files = [r for r in read_jsonl(split_path(args.corpus, "test")) if r["kind"] == "file"]
    rng.shuffle(files)
    packages = {}
    for r in files:
        packages.setdefault(r["package"], []).append((r["path"], r["text"]))
    builtin_names = set(dir(builtins)) | {"self", "cls"}
    name_pool = identifier_pool(packages, rng)

    cases = {"code": [], "prose": [], "rename": []}
    for r in files:
        where = {"package": r["package"], "path": r["path"]}
        code, prose = code_and_prose_cases(r["text"], rng)
        for kind, found in (("code", code), ("prose", prose)):
            for case in found[:args.per_file]:
                if len(cases[kind]) < args.per_kind:
                    cases[kind].append({"kind": kind, **where, **case})
        size = len(r["text"].encode())
        if args.min_rename_bytes <= size <= args.max_rename_bytes and len(cases["rename"]) < args.per_kind:
            task = make_rename_task(r["text"], rng, builtin_names, name_pool)
            if task is not None:
                cases["rename"].append({"kind": "rename", **where, "prompt": task["messages"][0]["content"],
                                        "answer": task["answer"], "old_name": task["old_name"],
                                        "new_name": task["new_name"]})
    with open(args.out, "w", encoding="utf-8") as out:
        for kind in ("code", "prose", "rename"):
            for case in cases[kind]:
                out.write(json.dumps(case) + "\n")
    print(", ".join(f"{len(v)} {k}" for k, v in cases.items()), "cases from",
          len({c["package"] for v in cases.values() for c in v}), "test packages")


if __name__ == "__main__":
    main()
