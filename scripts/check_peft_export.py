"""
Loads a LoRA checkpoint written by `train` with "lora" into Hugging Face transformers + peft, and checks it:
  0. the folder holds no adapter_config.json at its top (transformers with peft installed would apply it on top
     of the already merged model.safetensors), and AutoModelForCausalLM.from_pretrained(CHECKPOINT) loads no adapter
     and gives exactly the logits of the same model.safetensors in a folder of its own;
  1. PeftModel.from_pretrained(base = ref_model.safetensors, CHECKPOINT/adapter) gives the same logits as
     AutoModelForCausalLM.from_pretrained(CHECKPOINT) (our merge), and so does peft's merge_and_unload;
  2. those logits differ from the base's (the adapter is not a no-op);
  3. the value adapter (CHECKPOINT/value_adapter: SEQ_CLS, modules_to_save score), when the run has one, loads
     with PeftModel.from_pretrained(GPT2ForSequenceClassification(base, num_labels=1), CHECKPOINT/value_adapter)
     with every tensor of its file in place (no missing or unexpected key).
Any family: GPT-2 (Conv1D, fan_in_fan_out true) and Llama / Qwen2 / Qwen3 (nn.Linear) through transformers' Auto classes.
Usage: python3 scripts/check_peft_export.py CHECKPOINT_DIR   (needs torch, transformers, peft; exit 1 on failure)
docs/formats.md §6 describes the files.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

ck = sys.argv[1]
tmp = tempfile.mkdtemp()


def folder(name, weights):
    """A folder of its own: the checkpoint's config.json and `weights` as model.safetensors."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    shutil.copy(os.path.join(ck, "config.json"), d)
    shutil.copy(os.path.join(ck, weights), os.path.join(d, "model.safetensors"))
    return d


base_dir = folder("base", "ref_model.safetensors")
merged_dir = folder("merged", "model.safetensors")
cfg = json.load(open(os.path.join(ck, "config.json")))
V = cfg["vocab_size"]

torch.manual_seed(0)
ids = torch.randint(0, min(V, 500) - 2, (3, 24))
ok = True
top = sorted(n for n in os.listdir(ck) if "adapter" in n and os.path.isfile(os.path.join(ck, n)))
print(f"adapter files at the top of the checkpoint: {top}")
ok &= not top
with torch.no_grad():
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    lm = AutoModelForCausalLM.from_pretrained(ck).eval()
    alone = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    hooked = bool(getattr(lm, "_hf_peft_config_loaded", False))
    d_alone = (lm(ids).logits - alone(ids).logits).abs().max().item()
    print(f"from_pretrained(checkpoint): peft adapter loaded = {hooked}; max |it - model.safetensors alone| = {d_alone:.3e}")
    ok &= not hooked and d_alone == 0.0

    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), os.path.join(ck, "adapter")).eval()
    lp, lm_, lb = peft(ids).logits, lm(ids).logits, base(ids).logits
    d_merged = (lp - lm_).abs().max().item()
    d_base = (lp - lb).abs().max().item()
    scale = lm_.abs().max().item()
    print(f"policy adapter: max |peft - our merged| = {d_merged:.3e} (logits up to {scale:.2f}); |peft - base| = {d_base:.3e}")
    ok &= d_merged <= 1e-4 * max(1.0, scale)
    ok &= d_base > 1e-3
    # the merge peft itself makes
    d_unload = (peft.merge_and_unload()(ids).logits - lm_).abs().max().item()
    print(f"peft merge_and_unload vs our merged: {d_unload:.3e}")
    ok &= d_unload <= 1e-4 * max(1.0, scale)

vdir = os.path.join(ck, "value_adapter")
if os.path.exists(os.path.join(vdir, "adapter_config.json")):
    seq = AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=1)
    seq.config.pad_token_id = cfg.get("pad_token_id", V - 1)
    vm = PeftModel.from_pretrained(seq, vdir).eval()
    sd = vm.state_dict()
    file = load_file(os.path.join(vdir, "adapter_model.safetensors"))
    missing = []
    for k, t in file.items():
        k2 = k.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        k2 = k2.replace("score.weight", "score.modules_to_save.default.weight")
        if k2 not in sd or not torch.equal(sd[k2].float(), t.float()):
            missing.append(k)
    print(f"value adapter: {len(file)} tensors, {len(missing)} not in place {missing[:3]}")
    ok &= not missing
    with torch.no_grad():
        v = vm(ids).logits
    print(f"value adapter: scores {v.flatten().tolist()}")
else:
    print("value adapter: none (valueModel separate, or a critic-free algorithm)")
print("PEFT CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
