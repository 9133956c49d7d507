/**
 * LoRA adapters for GPT-2's Conv1D layers with PEFT's semantics (`fan_in_fan_out: true`; docs/formats.md §6):
 *   W_eff [in, out] = W + (B · A)ᵀ · scaling,   scaling = loraAlpha / r,
 * A [r, in] drawn as PEFT draws it (torch's kaiming_uniform_ with a = √5, i.e. uniform(−1/√in, 1/√in)),
 * B [out, r] zero, so a fresh adapter set leaves the model exactly as it was (the policy equals the reference
 * on step 1 and KL starts at 0).
 *
 * The adapters are trainable tf.Variables; the base weights stay in their GPT2 (built non-trainable for LoRA)
 * and are shared: `base.withLora(adapters)` (gpt2.ts) is a view that applies them, the base alone is the
 * reference, and a second adapter set on the same base is a second view (the value model's trunk; see
 * ScalarModel.onSharedBase). `enabled = false` switches a set off without touching any weight.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LMConfig } from './config';
import { isLlamaFamily } from './llama-config';
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';
import type { LowRank } from './ops';
import {
  ALL_LORA_TARGET_NAMES,
  LLAMA_LORA_TARGET_NAMES,
  LORA_TARGET_NAMES,
  type LoraTargetName,
} from '../../common/config';

/** GPT-2's Conv1D layers LoRA can adapt, in the names the config key `loraTargets` and PEFT's target_modules use. */
export const LORA_TARGETS = LORA_TARGET_NAMES;
/** The Llama/Qwen2/Qwen3 nn.Linear layers LoRA can adapt (PEFT's default set for these families). */
export const LLAMA_LORA_TARGETS = LLAMA_LORA_TARGET_NAMES;
/** Every target name, in the order adapters are laid out within a block. */
export const ALL_LORA_TARGETS = ALL_LORA_TARGET_NAMES;
export type LoraTarget = LoraTargetName;

/** The layers a model's family can adapt. */
export function familyLoraTargets(config: Pick<LMConfig, 'model_type'>): readonly LoraTarget[] {
  return isLlamaFamily(config.model_type) ? LLAMA_LORA_TARGETS : LORA_TARGETS;
}

/**
 * The targets a run's `loraTargets` means for this model. GPT-2's four (the config default) on a Llama-family
 * model mean all seven of its linear layers; otherwise every name must belong to the model's family.
 */
export function resolveLoraTargets(
  config: Pick<LMConfig, 'model_type'>,
  targets: readonly LoraTarget[],
): LoraTarget[] {
  const own = familyLoraTargets(config);
  if (
    own !== LORA_TARGETS &&
    targets.length === LORA_TARGETS.length &&
    LORA_TARGETS.every((t) => targets.includes(t))
  ) {
    return [...own];
  }
  const foreign = targets.filter((t) => !own.includes(t));
  if (foreign.length > 0) {
    throw new UserError(
      `"loraTargets" names ${JSON.stringify(foreign)}, which a ${config.model_type} model does not have; ` +
        `its layers are ${JSON.stringify(own)}.`,
    );
  }
  return own.filter((t) => targets.includes(t));
}

/** The config keys of docs/formats.md §5/§6: `lora` = rank r (0 = off, full fine-tuning). */
export interface LoraConfig {
  lora: number;
  loraAlpha: number;
  loraTargets: LoraTarget[];
}

/** Defaults for the LoRA config keys: off; when turned on, scaling = 16 / r, all four Conv1D layers. */
export const LORA_DEFAULTS: LoraConfig = { lora: 0, loraAlpha: 16, loraTargets: [...LORA_TARGETS] };

