/**
 * Hugging Face GPT-2 tensor names ↔ our parameter specs (docs/formats.md §2), with a shape check per tensor.
 *
 * Import accepts names with or without the `transformer.` prefix (GPT2LMHeadModel /
 * GPT2ForSequenceClassification vs GPT2Model), ignores the `attn.bias` / `attn.masked_bias` buffers and
 * ties `lm_head.weight` to `wte.weight`. `score.*` names never carry the prefix.
 */
import { HalfArray } from './f16-base';
import { UserError } from '../../common/errors';
import type { NamedTensor, SafetensorsFile } from './safetensors';
import type { ParamSpec } from './specs';

const PREFIX = 'transformer.';
const ATTN_BUFFER = /^h\.\d+\.attn\.(bias|masked_bias)$/;

function fmtShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

function isScoreName(name: string): boolean {
  return name.startsWith('score.');
}

/** Whether two weights hold the same bits (f32 values, or packed f16 words). */
export function sameBits(a: Float32Array | HalfArray, b: Float32Array | HalfArray): boolean {
  if (a instanceof HalfArray || b instanceof HalfArray) {
    if (!(a instanceof HalfArray && b instanceof HalfArray)) return false;
    return sameBits(
      new Float32Array(a.words.buffer, a.words.byteOffset, a.words.length),
      new Float32Array(b.words.buffer, b.words.byteOffset, b.words.length),
    );
  }
  if (a.length !== b.length) return false;
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) if (ua[i] !== ub[i]) return false;
  return true;
}

/** Where each spec's tensor is in a GPT-2 file, from its header alone (planHfTensors). */
export interface HfTensorPlan {
  /** Spec name → the file's tensor name. */
  keys: Map<string, string>;
  /** A `lm_head.weight` in the file, which must equal `wte.weight` bit for bit (checkHfLmHead); else null. */
  lmHead: string | null;
  /** The file's name of `wte.weight` (with or without the prefix), where it has one. */
  wte: string | null;
  /** A `score.bias` in the file, which must be zero (checkHfScoreBias); else null. */
  scoreBias: string | null;
}

/**
 * Which tensor of a GPT-2 file (names and shapes from its header) is each spec's, checked: a missing tensor, a
 * wrong shape, a name given both with and without the prefix, a `lm_head.weight` without `wte.weight` or of
 * another shape, tensors the model does not use (unless listed in `opts.allowExtra`) — each a UserError naming the
 * file and the tensor. What needs the data (the head's bits, `score.bias`'s zeros) is checked by checkHfLmHead and
 * checkHfScoreBias.
 */
