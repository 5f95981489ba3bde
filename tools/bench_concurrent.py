#!/usr/bin/env python3
"""Runs each case alone (serially) and with K simultaneous streams, checks that every reply's
token_sha is the same across modes, and prints a receipt: tok/s (median and range over waves),
tokens per round and draft acceptance, with the command, commit and machine.

--draft-compare runs every case with speculation on and off against the same server.
--forced-accept L ... adds rows where the replay proposer drafts the case's own draft-off reply, L
tokens a round and alone, so each round accepts exactly L (the server needs --bench-extensions).
--compare MAIN BRANCH is a pull-request receipt: each wave starts a fresh server from each build in
turn, and the receipt gives branch/main ratios and checks both builds produce the same tokens.
Standard library only."""
import argparse
import collections
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_openai import (OpenAiServer, format_speculation, request_body, run_at_once,  # noqa: E402
                          speculation_figures, spread)

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


# One table row: which build ("" outside --compare), speculation on or off, streams at once, case.
# draft: "on", "off" or "replay L" (a forced acceptance length L)
RowKey = collections.namedtuple("RowKey", "build draft streams case")


def git_commit(directory=REPO_ROOT, short=False):
    """The commit checked out in `directory`'s worktree, flagged when it has uncommitted changes."""
    try:
        commit = subprocess.run(["git", "-C", directory, "rev-parse"] + (["--short"] if short else []) + ["HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", directory, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def describe_binary(path):
    """A build named by its path and the commit of the worktree it sits in (e.g. build-lead/ of a checkout)."""
    return f"`{path}`, commit {git_commit(os.path.dirname(os.path.abspath(path)), short=True)}"


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
    """Starts a server command and waits for /health 200; stop() ends it. With is_quiet its output
    goes to a scratch file, shown only when it fails to start."""

    def __init__(self, argv, server, timeout_s, is_quiet=False):
        self.log = tempfile.TemporaryFile() if is_quiet else None
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT if self.log else None)
        deadline = time.monotonic() + timeout_s
        while not server.is_healthy():
            if self.process.poll() is not None:
                sys.exit(f"{shlex.join(argv)}: exited with {self.process.returncode} before /health answered"
                         f"{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                sys.exit(f"{shlex.join(argv)}: /health did not answer 200 within {timeout_s} s{self._log_tail()}")
            time.sleep(0.2)

    def _log_tail(self):
        if not self.log:
            return ""
        self.log.seek(0)
        return "\n" + self.log.read()[-2000:].decode("utf-8", "replace")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log:
            self.log.close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request_bodies(args, cases, model, server):
    """(case, draft) -> request body. A "replay L" body replays the case's draft-off reply, fetched
    here with its token ids."""
    bodies = {}
    for name, (prompt, max_tokens) in cases.items():
        for draft in args.drafts:
            bodies[(name, draft)] = request_body(model, prompt, max_tokens, args.temperature, args.seed,
                                                 args.endpoint, draft != "off")
        if args.forced_accept:
            reference = server.stream(args.endpoint, dict(bodies[(name, "off")], return_token_ids=True))
            for depth in args.forced_accept:
                bodies[(name, f"replay {depth}")] = dict(bodies[(name, "off")], draft=True,
                                                        replay={"token_ids": reference.token_ids, "accept": depth})
    return bodies


def empty_rows(args, builds):
    """Every row the receipt will show, in its order, each with an empty list of waves."""
    return {RowKey(build, draft, n_streams, name): [] for n_streams in args.stream_counts for name in args.cases
            for build in builds for draft in args.drafts}


def measure(server, args, bodies, rows, build, n_waves):
    """After one discarded warm-up reply, runs every (streams, case) n_waves times and appends each wave's
    replies to its row. Draft on and off alternate wave by wave, so drift in the machine hits both alike."""
    warm_up = next(iter(bodies.values()))
    server.stream(args.endpoint, dict(warm_up, max_tokens=min(16, warm_up["max_tokens"])))
    for n_streams in args.stream_counts:
        for name in args.cases:
            for _ in range(n_waves):
                for draft in args.drafts:
                    replies = run_at_once(server, args.endpoint, [bodies[(name, draft)]] * n_streams)
                    rows[RowKey(build, draft, n_streams, name)].append(replies)
            print(f"{build + ': ' if build else ''}{n_streams} stream(s): {name} done", file=sys.stderr)


def compare_builds(args, cases, rows):
    """Each wave starts a fresh server from main, then from branch, each on its own free port."""
    model = None
    for wave in range(args.waves):
        for build, binary in zip(("main", "branch"), args.compare):
            port = free_port()
            server = OpenAiServer(f"http://127.0.0.1:{port}/v1", args.api_key)
            argv = [binary, "serve", *shlex.split(args.server_args), "--host", "127.0.0.1", "--port", str(port)]
            managed = ManagedServer(argv, server, args.server_timeout, is_quiet=True)
            try:
                model = args.model or server.first_model()
                measure(server, args, request_bodies(args, cases, model, server), rows, build, n_waves=1)
            finally:
                managed.stop()
            print(f"wave {wave + 1}/{args.waves}: {build} done", file=sys.stderr)
    return model


def check_token_shas(rows):
    """Every reply of a case must have the token_sha of the case's first row's first reply: solo, main
    and speculation on. So this checks concurrent against solo, branch against main, draft against none."""
    reference = {}
    mismatches = []
    for key, waves in rows.items():
        for wave, replies in enumerate(waves, 1):
            for reply in replies:
                expected = reference.setdefault(key.case, reply.token_sha)
                if not reply.token_sha or reply.token_sha != expected:
                    mismatches.append(f"{row_label(key)}, wave {wave}: {reply.token_sha or 'no token_sha'}"
                                      f" != {expected}")
    return mismatches


def row_label(key):
    build = f"{key.build}, " if key.build else ""
    return f"{build}{key.case} at {key.streams} stream(s), draft {key.draft}"


def wave_rates(waves):
    """One figure per wave: the median of its streams' decode tok/s."""
    return [statistics.median(reply.decode_tokens_per_s() for reply in replies) for replies in waves]


def ratio_column(args, rows):
    """(title, {key: ratio of median tok/s}), the ratio shown on the second row of each pair:
    branch/main on the branch row, or draft on/off on the draft-off row."""
    if args.compare:
        title, pairs = "branch/main", [(key, key, key._replace(build="main")) for key in rows if key.build == "branch"]
    elif args.draft_compare:
        title, pairs = "draft on/off", [(key, key._replace(draft="on"), key) for key in rows if key.draft == "off"]
    elif args.forced_accept:
        title, pairs = "vs draft off", [(key, key, key._replace(draft="off")) for key in rows if key.draft != "off"]
    else:
        return None, {}
    ratios = {}
    for shown_on, numerator, denominator in pairs:
        below = statistics.median(wave_rates(rows[denominator]))
        ratios[shown_on] = statistics.median(wave_rates(rows[numerator])) / below if below else float("nan")
    return title, ratios


def receipt_text(args, rows, mismatches, model):
    if args.compare:
        setup = [f"- main: {describe_binary(args.compare[0])}", f"- branch: {describe_binary(args.compare[1])}",
                 f"- serve flags: `{args.server_args}`; model {model}; {args.endpoint}; each wave starts a fresh "
                 "server from main, then from branch"]
    else:
        setup = [f"- commit: {git_commit()}", f"- server: {args.server_cmd or args.base_url}; model {model}; "
                                              f"{args.endpoint}"]
    lines = [
        "# bench_concurrent receipt", "",
        f"- command: `{shlex.join(sys.argv)}`", *setup,
        f"- machine: {machine_description()}",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- T is the sampling temperature{f' (seed {args.seed})' if args.seed is not None else ''}; tok/s is "
        f"per-stream decode speed (a wave's median over its streams), median and range over {args.waves} wave(s), "
        "after one discarded warm-up reply per server",
        "- tokens per round, drafted per round and accepted (accepted / drafted) are totals over every reply's "
        "`timings`",
        "",
    ]
    ratio_title, ratios = ratio_column(args, rows)
    header = (["Build"] if args.compare else []) + ["Streams", "Case", "T", "Draft", "tok/s", "range",
                                                    "tokens per round", "drafted per round", "accepted"]
    header += [ratio_title] if ratio_title else []
    lines += ["| " + " | ".join(header) + " |",
              "|" + "|".join("---" if title in ("Build", "Case", "Draft", "range") else "---:"
                             for title in header) + "|"]
    for key, waves in rows.items():
        median, low, high = spread(wave_rates(waves))
        cells = [key.build] if args.compare else []
        cells += [str(key.streams), key.case, f"{args.temperature:g}", key.draft,
                  f"{median:.1f}", f"{low:.1f}-{high:.1f}"]
        cells += format_speculation(speculation_figures([reply for replies in waves for reply in replies]))
        if ratio_title:
            cells.append(f"{ratios[key]:.2f}x" if key in ratios else "")
        lines.append("| " + " | ".join(cells) + " |")
    n_replies = sum(len(replies) for waves in rows.values() for replies in waves)
    lines.append("")
    if mismatches:
        lines.append(f"**TOKEN_SHA MISMATCH: {len(mismatches)} of {n_replies} replies differ from their case's "
                     "first solo reply:**")
        lines += [f"- {line}" for line in mismatches]
    else:
        lines.append(f"token_sha: all {n_replies} replies equal their case's first solo reply"
                     f"{' (main and branch alike)' if args.compare else ''}.")
    return "\n".join(lines) + "\n"


def parse_stream_counts(text):
    return [int(k) for k in text.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or os.environ.get("TF_API_KEY"))
    parser.add_argument("--server-cmd", help="start this server command first (it must listen on --base-url)")
    parser.add_argument("--compare", nargs=2, metavar=("MAIN_BINARY", "BRANCH_BINARY"),
                        help="two tensorfold builds: each wave starts a fresh server from each, main then branch")
    parser.add_argument("--server-args", default="",
                        help="with --compare: serve flags for both builds, e.g. '--model DIR --parallel 4'")
    parser.add_argument("--server-timeout", type=float, default=600, help="seconds to wait for a started server's /health")
    parser.add_argument("--model", help="model id (default: the first one /v1/models lists)")
    parser.add_argument("--endpoint", choices=["chat/completions", "completions"], default="chat/completions")
    parser.add_argument("--cases", type=lambda text: text.split(","), default=["rewrite", "prose", "code"],
                        help="comma-separated: rewrite, prose, code")
    parser.add_argument("--streams", type=parse_stream_counts, nargs="+",
                        help="simultaneous streams K, besides the solo run (e.g. 4, or 1,4; default 4)")
    parser.add_argument("--alone", action="store_true", help="only the solo mode: each case alone, serially")
    parser.add_argument("--waves", "--repeats", type=int, default=2,
                        help="measured runs of each case per mode; with --compare, fresh servers per build")
    parser.add_argument("--max-tokens", type=int, default=256, help="budget of the prose and code cases")
    parser.add_argument("--rewrite-file", default=DEFAULT_REWRITE_FILE)
    parser.add_argument("--rename", default=DEFAULT_RENAME, help="OLD:NEW identifier for the rewrite case")
    parser.add_argument("--rewrite-max-tokens", type=int, default=0, help="0: sized from the file")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=7, help="the same seed for every run, so sampled replies compare")
    parser.add_argument("--no-draft", action="store_true", help='send "draft": false (speculation off)')
    parser.add_argument("--draft-compare", action="store_true",
                        help="run every case with speculation on and off, alternating, and give the ratio")
    parser.add_argument("--forced-accept", type=int, nargs="+", default=[], metavar="L",
                        help="add rows where the replay proposer alone drafts the case's draft-off reply, L tokens a "
                             "round (e.g. 1 4 16 47); the server must run with --bench-extensions")
    parser.add_argument("--receipt", help="also write the receipt here (e.g. bench/receipts/NAME.md)")
    args = parser.parse_args()
    streams = [k for counts in args.streams or ([] if args.alone else [[4]]) for k in counts]
    if args.waves < 1 or args.max_tokens < 1 or any(k < 1 for k in streams) or ":" not in args.rename:
        parser.error("--waves, --max-tokens and --streams must be at least 1; --rename is OLD:NEW")
    if args.compare and args.server_cmd:
        parser.error("--compare starts its own servers; leave out --server-cmd")
    if args.compare and {"--host", "--port"} & {word.split("=")[0] for word in shlex.split(args.server_args)}:
        parser.error("--server-args: leave out --host and --port; --compare picks a free port for each server")
    if args.draft_compare and (args.no_draft or args.compare):
        parser.error("--draft-compare runs both settings against one server; leave out --no-draft and --compare")
    args.stream_counts = [1] + sorted(set(streams) - {1})  # solo first: it is every case's token_sha reference
    if args.forced_accept and (args.no_draft or args.compare or any(depth < 1 for depth in args.forced_accept)):
        parser.error("--forced-accept: lengths of 1 or more, against one server, with its draft-off reference")
    args.drafts = ["on", "off"] if args.draft_compare else ["off"] if args.no_draft else ["on"]
    if args.forced_accept:
        args.drafts = sorted(set(args.drafts) | {"off"}, key=["off", "on"].index)
        args.drafts += [f"replay {depth}" for depth in args.forced_accept]
    cases = build_cases(args)

    if args.compare:
        rows = empty_rows(args, ["main", "branch"])
        model = compare_builds(args, cases, rows)
    else:
        rows = empty_rows(args, [""])
        server = OpenAiServer(args.base_url, args.api_key)
        managed = ManagedServer(shlex.split(args.server_cmd), server, args.server_timeout) if args.server_cmd else None
        try:
            model = args.model or server.first_model()
            measure(server, args, request_bodies(args, cases, model, server), rows, "", args.waves)
        finally:
            if managed:
                managed.stop()
    mismatches = check_token_shas(rows)
    receipt = receipt_text(args, rows, mismatches, model)
    print(receipt)
    if mismatches:
        print(f"\n!!! TOKEN_SHA MISMATCH: {len(mismatches)} replies differ (listed above); exit code 1 !!!",
              file=sys.stderr)
    if args.receipt:
        os.makedirs(os.path.dirname(os.path.abspath(args.receipt)), exist_ok=True)
        with open(args.receipt, "w", encoding="utf-8") as file:
            file.write(receipt)
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
