#!/usr/bin/env python3
"""Runs each case alone (serially) and with K simultaneous streams, checks that every reply's
token_sha is the same across modes, and prints a receipt: Streams | Case | T | tok/s | range |
tokens per round, with the command, commit and machine (standard library only)."""
import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_openai import OpenAiServer, request_body, run_at_once, spread  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_REWRITE_FILE = os.path.join(REPO_ROOT, "src", "server", "reply_channel.cpp")
DEFAULT_RENAME = "ReplyChannel:UpdateMailbox"


def build_cases(args):
    """name -> (prompt, max_tokens). The rewrite case asks for a whole file back, one name changed:
    the reply mostly copies the prompt, which is what the long-copy proposer is for."""
    old_name, new_name = args.rename.split(":", 1)
    with open(args.rewrite_file, encoding="utf-8") as file:
        source = file.read()
    if old_name not in source:
        sys.exit(f"--rename: '{old_name}' does not occur in {args.rewrite_file}")
    # About one token per three bytes of code, plus room for a fence and a sentence.
    rewrite_max_tokens = args.rewrite_max_tokens or len(source.encode()) // 3 + 64
    all_cases = {
        "rewrite": (f"Here is the file {os.path.basename(args.rewrite_file)}:\n\n```\n{source}```\n\n"
                    f"Rewrite the whole file, renaming the identifier `{old_name}` to `{new_name}` everywhere. "
                    "Change nothing else and output only the file.", rewrite_max_tokens),
        "prose": ("Write a short essay about the history of lighthouses and the people who kept them.",
                  args.max_tokens),
        "code": ("Write a Python module that parses ISO 8601 dates without datetime.fromisoformat, "
                 "with docstrings and unit tests.", args.max_tokens),
    }
    unknown = [name for name in args.cases if name not in all_cases]
    if unknown:
        sys.exit(f"--cases: unknown case(s) {unknown}; choose from {list(all_cases)}")
    return {name: all_cases[name] for name in args.cases}


def git_commit():
    try:
        commit = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO_ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def machine_description():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    parts = [platform.node(), f"{cpu} x {os.cpu_count()} logical cores", platform.system()]
    if shutil.which("nvidia-smi"):
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()
        if gpus:
            parts.append(f"{len(gpus)} x {gpus[0]}")
    return ", ".join(parts)


class ManagedServer:
    """Starts --server-cmd and waits for /health; stops it on exit."""

    def __init__(self, command, server, timeout_s):
        self.process = subprocess.Popen(shlex.split(command))
        deadline = time.monotonic() + timeout_s
        while not server.is_healthy():
            if self.process.poll() is not None:
                sys.exit(f"--server-cmd exited with {self.process.returncode} before /health answered")
            if time.monotonic() > deadline:
                self.stop()
                sys.exit(f"--server-cmd: /health did not answer 200 within {timeout_s} s")
            time.sleep(0.2)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def measure(server, args, cases, model):
    """Returns rows {streams, case, results}: first every case alone, then each K at once."""
    endpoint = args.endpoint
    body = {name: request_body(model, prompt, max_tokens, args.temperature, args.seed, endpoint)
            for name, (prompt, max_tokens) in cases.items()}
    server.stream(endpoint, body[next(iter(cases))])  # warm-up, discarded
    rows = []
    for name in cases:
        results = [server.stream(endpoint, body[name]) for _ in range(args.repeats)]
        rows.append({"streams": 1, "case": name, "results": results})
        print(f"alone: {name} done", file=sys.stderr)
    for n_streams in args.streams:
        for name in cases:
            results = []
            for _ in range(args.repeats):
                results += run_at_once(server, endpoint, [body[name]] * n_streams)
            rows.append({"streams": n_streams, "case": name, "results": results})
            print(f"{n_streams} streams: {name} done", file=sys.stderr)
    return rows


