#!/usr/bin/env python3
"""Fails when a source file includes a layer above its own, or a sibling backend.

The layers, lowest first (DESIGN.md, docs/architecture.md):
  core <- loader, tokenizer, sampling, grammar <- runtime <- models <- backends/cpu, backends/cuda
       <- backends (the one file that chooses a backend) <- speculation <- engine <- app <- server, cli
A file may include its own folder and any lower layer. Folders of one rank (loader, tokenizer,
sampling, grammar; the two backends; server and cli) may not include each other, except that cli may
start the server.
"""
import pathlib
import re
import sys

RANKS = {
    "core": 0,
    "loader": 1, "tokenizer": 1, "sampling": 1, "grammar": 1,
    "runtime": 2,
    "models": 3,
    "backends/cpu": 4, "backends/cuda": 4,
    "backends": 5,
    "speculation": 6,
    "engine": 7,
    "app": 8,
    "server": 9, "cli": 10,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path: str) -> str | None:
    parts = path.split("/")
    if len(parts) >= 3 and parts[0] == "backends" and f"backends/{parts[1]}" in RANKS:
        return f"backends/{parts[1]}"
    return parts[0] if parts[0] in RANKS and len(parts) > 1 else None


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    problems = []
    n_files = 0
    for file in sorted(src.rglob("*")):
        if file.suffix not in {".h", ".cpp", ".cu", ".cuh"}:
            continue
        n_files += 1
        own = layer_of(file.relative_to(src).as_posix())
        if own is None:
            problems.append(f"{file}: not inside a known layer folder")
            continue
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = layer_of(match.group(1))
            if target is None or target == own:
                continue
            if RANKS[target] > RANKS[own] or (RANKS[target] == RANKS[own] and target != own):
                problems.append(f"{file}:{number}: {own} includes {match.group(1)} ({target} is not below it)")
    for problem in problems:
        print(problem)
    print(f"checked {n_files} files: {len(problems)} upward includes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
