/**
 * LoRA checkpoint files in PEFT's format (docs/formats.md §6). A checkpoint folder holds:
 * - `model.safetensors`: the merged policy W + (B·A)ᵀ·scaling (mergedWeights; lmSafetensors/exportLM of a LoRA
 *   view write it too), so every tool loads the folder as a plain GPT2LMHeadModel;
 * - `adapter/adapter_config.json`: PEFT's LoraConfig (peft_type LORA, r, lora_alpha, target_modules,
 *   fan_in_fan_out true);
 * - `adapter/adapter_model.safetensors`: `base_model.model.transformer.h.{i}.{attn.c_attn|attn.c_proj|mlp.c_fc|
 *   mlp.c_proj}.lora_A.weight` [r, in] and `.lora_B.weight` [out, r].
 * The pair sits in a subfolder, never beside model.safetensors: transformers with peft installed applies a
 * top-level adapter_config.json on top of the folder's (already merged) weights, counting the adapters twice.
 * Older checkpoints kept the pair at the top; readAdapterSet still reads them (`legacy`).
 * readAdapters checks everything against the base before it assigns anything.
 */
import type { CausalLM } from './causal-lm';
import { parseJsonFile, type ModelFiles } from './folder';
import { isLlamaFamily } from './llama-config';
import {
  LoraAdapters,
  LLAMA_LORA_TARGETS,
  LORA_TARGETS,
  loraModuleShape,
  loraModules,
  type LoraArrays,
  type LoraTarget,
} from './lora';
import { readSafetensors, writeSafetensors, type NamedTensor } from './safetensors';
import { UserError } from '../../common/errors';

/** PEFT's file names inside an adapter folder (what `PeftModel.from_pretrained(base, folder)` reads). */
export const PEFT_CONFIG_NAME = 'adapter_config.json';
export const PEFT_WEIGHTS_NAME = 'adapter_model.safetensors';
/** The policy adapters' folder in a checkpoint (docs/formats.md §6; not at the top, see above). */
export const ADAPTER_DIR = 'adapter';
export const ADAPTER_CONFIG_FILE = `${ADAPTER_DIR}/${PEFT_CONFIG_NAME}`;
export const ADAPTER_WEIGHTS_FILE = `${ADAPTER_DIR}/${PEFT_WEIGHTS_NAME}`;

/** A config + weights pair of files, by path inside the checkpoint folder. */
export interface AdapterPair {
  configFile: string;
  weightsFile: string;
}

/** Where checkpoints before the adapter/ folder kept the policy's pair: at the top, beside model.safetensors. */
export const LEGACY_ADAPTER_FILES: AdapterPair = {
  configFile: PEFT_CONFIG_NAME,
  weightsFile: PEFT_WEIGHTS_NAME,
};

/**
 * Which files an adapter set is written to / read from, and tensors stored beside the adapters (a value model's
 * `score` head, PEFT's modules_to_save). Defaults: the policy's pair in adapter/ (read also from the top, where
 * older checkpoints kept it), CAUSAL_LM, no extra tensors.
 */
export interface AdapterFileOptions {
  configFile?: string;
  weightsFile?: string;
  /**
   * Read only: where older checkpoints kept this pair, tried when `configFile` does not exist. Defaults to
   * LEGACY_ADAPTER_FILES when neither configFile nor weightsFile is given; null: no fallback.
   */
  legacy?: AdapterPair | null;
  /** PEFT's task_type in the config file ("CAUSAL_LM" for the policy, "SEQ_CLS" for a value model). */
  taskType?: string;
  /** PEFT's modules_to_save (e.g. ["score"]); written only when given. */
  modulesToSave?: string[];
  /**
   * Read only: where a warning goes (an adapter_config.json that PEFT itself would correct, e.g. GPT-2 adapters
   * saved with "fan_in_fan_out": false). Default: console.warn, which the CLI prints to stderr.
   */
  onWarning?: (message: string) => void;
}

