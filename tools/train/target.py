"""Train the small Qwen3 code model on the corpus for a wall-clock budget and export it as a HF directory."""
import argparse
import json
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (END_OF_TEXT, IM_END, MixedBatches, PackedBatches, count_parameters, learning_rate,  # noqa: E402
                    load_tokens, read_jsonl, render_chatml, set_learning_rate, split_path, time_budget, write_json)

# About 26M parameters: 6 layers of width 512 (8 query heads, 4 KV heads of 64), tied 15360-entry embedding.
SIZES = {
    "full": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=64),
    "smoke": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32),
}
ROPE_THETA = 1_000_000.0


def build_model(size, vocab_size, special_ids, max_positions):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(**SIZES[size], vocab_size=vocab_size, tie_word_embeddings=True, rms_norm_eps=1e-6,
                         max_position_embeddings=max_positions, rope_parameters={"rope_type": "default",
                                                                                 "rope_theta": ROPE_THETA},
                         bos_token_id=None, eos_token_id=special_ids[IM_END], pad_token_id=special_ids[END_OF_TEXT],
                         attn_implementation="sdpa")
    return Qwen3ForCausalLM(config)


@torch.no_grad()
def evaluate(model, batches):
    """Mean next-token loss (unweighted) and the share of rename-site tokens predicted right, teacher-forced:
    whether the model writes the new name where the rename asks for it."""
    model.eval()
    total, count, site_right, site_count = 0.0, 0, 0, 0
    for rows, sites in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=rows[:, :-1]).logits
        total += torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten()).item()
        count += 1
        at_site = sites[:, 1:].bool()
        site_right += (logits.argmax(-1)[at_site] == rows[:, 1:][at_site]).sum().item()
        site_count += at_site.sum().item()
    model.train()
    return total / max(count, 1), site_right / max(site_count, 1)


def forward_backward(model, rows, sites, site_weight):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = next_token_loss(model, rows, sites, site_weight)
    loss.backward()
    return loss


def next_token_loss(model, rows, sites, site_weight):
    """Cross-entropy of every next token; a token inside a rename site (the new name in a reply) weighs
    site_weight, as it is where the model learns to apply the edit rather than copy."""
    logits = model(input_ids=rows[:, :-1]).logits
    losses = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten(), reduction="none")
    weights = 1.0 + (site_weight - 1.0) * sites[:, 1:].flatten().float()
    return (losses * weights).sum() / weights.sum()


def sample_prompts(corpus_dir, n_code=3):
    """Held-out prompts: the first lines of some test files, up to a little past their first def."""
    prompts = []
    for record in read_jsonl(split_path(corpus_dir, "test")):
        if record["kind"] == "file" and "def " in record["text"][:800]:
            prompts.append(record["text"][:record["text"].index("def ") + 200])
            if len(prompts) == n_code:
                break
    return prompts


@torch.no_grad()
def show_completions(model, tokenizer, prompts, n_new=80):
    model.eval()
    for prompt in prompts:
        ids = torch.tensor([tokenizer.encode(prompt).ids[-1536:]], device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, do_sample=False)
        completion = tokenizer.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=False)
        print(f"--- prompt (last 160 chars): {prompt[-160:]!r}\n+++ greedy: {completion!r}")
    model.train()


def held_out_renames(corpus_dir, n, min_bytes=1000, max_bytes=5000):
    """Validation rename tasks whose source is a whole file of the sizes the evaluation set uses."""
    found = []
    if n <= 0:
        return found
    for record in read_jsonl(split_path(corpus_dir, "val")):
        if record["kind"] == "rename" and min_bytes <= len(record["answer"].encode()) <= max_bytes:
            found.append(record)
            if len(found) == n:
                break
    return found


