"""DFlash-style block drafter: model, training on a frozen target's taps, export, and the reference forward."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (MASK, MixedBatches, PackedBatches, count_parameters, learning_rate, load_tokens,  # noqa: E402
                    set_learning_rate, time_budget, write_json)

CONFIG_FIELDS = ("block_size", "target_layer_ids", "mask_token_id", "hidden_size", "intermediate_size",
                 "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                 "rope_theta", "target_hidden_size", "vocab_size")


def validate_config(config, source="drafter config"):
    missing = [f for f in CONFIG_FIELDS if f not in config]
    assert not missing, f"{source} lacks {', '.join(missing)}"
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0, "query heads must group over KV heads"
    assert config["head_dim"] % 2 == 0, "RoPE needs an even head_dim"
    return config


class RMSNorm(nn.Module):
    """Qwen3's RMSNorm: normalize in float32, round to the input type, then scale; the result keeps the
    input type, as with bf16 weights at inference, also while training float32 weights under autocast."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x32.to(x.dtype)).to(x.dtype)


def rotary_tables(positions, head_dim, theta, dtype):
    """cos and sin [batch, n, head_dim] for integer positions; angles in float32 as in transformers."""
    inverse_frequency = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device)
                                         .float() / head_dim))
    angles = positions.float()[..., None] * inverse_frequency
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x, cos, sin):
    """x [batch, n, heads, head_dim]; the half-split pairing (i, i + head_dim/2) of transformers' rotate_half."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, :, None, :] + rotated * sin[:, :, None, :]


class DrafterAttention(nn.Module):
    """Non-causal attention of block queries over [context K/V] + [block K/V]; both come from this layer's
    k_proj/v_proj, so the target's features are injected afresh into every layer."""

    def __init__(self, config):
        super().__init__()
        hidden, self.head_dim = config["hidden_size"], config["head_dim"]
        self.n_heads, self.n_kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.q_proj = nn.Linear(hidden, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config["rms_norm_eps"])
        self.k_norm = RMSNorm(self.head_dim, config["rms_norm_eps"])

    def keys_values(self, x, rope):
        batch, n = x.shape[:2]
        keys = apply_rotary(self.k_norm(self.k_proj(x).view(batch, n, self.n_kv_heads, self.head_dim)), *rope)
        return keys, self.v_proj(x).view(batch, n, self.n_kv_heads, self.head_dim)

    def forward(self, block, context, block_rope, context_rope, mask):
        batch, n_block = block.shape[:2]
        queries = apply_rotary(self.q_norm(self.q_proj(block).view(batch, n_block, self.n_heads, self.head_dim)),
                               *block_rope)
        context_keys, context_values = self.keys_values(context, context_rope)
        block_keys, block_values = self.keys_values(block, block_rope)
        keys = torch.cat([context_keys, block_keys], dim=1)
        values = torch.cat([context_values, block_values], dim=1)
        out = F.scaled_dot_product_attention(queries.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             attn_mask=mask, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, n_block, self.n_heads * self.head_dim))


class DrafterMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config["hidden_size"], config["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(config["hidden_size"], config["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(config["intermediate_size"], config["hidden_size"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])
        self.self_attn = DrafterAttention(config)
        self.post_attention_layernorm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])
        self.mlp = DrafterMLP(config)

    def forward(self, x, context, block_rope, context_rope, mask):
        # the context features are already normed by hidden_norm; only the block goes through input_layernorm
        x = x + self.self_attn(self.input_layernorm(x), context, block_rope, context_rope, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """Parameter names equal the exported tensor names (see tools/train/README.md)."""

    def __init__(self, config):
        super().__init__()
        self.config = validate_config(dict(config))
        n_taps = len(config["target_layer_ids"])
        self.fc = nn.Linear(n_taps * config["target_hidden_size"], config["hidden_size"], bias=False)
        self.hidden_norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])
        self.layers = nn.ModuleList(DrafterLayer(config) for _ in range(config["num_hidden_layers"]))
        self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])

    def forward(self, block_embeddings, taps, block_positions, context_positions, mask=None):
        """block_embeddings [batch, n_block, hidden]; taps [batch, n_context, n_taps * target_hidden];
        positions [batch, n]; mask [batch, 1, n_block, n_context + n_block] (True = visible) or None for all.
        Returns the final-normed hidden states of the block entries, for the target's LM head."""
        def rope(positions):
            return rotary_tables(positions, self.config["head_dim"], self.config["rope_theta"], block_embeddings.dtype)
        context = self.hidden_norm(self.fc(taps))
        block_rope, context_rope = rope(block_positions), rope(context_positions)
        x = block_embeddings
        for layer in self.layers:
            x = layer(x, context, block_rope, context_rope, mask)
        return self.norm(x)


