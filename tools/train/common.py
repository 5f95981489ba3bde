"""Pieces shared by the training scripts: ChatML rendering, token caches, packed batches, time-based LR."""
import json
import math
import os
import random

# Special tokens of the trained tokenizer, in the order they are appended after the BPE vocabulary.
END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MASK = "<|mask|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END, MASK]


def render_chatml(messages, add_generation_prompt=False):
    """The exact text the chat_template in tokenizer_config.json renders (Qwen3 without thinking)."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    if add_generation_prompt:
        text += f"{IM_START}assistant\n"
    return text


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def split_path(corpus_dir, split):
    return os.path.join(corpus_dir, f"{split}.jsonl")


def load_tokens(corpus_dir, tokenizer_dir, split, cache_dir):
    """All documents of one split as one int32 tensor, each document followed by <|endoftext|>.

    Cached under cache_dir, so the target and the drafter stage tokenize the corpus once."""
    import torch
    os.makedirs(cache_dir, exist_ok=True)
    cache = os.path.join(cache_dir, f"{split}.pt")
    if os.path.exists(cache):
        return torch.load(cache)
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    end_id = tokenizer.token_to_id(END_OF_TEXT)
    texts = [record["text"] for record in read_jsonl(split_path(corpus_dir, split))]
    ids = []
    batch = 2048  # encode_batch runs in parallel in Rust; batches bound the Python-side memory
    for start in range(0, len(texts), batch):
        for encoding in tokenizer.encode_batch(texts[start:start + batch], add_special_tokens=False):
            ids.extend(encoding.ids)
            ids.append(end_id)
    tokens = torch.tensor(ids, dtype=torch.int32)
    torch.save(tokens, cache)
    return tokens


class PackedBatches:
    """Random windows of seq_len tokens from one long token stream (documents packed end to end)."""

    def __init__(self, tokens, seq_len, batch_size, seed):
        assert len(tokens) > seq_len + 1, f"only {len(tokens)} tokens for sequences of {seq_len}"
        self.tokens = tokens
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.rng = random.Random(seed)

    def next(self, device):
        import torch
        starts = [self.rng.randrange(len(self.tokens) - self.seq_len - 1) for _ in range(self.batch_size)]
        rows = torch.stack([self.tokens[s:s + self.seq_len + 1] for s in starts]).long()
        return rows.to(device, non_blocking=True)

    def fixed(self, n_batches, device):
        """The same evaluation batches on every call: windows at evenly spaced offsets."""
        import torch
        n_rows = n_batches * self.batch_size
        stride = max(1, (len(self.tokens) - self.seq_len - 1) // n_rows)
        rows = [self.tokens[i * stride:i * stride + self.seq_len + 1] for i in range(n_rows)]
        rows = [r for r in rows if len(r) == self.seq_len + 1]
        for start in range(0, len(rows), self.batch_size):
            yield torch.stack(rows[start:start + self.batch_size]).long().to(device)


def learning_rate(peak, elapsed_fraction, warmup_fraction=0.03, floor=0.1):
    """Linear warm-up then cosine decay to floor*peak, driven by the share of the wall-clock budget used,
    so a run ends its schedule exactly when its time is up whatever the machine's speed."""
    if elapsed_fraction < warmup_fraction:
        return peak * max(elapsed_fraction / warmup_fraction, 0.01)
    progress = min(1.0, (elapsed_fraction - warmup_fraction) / (1.0 - warmup_fraction))
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def set_learning_rate(optimizer, value):
    for group in optimizer.param_groups:
        group["lr"] = value


def count_parameters(module):
    return sum(p.numel() for p in module.parameters())
