#!/usr/bin/env python3
"""The prefix cache's figures against a running TensorFold server (standard library only).

  ttft   time to first token of a long prompt (token ids) whose first part is cached, against the
         same prompt cold ("cache_prompt": false); medians and ranges over repeats.
  chat   a multi-turn chat, each turn re-sending the whole conversation: prompt tokens computed and
         wall time, with the cache and without it; every reply must be the same either way.
  decode decode speed (the server's own timings) of the same long replies on two servers, one with
         the cache and one started with --no-prompt-cache (--url-b), alternating: the cache's cost.

Both modes check that the cached reply's token_sha equals the cold one's (resumed = fresh).
"""
import argparse
import json
import random
import statistics
import sys
import time
import urllib.request


def post(base, route, body, timeout=600):
    request = urllib.request.Request(base.rstrip("/") + route, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    return reply, time.perf_counter() - start


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ttft(args):
    rng = random.Random(args.seed)
    results = {"cold_s": [], "cached_s": [], "cached_tokens": []}
    for repeat in range(args.repeats):
        shared = [rng.randrange(args.low_id, args.vocab) for _ in range(args.cached)]
        tail = [rng.randrange(args.low_id, args.vocab) for _ in range(args.prompt - args.cached)]
        other_tail = [rng.randrange(args.low_id, args.vocab) for _ in range(args.prompt - args.cached)]
        body = {"prompt": shared + tail, "max_tokens": 1, "temperature": 0, "return_token_ids": True}
        cold, cold_s = post(args.url, "/v1/completions", {**body, "cache_prompt": False})
        post(args.url, "/v1/completions", {**body, "prompt": shared + other_tail})  # leaves `shared` cached
        cached, cached_s = post(args.url, "/v1/completions", body)
        if cold["token_sha"] != cached["token_sha"]:
            sys.exit(f"repeat {repeat}: the cached reply differs from the cold one")
        results["cold_s"].append(cold_s)
        results["cached_s"].append(cached_s)
        results["cached_tokens"].append(cached["usage"]["prompt_tokens_details"]["cached_tokens"])
    ratio = [c / f for c, f in zip(results["cached_s"], results["cold_s"])]
    return {"mode": "ttft", "prompt_tokens": args.prompt, "cached_prefix": args.cached,
            "cold_s": summary(results["cold_s"]), "cached_s": summary(results["cached_s"]),
            "cached_over_cold": summary(ratio), "cached_tokens": summary(results["cached_tokens"])}


QUESTIONS = [
    "Write a Python function that parses a CSV line with quoted fields.",
    "Add support for escaped quotes.",
    "Now make it a generator over a file object.",
    "Add type hints.",
    "Write three unit tests for it.",
    "Rename the function to read_rows.",
    "Add a docstring with an example.",
    "Make the delimiter a parameter.",
    "Handle a trailing newline.",
    "Show the final module in full.",
]


def chat(args):
    outcome = {}
    for label, cache_prompt in (("cached", True), ("cold", False)):
        messages = [{"role": "system", "content": "You are a careful Python programmer."}]
        computed, wall, shas = 0, 0.0, []
        for question in QUESTIONS[:args.turns]:
            messages.append({"role": "user", "content": question})
            reply, seconds = post(args.url, "/v1/chat/completions", {
                "messages": messages, "max_tokens": args.max_tokens, "temperature": 0, "cache_prompt": cache_prompt})
            usage = reply["usage"]
            computed += usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
            wall += seconds
            shas.append(reply["token_sha"])
            messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})
        outcome[label] = {"prompt_tokens_computed": computed, "wall_s": wall, "token_shas": shas}
    if outcome["cached"]["token_shas"] != outcome["cold"]["token_shas"]:
        sys.exit("a cached turn's reply differs from the cold one")
    for side in outcome.values():
        del side["token_shas"]
    return {"mode": "chat", "turns": args.turns, **outcome,
            "wall_cold_over_cached": outcome["cold"]["wall_s"] / outcome["cached"]["wall_s"]}


def decode(args):
    if not args.url_b:
        sys.exit("decode needs --url-b: a server started with --no-prompt-cache")
    rng = random.Random(args.seed)
    speeds = {"cached": [], "uncached": []}
    for repeat in range(args.repeats):
        prompt = [rng.randrange(args.low_id, args.vocab) for _ in range(64)]
        body = {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True, "draft": False}
        shas = []
        for label, url in (("cached", args.url), ("uncached", args.url_b)):
            reply, _ = post(url, "/v1/completions", body)
            timings = reply["timings"]
            speeds[label].append(1000.0 * (timings["predicted_n"] - 1) / timings["predicted_ms"])
            shas.append(reply["token_sha"])
        if shas[0] != shas[1]:
            sys.exit(f"repeat {repeat}: the two servers' replies differ")
    ratio = [a / b for a, b in zip(speeds["cached"], speeds["uncached"])]
    return {"mode": "decode", "max_tokens": args.max_tokens, "cached_tok_s": summary(speeds["cached"]),
            "uncached_tok_s": summary(speeds["uncached"]), "cached_over_uncached": summary(ratio)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["ttft", "chat", "decode"])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--url-b", help="decode: a server started with --no-prompt-cache")
    parser.add_argument("--prompt", type=int, default=4000, help="ttft: prompt tokens")
    parser.add_argument("--cached", type=int, default=3900, help="ttft: of which cached")
    parser.add_argument("--vocab", type=int, default=4096, help="ttft: prompt ids are drawn below this")
    parser.add_argument("--low-id", type=int, default=16, help="ttft: ...and from this up (past special ids)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=64, help="chat and decode: reply length")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps({"ttft": ttft, "chat": chat, "decode": decode}[args.mode](args), indent=2))


if __name__ == "__main__":
    main()
