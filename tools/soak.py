#!/usr/bin/env python3
"""Soak test: N clients stream chat completions for M minutes against one server, with clients
that disconnect mid-stream, slow readers and bad requests mixed in. Reports errors (any reply that
is not what that kind of client should get), p50/p99 latency (first token and whole reply), the
server's RSS over time, and whether every lane and queue slot was free at the end; writes a
receipt with the command, commit and machine.

  tools/soak.py --binary build-cpu/tensorfold --streams 64 --minutes 10 --receipt bench/receipts/x.md

Without --model the server runs the embedded default model. --url soaks a server already running
(--pid then names its process for the RSS figures). Standard library only."""
import argparse
import http.client
import json
import os
import platform
import random
import re
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["Write a Python function that merges two sorted lists.",
           "Explain what a hash map is in two sentences.",
           "Write a C function that reverses a string in place.",
           "List three uses of a binary search tree.",
           "Write a shell one-liner that counts lines in every .py file."]
# Bodies a correct server refuses with a 4xx JSON error (the soak checks the status class and shape).
BAD_BODIES = [b'{"messages": [', b'[1, 2, 3]', b'{"messages": [{"role": "wizard", "content": "x"}]}',
              b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
              b'{"messages": [{"role": "user", "content": "x"}], "n": 0}',
              b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
              b'\xff\xfe not utf-8']
KINDS = ["stream"] * 7 + ["disconnect", "slow", "bad"]  # one in ten of each odd kind


def percentile(values, fraction):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def rss_mib(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1)) / 1024