/** An extra tensor the weights file must hold, with its exact shape. */
export interface ExtraTensorSpec {
  name: string;
  shape: number[];
}

/**
 * PEFT's tensor name of module `key`'s A or B: `h.{i}.attn.c_attn` (GPT-2) under `base_model.model.transformer.`,
 * `layers.{i}.self_attn.q_proj` (Llama families) under `base_model.model.model.`.
 */
export function peftTensorName(key: string, which: 'A' | 'B'): string {
  const root = key.startsWith('layers.') ? 'model' : 'transformer';
  return `base_model.model.${root}.${key}.lora_${which}.weight`;
}

/** Whether an adapter set adapts nn.Linear layers (Llama families: W [out, in]) rather than GPT-2's Conv1D. */
function adaptsLinear(adapters: LoraAdapters): boolean {
  return adapters.targets.some((t) => (LLAMA_LORA_TARGETS as readonly string[]).includes(t));
}

/**
 * The merged policy's weights, by GPT2Model name as GPT2.toArrays gives them: W + (B·A)ᵀ·scaling for every
 * adapted Conv1D, the base's own values for the rest. `adapters` defaults to the view's own; they are merged
 * even while switched off. For model.safetensors: toHfTensors + writeSafetensors, as folder.ts lmSafetensors.
 */
export async function mergedWeights(
  model: CausalLM,
  adapters: LoraAdapters | null = model.lora,
): Promise<Map<string, Float32Array>> {
  const view = model.base.withLora(null);
  const out = await view.toArrays(); // the base's values
  if (!adapters) return out;
  const merged = new Map<string, Float32Array>();
  for (const [key, m] of adapters.modules) {
    const w = out.get(`${key}.weight`)!;
    const a = (await m.a.data()) as Float32Array; // [r, in]
    const b = (await m.b.data()) as Float32Array; // [out, r]
    merged.set(
      `${key}.weight`,
      mergeHost(w, a, b, m.in, m.out, adapters.r, adapters.scaling, adaptsLinear(adapters)),
    );
  }
  for (const [k, v] of merged) out.set(k, v);
  return out;
}

/**
 * W + (B [out, r] · A [r, in]) · s on the host, in float64 sums rounded once (no device copy): W [in, out] with
 * the product transposed for a Conv1D, W [out, in] as it is for an nn.Linear (`linear`).
 */
function mergeHost(
  w: Float32Array,
  a: Float32Array,
  b: Float32Array,
  nIn: number,
  nOut: number,
  r: number,
  s: number,
  linear = false,
): Float32Array {
  const out = new Float32Array(w.length);
  for (let i = 0; i < nIn; i++) {
    for (let o = 0; o < nOut; o++) {
      let d = 0;
      for (let k = 0; k < r; k++) d += b[o * r + k] * a[k * nIn + i];
      const at = linear ? o * nIn + i : i * nOut + o;
      out[at] = w[at] + d * s;
    }
  }
  return out;
}

/** PEFT's adapter_config.json for a set, with the base model's name or path. */
export function adapterConfigJson(
  adapters: LoraAdapters,
  baseName: string,
  opts: AdapterFileOptions = {},
): Record<string, unknown> {
  return {
    peft_type: 'LORA',
    task_type: opts.taskType ?? 'CAUSAL_LM',
    r: adapters.r,
    lora_alpha: adapters.alpha,
    target_modules: [...adapters.targets],
    fan_in_fan_out: !adaptsLinear(adapters),
    bias: 'none',
    lora_dropout: 0,
    base_model_name_or_path: baseName,
    ...(opts.modulesToSave ? { modules_to_save: [...opts.modulesToSave] } : {}),
  };
}

/**
 * `adapter/adapter_config.json` and `adapter/adapter_model.safetensors` of an adapter set (PEFT names and layout);
 * with `opts`, other paths and `extra` tensors written after the adapters (e.g. a value model's score head).
 */