/** Each target's module inside block i, as GPT2Model names it (`h.{i}.` + this). */
const MODULE_OF: Record<LoraTarget, string> = {
  c_attn: 'attn.c_attn',
  'attn.c_proj': 'attn.c_proj',
  c_fc: 'mlp.c_fc',
  'mlp.c_proj': 'mlp.c_proj',
  q_proj: 'self_attn.q_proj',
  k_proj: 'self_attn.k_proj',
  v_proj: 'self_attn.v_proj',
  o_proj: 'self_attn.o_proj',
  gate_proj: 'mlp.gate_proj',
  up_proj: 'mlp.up_proj',
  down_proj: 'mlp.down_proj',
};

/**
 * The module key of a target in block i: `h.{i}.attn.c_attn`, … for GPT-2, `layers.{i}.self_attn.q_proj`, … for the
 * Llama families (the weight is `${key}.weight`).
 */
export function loraModuleKey(target: LoraTarget, layer: number): string {
  return (LORA_TARGETS as readonly string[]).includes(target)
    ? `h.${layer}.${MODULE_OF[target]}`
    : `layers.${layer}.${MODULE_OF[target]}`;
}

/** The layer's [in, out] for a target (a Conv1D's weight shape; an nn.Linear's weight is [out, in]). */
export function loraModuleShape(config: LMConfig, target: LoraTarget): { in: number; out: number } {
  const C = config.n_embd;
  if (isLlamaFamily(config.model_type)) {
    const c = config as Extract<LMConfig, { head_dim: number }>;
    const q = c.num_attention_heads * c.head_dim;
    const kv = c.num_key_value_heads * c.head_dim;
    const I = c.intermediate_size;
    const shapes: Partial<Record<LoraTarget, { in: number; out: number }>> = {
      q_proj: { in: C, out: q },
      k_proj: { in: C, out: kv },
      v_proj: { in: C, out: kv },
      o_proj: { in: q, out: C },
      gate_proj: { in: C, out: I },
      up_proj: { in: C, out: I },
      down_proj: { in: I, out: C },
    };
    const s = shapes[target];
    if (!s) throw new UserError(`LoRA: a ${config.model_type} model has no layer "${target}".`);
    return s;
  }
  switch (target) {
    case 'c_attn':
      return { in: C, out: 3 * C };
    case 'attn.c_proj':
      return { in: C, out: C };
    case 'c_fc':
      return { in: C, out: 4 * C };
    case 'mlp.c_proj':
      return { in: 4 * C, out: C };
    default:
      throw new UserError(
        `LoRA: a GPT-2 model has no layer "${target}"; its layers are ${JSON.stringify(LORA_TARGETS)}.`,
      );
  }
}

/** Every adapted module of a model with these targets, block by block, in LORA_TARGETS order. */
export function loraModules(
  config: LMConfig,
  targets: readonly LoraTarget[],
): { key: string; target: LoraTarget; in: number; out: number }[] {
  const ordered = resolveLoraTargets(config, targets);
  const out: { key: string; target: LoraTarget; in: number; out: number }[] = [];
  for (let i = 0; i < config.n_layer; i++) {
    for (const t of ordered) out.push({ key: loraModuleKey(t, i), target: t, ...loraModuleShape(config, t) });
  }
  return out;
}

/**
 * Bound of torch.nn.init.kaiming_uniform_(w, a) for fan_in = `fanIn` (mode "fan_in", leaky_relu):
 * gain = √(2 / (1 + a²)), std = gain / √fan_in, bound = √3 · std = √(6 / ((1 + a²) · fan_in)).
 * PEFT's a = √5 gives √(6 / (6 · fan_in)) = 1/√fan_in.
 */
export function kaimingUniformBound(fanIn: number, a: number): number {
  return Math.sqrt(6 / ((1 + a * a) * fanIn));
}