export function planHfTensors(
  shapes: Map<string, { shape: number[] }>,
  specs: ParamSpec[],
  fileName: string,
  opts: { allowExtra?: string[] } = {},
): HfTensorPlan {
  const specByName = new Map(specs.map((s) => [s.name, s]));
  const allowExtra = new Set(opts.allowExtra ?? []);
  type Found = { key: string; shape: number[] };
  const found = new Map<string, Found>();
  const extras: string[] = [];
  let lmHead: Found | null = null;
  let wte: Found | null = null;
  let scoreBias: Found | null = null;

  for (const [key, t] of shapes) {
    const prefixed = key.startsWith(PREFIX);
    const base = prefixed ? key.slice(PREFIX.length) : key;
    const entry: Found = { key, shape: t.shape };

    if (ATTN_BUFFER.test(base)) continue;
    if (base === 'wte.weight') wte = entry;
    if (key === 'lm_head.weight') {
      lmHead = entry;
      continue;
    }
    // score.* is only recognised without the prefix.
    const isSpec = specByName.has(base) && !(prefixed && isScoreName(base));
    if (isSpec) {
      const prev = found.get(base);
      if (prev) {
        throw new UserError(
          `${fileName}: tensor "${base}" appears twice, as "${prev.key}" and as "${key}"; ` +
            `expected each tensor once, with or without the "${PREFIX}" prefix.`,
        );
      }
      found.set(base, entry);
      continue;
    }
    if (key === 'score.bias') {
      scoreBias = entry;
      continue;
    }
    if (allowExtra.has(key) || allowExtra.has(base)) continue;
    extras.push(key);
  }

  const keys = new Map<string, string>();
  const missing = specs.filter((s) => !found.has(s.name));
  if (missing.length > 0) {
    const s = missing[0];
    const shown = isScoreName(s.name) ? s.name : `${PREFIX}${s.name}`;
    const more =
      missing.length > 1 ? ` (${missing.length} of ${specs.length} expected tensors are missing)` : '';
    throw new UserError(
      `${fileName}: missing tensor "${shown}" (expected shape ${fmtShape(s.shape)})${more}. ` +
        `Is this a GPT-2 model file of the right kind?`,
    );
  }
  for (const s of specs) {
    const f = found.get(s.name)!;
    if (!sameShape(f.shape, s.shape)) {
      const transposed =
        s.shape.length === 2 &&
        f.shape.length === 2 &&
        f.shape[0] === s.shape[1] &&
        f.shape[1] === s.shape[0];
      const hint = transposed
        ? ' It looks transposed: GPT-2 Conv1D weights are [in, out].'
        : ' Check that config.json (vocab_size, n_positions, n_embd, n_layer) matches the weights.';
      throw new UserError(
        `${fileName}: tensor "${f.key}" has shape ${fmtShape(f.shape)}, expected ${fmtShape(s.shape)}.${hint}`,
      );
    }
    keys.set(s.name, f.key);
  }

  if (lmHead !== null) {
    const lm: Found = lmHead;
    if (wte === null) {
      throw new UserError(
        `${fileName}: tensor "lm_head.weight" is present without "wte.weight" to tie it to; ` +
          `untied LM heads are not supported (lm_head.weight must equal wte.weight).`,
      );
    }
    const w: Found = wte;
    if (!sameShape(lm.shape, w.shape)) hfLmHeadDiffers(fileName, lm.shape, w);
  }

  if (extras.length > 0) {
    const shown = extras
      .slice(0, 5)
      .map((e) => `"${e}"`)
      .join(', ');
    const more = extras.length > 5 ? ` and ${extras.length - 5} more` : '';
    throw new UserError(
      `${fileName}: unexpected tensor${extras.length > 1 ? 's' : ''} ${shown}${more}, ` +
        `not part of this GPT-2 model; is the file for a different model or config?`,
    );
  }
  return {
    keys,
    lmHead: lmHead?.key ?? null,
    wte: wte?.key ?? null,
    scoreBias: scoreBias?.key ?? null,
  };
}

/** Refuse a GPT-2 `lm_head.weight` that is not `wte.weight`, in words. */
export function hfLmHeadDiffers(
  fileName: string,
  lmShape: readonly number[],
  wte: { key: string; shape: readonly number[] },
): never {
  throw new UserError(
    `${fileName}: tensor "lm_head.weight" (shape ${fmtShape(lmShape)}) differs from "${wte.key}" ` +
      `(shape ${fmtShape(wte.shape)}); untied LM heads are not supported, lm_head.weight must equal wte.weight.`,
  );
}

/** A GPT-2 file's `score.bias` (HfTensorPlan.scoreBias) must be zero: GPT2ForSequenceClassification has none. */
export function checkHfScoreBias(data: Float32Array | HalfArray, fileName: string): void {
  const values = data instanceof HalfArray ? data.words : data;
  if (!values.every((v) => v === 0)) {
    throw new UserError(
      `${fileName}: tensor "score.bias" is nonzero; score.bias is not supported ` +
        `(GPT2ForSequenceClassification has no bias; a zero bias is accepted and dropped).`,
    );
  }
}

/**
 * Pick the data of every spec out of a safetensors file in HF names, keyed by spec name (planHfTensors), with
 * the checks that need the data: a `lm_head.weight` must be `wte.weight` bit for bit, a `score.bias` zero.
 */
