/**
 * A stand-in for the model worker: the same WorkerApi, no tfjs, synthetic but plausible metrics. The store's
 * unit tests drive it step by step (`stepMs: 0`, then `tick()`); `npm run dev` with `?worker=fake` runs the UI
 * on it with a timer, for working on the layout without waiting for real training.
 */
import { validateConfig, type TrainConfig } from '../../common/config';
import { applyLive, mergeConfig } from '../../common/config/live';
import { nonFiniteRunError, stepsDoneMessage } from '../../common/stops';
import type {
  MemoryEstimateReport,
  MemoryReport,
  MetricsByName,
  MetricsWire,
  RunStatus,
  SampleView,
  TrainerEvent,
  TrainConfigWire,
  WorkerApi,
} from '../../worker/protocol';

class FakeUserError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UserError';
  }
}

const WORDS = [' good', ' bad', ' movie', ' the', ' was', ' great', ' fun', '.', ' and', ' a', ' plot'];

export interface FakeWorker extends WorkerApi {
  /** Run one PPO step now (manual mode, or between timer ticks). */
  tick(): Promise<void>;
  /** Every call made, in order: [method, argument]. */
  calls: [string, unknown][];
}

const dropUndefined = (o: object) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

/**
 * The fake models' sizes (their loadModel summaries say the same): parameters and LoRA adapter parameters per
 * unit of rank on the four targets. The Hub's GPT-2 and DistilGPT-2 have their real counts, so the UI's LoRA
 * preselection for big models can be exercised; anything else is the 120 k-parameter fake.
 */
const FAKE_MODELS: Record<string, { params: number; adapterPerRank: number }> = {
  'openai-community/gpt2': { params: 124_439_808, adapterPerRank: 147_456 },
  'distilbert/distilgpt2': { params: 81_912_576, adapterPerRank: 73_728 },
};
const FAKE_SMALL = { params: 120_000, adapterPerRank: 1000 };
const fakeModel = (name: string) => FAKE_MODELS[name] ?? FAKE_SMALL;

/**
 * A stand-in estimate with the real one's shape (src/worker/sources.ts estimateReport), from simple counts of the
 * fake models: LoRA trains r · adapterPerRank parameters per adapter set on one base; full
 * fine-tuning holds a reference and a value copy; activations grow with batchSize × responseLength.
 */
export function fakeEstimate(cfg: TrainConfig): MemoryEstimateReport {
  const { params: P, adapterPerRank } = fakeModel(cfg.model);
  const critic = cfg.algorithm === 'ppo';
  const adapterSet = cfg.lora * adapterPerRank;
  const shared = cfg.lora > 0 && cfg.valueModel === 'shared';
  const trainable =
    cfg.lora > 0
      ? adapterSet + (critic ? (shared ? adapterSet + 64 : P + 64) : 0)
      : P + (critic ? P + 64 : 0);
  const parts = {
    base: P * 4,
    reference: cfg.lora > 0 ? 0 : P * 4,
    value: critic ? (shared ? 64 * 4 : (P + 64) * 4) : 0,
    rewardModel: typeof cfg.reward === 'object' && cfg.reward !== null && 'model' in cfg.reward ? P * 4 : 0,
    adapters: (cfg.lora > 0 ? adapterSet * (shared && critic ? 2 : 1) : 0) * 4,
    adam: 2 * trainable * 4,
    gradients: trainable * 4,
    activations: cfg.batchSize * (16 + cfg.responseLength) * 64 * 40 * 4,
    packed: 0,
    heapGrowth: 0,
  };
  const bytes = Object.values(parts).reduce((a, b) => a + b, 0);
  const budgetBytes = 3.2e9;
  return {
    model: cfg.model === 'tiny' ? 'built-in tiny' : cfg.model,
    params: P,
    policyTrainableParams: cfg.lora > 0 ? adapterSet : P,
    trainableParams: trainable,
    lora: cfg.lora,
    bytes,
    parts,
    budgetBytes,
    budget: 'the WASM backend allows 3.2 GB (75% of its 4.3 GB heap)',
    problem:
      bytes > budgetBytes ? `Training ${cfg.model} needs ≈ ${(bytes / 1e9).toFixed(1)} GB; too much.` : null,
  };
}

