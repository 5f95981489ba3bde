#!/usr/bin/env python3
"""Streams requests against any OpenAI-compatible server and reports time to first token,
per-request decode tokens/s as medians and ranges over waves, and, where the server's replies carry
`timings` (TensorFold's do), tokens per round and draft acceptance (standard library only)."""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

BUILTIN_PROMPTS = {
    "prose": "Write a short essay about the history of lighthouses and the people who kept them.",
    "code": "Write a Python module that parses ISO 8601 dates without using datetime.fromisoformat,"
            " with docstrings and a few unit tests.",
    "explain": "Explain, step by step, how a hash table handles collisions, with an example.",
}


@dataclass
class StreamResult:
    text: str = ""
    ttft_s: float = 0.0         # request sent -> first content chunk
    total_s: float = 0.0        # request sent -> [DONE]
    completion_tokens: int = 0
    finish_reason: str = ""
    token_sha: str = ""
    timings: dict = field(default_factory=dict)
    token_ids: list = field(default_factory=list)  # when the request set "return_token_ids"

    def decode_tokens_per_s(self):
        # The first token belongs to the prompt's latency; decode speed is the rest over the rest.
        decode_s = self.total_s - self.ttft_s
        return (self.completion_tokens - 1) / decode_s if self.completion_tokens > 1 and decode_s > 0 else 0.0


class OpenAiServer:
    """A base URL (with or without /v1) and an optional API key."""

    def __init__(self, base_url, api_key=None, timeout_s=600):
        parsed = urllib.parse.urlparse(base_url if "://" in base_url else "http://" + base_url)
        self.scheme, self.netloc = parsed.scheme, parsed.netloc
        path = parsed.path.rstrip("/")
        self.prefix = path if path.endswith("/v1") else path + "/v1"
        self.root = path[:-3] if path.endswith("/v1") else path
        self.api_key = api_key
        self.timeout_s = timeout_s

    def _connection(self):
        kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return kind(self.netloc, timeout=self.timeout_s)

    def _headers(self):
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        return headers

    def get_json(self, path, under_v1=True):
        connection = self._connection()
        try:
            connection.request("GET", (self.prefix if under_v1 else self.root) + path, headers=self._headers())
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:300]!r}")
            return json.loads(body)
        finally:
            connection.close()

    def is_healthy(self):
        try:
            self.get_json("/health", under_v1=False)
            return True
        except (OSError, RuntimeError, ValueError):
            return False

    def first_model(self):
        return self.get_json("/models")["data"][0]["id"]

    def stream(self, endpoint, body):
        """POSTs a streamed request to /v1/<endpoint> and times it chunk by chunk."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        result = StreamResult()
        connection = self._connection()
        started = time.perf_counter()
        try:
            connection.request("POST", f"{self.prefix}/{endpoint}", body=json.dumps(body), headers=self._headers())
            response = connection.getresponse()
            if response.status != 200:
                raise RuntimeError(f"POST {endpoint}: HTTP {response.status}: {response.read()[:300]!r}")
            for raw_line in response:
                line = raw_line.decode("utf-8").strip()
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    break
                self._take_chunk(json.loads(data), result, started)
        finally:
            connection.close()
        result.total_s = time.perf_counter() - started
        return result

    @staticmethod
    def _take_chunk(chunk, result, started):
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        for choice in chunk.get("choices", []):
            piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            if piece and not result.text:
                result.ttft_s = time.perf_counter() - started
            result.text += piece
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
        if chunk.get("usage"):
            result.completion_tokens = chunk["usage"]["completion_tokens"]
        result.token_sha = chunk.get("token_sha", result.token_sha)
        result.timings = chunk.get("timings", result.timings)
        result.token_ids = chunk.get("completion_token_ids", result.token_ids)


def speculation_figures(results):
    """Totals over replies' timings: {tokens_per_round, drafted_per_round, acceptance}, or None when
    the server reports no rounds (not TensorFold, or an older build)."""
    def total(key):
        return sum(r.timings.get(key, 0) for r in results)
    rounds = total("rounds")
    if not rounds:
        return None
    drafted = total("draft_n")
    return {"tokens_per_round": total("predicted_n") / rounds, "drafted_per_round": drafted / rounds,
            "acceptance": total("draft_accepted_n") / drafted if drafted else None}


def format_speculation(figures):
    """The three speculation figures as table cells; '-' where there are none."""
    if figures is None:
        return ["-", "-", "-"]
    acceptance = figures["acceptance"]
    return [f"{figures['tokens_per_round']:.2f}", f"{figures['drafted_per_round']:.1f}",
            "-" if acceptance is None else f"{100 * acceptance:.0f}%"]


def request_body(model, prompt, max_tokens, temperature, seed, endpoint, draft=True):
    """draft=False sends TensorFold's "draft": false extension, which turns speculation off."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature}
    if seed is not None:
        body["seed"] = seed
    if not draft:
        body["draft"] = False
    if endpoint == "chat/completions":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def run_at_once(server, endpoint, bodies):
    """Starts every body at the same moment on its own thread; returns results in order."""
    results = [None] * len(bodies)
    errors = []
    barrier = threading.Barrier(len(bodies))

    def worker(index):
        barrier.wait()
        try:
            results[index] = server.stream(endpoint, bodies[index])
        except Exception as error:  # reported after every thread finished
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def spread(values):
    """(median, low, high) of a list of numbers."""
    return statistics.median(values), min(values), max(values)


