#!/usr/bin/env python3
"""Make the tiny random Qwen3.5-class hybrid fixtures with transformers (run on the GPU machine).

Writes OUT/models/<name>/: a checkpoint saved by save_pretrained (the nested multimodal layout
Qwen3_5ForConditionalGeneration with a tiny vision tower, or the flat Qwen3_5ForCausalLM), and
reference.json: logits at every prompt position (one forward over the prompt) and greedy tokens
with the logits of every decode step (transformers' cached, token-by-token path). References run
in float32 on the saved (possibly bf16-rounded) weights. Configs are built in code: the GPU
machine has no network.

Usage: python3 tools/make_hybrid_fixtures.py OUT [--tar FILE]
"""
import json
import os
import sys
import tarfile
import traceback

import torch

# name -> text config, layout, save dtype. Shapes vary what the code must not assume: key/value head
# ratios 1 and 2+ (attention and DeltaNet), head dims that are not 64/128, tied and untied, the
# schedule from layer_types.
MODELS = {
    # nested multimodal layout, every ratio 1, tied, bf16
    "qwen3.5-tiny-a": dict(nested=True, dtype=torch.bfloat16, text=dict(
        hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2, head_dim=48,
        linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=24, linear_value_head_dim=40,
        layer_types=["linear_attention"] * 3 + ["full_attention"], vocab_size=320, tie_word_embeddings=True,
        rope_theta=10000.0, mrope_section=[2, 2, 2])),
    # flat text-only layout, attention GQA 2, DeltaNet 3 value heads per key head, untied, f32,
    # a schedule that is not every fourth layer
    "qwen3.5-tiny-b": dict(nested=False, dtype=torch.float32, text=dict(
        hidden_size=80, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=40,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=20, linear_value_head_dim=28,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                     "full_attention"], vocab_size=288, tie_word_embeddings=False,
        rope_theta=1000000.0, mrope_section=[2, 2, 1])),
    # nested layout, attention GQA 3, DeltaNet ratio 2, untied, bf16
    "qwen3.5-tiny-c": dict(nested=True, dtype=torch.bfloat16, text=dict(
        hidden_size=48, intermediate_size=112, num_attention_heads=6, num_key_value_heads=2, head_dim=24,
        linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=12,
        layer_types=["linear_attention"] * 3 + ["full_attention"], vocab_size=256, tie_word_embeddings=False,
        rope_theta=5000000.0, mrope_section=[1, 1, 1])),
    # the real Qwen3 vocabulary, so a server can run it through a real tokenizer
    "qwen3.5-tiny-chat": dict(nested=True, dtype=torch.bfloat16, text=dict(
        hidden_size=16, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        layer_types=["linear_attention"] * 3 + ["full_attention"], vocab_size=151936, tie_word_embeddings=True,
        rope_theta=10000000.0, mrope_section=[2, 1, 1])),
}


def text_config_dict(spec):
    spec = dict(spec)
    theta = spec.pop("rope_theta")
    section = spec.pop("mrope_section")
    vocab = spec["vocab_size"]
    return dict(spec, num_hidden_layers=len(spec["layer_types"]), hidden_act="silu",
                max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.08,
                linear_conv_kernel_dim=4, attention_bias=False,
                rope_parameters={"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.25,
                                 "mrope_section": section, "mrope_interleaved": True},
                bos_token_id=None, eos_token_id=151645 if vocab > 151645 else vocab - 1, pad_token_id=None)


def build(name, spec, seed):
    import transformers as T
    torch.manual_seed(seed)
    text = text_config_dict(spec["text"])
    if spec["nested"]:
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
                      spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=text["hidden_size"],
                      num_position_embeddings=16)
        config = T.Qwen3_5Config(text_config=text, vision_config=vision,
                                 tie_word_embeddings=text["tie_word_embeddings"])
        model = T.Qwen3_5ForConditionalGeneration(config)
    else:
        config = T.Qwen3_5TextConfig(**text)
        model = T.Qwen3_5ForCausalLM(config)
    config._attn_implementation = "eager"
    # Random values with some spread, so every part of the layer matters to the logits: zero-centred
    # (1 + w) norms get w ~ 0.2 N(0, 1), the DeltaNet's gated norm (plain w) 1 + 0.2 N(0, 1), decays
    # that keep a memory across the prompt (A in [0.1, 1.5]) and varied dt_bias.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "visual" in pname:
                continue
            if pname.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith("norm.weight"):
                p.copy_(0.2 * torch.randn_like(p))
            elif pname.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.1, 1.5).log())
            elif pname.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
    return model


def reference(model, vocab, seed):
    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(0, min(vocab, 151643), (1, 23), generator=g)
    with torch.no_grad():
        logits = model(input_ids=prompt).logits[0].float()
        gen = model.generate(input_ids=prompt, max_new_tokens=24, do_sample=False, eos_token_id=None,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    tokens = gen.sequences[0, prompt.shape[1]:].tolist()
    margins, step_top = [], []
    for s in gen.scores:
        row = s[0].float()
        top2 = torch.topk(row, 2).values
        margins.append(float(top2[0] - top2[1]))
        top = torch.topk(row, 16)
        step_top.append({"ids": top.indices.tolist(), "values": top.values.tolist()})
    small = vocab < 5000
    return {
        "prompt_ids": prompt[0].tolist(),
        "logits": logits.tolist() if small else None,
        "argmax": logits.argmax(-1).tolist(),
        "logits_last_top": torch.topk(logits[-1], 32).indices.tolist(),
        "logits_last_top_values": torch.topk(logits[-1], 32).values.tolist(),
        "greedy_tokens": tokens,
        "greedy_top2_margins": margins,
        "greedy_step_top": step_top,
        "transformers_version": __import__("transformers").__version__,
    }


def make(name, spec, out, seed):
    model = build(name, spec, seed)
    model = model.to(spec["dtype"])
    d = os.path.join(out, "models", name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    # The reference runs in float32 on the saved weights, loaded back as a user would load them.
    import transformers as T
    cls = T.Qwen3_5ForConditionalGeneration if spec["nested"] else T.Qwen3_5ForCausalLM
    loaded = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    ref = reference(loaded, spec["text"]["vocab_size"], seed)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(name, "ok:", sorted(os.listdir(d)), "greedy", ref["greedy_tokens"][:8],
          "min margin", min(ref["greedy_top2_margins"][:8]), flush=True)


def main():
    out = sys.argv[1]
    tar_path = sys.argv[sys.argv.index("--tar") + 1] if "--tar" in sys.argv else None
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    failures = 0
    for i, (name, spec) in enumerate(MODELS.items()):
        try:
            make(name, spec, out, 4321 + 100 * i)
        except Exception:
            failures += 1
            print(name, "FAILED", flush=True)
            traceback.print_exc()
    if tar_path:
        with tarfile.open(tar_path, "w") as tar:
            tar.add(os.path.join(out, "models"), arcname="models")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