export function createFakeWorker(opts: { stepMs?: number } = {}): FakeWorker {
  const stepMs = opts.stepMs ?? 0;
  let config: TrainConfig = validateConfig({});
  let state: RunStatus['state'] = 'idle';
  let step = 0;
  let history: MetricsWire[] = [];
  let listener: ((e: TrainerEvent) => void) | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let rewardCode: string | null = null;
  /** Steps in a row with (simulated) non-finite updates; three pause the run, as the real worker does. */
  let badSteps = 0;
  /** Config changes taken (configure, setHyperparameters): RunStatus.configSeq, as the real worker counts them. */
  let configSeq = 0;
  const calls: [string, unknown][] = [];

  const status = (): RunStatus => ({
    state,
    phase: 'idle',
    step,
    steps: config.steps,
    config: JSON.parse(JSON.stringify(config)) as TrainConfigWire,
    reward: rewardCode !== null ? 'your reward code' : `task ${config.task}`,
    configSeq,
  });
  const dropRun = () => {
    step = 0;
    history = [];
    badSteps = 0;
    state = 'idle';
  };
  /**
   * The stand-in for a reward that overflows: a mix weight beyond float32's range (3.4e38) makes the real
   * worker's returns ±Infinity in float32, so its value updates are skipped as non-finite every step.
   */
  const overflows = () => {
    const r = config.reward;
    return (
      typeof r === 'object' && r !== null && 'mix' in r && r.mix.some((m) => Math.abs(m.weight) > 3.4e38)
    );
  };
  const emit = (e: TrainerEvent) => listener?.(e);
  /** As the real worker: a config change answers with its number, its status goes out as an event only. */
  const configChanged = () => {
    configSeq += 1;
    emit({ type: 'status', status: status() });
    return configSeq;
  };
  const fakeMemory = (): MemoryReport => ({ numTensors: 42 + step, numBytes: 1024 * 1024, backend: 'wasm' });
  const log = (name: string, arg?: unknown) => calls.push([name, arg]);

  let seed = 1;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };

  function samples(): SampleView[] {
    return Array.from({ length: Math.min(config.batchSize, 8) }, (_, i) => {
      const n = 1 + Math.floor(rand() * Math.min(config.responseLength, 8));
      const tokens = Array.from({ length: n }, () => ({
        text: WORDS[Math.floor(rand() * WORDS.length)],
        logprob: -rand() * 6,
        kl: (rand() - 0.4) * 0.2,
        advantage: (rand() - 0.5) * 2,
      }));
      const response = tokens.map((t) => t.text).join('');
      let score = Math.tanh(step / 20) + (rand() - 0.5) * 0.3;
      if (rewardCode !== null) {
        if (/while\s*\(\s*true\s*\)/.test(rewardCode)) {
          throw new FakeUserError('Your reward code ran longer than the time limit (1 s) and was stopped.');
        }
        score = response.includes('good') ? 1 : 0;
      }
      return {
        prompt: `Prompt ${i + 1}:`,
        response,
        score,
        kl: tokens.reduce((a, t) => a + t.kl, 0),
        tokens,
      };
    });
  }

  async function runStep(): Promise<void> {
    for (const phase of ['generating', 'scoring', 'updating'] as const) {
      emit({ type: 'status', status: { ...status(), phase } });
    }
    let batch: SampleView[];
    try {
      batch = samples();
    } catch (e) {
      state = 'paused';
      emit({ type: 'error', message: (e as Error).message, userError: true });
      emit({ type: 'status', status: status() });
      throw e;
    }
    step += 1;
    const t = step;
    // Critic-free algorithms (docs/formats.md §7) have no value model: their value metrics are null.
    const critic = ((config as unknown as Record<string, unknown>).algorithm ?? 'ppo') === 'ppo';
    const valueMetric = (v: number) => (critic ? v : null);
    const metrics: MetricsWire = {
      step: t,
      reward: Math.tanh(t / 20) + (rand() - 0.5) * 0.2,
      rewardStd: 0.3,
      kl: 0.5 * Math.log1p(t) + rand() * 0.1,
      klCoef: config.klCoef,
      nonScoreReward: -config.klCoef * 0.5,
      clipFrac: 0.05 + rand() * 0.05,
      approxKl: 0.001 + rand() * 0.002,
      policyLoss: -0.01 + rand() * 0.02,
      valueLoss: valueMetric(1 / (1 + t / 5) + rand() * 0.05),
      valueClipFrac: valueMetric(rand() * 0.1),
      entropy: 3 - Math.log1p(t) * 0.2,
      explainedVariance: valueMetric(1 - 1 / (1 + t / 10)),
      ratioMean: 1,
      ratioMax: 1.2,
      logRatioClampFrac: 0,
      gradNorm: 0.5,
      advantageMean: 0,
      advantageStd: 1,
      returnMean: valueMetric(0.1),
      responseLength: config.responseLength * (0.5 + rand() * 0.5),
      tokensPerSecond: 200 + rand() * 50,
      timeGenerate: 0.1,
      timeScore: 0.05,
      timeUpdate: 0.2,
      learningRate: config.learningRate,
      valueLearningRate: valueMetric(config.valueLearningRate),
      valueGradNorm: valueMetric(0.4),
      eosFraction: 0.5,
      scoreMean: Math.tanh(t / 20),
      epochsRun: config.ppoEpochs,
      timeStep: 0.35,
      fracRewardZeroStd: critic ? null : rand() * 0.2,
      clipFracLow: 0.02,
      clipFracHigh: 0.03,
      decodeReplays: 0,
    };
    const bad = overflows();
    if (bad) metrics.valueLoss = Infinity;
    badSteps = bad ? badSteps + 1 : 0;
    history.push(metrics);
    const alerts =
      t % 7 === 0
        ? [{ id: 'entropy-low', step: t, message: 'Entropy is falling fast.', advice: 'Raise entropyCoef.' }]
        : [];
    if (bad) {
      alerts.unshift({
        id: 'non-finite',
        step: t,
        message: 'The updates this step had a NaN/Inf loss or gradient and were skipped.',
        advice: 'Lower the learning rate or maxGradNorm, and check that the reward returns finite numbers.',
      });
    }
    const stopped = badSteps >= 3;
    if (state === 'running' && (step >= config.steps || stopped)) state = 'paused';
    // Like the real worker, the step carries the worker's tensor memory (a stand-in figure here).
    emit({
      type: 'step',
      metrics,
      samples: batch,
      alerts,
      memory: { ...fakeMemory(), peakBytes: 3 * 1024 * 1024 },
    });
    if (stopped) emit({ type: 'error', message: nonFiniteRunError(t), userError: true });
    emit({ type: 'status', status: status() });
  }

  const schedule = () => {
    if (stepMs <= 0 || state !== 'running') return;
    timer = setTimeout(() => {
      timer = null;
      if (state !== 'running') return;
      runStep().then(schedule, () => undefined);
    }, stepMs);
  };

  const fake: FakeWorker = {
    calls,
    tick: () => runStep(),
    async subscribe(cb) {
      log('subscribe');
      listener = cb;
      return status();
    },
    async configure(c) {
      log('configure', c);
      // The real worker's rule (src/common/config/live.ts): merged over the current config; a non-live change drops the run.
      const { config: next, changes } = mergeConfig(config, c, 'config');
      if (changes.restart.length > 0) dropRun();
      config = next;
      return configChanged();
    },
    async start() {
      log('start');
      if (step > 0 && step >= config.steps) {
        throw new FakeUserError(stepsDoneMessage(config.steps));
      }
      state = 'running';
      emit({ type: 'status', status: status() });
      schedule();
      return status();
    },
    async pause() {
      log('pause');
      if (state !== 'running') return status();
      state = 'paused';
      if (timer) clearTimeout(timer);
      // Like the real worker: every change of state is a status event.
      emit({ type: 'status', status: status() });
      return status();
    },
    async stepOnce() {
      log('stepOnce');
      await runStep();
      state = 'paused';
      return status();
    },
    async reset() {
      log('reset');
      dropRun();
      if (timer) clearTimeout(timer);
      emit({ type: 'status', status: status() });
      return status();
    },
    async setHyperparameters(patch) {
      log('setHyperparameters', patch);
      config = applyLive(config, patch, 'setHyperparameters');
      return configChanged();
    },
    async setRewardCode(code) {
      log('setRewardCode', code);
      if (code !== null && /[{(]\s*$/.test(code.trim())) {
        throw new FakeUserError('Your reward code has a syntax error: Unexpected end of input.');
      }
      rewardCode = code;
      return status();
    },
    async trainRewardModel(jsonl) {
      log('trainRewardModel', jsonl.length);
      const lines = jsonl.split('\n').filter((l) => l.trim());
      emit({ type: 'progress', task: 'reward-model', fraction: 0.5, message: 'Training the reward model' });
      config = validateConfig({ ...config, reward: { model: 'preference-reward-model' } });
      dropRun();
      emit({ type: 'status', status: status() });
      return { pairs: lines.length, heldOut: 1, trainAccuracy: 0.9, heldOutAccuracy: 0.75, skipped: [] };
    },
    async setSupervisedJob(job) {
      log('setSupervisedJob', job?.kind ?? null);
      if (job !== null) throw new FakeUserError('The fake worker runs no DPO or SFT jobs.');
      return status();
    },
    async continueFromSft(next) {
      log('continueFromSft', next.algorithm);
      throw new FakeUserError('The fake worker runs no SFT jobs.');
    },
    async exportCheckpoint() {
      log('exportCheckpoint');
      const body = JSON.stringify({ step, config, history });
      return { name: `checkpoint-${step}.zip`, bytes: new TextEncoder().encode(body) };
    },
    async importCheckpoint(bytes) {
      log('importCheckpoint', bytes.length);
      let data: { step: number; config: TrainConfig; history: MetricsWire[] };
      try {
        data = JSON.parse(new TextDecoder().decode(bytes)) as typeof data;
      } catch {
        throw new FakeUserError('This file is not a checkpoint zip.');
      }
      step = data.step;
      config = validateConfig(data.config);
      history = data.history;
      state = 'paused';
      emit({ type: 'status', status: status() });
      return { step, historyLength: history.length, config: config as unknown as TrainConfigWire };
    },
    async exportMetrics(format) {
      log('exportMetrics', format);
      if (format === 'json') return JSON.stringify(history);
      const keys = Object.keys(history[0] ?? { step: 0 });
      const rows = history as MetricsByName[];
      return [keys.join(','), ...rows.map((m) => keys.map((k) => m[k]).join(','))].join('\n');
    },
    async history() {
      return history.map((m) => ({ ...m }));
    },
    async exportTrlConfig() {
      log('exportTrlConfig');
      return JSON.stringify({ learning_rate: config.learningRate, kl_coef: config.klCoef }, null, 2);
    },
    async init(pref) {
      log('init', pref);
      return {
        backend: pref === 'auto' ? 'wasm' : pref,
        adapter: { vendor: 'google', architecture: 'swiftshader', description: '', isSoftware: true },
        notice: null,
      };
    },
    async setBackend(pref) {
      return fake.init(pref);
    },
    async loadModel(source) {
      log('loadModel', source);
      emit({ type: 'progress', task: 'download', fraction: 1, message: 'Loaded' });
      const name =
        source.kind === 'builtin'
          ? 'tiny'
          : source.kind === 'hub'
            ? source.repo
            : source.kind === 'url'
              ? source.baseUrl
              : 'uploaded:model';
      config = validateConfig({ ...config, model: name });
      dropRun();
      emit({ type: 'status', status: status() });
      return {
        label: source.kind === 'builtin' ? 'built-in tiny' : name,
        family: 'gpt2',
        n_layer: 2,
        n_embd: 64,
        n_head: 2,
        vocab_size: 259,
        n_positions: 128,
        params: fakeModel(name).params,
        tokenizer: 'bytes',
        chatTemplate: false,
      };
    },
    async generate(req) {
      log('generate', req);
      return {
        text: ' good',
        tokens: [1],
        tokenTexts: [' good'],
        logprobs: [-1],
        promptTokens: req.prompt.length,
        tokensPerSecond: 100,
        millis: 10,
      };
    },
    async memory() {
      log('memory');
      return fakeMemory();
    },
    async estimateMemory(patch = {}) {
      log('estimateMemory', patch);
      return fakeEstimate(validateConfig({ ...config, ...dropUndefined(patch) }));
    },
    async modelFits(patch = {}) {
      log('modelFits', patch);
      return {};
    },
    async forwardLogits() {
      return [];
    },
  };
  return fake;
}
