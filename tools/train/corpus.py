"""Build the code corpus: Python sources (the standard library and installed packages), deduplicated, split by
package, plus rename tasks cut from the same files."""
import argparse
import ast
import builtins
import hashlib
import io
import json
import keyword
import math
import multiprocessing
import os
import random
import site
import sys
import sysconfig
import tokenize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import render_chatml, split_path, write_json  # noqa: E402

SPLITS = ("train", "val", "test")
BUILTIN_NAMES = frozenset(dir(builtins)) | {"self", "cls"}


def source_roots():
    """The standard library, then every site-packages folder: real, varied Python, all installed."""
    paths = sysconfig.get_paths()
    candidates = [paths["stdlib"], paths["purelib"], paths["platlib"]] + site.getsitepackages()
    candidates.append(site.getusersitepackages())
    seen, dirs = set(), []
    for d in candidates:
        real = os.path.realpath(d)
        if os.path.isdir(real) and real not in seen:
            seen.add(real)
            dirs.append(real)
    return dirs


def package_of(relative_path):
    """Top-level import name: the first folder under the root, or the module file's stem."""
    head = relative_path.split(os.sep)[0]
    return head[:-3] if head.endswith(".py") else head


def collect_sources(roots, max_file_bytes, max_total_bytes):
    """{package: [(relative path, text)]}, each distinct file content kept once (first path wins);
    the walk stops once max_total_bytes are kept (0: no limit). A root nested in an earlier one (site-packages
    inside the standard library's folder) is walked once, as its own root."""
    seen_hashes = set()
    packages = {}
    kept_bytes = 0
    for root_dir in roots:
        nested = [r for r in roots if r != root_dir and r.startswith(root_dir + os.sep)]
        for folder, subfolders, files in os.walk(root_dir):
            subfolders[:] = sorted(s for s in subfolders if os.path.join(folder, s) not in nested)
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
                # the standard library's own test suites and tools: huge, repetitive fixtures. They still
                # count towards max_total_bytes, as when the shipped models' corpus was cut at 250 MB.
                if relative.split(os.sep)[0] in ("test", "tests", "idlelib", "lib2to3"):
                    continue
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
    """(edited source, spans): every NAME token equal to old_name replaced (strings and comments stay as
    they are), and the [start, end) character ranges of the edited source where new_name was written."""
    columns_of_row = {}
    for t in tokens:
        if t.string == old_name:
            columns_of_row.setdefault(t.start[0], []).append(t.start[1])
    pieces, spans, offset = [], [], 0
    for row, line in enumerate(source.splitlines(keepends=True), start=1):
        last = 0
        for column in sorted(columns_of_row.get(row, [])):
            pieces.append(line[last:column])
            offset += column - last
            spans.append((offset, offset + len(new_name)))
            pieces.append(new_name)
            offset += len(new_name)
            last = column + len(old_name)
        pieces.append(line[last:])
        offset += len(line) - last
    return "".join(pieces), spans


def rename_request(source, old_name, new_name):
    """The user's message. The request comes before the file, so a causal model reads every line of the file
    already knowing which name changes."""
    return f"Rename {old_name} to {new_name} in this file:\n\n{source}"


def make_rename_task(source, rng, builtin_names, name_pool):
    """A ChatML conversation asking to rename one identifier, or None if the source has no good candidate."""
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
    edited, spans = rename_identifier(source, tokens, old_name, new_name)
    messages = [
        {"role": "user", "content": rename_request(source, old_name, new_name)},
        {"role": "assistant", "content": edited},
    ]
    # where the reply starts in the rendered text: the rename sites as offsets into "text"
    reply_start = len(render_chatml(messages[:1], add_generation_prompt=True))
    return {"kind": "rename", "old_name": old_name, "new_name": new_name, "messages": messages,
            "answer": edited, "text": render_chatml(messages),
            "rename_sites": [[reply_start + a, reply_start + b] for a, b in spans]}


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