export function mapHfTensors(
  file: SafetensorsFile,
  specs: ParamSpec[],
  fileName: string,
  opts: { allowExtra?: string[] } = {},
): Map<string, Float32Array> {
  const plan = planHfTensors(file.tensors, specs, fileName, opts);
  const out = new Map<string, Float32Array>();
  for (const [name, key] of plan.keys) out.set(name, file.tensors.get(key)!.data);
  if (plan.lmHead !== null && plan.wte !== null) {
    const lm = file.tensors.get(plan.lmHead)!;
    const w = file.tensors.get(plan.wte)!;
    if (!sameBits(lm.data, w.data)) hfLmHeadDiffers(fileName, lm.shape, { key: plan.wte, shape: w.shape });
  }
  if (plan.scoreBias !== null) checkHfScoreBias(file.tensors.get(plan.scoreBias)!.data, fileName);
  return out;
}

/**
 * Our parameters as HF-named tensors for export: trunk names get the `transformer.` prefix when
 * `opts.prefix`; `score.*` never does; no `lm_head.weight` (tied; transformers ties it on load).
 */
/** The file name of parameter `name` (GPT2LMHeadModel's `transformer.` prefix when asked; score heads never). */
export function hfTensorName(name: string, opts: { prefix: boolean }): string {
  return opts.prefix && !isScoreName(name) ? `${PREFIX}${name}` : name;
}

export function toHfTensors(
  params: Map<string, Float32Array>,
  specs: ParamSpec[],
  opts: { prefix: boolean },
): NamedTensor[] {
  return specs.map((s) => {
    const data = params.get(s.name);
    if (data === undefined) throw new Error(`toHfTensors: no data for parameter "${s.name}".`);
    const count = s.shape.reduce((a, b) => a * b, 1);
    if (data.length !== count) {
      throw new Error(
        `toHfTensors: parameter "${s.name}" has ${data.length} values, shape ${fmtShape(s.shape)} needs ${count}.`,
      );
    }
    const name = hfTensorName(s.name, opts);
    return { name, shape: s.shape.slice(), data };
  });
}

// ---- Llama, Qwen2, Qwen3 (LlamaForCausalLM names: `model.` + trunk name, `lm_head.weight`, `score.weight`) ----

const LLAMA_PREFIX = 'model.';
/** Buffers older checkpoints saved beside the weights (recomputed from the config, never read). */
const LLAMA_BUFFER = /^layers\.\d+\.self_attn\.rotary_emb\.inv_freq$/;

/** The file name of a Llama-family parameter: `model.` + name, except `lm_head.weight` and `score.*`. */
export function llamaTensorName(name: string): string {
  return name === 'lm_head.weight' || isScoreName(name) ? name : `${LLAMA_PREFIX}${name}`;
}

/** Where each spec's tensor is in a Llama-family file, from its header alone (planLlamaTensors). */
export interface LlamaTensorPlan {
  /** Spec name → the file's tensor name. */
  keys: Map<string, string>;
  /** A tied model's `lm_head.weight` in the file, which must repeat the embedding bit for bit; else null. */
  tiedHead: string | null;
}

/**
 * Which tensor of a Llama-family file (names and shapes from its header: `model.` prefix optional, as LlamaModel
 * saves without it) is each spec's, checked: a tensor twice, a tensor missing, a shape that differs, a tensor that
 * is not part of the model — each refused in words that name the file, the tensor and what would be right. What it
 * cannot check without the data: a tied model's repeated `lm_head.weight` (checkTiedHead).
 */
