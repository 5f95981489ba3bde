"""Make the drafter parity fixture: a tiny random drafter for qwen3-tiny-a and its reference outputs."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import write_json  # noqa: E402
from dflash import DFlashDrafter, export, lm_head_weight, reference_forward, target_taps  # noqa: E402

TARGET_DIR = "tests/fixtures/models/qwen3-tiny-a"
PROMPT_IDS = [17, 301, 5, 88, 240, 99, 3, 150, 62, 7, 330, 41]


def fresh_rotary_frequencies(model):
    """from_pretrained may leave the rotary inverse frequencies in the load dtype; recompute them in float32."""
    for module in model.modules():
        if hasattr(module, "inv_freq"):
            fresh = type(module)(config=model.config)
            module.inv_freq = fresh.inv_freq.to(torch.float32)
            if hasattr(module, "original_inv_freq"):
                module.original_inv_freq = fresh.inv_freq.to(torch.float32)


def tiny_drafter_config(target_config):
    # head layout differs from the target's (GQA 2, head_dim 24) so the engine cannot lean on the target's
    return {
        "architectures": ["DFlashDrafter"], "block_size": 16, "target_layer_ids": [0, 1],
        "mask_token_id": target_config.vocab_size - 1, "hidden_size": target_config.hidden_size,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 24, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "target_hidden_size": target_config.hidden_size, "vocab_size": target_config.vocab_size,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="tests/fixtures/drafter")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM
    torch.manual_seed(args.seed)

    # bf16 weights upcast to float32: the reference runs in float32 on bf16-rounded values
    target = AutoModelForCausalLM.from_pretrained(TARGET_DIR, dtype=torch.float32, attn_implementation="eager").eval()
    fresh_rotary_frequencies(target)
    config = tiny_drafter_config(target.config)
    drafter = DFlashDrafter(config)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("norm.weight") else 0.08 * torch.randn_like(p))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    drafter_dir = os.path.join(args.out, "tiny-a-drafter")
    export(drafter, drafter_dir)

    prompt = torch.tensor([PROMPT_IDS])
    with torch.no_grad():
        logits, taps = target_taps(target, prompt, config["target_layer_ids"])
    taps = taps[0]
    # the block starts with the target's own next token after the prompt, as in the engine
    first_token = int(logits[0, -1].argmax())
    block_ids = torch.tensor([first_token] + [config["mask_token_id"]] * (config["block_size"] - 1))
    embedding = target.get_input_embeddings().weight
    outputs = reference_forward(drafter, embedding, lm_head_weight(target), taps, block_ids)
    reference = {
        "description": "DFlash drafter parity dump: float32 on bf16-rounded weights; see tools/train/README.md",
        # where the repository keeps these files, whatever --out was on the machine that made them
        "target": TARGET_DIR, "drafter": "tests/fixtures/drafter/tiny-a-drafter",
        "prompt_ids": PROMPT_IDS,
        "context_positions": list(range(len(PROMPT_IDS))),
        "block_start_position": len(PROMPT_IDS),
        "taps": taps.tolist(),
        "block_input_ids": block_ids.tolist(),
        "context_features": outputs["context_features"].tolist(),
        "block_hidden": outputs["block_hidden"].tolist(),
        "block_logits": outputs["block_logits"].tolist(),
        "block_argmax": outputs["block_logits"].argmax(-1).tolist(),
    }
    write_json(os.path.join(args.out, "tiny-a-drafter-reference.json"), reference)
    size = sum(os.path.getsize(os.path.join(d, f)) for d in (args.out, drafter_dir) for f in os.listdir(d)
               if os.path.isfile(os.path.join(d, f)))
    print(f"drafter fixture: {size / 1e3:.0f} kB under {args.out}; block argmax {reference['block_argmax']}")


if __name__ == "__main__":
    main()
