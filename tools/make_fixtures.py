#!/usr/bin/env python3
"""Make the test fixtures with the reference libraries (run on the GPU machine).

Writes, under --out:
  models/<name>/            tiny random Qwen3 checkpoints (bf16 safetensors) and reference.json
                            (logits for every prompt position and greedy tokens from transformers)
  tokenizer/qwen3_vectors.json   >= 300 strings with ids from the `tokenizers` library
  tokenizer/qwen3_chat.json      chat renders from transformers' apply_chat_template

The references are computed in float32 on the bf16-rounded weights, so the engine's
float32 activations should agree to float32 rounding.
"""
import argparse
import json
import os
import random
import unicodedata

import torch

QWEN3_TOKENIZER_DIR = "tests/fixtures/models/qwen3-tiny-chat"

# name -> (config overrides, tied, shard size or None, classic config keys)
TINY_MODELS = {
    # GQA ratio 1, head_dim 32, tied embeddings
    "qwen3-tiny-a": dict(hidden_size=96, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=3, num_key_value_heads=3, head_dim=32,
                         rope_theta=10000.0, tie_word_embeddings=True, vocab_size=384),
    # GQA ratio 5, odd head_dim 24, untied, sharded
    "qwen3-tiny-b": dict(hidden_size=80, intermediate_size=136, num_hidden_layers=3,
                         num_attention_heads=10, num_key_value_heads=2, head_dim=24,
                         rope_theta=1000000.0, tie_word_embeddings=False, vocab_size=320),
    # GQA ratio 2, head_dim 40, untied, another theta
    "qwen3-tiny-c": dict(hidden_size=64, intermediate_size=200, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=40,
                         rope_theta=500000.0, tie_word_embeddings=False, vocab_size=300),
    # the real Qwen3 vocabulary, so the default model can talk through the real tokenizer
    "qwen3-tiny-chat": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            rope_theta=1000000.0, tie_word_embeddings=True, vocab_size=151936),
}
SHARDED = {"qwen3-tiny-b": "40KB"}