export function planLlamaTensors(
  shapes: Map<string, { shape: number[] }>,
  specs: ParamSpec[],
  fileName: string,
  opts: { tied: boolean },
): LlamaTensorPlan {
  const specByName = new Map(specs.map((s) => [s.name, s]));
  const found = new Map<string, { key: string; shape: number[] }>();
  const extras: string[] = [];
  let tiedHead: { key: string; shape: number[] } | null = null;
  for (const [key, t] of shapes) {
    const base = key.startsWith(LLAMA_PREFIX) ? key.slice(LLAMA_PREFIX.length) : key;
    if (LLAMA_BUFFER.test(base)) continue;
    const entry = { key, shape: t.shape };
    if (key === 'lm_head.weight' && opts.tied) {
      tiedHead = entry;
      continue;
    }
    if (specByName.has(base)) {
      const prev = found.get(base);
      if (prev) {
        throw new UserError(
          `${fileName}: tensor "${base}" appears twice, as "${prev.key}" and as "${key}"; expected each tensor once.`,
        );
      }
      found.set(base, entry);
      continue;
    }
    extras.push(key);
  }
  const missing = specs.filter((s) => !found.has(s.name));
  if (missing.length > 0) {
    const s = missing[0];
    const more =
      missing.length > 1 ? ` (${missing.length} of ${specs.length} expected tensors are missing)` : '';
    const hint =
      s.name === 'lm_head.weight'
        ? ' config.json says "tie_word_embeddings": false, so the file needs its own LM head.'
        : ' Is this a model file of the family config.json names?';
    throw new UserError(
      `${fileName}: missing tensor "${llamaTensorName(s.name)}" (expected shape ${fmtShape(s.shape)})${more}.${hint}`,
    );
  }
  const keys = new Map<string, string>();
  for (const s of specs) {
    const f = found.get(s.name)!;
    if (!sameShape(f.shape, s.shape)) {
      const transposed = s.shape.length === 2 && f.shape[0] === s.shape[1] && f.shape[1] === s.shape[0];
      const hint = transposed
        ? ' It looks transposed: nn.Linear weights are [out, in].'
        : ' Check that config.json (hidden_size, heads, key/value heads, head_dim, intermediate_size, vocab_size) matches the weights.';
      throw new UserError(
        `${fileName}: tensor "${f.key}" has shape ${fmtShape(f.shape)}, expected ${fmtShape(s.shape)}.${hint}`,
      );
    }
    keys.set(s.name, f.key);
  }
  if (tiedHead && !sameShape(tiedHead.shape, found.get('embed_tokens.weight')!.shape))
    tiedHeadDiffers(fileName, found.get('embed_tokens.weight')!.key);
  if (extras.length > 0) {
    const shown = extras
      .slice(0, 5)
      .map((e) => `"${e}"`)
      .join(', ');
    const more = extras.length > 5 ? ` and ${extras.length - 5} more` : '';
    throw new UserError(
      `${fileName}: unexpected tensor${extras.length > 1 ? 's' : ''} ${shown}${more}, not part of this model; ` +
        'is the file for a different model or config?',
    );
  }
  return { keys, tiedHead: tiedHead?.key ?? null };
}

/** Refuse a tied model's `lm_head.weight` that differs from its embedding, in words. */
export function tiedHeadDiffers(fileName: string, embKey: string): never {
  throw new UserError(
    `${fileName}: tensor "lm_head.weight" differs from "${embKey}", but config.json says "tie_word_embeddings": ` +
      'true; set it to false for a model with its own LM head.',
  );
}

/** A tied model's repeated `lm_head.weight` (LlamaTensorPlan.tiedHead) must be the embedding bit for bit. */
export function checkTiedHead(
  head: Float32Array | HalfArray,
  embedding: Float32Array | HalfArray,
  fileName: string,
  embKey: string,
): void {
  if (!sameBits(head, embedding)) tiedHeadDiffers(fileName, embKey);
}

/**
 * mapHfTensors for the Llama families: every spec's data by spec name, from a file in transformers' names
 * (planLlamaTensors). A tied model's file may repeat the embedding as `lm_head.weight` only bit for bit.
 */
export function mapLlamaTensors<D extends Float32Array | HalfArray = Float32Array>(
  file: SafetensorsFile<D>,
  specs: ParamSpec[],
  fileName: string,
  opts: { tied: boolean },
): Map<string, D> {
  const plan = planLlamaTensors(file.tensors, specs, fileName, opts);
  const out = new Map<string, D>();
  for (const [name, key] of plan.keys) out.set(name, file.tensors.get(key)!.data);
  if (plan.tiedHead) {
    const emb = plan.keys.get('embed_tokens.weight')!;
    checkTiedHead(file.tensors.get(plan.tiedHead)!.data, file.tensors.get(emb)!.data, fileName, emb);
  }
  return out;
}
