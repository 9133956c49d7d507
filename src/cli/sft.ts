import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse, str } from './args';
import { nodeBindingLimit, setNodeBackend } from './backend-node';
import { assertFolder, nodeFiles, writeFolder } from './files-node';
import { resolveModel, ROOT } from './models';
import { preflightSequenceTraining, preflightSft } from './preflight';
import { loadLM, exportLM } from '../core/model/folder';
import { parseGPT2Config } from '../core/model/config';
import { GPT2 } from '../core/model/gpt2';
import type { CausalLM } from '../core/model/causal-lm';
import type { Tokenizer } from '../core/tokenizer';
import { tokenizerFor } from '../core/tokenizer';
import { tokenizeCorpus, trainSft, type SftOptions } from '../core/sft/sft';
import { UserError } from '../common/errors';
import { writeFile, mkdir, appendFile } from 'node:fs/promises';

export const SFT_HELP = `sft --config FILE --out DIR [--backend wasm|cpu|webgpu] [--json]
  Supervised next-token training on a text corpus. Config JSON keys: corpus (path, one document per line),
  model (a folder or preset to start from) or init (GPT-2 config fields for a fresh model), steps, batchSize,
  seqLen, learningRate, warmup, maxGradNorm, seed. Writes DIR/config.json, DIR/model.safetensors, DIR/metrics.jsonl.`;

const SFT_KEYS = [
  'corpus',
  'model',
  'init',
  'steps',
  'batchSize',
  'seqLen',
  'learningRate',
  'warmup',
  'maxGradNorm',
  'seed',
];

export async function cmdSft(argv: string[]): Promise<void> {
  const v = parse('sft', argv, {
    config: { type: 'string' },
    out: { type: 'string' },
    backend: { type: 'string' },
    json: { type: 'boolean' },
  });
  const cfgPath = str('sft', v, 'config', true);
  const out = str('sft', v, 'out', true);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(await readFile(cfgPath, 'utf8'));
  } catch (e) {
    throw new UserError(`sft: cannot read config ${cfgPath}: ${(e as Error).message}`);
  }
  for (const k of Object.keys(raw)) {
    if (!SFT_KEYS.includes(k))
      throw new UserError(`sft: unknown config key "${k}"; allowed: ${SFT_KEYS.join(', ')}.`);
  }
  const o: SftOptions = {
    steps: Number(raw.steps ?? 1000),
    batchSize: Number(raw.batchSize ?? 16),
    seqLen: Number(raw.seqLen ?? 64),
    learningRate: Number(raw.learningRate ?? 3e-3),
    warmup: Number(raw.warmup ?? 50),
    maxGradNorm: Number(raw.maxGradNorm ?? 1),
    seed: Number(raw.seed ?? 1),
  };
  for (const [k, val] of Object.entries(o)) {
    if (!Number.isFinite(val) || val < 0)
      throw new UserError(`sft: "${k}" must be a non-negative number, got ${raw[k]}.`);
  }
  await setNodeBackend(str('sft', v, 'backend') ?? 'wasm');
  let model: CausalLM;
  let tokenizer: Tokenizer;
  const sequences = { sequences: o.batchSize, seqLen: o.seqLen + 1, head: 'lm' as const };
  if (raw.init) {
    const init = parseGPT2Config(raw.init, `${cfgPath} "init"`);
    preflightSequenceTraining('SFT of', `${cfgPath} "init"`, init, sequences);
    model = GPT2.random(init, o.seed);
    tokenizer = tokenizerFor(init);
  } else {
    const dir = resolveModel(String(raw.model ?? 'tiny'));
    await assertFolder(dir);
    await preflightSft(dir, o);
    ({ model, tokenizer } = await loadLM(nodeFiles(dir), { maxBindingBytes: nodeBindingLimit() }));
  }
  const corpusPath = path.resolve(
    path.dirname(cfgPath),
    String(raw.corpus ?? path.join(ROOT, 'public/corpus/tiny.txt')),
  );
  const text = await readFile(corpusPath, 'utf8').catch(() => {
    throw new UserError(`sft: cannot read corpus ${corpusPath}.`);
  });
  const stream = tokenizeCorpus(text, tokenizer);
  await mkdir(out, { recursive: true });
  const metricsPath = path.join(out, 'metrics.jsonl');
  await writeFile(metricsPath, '');
  const loss = await trainSft(model, stream, o, (step, l, lr, tps) => {
    process.stderr.write(
      `step ${step}/${o.steps} loss ${l.toFixed(4)} lr ${lr.toExponential(2)} ${tps.toFixed(0)} tok/s\n`,
    );
    void appendFile(
      metricsPath,
      JSON.stringify({ step, loss: l, learningRate: lr, tokensPerSecond: tps }) + '\n',
    );
  });
  await writeFolder(out, await exportLM(model));
  model.dispose();
  if (v.json) process.stdout.write(JSON.stringify({ out, steps: o.steps, loss }) + '\n');
}