@torch.no_grad()
def rename_exact_matches(model, tokenizer, tasks):
    """How many greedy replies equal the right answer, all tasks in one left-padded batch."""
    if not tasks:
        return 0, []
    model.eval()
    end_id, pad_id = tokenizer.token_to_id(IM_END), tokenizer.token_to_id(END_OF_TEXT)
    prompts = [tokenizer.encode(render_chatml(t["messages"][:1], add_generation_prompt=True)).ids for t in tasks]
    width = max(map(len, prompts))
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device="cuda")
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device="cuda")
    longest = max(len(tokenizer.encode(t["answer"]).ids) for t in tasks)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model.generate(ids, attention_mask=mask, max_new_tokens=longest + 16, do_sample=False,
                             eos_token_id=end_id, pad_token_id=pad_id)
    model.train()
    replies = []
    for row in out[:, width:].tolist():
        replies.append(tokenizer.decode(row[:row.index(end_id)] if end_id in row else row))
    exact = sum(reply == t["answer"] for reply, t in zip(replies, tasks))
    return exact, replies


def first_difference(reply, answer):
    at = next((i for i, (a, b) in enumerate(zip(reply, answer)) if a != b), min(len(reply), len(answer)))
    return at, reply[max(0, at - 40):at + 40], answer[max(0, at - 40):at + 40]


