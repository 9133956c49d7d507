"""PyTorch's own f16-base vs f32 difference (issue #36's accuracy bound; tests/f16-base-*.slow.test.ts).

usage: python scripts/torch_f16_base_diff.py MODEL_DIR BATCH_JSON

MODEL_DIR holds config.json and model.safetensors (f32); BATCH_JSON is {"ids": [[...]], "mask": [[...]],
"targets": [[...]]} (left padding allowed). Prints JSON {"lp32": [[...]], "lp16": [[...]]}: log softmax of each
target under the model in float32, and under the same weights cast to float16 (`model.half()`, how an f16 base
runs in PyTorch eager: weights and arithmetic in f16), both on the CPU. Positions are cumsum(mask) - 1, as the
engine computes them.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def logprobs(model, ids, mask, targets):
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def main():
    model_dir, batch_path = sys.argv[1], sys.argv[2]
    with open(batch_path) as f:
        batch = json.load(f)
    ids = torch.tensor(batch["ids"])
    mask = torch.tensor(batch["mask"])
    targets = torch.tensor(batch["targets"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    lp32 = logprobs(model, ids, mask, targets)
    model = model.half()
    lp16 = logprobs(model, ids, mask, targets)
    print(json.dumps({"lp32": lp32.tolist(), "lp16": lp16.tolist()}))


if __name__ == "__main__":
    main()