export async function adapterFiles(
  adapters: LoraAdapters,
  baseName: string,
  opts: AdapterFileOptions = {},
  extra: NamedTensor[] = [],
): Promise<Map<string, Uint8Array>> {
  const tensors: NamedTensor[] = [];
  for (const [key, m] of adapters.modules) {
    tensors.push({
      name: peftTensorName(key, 'A'),
      shape: [adapters.r, m.in],
      data: (await m.a.data()) as Float32Array,
    });
    tensors.push({
      name: peftTensorName(key, 'B'),
      shape: [m.out, adapters.r],
      data: (await m.b.data()) as Float32Array,
    });
  }
  tensors.push(...extra);
  const json = JSON.stringify(adapterConfigJson(adapters, baseName, opts), null, 2) + '\n';
  return new Map([
    [opts.configFile ?? ADAPTER_CONFIG_FILE, new TextEncoder().encode(json)],
    [opts.weightsFile ?? ADAPTER_WEIGHTS_FILE, writeSafetensors(tensors, { format: 'pt' })],
  ]);
}

/** target_modules entries PEFT users write for GPT-2, mapped onto ours (`c_proj` matches both projections). */
const TARGET_ALIASES: Record<string, LoraTarget[]> = {
  c_attn: ['c_attn'],
  'attn.c_attn': ['c_attn'],
  'attn.c_proj': ['attn.c_proj'],
  c_fc: ['c_fc'],
  'mlp.c_fc': ['c_fc'],
  'mlp.c_proj': ['mlp.c_proj'],
  c_proj: ['attn.c_proj', 'mlp.c_proj'],
};

const MODULE_TARGET: Record<string, LoraTarget> = {
  'attn.c_attn': 'c_attn',
  'attn.c_proj': 'attn.c_proj',
  'mlp.c_fc': 'c_fc',
  'mlp.c_proj': 'mlp.c_proj',
};

const TENSOR_NAME =
  /^base_model\.model\.transformer\.h\.(\d+)\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.lora_([AB])\.weight$/;

