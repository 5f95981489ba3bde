"""Pieces shared by the training scripts: ChatML rendering, token caches, packed batches, time-based LR."""
import json
import math
import os
import random
import time

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


class TokenStream:
    """Documents of one kind packed end to end (each followed by <|endoftext|>), where each starts, and
    which tokens lie in a rename site (the new name written in a rename task's reply)."""

    def __init__(self, tokens, starts, sites):
        self.tokens = tokens  # int32 [n]
        self.starts = starts  # int64 [documents]
        self.sites = sites    # uint8 [n], 1 inside a rename site

    def __len__(self):
        return len(self.tokens)


def site_flags(offsets, sites):
    """1 for each token whose characters [start, end) overlap one of the sites (character ranges sorted
    by start), else 0; offsets are the tokenizer's, in order."""
    flags, k = [], 0
    for start, end in offsets:
        while k < len(sites) and sites[k][1] <= start:
            k += 1
        flags.append(1 if k < len(sites) and sites[k][0] < end and start < sites[k][1] else 0)
    return flags


def load_tokens(corpus_dir, tokenizer_dir, split, cache_dir):
    """{"file": TokenStream, "rename": TokenStream} for one split: source files and rename tasks apart, so
    training can mix them in a chosen share and show every task from its request on.

    Cached under cache_dir, so the target and the drafter stage tokenize the corpus once."""
    import torch
    os.makedirs(cache_dir, exist_ok=True)
    cache = os.path.join(cache_dir, f"{split}.pt")
    if os.path.exists(cache):
        saved = torch.load(cache)
        return {kind: TokenStream(*saved[kind]) for kind in saved}
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    end_id = tokenizer.token_to_id(END_OF_TEXT)
    documents = {"file": [], "rename": []}
    for record in read_jsonl(split_path(corpus_dir, split)):
        documents[record["kind"]].append((record["text"], record.get("rename_sites", [])))
    streams = {}
    batch = 2048  # encode_batch runs in parallel in Rust; batches bound the Python-side memory
    for kind, records in documents.items():
        ids, starts, flags = [], [], []
        for first in range(0, len(records), batch):
            chunk = records[first:first + batch]
            encodings = tokenizer.encode_batch([text for text, _ in chunk], add_special_tokens=False)
            for encoding, (_, sites) in zip(encodings, chunk):
                starts.append(len(ids))
                ids.extend(encoding.ids)
                ids.append(end_id)
                flags.extend(site_flags(encoding.offsets, sites) if sites else [0] * len(encoding.ids))
                flags.append(0)
        streams[kind] = TokenStream(torch.tensor(ids, dtype=torch.int32), torch.tensor(starts, dtype=torch.int64),
                                    torch.tensor(flags, dtype=torch.uint8))
    torch.save({kind: (s.tokens, s.starts, s.sites) for kind, s in streams.items()}, cache)
    return streams


class PackedBatches:
    """Windows of seq_len + 1 tokens from one TokenStream: at random offsets, or with aligned=True at
    document starts, so a rename task is seen from its request on, never as a copy without its source.
    With sites=True a batch is (tokens, rename-site flags) of the same windows."""

    def __init__(self, stream, seq_len, batch_size, seed, aligned=False):
        assert len(stream) > seq_len + 1, f"only {len(stream)} tokens for sequences of {seq_len}"
        self.stream = stream
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.rng = random.Random(seed)
        self.starts = None
        if aligned:
            self.starts = stream.starts[stream.starts < len(stream) - seq_len - 1].tolist()
            assert self.starts, "no document starts a full window"

    def _start(self):
        if self.starts is not None:
            return self.rng.choice(self.starts)
        return self.rng.randrange(len(self.stream) - self.seq_len - 1)

    def _windows(self, offsets, sites):
        import torch
        width = self.seq_len + 1
        tokens = torch.stack([self.stream.tokens[o:o + width] for o in offsets]).long()
        if not sites:
            return tokens
        return tokens, torch.stack([self.stream.sites[o:o + width] for o in offsets])

    def rows(self, n, sites=False):
        return self._windows([self._start() for _ in range(n)], sites)

    def next(self, device):
        return self.rows(self.batch_size).to(device, non_blocking=True)

    def fixed(self, n_batches, device, sites=False):
        """The same evaluation batches on every call: windows at evenly spaced offsets (or document starts)."""
        n_rows = n_batches * self.batch_size
        if self.starts is not None:
            offsets = self.starts[::max(1, len(self.starts) // n_rows)][:n_rows]
        else:
            stride = max(1, (len(self.stream) - self.seq_len - 1) // n_rows)
            offsets = [i * stride for i in range(n_rows)]
        offsets = [o for o in offsets if o + self.seq_len + 1 <= len(self.stream)]
        for start in range(0, len(offsets), self.batch_size):
            batch = self._windows(offsets[start:start + self.batch_size], sites)
            yield tuple(t.to(device) for t in batch) if sites else batch.to(device)


class MixedBatches:
    """Batches of file windows at random offsets plus a fixed share of rows that start at a rename task;
    with sites=True, (tokens, rename-site flags)."""

    def __init__(self, streams, seq_len, batch_size, task_share, seed):
        self.n_tasks = round(batch_size * task_share) if len(streams["rename"]) > seq_len + 1 else 0
        self.files = PackedBatches(streams["file"], seq_len, batch_size - self.n_tasks, seed)
        self.tasks = PackedBatches(streams["rename"], seq_len, self.n_tasks, seed + 1, aligned=True) \
            if self.n_tasks else None

    def next(self, device, sites=False):
        import torch
        parts = [self.files.rows(self.files.batch_size, sites=sites)]
        if self.tasks is not None:
            parts.append(self.tasks.rows(self.n_tasks, sites=sites))
        if not sites:
            return torch.cat(parts).to(device, non_blocking=True)
        return tuple(torch.cat([p[i] for p in parts]).to(device, non_blocking=True) for i in (0, 1))


def time_budget(minutes, end_by):
    """Seconds a training loop may run: its own budget, cut so the device call ends by end_by (epoch
    seconds, 0: no deadline) whatever the earlier stages took."""
    budget = minutes * 60
    if end_by:
        left = end_by - time.time()
        assert left > 30, f"only {left:.0f} s left for training before the deadline"
        budget = min(budget, left)
    return budget


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