def check_token_shas(rows):
    """Every reply of a case must have the token_sha of its first solo reply."""
    reference = {row["case"]: row["results"][0].token_sha for row in rows if row["streams"] == 1}
    mismatches = []
    for row in rows:
        for result in row["results"]:
            if not result.token_sha or result.token_sha != reference[row["case"]]:
                mismatches.append(f"{row['case']} at {row['streams']} streams: {result.token_sha or 'no token_sha'}"
                                  f" != {reference[row['case']]}")
    return mismatches


def receipt_text(args, rows, mismatches, model):
    lines = [
        "# bench_concurrent receipt", "",
        f"- command: `{' '.join(shlex.quote(a) for a in sys.argv)}`",
        f"- commit: {git_commit()}",
        f"- machine: {machine_description()}",
        f"- server: {args.server_cmd or args.base_url}; model {model}; {args.endpoint}",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- T is the sampling temperature{f' (seed {args.seed})' if args.seed is not None else ''}; tok/s is "
        f"per-stream decode speed, median and range over {args.repeats} repeat(s) of every stream",
        "",
        "| Streams | Case | T | tok/s | range | tokens per round |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for row in rows:
        rates = [r.decode_tokens_per_s() for r in row["results"]]
        per_round = [r.timings.get("tokens_per_round", 0.0) for r in row["results"]]
        median, low, high = spread(rates)
        lines.append(f"| {row['streams']} | {row['case']} | {args.temperature:g} | {median:.1f} | "
                     f"{low:.1f}-{high:.1f} | {statistics.median(per_round):.2f} |")
    n_replies = sum(len(row["results"]) for row in rows)
    lines.append("")
    if mismatches:
        lines.append(f"token_sha: {len(mismatches)} of {n_replies} replies DIFFER from their solo reply:")
        lines += [f"- {line}" for line in mismatches]
    else:
        lines.append(f"token_sha: all {n_replies} replies equal their case's solo reply.")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or os.environ.get("TF_API_KEY"))
    parser.add_argument("--server-cmd", help="start this server command first (it must listen on --base-url)")
    parser.add_argument("--server-timeout", type=float, default=600, help="seconds to wait for --server-cmd's /health")
    parser.add_argument("--model", help="model id (default: the first one /v1/models lists)")
    parser.add_argument("--endpoint", choices=["chat/completions", "completions"], default="chat/completions")
    parser.add_argument("--cases", type=lambda text: text.split(","), default=["rewrite", "prose", "code"],
                        help="comma-separated: rewrite, prose, code")
    parser.add_argument("--streams", type=int, nargs="+", help="simultaneous streams K (one or more; default 4)")
    parser.add_argument("--alone", action="store_true", help="only the solo mode: each case alone, serially")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each case per mode")
    parser.add_argument("--max-tokens", type=int, default=256, help="budget of the prose and code cases")
    parser.add_argument("--rewrite-file", default=DEFAULT_REWRITE_FILE)
    parser.add_argument("--rename", default=DEFAULT_RENAME, help="OLD:NEW identifier for the rewrite case")
    parser.add_argument("--rewrite-max-tokens", type=int, default=0, help="0: sized from the file")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=7, help="the same seed for every run, so sampled replies compare")
    parser.add_argument("--receipt", help="also write the receipt here (e.g. bench/receipts/NAME.md)")
    args = parser.parse_args()
    if args.streams is None:
        args.streams = [] if args.alone else [4]
    if args.repeats < 1 or args.max_tokens < 1 or any(k < 1 for k in args.streams) or ":" not in args.rename:
        parser.error("--repeats, --max-tokens and --streams must be at least 1; --rename is OLD:NEW")

    server = OpenAiServer(args.base_url, args.api_key)
    managed = ManagedServer(args.server_cmd, server, args.server_timeout) if args.server_cmd else None
    try:
        model = args.model or server.first_model()
        rows = measure(server, args, build_cases(args), model)
    finally:
        if managed:
            managed.stop()
    mismatches = check_token_shas(rows)
    receipt = receipt_text(args, rows, mismatches, model)
    print(receipt)
    if args.receipt:
        os.makedirs(os.path.dirname(os.path.abspath(args.receipt)), exist_ok=True)
        with open(args.receipt, "w", encoding="utf-8") as file:
            file.write(receipt)
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
