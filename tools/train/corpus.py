"""Build the code corpus: installed Python sources, deduplicated, split by package, plus rename tasks."""
import argparse
import builtins
import hashlib
import io
import json
import keyword
import os
import random
import site
import sys
import sysconfig
import tokenize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import render_chatml, split_path, write_json  # noqa: E402

SPLITS = ("train", "val", "test")


def site_package_dirs():
    candidates = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    candidates += site.getsitepackages() + [site.getusersitepackages()]
    seen, dirs = set(), []
    for d in candidates:
        real = os.path.realpath(d)
        if os.path.isdir(real) and real not in seen:
            seen.add(real)
            dirs.append(real)
    return dirs


def package_of(relative_path):
    """Top-level import name: the first folder under site-packages, or the module file's stem."""
    head = relative_path.split(os.sep)[0]
    return head[:-3] if head.endswith(".py") else head


def collect_sources(max_file_bytes, max_total_bytes):
    """{package: [(relative path, text)]}, each distinct file content kept once (first path wins);
    the walk stops once max_total_bytes are kept (0: no limit)."""
    seen_hashes = set()
    packages = {}
    kept_bytes = 0
    for root_dir in site_package_dirs():
        for folder, subfolders, files in os.walk(root_dir):
            subfolders.sort()  # a fixed walk order makes "first path wins" deterministic
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                try:
                    raw = open(path, "rb").read()
                except OSError:
                    continue
                if not raw.strip() or len(raw) > max_file_bytes:
                    continue  # huge files are mostly generated tables, not code to learn from
                digest = hashlib.sha256(raw).digest()
                if digest in seen_hashes:
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                seen_hashes.add(digest)
                kept_bytes += len(raw)
                if max_total_bytes and kept_bytes > max_total_bytes:
                    return packages
                relative = os.path.relpath(path, root_dir)
                packages.setdefault(package_of(relative), []).append((relative, text))
    return packages


def assign_splits(packages, held_out_fraction, seed):
    """Whole packages go to val and test until each holds about held_out_fraction of the bytes.

    Packages larger than that share are never held out, so one giant package cannot swallow a split."""
    sizes = {name: sum(len(t.encode()) for _, t in files) for name, files in packages.items()}
    budget = held_out_fraction * sum(sizes.values())
    names = sorted(packages)
    random.Random(seed).shuffle(names)
    split_of = {}
    filled = {"val": 0, "test": 0}
    for name in names:
        target = next((s for s in ("val", "test") if filled[s] + sizes[name] <= budget), None)
        if target is not None and sizes[name] > 0:
            split_of[name] = target
            filled[target] += sizes[name]
        else:
            split_of[name] = "train"
    return split_of, sizes