/** Checks the LoRA config keys; throws a UserError naming the key and what is allowed. Returns them normalised. */
export function checkLoraConfig(cfg: Partial<LoraConfig>, where = 'config'): LoraConfig {
  const r = cfg.lora ?? LORA_DEFAULTS.lora;
  const alpha = cfg.loraAlpha ?? LORA_DEFAULTS.loraAlpha;
  const targets = cfg.loraTargets ?? LORA_DEFAULTS.loraTargets;
  if (!Number.isSafeInteger(r) || r < 0) {
    throw new UserError(
      `${where}: "lora" is ${JSON.stringify(r)}; it is the LoRA rank r, a whole number ≥ 1 (0 turns LoRA off).`,
    );
  }
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha <= 0) {
    throw new UserError(
      `${where}: "loraAlpha" is ${JSON.stringify(alpha)}; it must be a number > 0 (scaling = loraAlpha / r).`,
    );
  }
  if (!Array.isArray(targets) || targets.length === 0) {
    throw new UserError(
      `${where}: "loraTargets" must be a non-empty list drawn from ${JSON.stringify(LORA_TARGETS)} (GPT-2) or ${JSON.stringify(LLAMA_LORA_TARGETS)} (Llama, Qwen2, Qwen3).`,
    );
  }
  for (const t of targets) {
    if (!(ALL_LORA_TARGETS as readonly string[]).includes(t)) {
      throw new UserError(
        `${where}: "loraTargets" names ${JSON.stringify(t)}; the layers LoRA can adapt are ${JSON.stringify(LORA_TARGETS)} (GPT-2) or ${JSON.stringify(LLAMA_LORA_TARGETS)} (Llama, Qwen2, Qwen3).`,
      );
    }
  }
  if (new Set(targets).size !== targets.length) {
    throw new UserError(`${where}: "loraTargets" lists a layer twice (${JSON.stringify(targets)}).`);
  }
  return { lora: r, loraAlpha: alpha, loraTargets: ALL_LORA_TARGETS.filter((t) => targets.includes(t)) };
}

/** One adapted Conv1D: A [r, in] and B [out, r]. */
export interface LoraModule {
  target: LoraTarget;
  a: tf.Variable;
  b: tf.Variable;
  in: number;
  out: number;
}

/** Host copies of one module's pair (PEFT layout, row-major). */
export interface LoraArrays {
  a: Float32Array;
  b: Float32Array;
}

let adapterCounter = 0;

export class LoraAdapters {
  readonly r: number;
  readonly alpha: number;
  /** loraAlpha / r. */
  readonly scaling: number;
  readonly targets: LoraTarget[];
  /** Unique prefix of the variables' names (`${id}/h.0.attn.c_attn.lora_A.weight`, …). */
  readonly id: string;
  /** By module key (`h.{i}.attn.c_attn`, …), block by block in LORA_TARGETS order. */
  readonly modules: Map<string, LoraModule>;
  /** false: the views using this set compute the base model (nothing is changed or copied). */
  enabled = true;

  private constructor(cfg: LoraConfig, modules: Map<string, LoraModule>, id: string) {
    this.r = cfg.lora;
    this.alpha = cfg.loraAlpha;
    this.scaling = cfg.loraAlpha / cfg.lora;
    this.targets = [...cfg.loraTargets];
    this.modules = modules;
    this.id = id;
  }

  /**
   * A fresh set for `config`: A uniform(−1/√in, 1/√in) from a seeded Rng (same seed → same numbers on every
   * backend and platform), B zero. `lora.lora` must be ≥ 1.
   */
  static create(config: LMConfig, lora: Partial<LoraConfig>, seed: number, label = 'lora'): LoraAdapters {
    const cfg = checkLoraConfig(lora);
    if (cfg.lora < 1) throw new UserError('LoRA adapters need a rank "lora" ≥ 1 (0 means LoRA is off).');
    const rng = new Rng(seed);
    const arrays = new Map<string, LoraArrays>();
    for (const m of loraModules(config, cfg.loraTargets)) {
      const bound = kaimingUniformBound(m.in, Math.sqrt(5));
      const a = new Float32Array(cfg.lora * m.in);
      for (let j = 0; j < a.length; j++) a[j] = (2 * rng.next() - 1) * bound;
      arrays.set(m.key, { a, b: new Float32Array(m.out * cfg.lora) });
    }
    return LoraAdapters.fromArrays(config, cfg, arrays, label);
  }