def spread_layer_ids(n_target_layers, n_taps):
    """n_taps layers from layer 1 to the last, evenly spaced: early, middle and late features."""
    if n_taps == 1:
        return [n_target_layers - 1]
    return sorted({round(1 + i * (n_target_layers - 2) / (n_taps - 1)) for i in range(n_taps)})


def target_taps(target, input_ids, layer_ids):
    """(logits, taps): taps = outputs of decoder layers layer_ids (before the final norm), concatenated in
    the order of layer_ids along the feature axis: [batch, n, len(layer_ids) * hidden]."""
    captured = {}

    def keep(index):
        return lambda module, inputs, output: captured.__setitem__(index, output[0] if isinstance(output, tuple)
                                                                   else output)
    hooks = [target.model.layers[i].register_forward_hook(keep(i)) for i in set(layer_ids)]
    try:
        logits = target(input_ids=input_ids).logits
    finally:
        for hook in hooks:
            hook.remove()
    return logits, torch.cat([captured[i] for i in layer_ids], dim=-1)


def lm_head_weight(target):
    return target.get_output_embeddings().weight


def drafter_config_for(target_config, mask_token_id, n_layers, block_size, n_taps):
    return validate_config({
        "architectures": ["DFlashDrafter"], "block_size": block_size,
        "target_layer_ids": spread_layer_ids(target_config.num_hidden_layers, n_taps),
        "mask_token_id": mask_token_id, "hidden_size": target_config.hidden_size,
        "intermediate_size": target_config.intermediate_size, "num_hidden_layers": n_layers,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": target_config.num_key_value_heads, "head_dim": target_config.head_dim,
        "rms_norm_eps": target_config.rms_norm_eps,
        "rope_theta": target_config.rope_parameters["rope_theta"],
        "target_hidden_size": target_config.hidden_size, "vocab_size": target_config.vocab_size,
    })


def init_weights(drafter, std):
    for name, p in drafter.named_parameters():
        if name.endswith("norm.weight"):
            nn.init.ones_(p)
        else:
            nn.init.normal_(p, std=std)


def copy_target_layers(drafter, target):
    """Start the drafter's layers from the target's last layers: same shapes, and a head start at reading
    the target's representation."""
    target_layers = target.model.layers[-len(drafter.layers):]
    for mine, theirs in zip(drafter.layers, target_layers):
        own = mine.state_dict()
        mine.load_state_dict({k: v.to(own[k].dtype) for k, v in theirs.state_dict().items() if k in own})


