# Runs a PPO Playground verl export through verl's own trainer config and OmegaConf (issue #34), without verl:
#   python3 scripts/verl_config_check.py VERL_GIT_DIR COMMIT INPUT.json
# VERL_GIT_DIR is a clone (or bare mirror) of volcengine/verl; COMMIT the one the rule list was read from.
# INPUT.json: {"overrides": {dotted key: value}, "rules": {dotted key: {"type", "nullable"}}} (src/common/exports/rules.ts).
# 1. loads verl/trainer/config/_generated_ppo_trainer.yaml at COMMIT (the resolved config of main_ppo);
# 2. applies each override in struct mode, as Hydra does for an override without "+" (an unknown key is an error);
# 3. reports values still "???" (mandatory) that the run reads;
# 4. converts each ruled key's merged value with OmegaConf into the type verl's dataclass gives it (int, float,
#    str, bool, list, dict; Optional where nullable), as omega_conf_to_dataclass does at start-up.
# Prints one JSON line: {"errors": [...], "merged": {key: value}} (merged: every ruled key, interpolations resolved).
import json
import subprocess
import sys
from dataclasses import field, make_dataclass
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, OmegaConf

TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": List[Any], "dict": Dict[str, Any]}


def main(git_dir, commit, input_path):
    data = json.load(open(input_path))
    text = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:verl/trainer/config/_generated_ppo_trainer.yaml"],
        check=True, capture_output=True, text=True,
    ).stdout
    cfg = OmegaConf.create(text)
    OmegaConf.set_struct(cfg, True)
    errors = []
    for key, value in data["overrides"].items():
        try:
            OmegaConf.update(cfg, key, value, merge=False)
        except Exception as e:  # unknown key or a node that refuses the value
            errors.append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0]}")
    # Mandatory values the run reads (the reward model's own rollout only with the reward loop on).
    rm_loop = bool(OmegaConf.select(cfg, "reward_model.enable")) and bool(
        OmegaConf.select(cfg, "reward_model.use_reward_loop")
    )

    def walk(node, prefix):
        for k in node.keys():
            path = f"{prefix}.{k}" if prefix else str(k)
            if OmegaConf.is_missing(node, k):
                if path.startswith("reward_model.rollout.") and not rm_loop:
                    continue
                errors.append(f"{path} is mandatory (???) and not set")
                continue
            child = node._get_node(k)
            if OmegaConf.is_dict(child) and not child._is_interpolation():
                walk(child, path)

    walk(cfg, "")
    merged = {}
    for key, rule in data["rules"].items():
        try:
            value = OmegaConf.select(cfg, key, throw_on_missing=False)
        except Exception as e:
            errors.append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        if value == "???":
            value = None
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        merged[key] = value
        t = TYPES[rule["type"]]
        if rule.get("nullable"):
            t = Optional[t]
        K = make_dataclass("K", [("v", t, field(default=MISSING))])
        if value is None and not rule.get("nullable"):
            if not rule.get("mandatory"):
                errors.append(f"{key}: None for a non-optional {rule['type']}")
            continue
        try:
            OmegaConf.merge(OmegaConf.structured(K), {"v": value})
        except Exception as e:
            errors.append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0]}")
    print(json.dumps({"errors": errors, "merged": merged}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