def name_tokens(source):
    """The NAME tokens of a file that are not keywords; None if the file does not tokenize."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return [t for t in tokens if t.type == tokenize.NAME and not keyword.iskeyword(t.string)
            and not keyword.issoftkeyword(t.string)]


def rename_identifier(source, tokens, old_name, new_name):
    """Replace every NAME token equal to old_name; strings and comments stay as they are."""
    lines = source.splitlines(keepends=True)
    # right to left within a line, so earlier columns stay valid
    for token in sorted((t for t in tokens if t.string == old_name), key=lambda t: t.start, reverse=True):
        row, column = token.start
        line = lines[row - 1]
        lines[row - 1] = line[:column] + new_name + line[column + len(old_name):]
    return "".join(lines)


def make_rename_task(source, rng, builtin_names, name_pool):
    """A ChatML conversation asking to rename one identifier, or None if the file has no good candidate."""
    tokens = name_tokens(source)
    if not tokens:
        return None
    counts = {}
    for t in tokens:
        counts[t.string] = counts.get(t.string, 0) + 1
    # dunder names carry meaning to Python itself, so renaming them would change behaviour
    candidates = sorted(n for n, c in counts.items()
                        if c >= 2 and len(n) >= 3 and n not in builtin_names and not n.startswith("__"))
    if not candidates:
        return None
    old_name = rng.choice(candidates)
    present = set(counts)
    new_name = None
    for _ in range(20):
        proposal = rng.choice(name_pool)
        if proposal not in present and proposal not in builtin_names:
            new_name = proposal
            break
    if new_name is None:
        return None
    edited = rename_identifier(source, tokens, old_name, new_name)
    messages = [
        {"role": "user", "content": f"{source}\nRename {old_name} to {new_name}"},
        {"role": "assistant", "content": edited},
    ]
    return {"kind": "rename", "old_name": old_name, "new_name": new_name, "messages": messages,
            "answer": edited, "text": render_chatml(messages)}


def identifier_pool(packages, rng, size=5000):
    """Plausible new names: identifiers seen in the corpus, each with a short suffix so it is new."""
    names = set()
    for files in packages.values():
        for _, text in files[:3]:
            tokens = name_tokens(text) or []
            names.update(t.string for t in tokens if t.string.isidentifier() and 3 <= len(t.string) <= 24)
    pool = sorted(names)
    rng.shuffle(pool)
    suffixes = ["_new", "_value", "_item", "2", "_ref", "_data", "_obj", "_x"]
    return [name + rng.choice(suffixes) for name in pool[:size]] or ["renamed_value"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder for train/val/test .jsonl and manifest.json")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--held-out-fraction", type=float, default=0.02, help="share of bytes for val and for test")
    parser.add_argument("--max-file-bytes", type=int, default=100_000)
    parser.add_argument("--max-total-bytes", type=int, default=0, help="stop collecting after this (0: all)")
    parser.add_argument("--rename-ratio", type=float, default=0.5,
                        help="chance that a file small enough also yields a rename task")
    # a task holds the file twice, so 3 kB files (about 1k tokens) fit a 2k-token training window
    parser.add_argument("--max-rename-bytes", type=int, default=3000, help="only files this small become tasks")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    packages = collect_sources(args.max_file_bytes, args.max_total_bytes)
    split_of, package_bytes = assign_splits(packages, args.held_out_fraction, args.seed)
    builtin_names = set(dir(builtins)) | {"self", "cls"}
    name_pool = identifier_pool(packages, rng)

    os.makedirs(args.out, exist_ok=True)
    outputs = {s: open(split_path(args.out, s), "w", encoding="utf-8") for s in SPLITS}
    stats = {s: {"packages": [], "files": 0, "file_bytes": 0, "rename_tasks": 0, "rename_bytes": 0} for s in SPLITS}
    for name in sorted(packages):
        split = split_of[name]
        stats[split]["packages"].append({"name": name, "files": len(packages[name]), "bytes": package_bytes[name]})
        for relative, text in packages[name]:
            record = {"kind": "file", "package": name, "path": relative, "text": text}
            outputs[split].write(json.dumps(record) + "\n")
            stats[split]["files"] += 1
            stats[split]["file_bytes"] += len(text.encode())
            if len(text.encode()) <= args.max_rename_bytes and rng.random() < args.rename_ratio:
                task = make_rename_task(text, rng, builtin_names, name_pool)
                if task is not None:
                    task.update(package=name, path=relative)
                    outputs[split].write(json.dumps(task) + "\n")
                    stats[split]["rename_tasks"] += 1
                    stats[split]["rename_bytes"] += len(task["text"].encode())
    for f in outputs.values():
        f.close()

    manifest = {"seed": args.seed, "site_packages": site_package_dirs(), "python": sys.version.split()[0],
                "held_out_fraction": args.held_out_fraction, "max_file_bytes": args.max_file_bytes,
                "rename_ratio": args.rename_ratio, "splits": stats}
    write_json(os.path.join(args.out, "manifest.json"), manifest)
    for s in SPLITS:
        st = stats[s]
        print(f"corpus {s}: {len(st['packages'])} packages, {st['files']} files, {st['file_bytes'] / 1e6:.1f} MB, "
              f"{st['rename_tasks']} rename tasks ({st['rename_bytes'] / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