/** The same for the Llama families' nn.Linear layers (PEFT's names: `base_model.model.model.layers.{i}.…`). */
const LLAMA_TARGET_ALIASES: Record<string, LoraTarget[]> = Object.fromEntries(
  LLAMA_LORA_TARGETS.flatMap((t) => [
    [t, [t]],
    [`${t.endsWith('_proj') && ['q', 'k', 'v', 'o'].includes(t[0]) ? 'self_attn' : 'mlp'}.${t}`, [t]],
  ]),
);
const LLAMA_MODULE_TARGET: Record<string, LoraTarget> = Object.fromEntries(
  Object.entries(LLAMA_TARGET_ALIASES)
    .filter(([k]) => k.includes('.'))
    .map(([k, v]) => [k, v[0]]),
);
const LLAMA_TENSOR_NAME =
  /^base_model\.model\.model\.layers\.(\d+)\.(self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.lora_([AB])\.weight$/;

/** What differs between the families when reading PEFT files. */
function peftFamily(modelType: string) {
  return isLlamaFamily(modelType)
    ? {
        linear: true,
        targets: LLAMA_LORA_TARGETS as readonly LoraTarget[],
        aliases: LLAMA_TARGET_ALIASES,
        moduleTarget: LLAMA_MODULE_TARGET,
        tensorName: LLAMA_TENSOR_NAME,
        blockPrefix: 'layers',
        names: 'base_model.model.model.layers.{i}.{self_attn.q_proj|…|mlp.down_proj}.lora_{A|B}.weight',
        what: `a ${modelType} layer`,
      }
    : {
        linear: false,
        targets: LORA_TARGETS as readonly LoraTarget[],
        aliases: TARGET_ALIASES,
        moduleTarget: MODULE_TARGET,
        tensorName: TENSOR_NAME,
        blockPrefix: 'h',
        names:
          'base_model.model.transformer.h.{i}.{attn.c_attn|attn.c_proj|mlp.c_fc|mlp.c_proj}.lora_{A|B}.weight',
        what: 'a GPT-2 Conv1D layer',
      };
}

/**
 * Which pair to read: `pair` when its config file exists, else `legacy` when its config file does; neither: a
 * UserError naming the pair that is missing (and where older checkpoints kept it).
 */
async function findPair(
  files: ModelFiles,
  pair: AdapterPair,
  legacy: AdapterPair | null,
): Promise<{ pair: AdapterPair; bytes: Uint8Array }> {
  const bytes = await files.read(pair.configFile);
  if (bytes) return { pair, bytes };
  const old = legacy ? await files.read(legacy.configFile) : null;
  if (legacy && old) return { pair: legacy, bytes: old };
  const before = legacy
    ? ` (checkpoints of earlier versions: ${legacy.configFile} and ${legacy.weightsFile} at the top)`
    : '';
  throw new UserError(
    `${files.label}: ${pair.configFile} is missing; a LoRA checkpoint needs ${pair.configFile} and ${pair.weightsFile}${before}.`,
  );
}

function parseConfigJson(bytes: Uint8Array, path: string): Record<string, unknown> {
  const raw = parseJsonFile(bytes, path);
  if (!raw || typeof raw !== 'object' || Array.isArray(raw))
    throw new UserError(`${path} must hold a JSON object (PEFT's LoraConfig).`);
  return raw as Record<string, unknown>;
}

/**
 * Read and check a LoRA checkpoint's adapter files against `model`'s base, then load them. Into `model`'s own
 * adapters when it is a LoRA view (its r, lora_alpha and targets must match the files'), else into a new set
 * for `model.withLora(...)`. Every check runs before any value is assigned: on an error (a UserError naming
 * the file and the tensor or key) the model and its adapters are exactly as they were.
 */
export async function readAdapters(files: ModelFiles, model: CausalLM): Promise<LoraAdapters> {
  return (await readAdapterSet(files, model)).adapters;
}

/**
 * readAdapters with other file paths (`opts`) and `extra` tensors that the weights file must also hold with
 * exactly these shapes (e.g. a value model's score head); they are returned by name, checked like the rest
 * before anything is assigned. `configFile`: the path of the config file it read (the legacy one for an older
 * checkpoint), for messages.
 */
export async function readAdapterSet(
  files: ModelFiles,
  model: CausalLM,
  opts: AdapterFileOptions = {},
  extra: ExtraTensorSpec[] = [],
): Promise<{
  adapters: LoraAdapters;
  extra: Map<string, Float32Array>;
  configFile: string;
  warnings: string[];
}> {
  const named = opts.configFile !== undefined || opts.weightsFile !== undefined;
  const found = await findPair(
    files,
    {
      configFile: opts.configFile ?? ADAPTER_CONFIG_FILE,
      weightsFile: opts.weightsFile ?? ADAPTER_WEIGHTS_FILE,
    },
    opts.legacy !== undefined ? opts.legacy : named ? null : LEGACY_ADAPTER_FILES,
  );
  const { configFile, weightsFile } = found.pair;
  const cfgPath = `${files.label}/${configFile}`;
  const wPath = `${files.label}/${weightsFile}`;
  const raw = parseConfigJson(found.bytes, cfgPath);
  const bad = (msg: string): never => {
    throw new UserError(`${cfgPath}: ${msg}`);
  };
  if (raw.peft_type !== 'LORA')
    bad(`"peft_type" is ${JSON.stringify(raw.peft_type)}; only "LORA" adapters can be loaded.`);
  const fam = peftFamily(model.config.model_type);
  // fan_in_fan_out names the base layer's weight layout, not the adapters' (lora_A is [r, in] and lora_B [out, r]
  // either way). PEFT corrects a wrong value with a warning when it builds the layers (peft/tuners/lora/model.py,
  // _create_new_module: "fan_in_fan_out is set to False but the target module is `Conv1D`. Setting fan_in_fan_out
  // to True.", and the reverse for nn.Linear), so the same file gives the same model there; we do the same.
  const warnings: string[] = [];
  const flip = raw.fan_in_fan_out;
  if (typeof flip !== 'boolean' && flip !== undefined && flip !== null)
    bad(`"fan_in_fan_out" is ${JSON.stringify(flip)}; it must be true or false.`);
  if (!fam.linear && flip !== true) {
    warnings.push(
      `${cfgPath}: "fan_in_fan_out" is ${JSON.stringify(flip ?? null)}, but GPT-2's layers are Conv1D (weights ` +
        '[in, out]), which PEFT adapts with "fan_in_fan_out": true; read as true, as PEFT does (it warns and ' +
        'sets it to true). The adapters mean the same either way (W + (B·A)ᵀ·scaling).',
    );
  }
  if (fam.linear && flip === true) {
    warnings.push(
      `${cfgPath}: "fan_in_fan_out" is true, but a ${model.config.model_type} model's layers are nn.Linear ` +
        '(weights [out, in]), which PEFT adapts with "fan_in_fan_out": false; read as false, as PEFT does (it ' +
        'warns and sets it to false). The adapters mean the same either way (W + B·A·scaling).',
    );
  }
  for (const w of warnings) (opts.onWarning ?? console.warn)(`warning: ${w}`);
  const r = raw.r;
  if (typeof r !== 'number' || !Number.isSafeInteger(r) || r < 1)
    bad(`"r" is ${JSON.stringify(r)}; it must be a whole number ≥ 1 (the LoRA rank).`);
  const alpha = raw.lora_alpha;
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha <= 0)
    bad(`"lora_alpha" is ${JSON.stringify(alpha)}; it must be a number > 0.`);
  if (raw.bias !== undefined && raw.bias !== 'none')
    bad(`"bias" is ${JSON.stringify(raw.bias)}; only "none" is supported (no trained biases).`);
  if (raw.use_rslora === true)
    bad('"use_rslora" is true; only PEFT\'s standard scaling lora_alpha / r is supported.');
  if (raw.use_dora === true) bad('"use_dora" is true; DoRA adapters are not supported, only plain LoRA.');
  for (const key of ['rank_pattern', 'alpha_pattern'] as const) {
    const v = raw[key];
    if (v && typeof v === 'object' && Object.keys(v).length)
      bad(`"${key}" is set; one r and lora_alpha for every layer is supported, not per-layer patterns.`);
  }
  const tm = raw.target_modules;
  if (!Array.isArray(tm) || tm.length === 0 || tm.some((t) => typeof t !== 'string')) {
    bad(
      `"target_modules" is ${JSON.stringify(tm)}; it must be a list of layer names drawn from ${JSON.stringify(fam.targets)}.`,
    );
  }
  const targetSet = new Set<LoraTarget>();
  for (const t of tm as string[]) {
    const mapped = fam.aliases[t];
    if (!mapped)
      bad(
        `"target_modules" names ${JSON.stringify(t)}, which is not ${fam.what}; use names from ${JSON.stringify(fam.targets)}.`,
      );
    for (const m of mapped) targetSet.add(m);
  }
  const targets = fam.targets.filter((t) => targetSet.has(t));
  const rank = r as number;
  const config = model.config;

  const bytes = await files.read(weightsFile);
  if (!bytes)
    throw new UserError(
      `${files.label}: ${weightsFile} is missing; a LoRA checkpoint needs it beside ${configFile}.`,
    );
  const st = readSafetensors(bytes, wPath);
  const byModule = new Map<string, { a?: Float32Array; b?: Float32Array }>();
  const extraFound = new Map<string, Float32Array>();
  for (const [name, t] of st.tensors) {
    const fail = (msg: string): never => {
      throw new UserError(`${wPath}: tensor "${name}" ${msg}`);
    };
    const ex = extra.find((e) => e.name === name);
    if (ex) {
      if (t.shape.length !== ex.shape.length || t.shape.some((d, i) => d !== ex.shape[i]))
        fail(`has shape [${t.shape}]; it must be [${ex.shape}].`);
      extraFound.set(name, t.data);
      continue;
    }
    const m = fam.tensorName.exec(name);
    if (!m) fail(`is not a LoRA tensor of ${fam.what}; names are ${fam.names}.`);
    const [, layerStr, module, which] = m!;
    const layer = Number(layerStr);
    if (layer >= config.n_layer)
      fail(
        `is for block ${layer}, but the base model has ${config.n_layer} blocks (${fam.blockPrefix}.0 … ${fam.blockPrefix}.${config.n_layer - 1}).`,
      );
    const target = fam.moduleTarget[module];
    if (!targetSet.has(target))
      fail(`adapts ${module}, which ${configFile}'s target_modules (${JSON.stringify(tm)}) does not list.`);
    const { in: nIn, out: nOut } = loraModuleShape(config, target);
    const shape = t.shape;
    if (shape.length !== 2) fail(`has shape [${shape}]; lora_${which} must be 2-D.`);
    if (which === 'A') {
      if (shape[1] !== nIn)
        fail(
          `has shape [${shape}], which does not fit the base: its ${module} takes ${nIn} inputs, so lora_A must be [r, ${nIn}].`,
        );
      if (shape[0] !== rank)
        fail(
          `has shape [${shape}]: its rank ${shape[0]} disagrees with "r": ${rank} in ${configFile} (lora_A must be [${rank}, ${nIn}]).`,
        );
    } else {
      if (shape[0] !== nOut)
        fail(
          `has shape [${shape}], which does not fit the base: its ${module} has ${nOut} outputs, so lora_B must be [${nOut}, r].`,
        );
      if (shape[1] !== rank)
        fail(
          `has shape [${shape}]: its rank ${shape[1]} disagrees with "r": ${rank} in ${configFile} (lora_B must be [${nOut}, ${rank}]).`,
        );
    }
    const key = `${fam.blockPrefix}.${layer}.${module}`;
    const entry = byModule.get(key) ?? {};
    if (which === 'A') entry.a = t.data;
    else entry.b = t.data;
    byModule.set(key, entry);
  }
  const arrays = new Map<string, LoraArrays>();
  for (const m of loraModules(config, targets)) {
    const e = byModule.get(m.key);
    for (const which of ['A', 'B'] as const) {
      if (!e || !(which === 'A' ? e.a : e.b)) {
        throw new UserError(
          `${wPath}: tensor "${peftTensorName(m.key, which)}" is missing; target_modules ${JSON.stringify(tm)} ` +
            `asks for lora_A and lora_B in every one of the base's ${config.n_layer} blocks.`,
        );
      }
    }
    arrays.set(m.key, { a: e!.a!, b: e!.b! });
  }
  for (const e of extra) {
    if (!extraFound.has(e.name))
      throw new UserError(`${wPath}: tensor "${e.name}" of shape [${e.shape}] is missing.`);
  }
  const cfg = { lora: rank, loraAlpha: alpha as number, loraTargets: targets };
  const own = model.lora;
  if (own) {
    const want = `r ${own.r}, lora_alpha ${own.alpha}, targets ${JSON.stringify(own.targets)}`;
    const got = `r ${rank}, lora_alpha ${alpha}, targets ${JSON.stringify(targets)}`;
    if (want !== got)
      throw new UserError(
        `${cfgPath}: the adapters have ${got}; the model they are loaded into has ${want}. Use the same LoRA settings.`,
      );
    own.assignArrays(arrays);
    return { adapters: own, extra: extraFound, configFile, warnings };
  }
  return {
    adapters: LoraAdapters.fromArrays(config, cfg, arrays, 'lora'),
    extra: extraFound,
    configFile,
    warnings,
  };
}