def export(drafter, out_dir, card=None):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), {"architectures": ["DFlashDrafter"], **drafter.config})
    tensors = {name: p.detach().to(torch.bfloat16).cpu().contiguous() for name, p in drafter.state_dict().items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    if card:
        with open(os.path.join(out_dir, "README.md"), "w") as f:
            f.write(card)


def load(drafter_dir, device="cpu"):
    from safetensors.torch import load_file
    path = os.path.join(drafter_dir, "config.json")
    with open(path) as f:
        drafter = DFlashDrafter(validate_config(json.load(f), path))
    drafter.load_state_dict(load_file(os.path.join(drafter_dir, "model.safetensors")))
    return drafter.to(device)


@torch.no_grad()
def reference_forward(drafter, embedding_weight, head_weight, taps, block_ids):
    """The parity reference for the C++ engine: float32 on CPU, no mask.

    taps [n_context, n_taps * target_hidden] are those of positions 0..n_context-1; the block
    block_ids [block_size] sits at positions n_context..n_context+block_size-1. Returns float32 tensors."""
    drafter = drafter.float().cpu().eval()
    n_context, n_block = taps.shape[0], block_ids.shape[0]
    context_positions = torch.arange(n_context)[None]
    block_positions = torch.arange(n_context, n_context + n_block)[None]
    embeddings = F.embedding(block_ids[None], embedding_weight.float().cpu())
    context_features = drafter.hidden_norm(drafter.fc(taps.float()[None]))[0]
    hidden = drafter(embeddings, taps.float()[None], block_positions, context_positions)[0]
    logits = hidden @ head_weight.float().cpu().T
    return {"context_features": context_features, "block_hidden": hidden, "block_logits": logits}


# ----------------------------------------------------------------------------- training

def position_weights(block_size, gamma, device):
    """0 for the given first entry, exp(-(k-1)/gamma) for entry k >= 1: early tokens decide acceptance."""
    k = torch.arange(block_size, device=device, dtype=torch.float32)
    weights = torch.exp(-(k - 1) / gamma)
    weights[0] = 0.0
    return weights


def make_blocks(tokens, n_blocks, block_size, mask_token_id, generator, first_anchor=1):
    """Random anchors per row, from first_anchor on, and the drafter's inputs for them.

    tokens [batch, n]. Anchor a: block entry 0 is tokens[a] at position a, entries 1.. are masks at
    a+1..a+block_size-1; the block sees the context positions 0..a-1 and all of its own entries.
    Returns anchors [batch, n_blocks], block ids, block positions [batch, n_blocks * block_size], mask."""
    batch, n = tokens.shape
    device = tokens.device
    n_anchors = n - block_size - first_anchor + 1
    assert n_anchors >= n_blocks, f"{n_blocks} blocks per row need {n_blocks + block_size + first_anchor - 1} tokens"
    anchors = torch.stack([torch.randperm(n_anchors, generator=generator)[:n_blocks] + first_anchor
                           for _ in range(batch)]).to(device).sort(dim=-1).values
    offsets = torch.arange(block_size, device=device)
    positions = (anchors[..., None] + offsets).flatten(1)
    block_ids = torch.full_like(positions, mask_token_id)
    block_ids.view(batch, n_blocks, block_size)[..., 0] = tokens.gather(1, anchors)
    context_visible = torch.arange(n, device=device)[None, None, :] < anchors[..., None]
    context_visible = context_visible.repeat_interleave(block_size, dim=1)
    block_index = torch.arange(n_blocks * block_size, device=device) // block_size
    own_block = (block_index[:, None] == block_index[None, :]).expand(batch, -1, -1)
    mask = torch.cat([context_visible, own_block], dim=-1)[:, None]
    return anchors, block_ids, positions, mask


def block_step(drafter, target, tokens, config, n_blocks, label_source, weights, generator, first_anchor=1):
    """Weighted block loss and acceptance statistics for one batch of token rows [batch, n], with blocks
    anchored from first_anchor on."""
    block_size = config["block_size"]
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        target_logits, taps = target_taps(target, tokens, config["target_layer_ids"])
    # label of position t: what the target would emit there (its argmax after t-1), or the data itself
    labels = tokens.clone()
    if label_source == "target":
        labels[:, 1:] = target_logits[:, :-1].argmax(-1)
    del target_logits
    anchors, block_ids, positions, mask = make_blocks(tokens, n_blocks, block_size, config["mask_token_id"],
                                                      generator, first_anchor)
    block_labels = labels.gather(1, positions)
    context_positions = torch.arange(tokens.shape[1], device=tokens.device)[None].expand(tokens.shape[0], -1)
    embedding = target.get_input_embeddings().weight
    with torch.autocast("cuda", dtype=torch.bfloat16):
        hidden = drafter(F.embedding(block_ids, embedding), taps, positions, context_positions, mask)
        logits = F.linear(hidden, lm_head_weight(target))
    losses = F.cross_entropy(logits.float().flatten(0, 1), block_labels.flatten(), reduction="none")
    losses = losses.view(-1, block_size)
    loss = (losses * weights).sum() / (weights.sum() * losses.shape[0])
    correct = (logits.argmax(-1) == block_labels).view(-1, block_size)[:, 1:]
    accepted = correct.long().cumprod(dim=-1).sum(-1).float()
    return loss, {"accepted": accepted.mean().item(), "position_accuracy": correct.float().mean(0).tolist()}


@torch.no_grad()
def greedy_rows(target, prompts, new_tokens):
    """prompts [batch, n] on the GPU -> [batch, n + new_tokens] rows: each prompt and its greedy continuation."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, do_sample=False)
    return out[:, :prompts.shape[1] + new_tokens].cpu()


@torch.no_grad()
def self_distilled_rows(target, files, prompt_len, new_tokens, minutes, batch_size, seed):
    """Rows of prompt_len corpus tokens (a window of the files) followed by the target's own greedy
    continuation of new_tokens: the text the drafter meets when the engine decodes."""
    if minutes <= 0:
        return None
    prompts = PackedBatches(files, prompt_len, batch_size, seed)
    rows, deadline, start = [], time.time() + minutes * 60, time.time()
    while time.time() < deadline:
        rows.append(greedy_rows(target, prompts.next("cuda")[:, :prompt_len], new_tokens))
    rows = torch.cat(rows)
    print(f"drafter: {len(rows)} self-distilled rows of {prompt_len} + {new_tokens} tokens in "
          f"{time.time() - start:.0f} s (seed {seed})")
    return rows


@torch.no_grad()
def evaluate(drafter, target, batches, config, n_blocks, weights, first_anchor=1):
    drafter.eval()
    generator = torch.Generator().manual_seed(0)  # the same anchors at every evaluation
    losses, accepted, accuracy = [], [], []
    for rows in batches:
        loss, stats = block_step(drafter, target, rows[:, :-1], config, n_blocks, "target", weights, generator,
                                 first_anchor)
        losses.append(loss.item())
        accepted.append(stats["accepted"])
        accuracy.append(stats["position_accuracy"])
    drafter.train()
    n = max(len(losses), 1)
    per_position = [sum(a[k] for a in accuracy) / n for k in range(config["block_size"] - 1)]
    return {"loss": sum(losses) / n, "mean_accepted_drafts": sum(accepted) / n,
            "acceptance_length": 1 + sum(accepted) / n, "position_accuracy": per_position}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True, help="exported target directory (with tokenizer.json)")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--cache", required=True, help="tokenized splits written by target.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock budget of the training loop")
    parser.add_argument("--end-by", type=float, default=0, help="epoch seconds the training loop must end by")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--taps", type=int, default=3, help="number of target layers tapped")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--blocks-per-row", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--task-share", type=float, default=0.2, help="share of corpus rows that are renames")
    parser.add_argument("--distill-batch", type=int, default=1024, help="rows per greedy generation call")
    parser.add_argument("--distill-prompt", type=int, default=768, help="corpus tokens before a greedy continuation")
    parser.add_argument("--distill-tokens", type=int, default=256,
                        help="tokens of each greedy continuation (spec-eval's code cases take 128)")
    parser.add_argument("--distill-seed", type=int, default=1235,
                        help="seed of the prompt windows; give each call its own for fresh rows")
    parser.add_argument("--eval-distilled", type=int, default=256,
                        help="held-out prompts continued greedily once, for the acceptance on the target's own text")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=7.0, help="decay length of the position weights")
    parser.add_argument("--labels", choices=("target", "data"), default="target")
    parser.add_argument("--distill-minutes", type=float, default=0.0, help="time spent generating target rows")
    parser.add_argument("--distill-reuse", type=int, default=8,
                        help="times each generated row is shown at most; then corpus rows only")
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--init-from", help="continue from an exported drafter of this target's shapes")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM
    torch.manual_seed(args.seed)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).cuda().eval()
    target.requires_grad_(False)
    with open(os.path.join(args.target, "tokenizer.json")) as f:
        mask_token_id = next(t["id"] for t in json.load(f)["added_tokens"] if t["content"] == MASK)
    config = drafter_config_for(target.config, mask_token_id, args.layers, args.block_size, args.taps)
    if args.init_from:
        drafter = load(args.init_from, "cuda")
        differ = [k for k in config if drafter.config.get(k) != config[k]]
        assert not differ, f"{args.init_from}: {differ} differ from this target and --layers/--taps/--block-size"
    else:
        drafter = DFlashDrafter(config).cuda()
        init_weights(drafter, std=0.02)
        copy_target_layers(drafter, target)
    print(f"drafter: {count_parameters(drafter) / 1e6:.1f}M parameters, taps of layers {config['target_layer_ids']}")

    train = load_tokens(args.corpus, args.target, "train", args.cache)
    val = load_tokens(args.corpus, args.target, "val", args.cache)
    data_batches = MixedBatches(train, args.seq_len, args.batch_size, args.task_share, args.seed)
    val_batches = list(PackedBatches(val["file"], args.seq_len, args.batch_size, args.seed)
                       .fixed(args.eval_batches, "cuda"))
    # The target's greedy continuations of held-out windows: the drafter's job in the engine, so the
    # acceptance there predicts spec-eval's far better than the teacher-forced one on the corpus.
    own_prompts = PackedBatches(val["file"], args.distill_prompt, args.eval_distilled, args.seed)
    own_prompts = next(own_prompts.fixed(1, "cuda"))
    own_rows = greedy_rows(target, own_prompts[:, :args.distill_prompt], args.distill_tokens)
    own_batches = [b.cuda() for b in own_rows.split(args.batch_size)]
    distilled = self_distilled_rows(target, train["file"], args.distill_prompt, args.distill_tokens,
                                    args.distill_minutes, args.distill_batch, args.distill_seed)
    weights = position_weights(args.block_size, args.gamma, "cuda")
    generator = torch.Generator().manual_seed(args.seed)
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01, fused=True)

    def evaluate_both():
        corpus = evaluate(drafter, target, val_batches, config, args.blocks_per_row, weights)
        # evaluate() drops each row's last token, as corpus rows carry one for the next-token label
        own = evaluate(drafter, target, [torch.nn.functional.pad(b, (0, 1)) for b in own_batches], config,
                       args.blocks_per_row, weights, first_anchor=args.distill_prompt)
        return corpus, own
    before, own_before = evaluate_both()
    print(f"drafter: before: teacher-forced acceptance {before['acceptance_length']:.2f} on held-out files, "
          f"{own_before['acceptance_length']:.2f} on the target's own continuations of them")

    # Corpus rows alternate with the target's own rows until those have been shown distill_reuse times
    # each on average: 256 rows alternated for six minutes were memorized (their loss fell to 1.1 while the
    # validation loss stayed at 3.58), not learned from.
    distilled_steps = 0 if distilled is None else len(distilled) * args.distill_reuse // args.batch_size
    budget, start, step = time_budget(args.minutes, args.end_by), time.time(), 0
    while (elapsed := time.time() - start) < budget:
        set_learning_rate(optimizer, learning_rate(args.lr, elapsed / budget))
        if step % 2 == 1 and step // 2 < distilled_steps:
            pick = torch.randint(len(distilled), (args.batch_size,), generator=generator)
            rows, first_anchor = distilled[pick].cuda(), args.distill_prompt
        else:
            rows, first_anchor = data_batches.next("cuda")[:, :-1], 1
        loss, stats = block_step(drafter, target, rows, config, args.blocks_per_row, args.labels, weights,
                                 generator, first_anchor)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % 100 == 0:
            print(f"drafter: step {step} {elapsed:.0f}s loss {loss.item():.3f} "
                  f"accepted drafts {stats['accepted']:.2f}", flush=True)
    train_seconds = time.time() - start
    after, own_after = evaluate_both()
    print(f"drafter: {step} steps in {train_seconds:.0f}s; validation loss {before['loss']:.3f} -> "
          f"{after['loss']:.3f}, acceptance length (teacher-forced estimate) {after['acceptance_length']:.2f}; "
          f"on the target's own continuations {own_before['acceptance_length']:.2f} -> "
          f"{own_after['acceptance_length']:.2f}")
    print("drafter: accuracy by block position " + " ".join(f"{a:.2f}" for a in after["position_accuracy"]))
    print("drafter: the same on its own continuations " +
          " ".join(f"{a:.2f}" for a in own_after["position_accuracy"]))
    card = (f"# TensorFold code drafter (DFlash-style, block {args.block_size})\n\n"
            f"Block drafter for the target in the sibling folder; format in tools/train/README.md.\n\n"
            f"- {config['num_hidden_layers']} layers, {count_parameters(drafter) / 1e6:.1f}M parameters, taps of "
            f"target layers {config['target_layer_ids']}, mask token {mask_token_id}\n"
            f"- {step} steps of {args.batch_size} rows x {args.blocks_per_row} blocks, labels: {args.labels}, "
            f"position weight decay {args.gamma}, {train_seconds / 60:.1f} minutes\n"
            f"- validation block loss {after['loss']:.3f}; teacher-forced acceptance length "
            f"{after['acceptance_length']:.2f} (held-out packages, greedy target labels), "
            f"{own_after['acceptance_length']:.2f} on the target's greedy continuations of held-out windows\n"
            "- engine acceptance figures: bench/receipts/\n")
    export(drafter, args.out, card)
    write_json(os.path.join(args.out, "training_metrics.json"),
               {"steps": step, "train_seconds": train_seconds, "before": before, "after": after,
                "own_continuations_before": own_before, "own_continuations_after": own_after,
                "init_from": args.init_from, "distill_reuse": args.distill_reuse,
                "labels": args.labels, "gamma": args.gamma, "distill_minutes": args.distill_minutes,
                "distill_rows": 0 if distilled is None else len(distilled), "distill_seed": args.distill_seed})
    print(f"drafter: exported to {args.out}")


if __name__ == "__main__":
    main()