def make_model(name, spec, out_dir, seed):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    spec = dict(spec)
    theta = spec.pop("rope_theta")
    cfg = Qwen3Config(**spec, max_position_embeddings=4096, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": theta},
                      initializer_range=0.08, bos_token_id=None,
                      eos_token_id=151645 if spec["vocab_size"] > 151645 else spec["vocab_size"] - 1,
                      attn_implementation="eager")
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    model = model.to(torch.bfloat16)
    d = os.path.join(out_dir, "models", name)
    os.makedirs(d, exist_ok=True)
    kw = {"max_shard_size": SHARDED[name]} if name in SHARDED else {}
    model.save_pretrained(d, safe_serialization=True, **kw)
    # real Qwen3 checkpoints keep rope_theta at the top level; write both spellings
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    c["rope_theta"] = theta
    c["architectures"] = ["Qwen3ForCausalLM"]
    json.dump(c, open(cpath, "w"), indent=2)

    model = model.to(torch.float32).eval()
    # .to(bfloat16) also rounded the rotary inverse frequencies, which a checkpoint loaded with
    # from_pretrained keeps in float32; recompute them so the reference is what users run.
    for module in model.modules():
        if hasattr(module, "inv_freq"):
            fresh = type(module)(config=model.config)
            module.inv_freq = fresh.inv_freq.to(torch.float32)
            if hasattr(module, "original_inv_freq"):
                module.original_inv_freq = fresh.inv_freq.to(torch.float32)
    g = torch.Generator().manual_seed(seed + 1)
    vocab = spec["vocab_size"]
    hi = min(vocab, 151643)
    prompt = torch.randint(0, hi, (1, 23), generator=g)
    with torch.no_grad():
        logits = model(prompt).logits[0]
        gen = model.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=None,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    tokens = gen.sequences[0, prompt.shape[1]:].tolist()
    margins = []
    for s in gen.scores:
        top2 = torch.topk(s[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    ref = {
        "prompt_ids": prompt[0].tolist(),
        "logits_last": logits[-1].tolist() if vocab < 5000 else None,
        "logits": logits.tolist() if vocab < 5000 else None,
        "argmax": logits.argmax(-1).tolist(),
        "logits_last_top": torch.topk(logits[-1], 32).indices.tolist(),
        "logits_last_top_values": torch.topk(logits[-1], 32).values.tolist(),
        "greedy_tokens": tokens,
        "greedy_top2_margins": margins,
    }
    json.dump(ref, open(os.path.join(d, "reference.json"), "w"))


def tokenizer_strings(seed):
    rng = random.Random(seed)
    s = [
        "Hello world", "hello   world", "  leading spaces", "trailing spaces   ", "\ttabs\tand\ttext",
        "line one\nline two\n\nline four", "crlf line\r\nnext\r\n\r\nend", "\r\n\r\n", "   \n   \n",
        "I'M HERE, YOU'RE THERE, WE'VE GOT IT, THEY'LL SEE, HE'D GO, IT'S OK",
        "don't can't won't shouldn't I'd you'll we're they've it's",
        "1234567890", "3.14159 2.71828 1e-10 0x1F", "Price: $1,234.56 (approx.)",
        "def foo(x, y=2):\n    return x ** y  # power\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "<html><body><div class=\"x\">Hi</div></body></html>",
        "SELECT * FROM users WHERE id = 42;",
        "日本語のテキストです。", "中文文本，包含标点符号。", "한국어 텍스트입니다",
        "مرحبا بالعالم", "नमस्ते दुनिया", "Привет, мир!", "Γειά σου Κόσμε", "שלום עולם",
        "👨‍👩‍👧‍👦 family", "👍🏽 thumbs", "🏳️‍🌈 flag", "❤️‍🔥", "🤖🤖🤖",
        "e\u0301te\u0301", "Cafe\u0301 na\u0131\u0308ve", "A\u030a", "\u1e9b\u0323",
        "<|im_start|>user\nhi<|im_end|>", "text<|endoftext|>more", "<think>\nreason\n</think>\n\nanswer",
        "<|im_start|><|im_end|><|endoftext|>", "a<|fim_prefix|>b<|fim_suffix|>c<|fim_middle|>",
        "<tool_call>{\"name\": \"f\"}</tool_call>", "<|im_start", "|im_end|>", "<|unknown|>",
        "", " ", "  ", "\n", "\n\n\n", "a", "!!!", "...", "---", "===", "~~~", "@@@ #$%^&*()",
        "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
        "snake_case_name camelCaseName PascalCase SCREAMING_CASE kebab-case",
        "    indented\n        more\n\tmixed \t tabs",
        "multiple     spaces     between", "x\u00a0y\u2003z\u3000w", "zero\u200bwidth",
        "\u00c5ngstr\u00f6m \u212b", "\ufb01 ligature", "１２３ ＡＢＣ", "½ ⅓ ² ³",
        "mixed 中文 and English 123", "emoji 😀 in 😃 text 😄", "tab\there", "null\u0000byte",
    ]
    pools = {
        "ascii": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "digits": "0123456789",
        "space": [" ", "  ", "\t", "\n", "\r\n", "   ", "\n\n", " \n"],
        "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
        "cjk": "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从",
        "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "devanagari": "अआइईउऊऋएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसहािीुूेैोौं्",
        "emoji": ["😀", "👨‍💻", "👩‍👩‍👦", "🇯🇵", "✌🏿", "🧑‍🚀", "⭐", "🔥", "✅", "❤️"],
        "combining": ["e\u0301", "a\u0308", "o\u0302", "n\u0303", "c\u0327", "u\u030a", "i\u0300"],
        "special": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"],
        "contractions": ["'s", "'T", "'RE", "'ve", "'M", "'LL", "'d", "'S"],
    }
    keys = list(pools)
    while len(s) < 260:
        parts = []
        for _ in range(rng.randint(1, 12)):
            k = rng.choice(keys)
            p = pools[k]
            n = rng.randint(1, 6)
            if isinstance(p, str):
                parts.append("".join(rng.choice(p) for _ in range(n)))
            else:
                parts.append(rng.choice(p))
            if rng.random() < 0.4:
                parts.append(rng.choice([" ", "  ", "\n", "\r\n", "\t", ""]))
        s.append("".join(parts))
    # real source code: slices of the standard library
    import inspect
    import json as json_mod
    import textwrap
    import collections
    import argparse as ap_mod
    sources = [inspect.getsource(m) for m in (json_mod, textwrap, collections, ap_mod, random)]
    while len(s) < 340:
        src = rng.choice(sources)
        a = rng.randrange(0, len(src) - 50)
        s.append(src[a:a + rng.randint(20, 800)])
    return s


def make_tokenizer_vectors(out_dir, seed):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(QWEN3_TOKENIZER_DIR, "tokenizer.json"))
    rows = []
    for text in tokenizer_strings(seed):
        enc = tok.encode(text, add_special_tokens=False)
        rows.append({"text": text, "ids": enc.ids,
                     "decoded": tok.decode(enc.ids, skip_special_tokens=False),
                     "nfc": unicodedata.normalize("NFC", text)})
    d = os.path.join(out_dir, "tokenizer")
    os.makedirs(d, exist_ok=True)
    json.dump(rows, open(os.path.join(d, "qwen3_vectors.json"), "w"), ensure_ascii=False, indent=0)


def make_chat_renders(out_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(QWEN3_TOKENIZER_DIR)
    convs = [
        [{"role": "user", "content": "Hello!"}],
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Rename foo to bar."}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"},
         {"role": "user", "content": "Write code.\n```py\nx = 1\n```"}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
         {"role": "assistant", "content": "<think>\nthinking hard\n</think>\n\nA1"},
         {"role": "user", "content": "Q2"}],
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nplan\n</think>\n\nfinal"}],
        [{"role": "user", "content": "日本語 😀 and\ttabs\r\nCRLF"}],
        [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}],
    ]
    rows = []
    for conv in convs:
        for gen in (True, False):
            for thinking in (None, True, False):
                kw = {} if thinking is None else {"enable_thinking": thinking}
                text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, **kw)
                rows.append({"messages": conv, "add_generation_prompt": gen,
                             "enable_thinking": thinking, "text": text})
    d = os.path.join(out_dir, "tokenizer")
    os.makedirs(d, exist_ok=True)
    json.dump(rows, open(os.path.join(d, "qwen3_chat.json"), "w"), ensure_ascii=False, indent=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    make_tokenizer_vectors(args.out, args.seed)
    make_chat_renders(args.out)
    for i, (name, spec) in enumerate(TINY_MODELS.items()):
        make_model(name, spec, args.out, args.seed + 100 * i)
    print("fixtures written to", args.out)


if __name__ == "__main__":
    main()
