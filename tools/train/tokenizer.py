"""Train the byte-level BPE tokenizer (Qwen3's normalizer and pre-tokenizer) on the corpus; save it for the engine."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import END_OF_TEXT, IM_END, SPECIAL_TOKENS, read_jsonl, render_chatml, split_path, write_json  # noqa: E402

QWEN3_TOKENIZER = "tests/fixtures/models/qwen3-tiny-chat/tokenizer.json"

# Qwen3's template with the thinking and tool branches removed; render_chatml in common.py is its twin.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def training_texts(corpus_dir, max_bytes):
    """Train-split texts until max_bytes, spread over the file so every package contributes."""
    records = list(read_jsonl(split_path(corpus_dir, "train")))
    total = sum(len(r["text"]) for r in records)
    step = max(1, round(total / max_bytes)) if max_bytes else 1
    return [r["text"] for r in records[::step]]


def qwen3_pipeline(repo_root):
    """Normalizer, pre-tokenizer, post-processor and decoder of Qwen3's tokenizer.json, read as data."""
    with open(os.path.join(repo_root, QWEN3_TOKENIZER), encoding="utf-8") as f:
        qwen = json.load(f)
    return {key: qwen[key] for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}, qwen["model"]


def train(texts, vocab_size, pipeline):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    split_regex = pipeline["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    # special tokens are appended after the BPE entries (as in Qwen3), so BPE gets the rest of the budget
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def finish(tokenizer, pipeline, qwen_model, out_dir):
    """Add the special tokens, then make every non-vocabulary field byte-for-byte Qwen3's."""
    from tokenizers import AddedToken, Tokenizer
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    spec = json.loads(tokenizer.to_str())
    spec.update(pipeline)
    for key, value in qwen_model.items():
        if key not in ("vocab", "merges"):
            spec["model"][key] = value
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return Tokenizer.from_file(path)


def write_config(tokenizer, out_dir):
    added = {str(tokenizer.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                             "single_word": False, "special": True} for t in SPECIAL_TOKENS}
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
        "additional_special_tokens": SPECIAL_TOKENS[1:], "bos_token": None, "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False, "eos_token": IM_END, "errors": "replace",
        "model_max_length": 4096, "pad_token": END_OF_TEXT, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    })


def check(tokenizer, out_dir):
    """Round trips, special tokens as single ids, and the template matching render_chatml."""
    sample = "def héllo(x):\n    return x  # ünïcode ✓\n\t\r\n"
    assert tokenizer.decode(tokenizer.encode(sample).ids) == sample, "round trip failed"
    for t in SPECIAL_TOKENS:
        assert tokenizer.encode(t).ids == [tokenizer.token_to_id(t)], f"{t} is not one token"
    messages = [{"role": "user", "content": "Rename a to b"}, {"role": "assistant", "content": "b = 1\n"}]
    try:
        from transformers import AutoTokenizer
        rendered = AutoTokenizer.from_pretrained(out_dir).apply_chat_template(messages, tokenize=False)
        assert rendered == render_chatml(messages), f"template renders {rendered!r}"
    except ImportError:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab-size", type=int, default=15360,
                        help="total entries with the specials; 15360 x 512 bf16 keeps the embedding under 16 MB")
    parser.add_argument("--max-bytes", type=int, default=60_000_000, help="training text sampled from the train split")
    parser.add_argument("--repo-root", default=".")
    args = parser.parse_args()
    pipeline, qwen_model = qwen3_pipeline(args.repo_root)
    texts = training_texts(args.corpus, args.max_bytes)
    tokenizer = finish(train(texts, args.vocab_size, pipeline), pipeline, qwen_model, args.out)
    write_config(tokenizer, args.out)
    check(tokenizer, args.out)
    sample = texts[0][:2000]
    print(f"tokenizer: {tokenizer.get_vocab_size()} entries, trained on {sum(map(len, texts)) / 1e6:.1f} MB; "
          f"{len(sample) / len(tokenizer.encode(sample).ids):.2f} characters per token on a sample")


if __name__ == "__main__":
    main()