  /** A set from host arrays (already validated: every module of `cfg` present with the right sizes). */
  static fromArrays(
    config: LMConfig,
    lora: Partial<LoraConfig>,
    arrays: Map<string, LoraArrays>,
    label = 'lora',
    trainable = true,
  ): LoraAdapters {
    const checked = checkLoraConfig(lora);
    const cfg = { ...checked, loraTargets: resolveLoraTargets(config, checked.loraTargets) };
    const id = `${label}_${adapterCounter++}`;
    const modules = new Map<string, LoraModule>();
    const r = cfg.lora;
    try {
      for (const m of loraModules(config, cfg.loraTargets)) {
        const host = arrays.get(m.key);
        if (!host || host.a.length !== r * m.in || host.b.length !== m.out * r) {
          throw new Error(`LoRA: ${m.key} needs A [${r}, ${m.in}] and B [${m.out}, ${r}]`);
        }
        const a = tf.tidy(() =>
          tf.variable(tf.tensor2d(host.a, [r, m.in]), trainable, `${id}/${m.key}.lora_A.weight`),
        );
        const b = tf.tidy(() =>
          tf.variable(tf.tensor2d(host.b, [m.out, r]), trainable, `${id}/${m.key}.lora_B.weight`),
        );
        modules.set(m.key, { target: m.target, a, b, in: m.in, out: m.out });
      }
    } catch (e) {
      for (const m of modules.values()) tf.dispose([m.a, m.b]);
      throw e;
    }
    return new LoraAdapters(cfg, modules, id);
  }

  /** The config keys this set was built with. */
  config(): LoraConfig {
    return { lora: this.r, loraAlpha: this.alpha, loraTargets: [...this.targets] };
  }

  /** The pair to apply in module `key` (null when the set is off or does not adapt it). */
  lowRank(key: string): LowRank | null {
    if (!this.enabled) return null;
    const m = this.modules.get(key);
    return m
      ? { a: m.a as tf.Tensor as tf.Tensor2D, b: m.b as tf.Tensor as tf.Tensor2D, scaling: this.scaling }
      : null;
  }

  /** A, B of every module (the trainable variables of a LoRA model). */
  variables(): tf.Variable[] {
    const out: tf.Variable[] = [];
    for (const m of this.modules.values()) out.push(m.a, m.b);
    return out;
  }

  /** Bytes the adapters hold (float32). */
  bytes(): number {
    let n = 0;
    for (const m of this.modules.values()) n += (m.a.size + m.b.size) * 4;
    return n;
  }

  async toArrays(): Promise<Map<string, LoraArrays>> {
    const out = new Map<string, LoraArrays>();
    for (const [key, m] of this.modules) {
      out.set(key, { a: (await m.a.data()) as Float32Array, b: (await m.b.data()) as Float32Array });
    }
    return out;
  }

  /** Overwrite every pair from host arrays; everything is checked before anything is assigned. */
  assignArrays(arrays: Map<string, LoraArrays>): void {
    for (const [key, m] of this.modules) {
      const host = arrays.get(key);
      if (!host || host.a.length !== m.a.size || host.b.length !== m.b.size) {
        throw new Error(`LoRA: ${key} needs A [${m.a.shape}] and B [${m.b.shape}]`);
      }
    }
    for (const [key, m] of this.modules) {
      const host = arrays.get(key)!;
      tf.tidy(() => {
        m.a.assign(tf.tensor2d(host.a, m.a.shape as [number, number]));
        m.b.assign(tf.tensor2d(host.b, m.b.shape as [number, number]));
      });
    }
  }

  dispose(): void {
    for (const m of this.modules.values()) tf.dispose([m.a, m.b]);
    this.modules.clear();
  }
}