class Soak:
    def __init__(self, host, port, model, args):
        self.host, self.port, self.model, self.args = host, port, model, args
        self.lock = threading.Lock()
        self.counts = {kind: 0 for kind in set(KINDS)}
        self.errors = []
        self.first_token_s = []
        self.whole_s = []
        self.tokens = 0

    def connection(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.args.timeout)

    def error(self, kind, message):
        with self.lock:
            self.errors.append(f"{kind}: {message}")

    def body(self, rng):
        return json.dumps({"model": self.model, "stream": True, "max_tokens": self.args.max_tokens,
                           "temperature": rng.choice([0, 0.7]), "seed": rng.randrange(1 << 30),
                           "messages": [{"role": "user", "content": rng.choice(PROMPTS)}]})

    def stream(self, kind, rng):
        """A streamed chat: 'stream' reads it all, 'slow' reads it with pauses, 'disconnect' leaves."""
        connection = self.connection()
        started = time.perf_counter()
        first = None
        try:
            connection.request("POST", "/v1/chat/completions", body=self.body(rng),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            if response.status != 200:
                return self.error(kind, f"HTTP {response.status}: {response.read()[:200]!r}")
            finish, done, n_chunks = None, False, 0
            for raw_line in response:
                line = raw_line.decode("utf-8").strip()
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                choices = chunk.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    n_chunks += 1
                    if first is None:
                        first = time.perf_counter() - started
                if choices and choices[0].get("finish_reason"):
                    finish = choices[0]["finish_reason"]
                    with self.lock:
                        self.tokens += chunk.get("timings", {}).get("predicted_n", 0)  # usage comes only with include_usage
                if kind == "disconnect" and n_chunks >= 2:
                    return  # leaves mid-stream: the server must free the lane and carry on
                if kind == "slow":
                    time.sleep(self.args.slow_read_s)
            if kind == "disconnect":
                return  # the reply was shorter than two chunks: nothing to leave
            if not done or finish is None:
                return self.error(kind, f"the stream ended without {'[DONE]' if finish else 'a finish_reason'}")
            with self.lock:
                self.whole_s.append(time.perf_counter() - started)
                if first is not None:
                    self.first_token_s.append(first)
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.error(kind, repr(error))
        finally:
            connection.close()

    def bad(self, rng):
        """A request the server must refuse with a 4xx JSON error, or raw bytes that are not HTTP."""
        if rng.random() < 0.25:
            try:
                with socket.create_connection((self.host, self.port), timeout=self.args.timeout) as raw:
                    raw.sendall(b"GARBAGE / HTTP/9.9\r\n" + b"X: " + b"y" * 20000 + b"\r\n\r\n")
                    reply = raw.recv(4096)
                if not re.match(rb"HTTP/1\.1 4\d\d ", reply):
                    self.error("bad", f"raw garbage got {reply[:80]!r}")
            except OSError as error:
                self.error("bad", f"raw garbage: {error!r}")
            return
        body = rng.choice(BAD_BODIES)
        connection = self.connection()
        try:
            connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            reply = response.read()
            if not 400 <= response.status < 500 or "error" not in json.loads(reply):
                self.error("bad", f"{body[:40]!r} got HTTP {response.status}: {reply[:120]!r}")
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.error("bad", repr(error))
        finally:
            connection.close()

    def client(self, index, end_time):
        rng = random.Random(index)
        while time.monotonic() < end_time:
            kind = rng.choice(KINDS)
            with self.lock:
                self.counts[kind] += 1
            if kind == "bad":
                self.bad(rng)
            else:
                self.stream(kind, rng)


def metrics(host, port):
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(tensorfold_\w+) (\S+)$", text, re.M)}


def start_server(args):
    command = [args.binary, "serve", "--host", "127.0.0.1", "--port", "0", "--parallel", str(args.parallel),
               "--max-queue", str(max(64, args.streams))]
    if args.model:
        command += ["--model", args.model]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    port = None
    for line in process.stderr:
        found = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if found:
            port = int(found.group(1))
            break
    if port is None:
        sys.exit("the server exited before listening")
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # keep the pipe drained
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return process, port
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("the server did not become healthy within 600 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(REPO_ROOT, "build-cpu", "tensorfold"))
    parser.add_argument("--model", help="model directory (default: the embedded default model)")
    parser.add_argument("--url", help="soak a running server (host:port) instead of starting one")
    parser.add_argument("--pid", type=int, help="with --url: the server's process, for RSS")
    parser.add_argument("--streams", type=int, default=64, help="clients at once")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--parallel", type=int, default=16, help="the server's lanes (when it is started here)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--slow-read-s", type=float, default=0.05, help="a slow reader's pause per chunk")
    parser.add_argument("--timeout", type=float, default=300, help="a client's socket timeout")
    parser.add_argument("--rss-every-s", type=float, default=10)
    parser.add_argument("--receipt", help="write the receipt here (markdown)")
    args = parser.parse_args()

    process = None
    if args.url:
        host, port = args.url.rsplit(":", 1)
        port = int(port)
        pid = args.pid
    else:
        process, port = start_server(args)
        host, pid = "127.0.0.1", process.pid
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("GET", "/v1/models")
    model = json.loads(connection.getresponse().read())["data"][0]["id"]

    soak = Soak(host, port, model, args)
    rss = []  # (seconds since start, MiB)
    started = time.monotonic()
    end_time = started + args.minutes * 60
    stop_sampling = threading.Event()

    def sample():
        while not stop_sampling.is_set():
            if pid:
                rss.append((time.monotonic() - started, rss_mib(pid)))
            stop_sampling.wait(args.rss_every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    clients = [threading.Thread(target=soak.client, args=(i, end_time)) for i in range(args.streams)]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    elapsed = time.monotonic() - started
    stop_sampling.set()
    sampler.join()

    # Nothing may be left behind: every lane and queue slot free once the clients are done.
    deadline = time.monotonic() + 30
    final = metrics(host, port)
    while (final.get("tensorfold_lanes_live", 0) or final.get("tensorfold_queue_depth", 0)) and time.monotonic() < deadline:
        time.sleep(0.5)
        final = metrics(host, port)
    leftover = int(final.get("tensorfold_lanes_live", 0) + final.get("tensorfold_queue_depth", 0))
    if process:
        process.terminate()
        process.wait(timeout=30)

    commit = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    first_rss = [m for t, m in rss if t >= 60] or [m for _, m in rss]
    growth = (first_rss[-1] - first_rss[0]) if len(first_rss) >= 2 else float("nan")
    lines = [
        f"# Soak: {args.streams} streams for {elapsed / 60:.1f} minutes, {model}",
        "",
        f"- command: `{shlex.join([sys.executable] + sys.argv)}`",
        f"- commit: {commit}; machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- clients started: " + ", ".join(f"{k} {v}" for k, v in sorted(soak.counts.items())) +
        f" (stream: read to [DONE]; slow: {args.slow_read_s}s pause per chunk; disconnect: leaves after 2 chunks; "
        "bad: malformed JSON, bad fields, not UTF-8, or raw garbage with a 20 KB header line)",
        f"- completion tokens streamed to clients that finished: {soak.tokens}",
        f"- **errors: {len(soak.errors)}**" + ("" if not soak.errors else " — first: " + "; ".join(soak.errors[:5])),
        f"- latency of whole replies (stream and slow): p50 {percentile(soak.whole_s, 0.5):.2f} s, "
        f"p99 {percentile(soak.whole_s, 0.99):.2f} s over {len(soak.whole_s)} replies",
        f"- first token: p50 {percentile(soak.first_token_s, 0.5):.2f} s, p99 {percentile(soak.first_token_s, 0.99):.2f} s",
        f"- lanes or queue slots still held after the clients finished: {leftover}",
    ]
    if rss:
        lines += [f"- server RSS: {rss[0][1]:.0f} MiB at start, {min(m for _, m in rss):.0f}–{max(m for _, m in rss):.0f} MiB "
                  f"over the run, {rss[-1][1]:.0f} MiB at the end; from the first minute on it changed by {growth:+.1f} MiB",
                  "", "| minute | RSS MiB (last sample) |", "|---:|---:|"]
        by_minute = {}
        for t, m in rss:
            by_minute[int(t // 60)] = m
        lines += [f"| {minute} | {m:.1f} |" for minute, m in sorted(by_minute.items())]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.receipt:
        with open(args.receipt, "w", encoding="utf-8") as receipt:
            receipt.write(text)
    sys.exit(1 if soak.errors or leftover else 0)


if __name__ == "__main__":
    main()