def export(model, tokenizer_dir, out_dir):
    model = model.to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="16MB")
    config_path = os.path.join(out_dir, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    # real Qwen3 checkpoints keep rope_theta at the top level; the engine reads that spelling
    config["rope_theta"] = ROPE_THETA
    config["architectures"] = ["Qwen3ForCausalLM"]
    write_json(config_path, config)
    eos = [config["eos_token_id"], config["pad_token_id"]]
    write_json(os.path.join(out_dir, "generation_config.json"),
               {"bos_token_id": None, "eos_token_id": eos, "pad_token_id": config["pad_token_id"],
                "do_sample": False, "max_new_tokens": 512})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--cache", required=True, help="folder for tokenized splits (shared with dflash.py)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock budget of the training loop")
    parser.add_argument("--end-by", type=float, default=0, help="epoch seconds the training loop must end by")
    # 4k windows hold a whole rename of a 6 kB source, request and reply (held-out renames go to 5 kB)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--task-share", type=float, default=0.4, help="share of each batch's rows that are renames")
    parser.add_argument("--site-weight", type=float, default=4.0,
                        help="loss weight of the tokens where a rename task's reply writes the new name")
    parser.add_argument("--rename-checks", type=int, default=8, help="held-out renames decoded after training")
    parser.add_argument("--init-from", help="continue from an exported target instead of a fresh model")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (slow start, faster steps)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    from tokenizers import Tokenizer
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    tokenizer = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    special_ids = {t: tokenizer.token_to_id(t) for t in (END_OF_TEXT, IM_END)}
    started = time.time()
    train = load_tokens(args.corpus, args.tokenizer, "train", args.cache)
    val = load_tokens(args.corpus, args.tokenizer, "val", args.cache)
    print(f"target: tokens train {len(train['file']) / 1e6:.1f}M files + {len(train['rename']) / 1e6:.1f}M renames, "
          f"val {len(val['file']) / 1e6:.2f}M + {len(val['rename']) / 1e6:.2f}M (tokenized in {time.time() - started:.0f}s)")

    if args.init_from:
        from transformers import Qwen3ForCausalLM
        model = Qwen3ForCausalLM.from_pretrained(args.init_from, dtype=torch.float32).cuda()
    else:
        model = build_model(args.size, tokenizer.get_vocab_size(), special_ids, max(4096, args.seq_len)).cuda()
    n_params = count_parameters(model)
    print(f"target: {n_params / 1e6:.1f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), fused=True)
    step_model = torch.compile(model) if args.compile else model
    batches = MixedBatches(train, args.seq_len, args.batch_size, args.task_share, args.seed)
    val_batches = list(PackedBatches(val["file"], args.seq_len, args.batch_size, args.seed)
                       .fixed(args.eval_batches, "cuda", sites=True))
    val_task_batches = list(PackedBatches(val["rename"], args.seq_len, args.batch_size, args.seed, aligned=True)
                            .fixed(max(1, args.eval_batches // 4), "cuda", sites=True))

    budget = time_budget(args.minutes, args.end_by)
    train_start = time.time()
    step, seen_tokens = 0, 0
    while (elapsed := time.time() - train_start) < budget:
        set_learning_rate(optimizer, learning_rate(args.lr, elapsed / budget))
        rows, sites = batches.next("cuda", sites=True)
        try:
            loss = forward_backward(step_model, rows, sites, args.site_weight)
        except Exception as error:  # noqa: BLE001 - a failed compile must not cost the device call
            if step_model is model:
                raise
            print(f"target: torch.compile failed ({type(error).__name__}: {error}); training eagerly")
            step_model = model
            optimizer.zero_grad(set_to_none=True)
            loss = forward_backward(step_model, rows, sites, args.site_weight)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        seen_tokens += rows[:, 1:].numel()
        if step % 200 == 0:
            print(f"target: step {step} {elapsed:.0f}s loss {loss.item():.3f} "
                  f"{seen_tokens / max(elapsed, 1e-9) / 1e3:.0f}k tokens/s", flush=True)
    train_seconds = time.time() - train_start
    val_loss, _ = evaluate(model, val_batches)
    val_task_loss, site_accuracy = evaluate(model, val_task_batches)
    print(f"target: {step} steps, {seen_tokens / 1e6:.1f}M tokens in {train_seconds:.0f}s "
          f"({seen_tokens / train_seconds / 1e3:.0f}k tokens/s); validation loss {val_loss:.3f} on files, "
          f"{val_task_loss:.3f} on renames; rename sites right {site_accuracy:.3f} (teacher-forced)")
    export(model, args.tokenizer, args.out)  # first, so a failing diagnostic below cannot lose the model
    print(f"target: exported to {args.out}")

    exact, checks = 0, []
    try:
        show_completions(model, tokenizer, sample_prompts(args.corpus))
        checks = held_out_renames(args.corpus, args.rename_checks)
        exact, replies = rename_exact_matches(model, tokenizer, checks)
        print(f"target: {exact} of {len(checks)} held-out renames exact (greedy)")
        for reply, task in zip(replies, checks):
            if reply != task["answer"]:
                at, got, want = first_difference(reply, task["answer"])
                print(f"  {task['old_name']} -> {task['new_name']}: differs at {at} of {len(task['answer'])}: "
                      f"{got!r} instead of {want!r}")
    except Exception as error:  # noqa: BLE001 - diagnostics only; the model is already exported
        print(f"target: diagnostics failed: {type(error).__name__}: {error}")

    with open(os.path.join(args.corpus, "manifest.json")) as f:
        manifest = json.load(f)
    metrics = {"parameters": n_params, "steps": step, "train_tokens": seen_tokens, "train_seconds": train_seconds,
               "validation_loss": val_loss, "validation_rename_loss": val_task_loss,
               "rename_site_accuracy": site_accuracy, "site_weight": args.site_weight,
               "held_out_renames_exact": [exact, len(checks)], "seq_len": args.seq_len,
               "batch_size": args.batch_size, "task_share": args.task_share, "peak_lr": args.lr, "size": args.size,
               "init_from": args.init_from, "compile": args.compile, "device": torch.cuda.get_device_name()}
    card = (f"# TensorFold code target ({n_params / 1e6:.1f}M parameters, Qwen3 architecture)\n\n"
            "Trained from scratch by `tools/train/run_all.sh` on Python sources installed on the GPU machine "
            f"({sum(s['file_bytes'] for s in manifest['splits'].values()) / 1e6:.0f} MB after deduplication, "
            "whole packages held out for validation and test) mixed with synthetic rename tasks in ChatML.\n\n"
            f"- layers {model.config.num_hidden_layers}, width {model.config.hidden_size}, "
            f"vocabulary {model.config.vocab_size} (byte-level BPE), tied embeddings\n"
            f"- {step} steps of {args.batch_size} x {args.seq_len} tokens, {seen_tokens / 1e6:.0f}M tokens, "
            f"{train_seconds / 60:.1f} minutes on {metrics['device']}\n"
            f"- validation loss {val_loss:.3f} nats per token on held-out packages ({val_task_loss:.3f} on their "
            f"rename tasks); {exact} of {len(checks)} held-out renames exact\n"
            "- acceptance figures: see the drafter's card and bench/receipts/\n")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(card)
    write_json(os.path.join(args.out, "training_metrics.json"), metrics)


if __name__ == "__main__":
    main()