def format_spread(values, unit, digits=1):
    median, low, high = spread(values)
    return f"{median:.{digits}f} {unit} (range {low:.{digits}f}-{high:.{digits}f})"


def load_prompts(prompt_files):
    if not prompt_files:
        return dict(BUILTIN_PROMPTS)
    prompts = {}
    for path in prompt_files:
        with open(path, encoding="utf-8") as file:
            prompts[os.path.basename(path)] = file.read()
    return prompts


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or os.environ.get("TF_API_KEY"))
    parser.add_argument("--model", help="model id (default: the first one /v1/models lists)")
    parser.add_argument("--prompt-file", action="append", help="a prompt per file (repeatable); default: built-in cases")
    parser.add_argument("--endpoint", choices=["chat/completions", "completions"], default="chat/completions")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--waves", type=int, default=3, help="measured waves (after one warm-up reply)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests at once in each wave")
    parser.add_argument("--no-draft", action="store_true", help='send "draft": false (speculation off)')
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    if args.waves < 1 or args.concurrency < 1 or args.max_tokens < 1:
        parser.error("--waves, --concurrency and --max-tokens must be at least 1")

    server = OpenAiServer(args.base_url, args.api_key)
    model = args.model or server.first_model()
    prompts = load_prompts(args.prompt_file)
    names = list(prompts)
    body_for = lambda i: request_body(model, prompts[names[i % len(names)]], args.max_tokens,
                                      args.temperature, args.seed, args.endpoint, draft=not args.no_draft)

    server.stream(args.endpoint, body_for(0))  # warm-up: first-request costs are not the server's speed
    ttft_ms, decode_rates, wave_rates, all_results = [], [], [], []
    for wave in range(args.waves):
        started = time.perf_counter()
        results = run_at_once(server, args.endpoint, [body_for(wave * args.concurrency + i) for i in range(args.concurrency)])
        elapsed = time.perf_counter() - started
        ttft_ms += [r.ttft_s * 1000 for r in results]
        decode_rates += [r.decode_tokens_per_s() for r in results]
        wave_rates.append(sum(r.completion_tokens for r in results) / elapsed)
        all_results += results
        print(f"wave {wave + 1}/{args.waves}: {sum(r.completion_tokens for r in results)} tokens in {elapsed:.2f} s",
              file=sys.stderr)

    summary = {
        "model": model, "endpoint": args.endpoint, "concurrency": args.concurrency, "waves": args.waves,
        "max_tokens": args.max_tokens, "ttft_ms": spread(ttft_ms),
        "decode_tokens_per_s": spread(decode_rates), "aggregate_tokens_per_s": spread(wave_rates),
        "draft": not args.no_draft, "speculation": speculation_figures(all_results),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"model {model}, {args.endpoint}, concurrency {args.concurrency}, {args.waves} waves, "
          f"max_tokens {args.max_tokens}, draft {'off' if args.no_draft else 'on'}")
    print(f"time to first token  {format_spread(ttft_ms, 'ms')}")
    print(f"decode per request   {format_spread(decode_rates, 'tok/s')}")
    print(f"aggregate per wave   {format_spread(wave_rates, 'tok/s')}")
    per_round, drafted, acceptance = format_speculation(summary["speculation"])
    print(f"tokens per round     {per_round} (drafted per round {drafted}, accepted {acceptance})")


if __name__ == "__main__":
    main()
