/**
 * `bench --gpu`'s PyTorch column (issue #22, `vsTorchEager`; docs/gpu.md): the spec that scripts/torch_ppo_step.py
 * reads — the same GPT-2 LoRA PPO step as the one our bench timed (model folder, batch, prompt length, response
 * length, LoRA, the PPO hyperparameters of our config) — and the parse of what it prints. Pure: the process is run
 * by src/cli/torch-probe.ts (Node only); tested in tests/bench-gpu-keys.test.ts.
 */
import type { TrainConfig } from '../common/config';

/** What scripts/torch_ppo_step.py reads (its docstring says how each is used). */
export interface TorchPpoSpec {
  model: string;
  device: 'cuda' | 'cpu';
  seed: number;
  batch: number;
  Tq: number;
  responseLength: number;
  lora: number;
  loraAlpha: number;
  learningRate: number;
  valueLearningRate: number;
  temperature: number;
  topK: number;
  topP: number;
  klCoef: number;
  gamma: number;
  lam: number;
  clipRange: number;
  clipRangeValue: number;
  vfCoef: number;
  logRatioClamp: number;
  maxGradNorm: number;
  warmup: number;
  steps: number;
  /** Greedy decode ms/token is timed at each of these batches, sampled at `sampledBatch`. */
  decodeBatches: number[];
  sampledBatch: number;
  decodeTokens: number;
}

/** What scripts/torch_ppo_step.py prints on its last stdout line (seconds; ms per token). */
export interface TorchPpoResult {
  timeGenerate: number;
  timeScore: number;
  timeUpdate: number;
  timeStep: number;
  steps: number;
  stepTimes: number[];
  greedyMsPerToken: Record<string, number>;
  sampledMsPerToken: number;
  device: string;
  tf32: boolean;
  torch: string;
  transformers: string;
}

/** The spec of the PyTorch step that matches our trainer's config `cfg` at prompt bucket `Tq`. */
export function torchSpec(
  cfg: Pick<
    TrainConfig,
    | 'batchSize'
    | 'responseLength'
    | 'lora'
    | 'loraAlpha'
    | 'learningRate'
    | 'valueLearningRate'
    | 'temperature'
    | 'topK'
    | 'topP'
    | 'klCoef'
    | 'gamma'
    | 'lam'
    | 'clipRange'
    | 'clipRangeValue'
    | 'vfCoef'
    | 'logRatioClamp'
    | 'maxGradNorm'
    | 'ppoEpochs'
    | 'miniBatches'
    | 'algorithm'
  >,
  o: {
    model: string;
    Tq: number;
    device: 'cuda' | 'cpu';
    warmup: number;
    steps: number;
    decodeBatches: number[];
    sampledBatch: number;
    decodeTokens: number;
  },
): TorchPpoSpec {
  if (cfg.algorithm !== 'ppo' || cfg.ppoEpochs !== 1 || cfg.miniBatches !== 1 || !(cfg.lora > 0))
    throw new Error(
      `the PyTorch step is PPO with LoRA, one epoch of one minibatch; got algorithm ${cfg.algorithm}, lora ${cfg.lora}, ppoEpochs ${cfg.ppoEpochs}, miniBatches ${cfg.miniBatches}.`,
    );
  return {
    model: o.model,
    device: o.device,
    seed: 0,
    batch: cfg.batchSize,
    Tq: o.Tq,
    responseLength: cfg.responseLength,
    lora: cfg.lora,
    loraAlpha: cfg.loraAlpha,
    learningRate: cfg.learningRate,
    valueLearningRate: cfg.valueLearningRate,
    temperature: cfg.temperature,
    topK: cfg.topK,
    topP: cfg.topP,
    klCoef: cfg.klCoef,
    gamma: cfg.gamma,
    lam: cfg.lam,
    clipRange: cfg.clipRange,
    clipRangeValue: cfg.clipRangeValue,
    vfCoef: cfg.vfCoef,
    logRatioClamp: cfg.logRatioClamp,
    maxGradNorm: cfg.maxGradNorm,
    warmup: o.warmup,
    steps: o.steps,
    decodeBatches: o.decodeBatches,
    sampledBatch: o.sampledBatch,
    decodeTokens: o.decodeTokens,
  };
}

const positive = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;

/** The result on the last JSON line of the script's stdout; an Error that says what is missing otherwise. */
export function parseTorchResult(stdout: string): TorchPpoResult {
  const line = stdout
    .trim()
    .split('\n')
    .reverse()
    .find((l) => l.trim().startsWith('{'));
  if (!line)
    throw new Error(`the PyTorch step printed no JSON result (${JSON.stringify(stdout.slice(-200))})`);
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(line);
  } catch (e) {
    throw new Error(`the PyTorch step's result is not JSON: ${(e as Error).message}`);
  }
  for (const k of ['timeGenerate', 'timeScore', 'timeUpdate', 'timeStep', 'sampledMsPerToken'])
    if (!positive(r[k]))
      throw new Error(`the PyTorch step's result has no positive "${k}" (got ${JSON.stringify(r[k])})`);
  const g = r.greedyMsPerToken as Record<string, unknown> | undefined;
  if (!g || typeof g !== 'object' || !Object.values(g).length || !Object.values(g).every(positive))
    throw new Error(
      `the PyTorch step's result has no greedy ms/token per batch (got ${JSON.stringify(r.greedyMsPerToken)})`,
    );
  return r as unknown as TorchPpoResult;
}
