#!/usr/bin/env python3
"""Predicted Outputs through a running TensorFold server: held-out rename rewrites (the file is in
the prompt; the prediction is the old file, as an editor would send it) with and without
`prediction`, and with speculation off as the baseline. Reports decode tok/s and tokens per round
(from each reply's `timings`), accepted/rejected prediction tokens, as medians and ranges over
repeated runs, and checks every reply's token_sha equals the draft-off reply (standard library only)."""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time
import urllib.parse


def post(base, path, body):
    url = urllib.parse.urlparse(base)
    connection = http.client.HTTPConnection(url.netloc, timeout=900)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    text = response.read().decode()
    if response.status != 200:
        raise RuntimeError(f"{response.status}: {text}")
    return json.loads(text)


def cases(path, n):
    records = [json.loads(line) for line in open(path)]
    renames = sorted((r for r in records if r["kind"] == "rename"), key=lambda r: len(r["answer"]))
    return renames[:n]


def spread(values):
    return statistics.median(values), min(values), max(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8080")
    parser.add_argument("--inputs", default="bench/inputs/heldout-eval.jsonl")
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--receipt")
    args = parser.parse_args()
    rows = []
    for index, case in enumerate(cases(args.inputs, args.cases)):
        old_file = case["prompt"].split("\n\n", 1)[1]
        n_answer = len(post(args.base_url, "/tokenize", {"content": case["answer"], "add_special": False})["tokens"])
        base = {"messages": [{"role": "user", "content": case["prompt"]}], "max_tokens": n_answer + 16,
                "temperature": 0}
        modes = {"draft off": {"draft": False}, "no prediction": {},
                 "prediction": {"prediction": {"type": "content", "content": old_file}}}
        post(args.base_url, "/v1/chat/completions", dict(base, max_tokens=8))  # warm-up
        reference = None
        for mode, extra in modes.items():
            speeds, per_round, accepted, rejected, shas = [], [], [], [], set()
            for _ in range(args.runs):
                reply = post(args.base_url, "/v1/chat/completions", dict(base, **extra))
                t = reply["timings"]
                speeds.append(t["predicted_n"] / (t["predicted_ms"] / 1000.0))
                per_round.append(t["tokens_per_round"])
                details = reply["usage"].get("completion_tokens_details", {})
                accepted.append(details.get("accepted_prediction_tokens", 0))
                rejected.append(details.get("rejected_prediction_tokens", 0))
                shas.add(reply["token_sha"])
            reference = reference or shas
            rows.append({"case": index, "path": case["path"], "mode": mode, "tok_s": spread(speeds),
                         "tokens_per_round": spread(per_round), "accepted": statistics.median(accepted),
                         "rejected": statistics.median(rejected), "same_tokens": shas == reference,
                         "completion_tokens": reply["usage"]["completion_tokens"]})
            r = rows[-1]
            print(f"case {index} {mode:13s} tok/s {r['tok_s'][0]:7.1f} ({r['tok_s'][1]:.1f}-{r['tok_s'][2]:.1f}) "
                  f"tokens/round {r['tokens_per_round'][0]:5.2f} accepted {r['accepted']} rejected {r['rejected']} "
                  f"same tokens {r['same_tokens']}", flush=True)
    if args.receipt:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(args.receipt, "w") as out:
            out.write("# Predicted Outputs through the server: rename rewrites with and without `prediction`\n\n")
            out.write(f"- command: `{' '.join(sys.argv)}`\n- commit: {commit}\n")
            out.write(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
            out.write(f"- runs per mode: {args.runs} (median and range); greedy; tok/s = timings.predicted_n / predicted_ms\n\n")
            out.write("| case | file | mode | completion tokens | tok/s | range | tokens per round | range | accepted prediction | rejected prediction | tokens = draft off |\n")
            out.write("|---:|---|---|---:|---:|---|---:|---|---:|---:|---|\n")
            for r in rows:
                out.write(f"| {r['case']} | {r['path']} | {r['mode']} | {r['completion_tokens']} | {r['tok_s'][0]:.1f} | "
                          f"{r['tok_s'][1]:.1f}-{r['tok_s'][2]:.1f} | {r['tokens_per_round'][0]:.2f} | "
                          f"{r['tokens_per_round'][1]:.2f}-{r['tokens_per_round'][2]:.2f} | {r['accepted']:.0f} | "
                          f"{r['rejected']:.0f} | {'yes' if r['same_tokens'] else 'NO'} |\n")
    return 0 if all(r["same_tokens"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