def top_level_boundaries(source):
    """Line indices where the file's top-level statements start (decorators and all), or None if it does
    not parse. Cutting only there keeps every piece a whole, tokenizable run of statements."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    starts = {0}
    for node in tree.body:
        decorators = getattr(node, "decorator_list", [])
        starts.add(min([node.lineno] + [d.lineno for d in decorators]) - 1)
    return sorted(starts)


def rename_sources(text, rng, min_bytes, max_bytes):
    """The pieces of one file that become rename tasks: the whole file if it is small enough, else runs of
    whole top-level statements whose sizes are drawn log-uniformly between min_bytes and max_bytes."""
    if len(text.encode()) <= max_bytes:
        return [text]
    boundaries = top_level_boundaries(text)
    if boundaries is None:
        return []
    lines = text.splitlines(keepends=True)
    segments = ["".join(lines[a:b]) for a, b in zip(boundaries, boundaries[1:] + [len(lines)])]
    pieces, i = [], 0
    while i < len(segments):
        size = len(segments[i].encode())
        if size > max_bytes:  # one statement too large for a task
            i += 1
            continue
        want = math.exp(rng.uniform(math.log(min_bytes), math.log(max_bytes)))
        j = i + 1  # a piece holds at least one statement
        while j < len(segments) and size + len(segments[j].encode()) <= want:
            size += len(segments[j].encode())
            j += 1
        pieces.append("".join(segments[i:j]))
        i = j
    return [p for p in pieces if len(p.encode()) >= min_bytes and p.strip()]


_pool_names = None


def _init_worker(name_pool):
    global _pool_names
    _pool_names = name_pool


def tasks_of_file(job):
    """Rename tasks for one file; the random stream is seeded by the file, so any worker gives the same."""
    seed, package, relative, text, ratio, min_bytes, max_bytes = job
    rng = random.Random(f"{seed}:{package}:{relative}")
    tasks = []
    for piece in rename_sources(text, rng, min_bytes, max_bytes):
        if rng.random() < ratio:
            task = make_rename_task(piece, rng, BUILTIN_NAMES, _pool_names)
            if task is not None:
                task.update(package=package, path=relative)
                tasks.append(task)
    return tasks


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder for train/val/test .jsonl and manifest.json")
    parser.add_argument("--roots", nargs="*", help="source folders (default: the standard library and site-packages)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--held-out-fraction", type=float, default=0.02, help="share of bytes for val and for test")
    parser.add_argument("--max-file-bytes", type=int, default=100_000)
    parser.add_argument("--max-total-bytes", type=int, default=0, help="stop collecting after this (0: all)")
    parser.add_argument("--rename-ratio", type=float, default=0.5, help="chance that a piece becomes a rename task")
    parser.add_argument("--min-rename-bytes", type=int, default=300)
    # a task holds its source twice: 6 kB sources (about 1.5k tokens) fit a 4k-token training window
    parser.add_argument("--max-rename-bytes", type=int, default=6000)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    args = parser.parse_args()

    rng = random.Random(args.seed)
    roots = [os.path.realpath(r) for r in args.roots] if args.roots else source_roots()
    packages = collect_sources(roots, args.max_file_bytes, args.max_total_bytes)
    split_of, package_bytes = assign_splits(packages, args.held_out_fraction, args.seed)
    name_pool = identifier_pool(packages, rng)

    jobs = [(args.seed, name, relative, text, args.rename_ratio, args.min_rename_bytes, args.max_rename_bytes)
            for name in sorted(packages) for relative, text in packages[name]]
    with multiprocessing.Pool(args.workers, initializer=_init_worker, initargs=(name_pool,)) as pool:
        task_lists = pool.map(tasks_of_file, jobs, chunksize=16)

    os.makedirs(args.out, exist_ok=True)
    outputs = {s: open(split_path(args.out, s), "w", encoding="utf-8") for s in SPLITS}
    stats = {s: {"packages": [], "files": 0, "file_bytes": 0, "rename_tasks": 0, "rename_bytes": 0} for s in SPLITS}
    for name in sorted(packages):
        stats[split_of[name]]["packages"].append({"name": name, "files": len(packages[name]),
                                                  "bytes": package_bytes[name]})
    for job, tasks in zip(jobs, task_lists):
        _, name, relative, text = job[:4]
        split = split_of[name]
        outputs[split].write(json.dumps({"kind": "file", "package": name, "path": relative, "text": text}) + "\n")
        stats[split]["files"] += 1
        stats[split]["file_bytes"] += len(text.encode())
        for task in tasks:
            outputs[split].write(json.dumps(task) + "\n")
            stats[split]["rename_tasks"] += 1
            stats[split]["rename_bytes"] += len(task["text"].encode())
    for f in outputs.values():
        f.close()

    manifest = {"seed": args.seed, "roots": roots, "python": sys.version.split()[0],
                "held_out_fraction": args.held_out_fraction, "max_file_bytes": args.max_file_bytes,
                "rename_ratio": args.rename_ratio, "rename_bytes": [args.min_rename_bytes, args.max_rename_bytes],
                "splits": stats}
    write_json(os.path.join(args.out, "manifest.json"), manifest)
    for s in SPLITS:
        st = stats[s]
        print(f"corpus {s}: {len(st['packages'])} packages, {st['files']} files, {st['file_bytes'] / 1e6:.1f} MB, "
              f"{st['rename_tasks']} rename tasks ({st['rename_bytes'] / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
