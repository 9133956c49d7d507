/**
 * `npm run bench` / `cli bench`: the benchmark suite (src/bench/bench.ts sections) in Node on WASM, then in
 * headless Chromium per backend (WebGPU, WASM) through src/cli/bench-browser.ts, then the GPT-2-sized memory runs
 * in Node on the CPU backend (GPT-2's four models and optimizers do not fit WASM's 4 GiB heap). Prints markdown
 * tables, writes them to --out (default .bench/bench-results.md, an ignored folder, so a bench run leaves the
 * working tree clean), and with --json one JSON object on the last stdout line.
 * Progress goes to stderr. Speed is measured here, never in unit tests.
 */
import * as tf from '@tensorflow/tfjs-core';
import os from 'node:os';
import path from 'node:path';
import { mkdir, writeFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { num, parse, str } from './args';
import { setNodeBackend } from './backend-node';
import { nodeFiles } from './files-node';
import { resolveModel, ROOT } from './models';
import { nodeResources } from './train';
import { qwenGrpoBenchHooks, runPython } from './torch-probe';
import { loadTaskNode } from './tasks-node';
import { loadLM, readConfig } from '../core/model/folder';
import { validateConfig, type TrainConfig } from '../common/config';
import { gpt2Only } from '../core/model/config';
import type { GPT2 } from '../core/model/gpt2';
import { buildTrainer } from '../core/ppo/setup';
import { tokenizerFor, tokenizerForFolder } from '../core/tokenizer';
import { planFor, runBenchSections, SECTIONS, type BenchEnv, type Section } from '../bench/bench';
import { registerFusedAdamKernels } from '../core/optim/fused-adam';
import { registerFastCpuKernels } from '../bench/perf/cpu-kernels';
import {
  benchFourModelMemory,
  SHAPES,
  shapeConfig,
  type FourModelMemory,
  type MemorySetup,
} from '../bench/perf/memory';
import type { NanoGptPeer } from '../bench/perf/lm-train';
import type { GpuDispatchCounts } from '../bench/perf/dispatch';
import {
  markdown,
  reportJson,
  headline,
  REPORTED,
  type BenchReport,
  type BenchRun,
} from '../bench/perf/report';
import { UserError } from '../common/errors';
import {
  byteMatchedPrompts,
  matmulShapes,
  ourConfig,
  ourQueryLength,
  parseShape,
  parseTrlResult,
  summariseVsTrl,
  trlSpec,
  vsTrlMarkdown,
  VS_TRL_GPT2_SHAPE,
  VS_TRL_PROMPTS,
  VS_TRL_SETUP,
  type OursResult,
  type PhaseSeconds,
  type VsTrl,
} from '../bench/vs-trl';

/** Where the bench's tables go without --out: an ignored folder (.gitignore), so a run leaves no change to commit. */
export const DEFAULT_BENCH_OUT = '.bench/bench-results.md';

/** Where `bench --vs-trl` writes its table without --out. */
export const DEFAULT_VS_TRL_OUT = '.bench/vs-trl.md';

export const BENCH_HELP = `bench [--quick] [--json] [--out FILE] [--no-browser] [--browser-backends webgpu,wasm]
      [--sections matmul,gen,ppo,lm,memory,dispatch] [--big-memory gpt2,distilgpt2|none]
      [--big-memory-setups four-model,lora-ppo,grpo-lora,lora-ppo-b64,lora-ppo-recompute-off] [--big-memory-adam fused|tfjs]
      [--backend wasm|cpu] [--model DIR] [--gpu]
  Matmul peak, generation with/without the KV cache, the PPO step by phase with update MFU, LM training vs
  @genai-fi/nanogpt, four-model, LoRA PPO and GRPO LoRA memory at GPT-2 sizes, and WebGPU dispatches per layer and
  per step (Node WebGPU, any adapter); in Node and in headless Chromium (WebGPU, WASM). --quick runs
  the smallest sizes (≈ 8 minutes on 2 cores). Writes the tables to --out (default .bench/bench-results.md).
  --gpu: only WebGPU in Node (Dawn) on whatever adapter exists: the adapter, its matmul peak, the tiny PPO step
  (seconds, update MFU, dispatches and readbacks per step) and GPT-2 dispatches per layer; smallest sizes on a
  software adapter. updateMfu is the update's FLOP/s against tfjs's own matmul peak, not against the machine.
bench --vs-trl [--vs-trl-shape L,C,H,P,V] [--vs-trl-model DIR] [--vs-trl-steps N] [--vs-trl-warmup N]
      [--vs-trl-micro-batch N] [--json] [--out FILE]
  The same GRPO LoRA step (batch 8 in groups of 4, 24 new tokens, r 8 on the four GPT-2 layers) through our engine
  (WASM, 1 thread) and through TRL's GRPOTrainer + PEFT on PyTorch CPU (1 thread, scripts/trl_grpo_step.py, run by
  $PPO_PYTHON, else /tmp/venv/bin/python, else python3): s/step, phases, GFLOP/s per phase, resident peaks, both
  matmul peaks, vsTrlCpu = ours ÷ TRL. Ours runs the batch in one micro-batch without recompute, as TRL does;
  --vs-trl-micro-batch 0 gives cli train's default (automatic micro-batch, recompute auto). Default shape GPT-2 124M (random weights, made once under .bench/models/).
  Skipped, with the reason, when that Python cannot import torch, transformers, peft and trl (docs/vs-trl.md).`;

/** nanogpt's files by path (its package exports only main.js; BasicTrainer must share main.js's modules). */
async function loadNanoGptNode(): Promise<NanoGptPeer> {
  const dir = path.join(ROOT, 'node_modules/@genai-fi/nanogpt/dist');
  // Its bundled tfjs-core sets up a Node platform from a browser stub of `util` and throws; it runs as in a browser.
  const wasNode = tf.env().getBool('IS_NODE');
  tf.env().set('IS_NODE', false);
  try {
    const main = await import(pathToFileURL(path.join(dir, 'main.js')).href);
    const trainer = await import(pathToFileURL(path.join(dir, 'training/BasicTrainer.js')).href);
    return { NanoGPTV1: main.models.NanoGPTV1, BasicTrainer: trainer.default };
  } finally {
    tf.env().set('IS_NODE', wasNode);
  }
}

function machine(): BenchReport['machine'] {
  const cpus = os.cpus();
  return {
    cpu: `${cpus[0]?.model ?? 'unknown'} × ${cpus.length}`,
    memory: `${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    'load average at start': os
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' '),
    node: process.version,
    os: `${os.type()} ${os.release()}`,
    tfjs: tf.version_core,
  };
}

export async function cmdBench(argv: string[]): Promise<void> {
  const v = parse('bench', argv, {
    quick: { type: 'boolean' },
    json: { type: 'boolean' },
    out: { type: 'string' },
    'no-browser': { type: 'boolean' },
    'browser-backends': { type: 'string' },
    sections: { type: 'string' },
    'big-memory': { type: 'string' },
    'big-memory-adam': { type: 'string' },
    'big-memory-setups': { type: 'string' },
    'memory-child': { type: 'string' },
    backend: { type: 'string' },
    model: { type: 'string' },
    gpu: { type: 'boolean' },
    'gpu-dispatch-only': { type: 'boolean' },
    'vs-trl': { type: 'boolean' },
    'vs-trl-shape': { type: 'string' },
    'vs-trl-model': { type: 'string' },
    'vs-trl-steps': { type: 'string' },
    'vs-trl-warmup': { type: 'string' },
    'vs-trl-child': { type: 'string' },
    'vs-trl-micro-batch': { type: 'string' },
  });
  const t0 = performance.now();
  const quick = !!v.quick;
  const cliSections = (str('bench', v, 'sections')?.split(',') ?? CLI_SECTIONS) as CliSection[];
  for (const s of cliSections)
    if (!CLI_SECTIONS.includes(s))
      throw new UserError(
        `bench: --sections: unknown section "${s}"; sections are ${CLI_SECTIONS.join(', ')}.`,
      );
  // 'dispatch' is the CLI's own (a Node WebGPU child process); the others run on every platform.
  const sections = cliSections.filter((x): x is Section => x !== 'dispatch');
  const bigRaw =
    str('bench', v, 'big-memory') ?? (quick ? 'gpt2,gpt2-medium' : 'distilgpt2,gpt2,gpt2-medium');
  const big = bigRaw === 'none' || !sections.includes('memory') ? [] : bigRaw.split(',');
  const bigAdam = str('bench', v, 'big-memory-adam') ?? 'fused';
  const setups = (str('bench', v, 'big-memory-setups')?.split(',') ?? MEMORY_SETUPS) as MemorySetup[];
  for (const x of setups)
    if (!MEMORY_SETUPS.includes(x))
      throw new UserError(
        `bench: --big-memory-setups: unknown setup "${x}"; setups are ${MEMORY_SETUPS.join(', ')}.`,
      );
  if (bigAdam !== 'fused' && bigAdam !== 'tfjs')
    throw new UserError(`bench: --big-memory-adam must be "fused" or "tfjs", got "${bigAdam}".`);
  for (const b of big)
    if (!(b in SHAPES))
      throw new UserError(
        `bench: --big-memory: unknown shape "${b}"; use ${Object.keys(SHAPES).join(', ')} or none.`,
      );
  const log = (m: string): void =>
    void process.stderr.write(`[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s] ${m}\n`);
  const notes: string[] = [];
  const runs: BenchRun[] = [];
  if (v['vs-trl-child'] !== undefined) {
    // The child process of --vs-trl: our side's steps, one JSON line out.
    const r = await vsTrlOursChild(str('bench', v, 'vs-trl-child', true)!, log);
    process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  if (v['vs-trl']) {
    await vsTrlBench(
      {
        shape: str('bench', v, 'vs-trl-shape'),
        model: str('bench', v, 'vs-trl-model'),
        steps: num('bench', v, 'vs-trl-steps', 2, { min: 1, max: 100, integer: true }),
        warmup: num('bench', v, 'vs-trl-warmup', 1, { min: 0, max: 100, integer: true }),
        microBatch: num('bench', v, 'vs-trl-micro-batch', VS_TRL_SETUP.batchSize, {
          min: 0,
          max: VS_TRL_SETUP.batchSize,
          integer: true,
        }),
        json: !!v.json,
        out: str('bench', v, 'out') ?? DEFAULT_VS_TRL_OUT,
      },
      log,
    );
    return;
  }
  const task = await loadTaskNode('sentiment');

  if (v.gpu) {
    await gpuBench(str('bench', v, 'model') ?? 'tiny', !!v.json, str('bench', v, 'out'), log);
    return;
  }

  if (v['gpu-dispatch-only']) {
    // The child process of the dispatch section: one JSON line out.
    const r = await gpuDispatchRun(str('bench', v, 'model') ?? 'tiny', log);
    process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }

  const memoryChildArg = str('bench', v, 'memory-child');
  if (memoryChildArg !== undefined) {
    // The child process of step 3: memory runs only, one JSON line out.
    const r = await memoryRuns(
      memoryChildArg === 'none' ? [] : memoryChildArg.split(','),
      setups,
      bigAdam,
      quick,
      task.prompts,
      str('bench', v, 'model'),
      log,
    );
    process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  // 3. Memory (the tiny shape's 200-step growth on WASM, the GPT-2-sized shapes on CPU) in a child process: its
  // numbers are bytes, not times, and GPT-2's four models need ~4 GB of heap of their own. With --quick it starts
  // after the Node sections and overlaps the browser part (which then shares the CPU with it: the notes say so);
  // otherwise it runs last.
  const wantMemory = sections.includes('memory');
  const startMemory = (): Promise<MemoryChildResult> =>
    wantMemory
      ? memoryChild(big, setups, bigAdam, quick, str('bench', v, 'model'), log)
      : Promise.resolve({ tiny: null, bigMemory: [], notes: [] });
  let memoryEarly: Promise<MemoryChildResult> | null = null;

  // 1. Node.
  const backend = await setNodeBackend(str('bench', v, 'backend') ?? 'wasm');
  registerFusedAdamKernels();
  const modelDir = resolveModel(str('bench', v, 'model') ?? 'tiny');
  const tinyFiles = nodeFiles(modelDir);
  const tinyConfig = gpt2Only(await readConfig(tinyFiles), 'bench');
  const env: BenchEnv = {
    platform: 'node',
    tinyConfig,
    tinyTokenizer: await tokenizerForFolder(tinyFiles, tinyConfig),
    prompts: task.prompts,
    buildPpoTrainer: (o) =>
      buildTrainer(validateConfig({ model: modelDir, task: 'sentiment', ...o }, 'bench'), nodeResources),
    loadTinyModel: async () => (await loadLM(tinyFiles, { trainable: false, label: 'bench' })).model as GPT2,
    nanogpt: loadNanoGptNode,
    log,
  };
  const nodeRun = await runBenchSections(
    env,
    sections.filter((x) => x !== 'memory'),
    planFor('node', backend, quick),
    { fusedAdamCheck: true },
  );
  runs.push({ ...nodeRun, label: `node/${backend}` });
  if (quick && wantMemory) {
    memoryEarly = startMemory();
    notes.push(
      '--quick: the memory runs (a child process) overlapped the browser part, which shared the CPU with it.',
    );
  }

  // 2. Chromium, one page per backend.
  const browserBackends = v['no-browser']
    ? []
    : (str('bench', v, 'browser-backends') ?? 'webgpu,wasm').split(',').filter(Boolean);
  if (browserBackends.length) {
    const { chromiumPath, runBrowserBench } = await import('./bench-browser');
    if (!chromiumPath()) {
      notes.push(
        `Browser part skipped: no Chromium at ${process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'} (set CHROMIUM_PATH or apt-get install chromium).`,
      );
    } else {
      const s = await runBrowserBench({
        backends: browserBackends,
        quick,
        sections,
        log,
        timeoutSeconds: (b) => (b === 'webgpu' ? (quick ? 420 : 3600) : quick ? 240 : 1800),
      });
      for (const r of s.results) {
        if (r.result) runs.push({ ...(r.result as unknown as BenchRun), label: `chromium/${r.backend}` });
        if (r.error)
          notes.push(
            `chromium/${r.backend}: ${r.error}${r.result ? ' (the sections finished before it are reported)' : ''}`,
          );
      }
      notes.push(
        `Chromium ${s.chromiumVersion}, headless; WebGPU adapter: ${JSON.stringify(runs.find((x) => x.backend === 'webgpu')?.adapter ?? null)}.`,
      );
    }
  }

  // 4. WebGPU dispatch counts on Node WebGPU (Dawn), in a child process (counts, not times: it may overlap the
  // memory child).
  let gpuDispatch: GpuDispatchCounts | null = null;
  if (cliSections.includes('dispatch')) {
    const d = await gpuDispatchChild(str('bench', v, 'model'), log);
    gpuDispatch = d.counts;
    if (d.note) notes.push(d.note);
  }

  const mem = await (memoryEarly ?? startMemory());
  if (mem.tiny) nodeRun.memory.push(mem.tiny);
  const bigMemory = mem.bigMemory;
  notes.push(...mem.notes);
  const report: BenchReport = {
    quick,
    machine: machine(),
    runs,
    bigMemory,
    gpuDispatch,
    notes,
    seconds: (performance.now() - t0) / 1000,
  };
  const md = markdown(report);
  const out = str('bench', v, 'out') ?? DEFAULT_BENCH_OUT;
  await mkdir(path.dirname(out), { recursive: true });
  await writeFile(out, md);
  process.stdout.write(md);
  log(`bench: wrote ${out}`);
  for (const [k, t] of Object.entries(headline(report)))
    log(
      `  ${k} = ${t.value ?? '—'} (target ${t.target}: ${t.value == null ? 'not measured' : t.target === REPORTED ? 'no target' : t.met ? 'met' : 'NOT met'})`,
    );
  if (v.json) process.stdout.write(JSON.stringify(reportJson(report)) + '\n');
}

type CliSection = Section | 'dispatch';
/** The sections of `cli bench`: bench.ts's, and 'dispatch' (WebGPU dispatch counts, Node WebGPU). */
export const CLI_SECTIONS: CliSection[] = [...SECTIONS, 'dispatch'];

interface GpuDispatchChildResult {
  counts: GpuDispatchCounts | null;
  /** Why there are no counts (no adapter, a failure), or what they ran on. */
  note: string | null;
}

/** The dispatch section in this process: Node WebGPU on whatever adapter exists; null counts and why when none. */
async function gpuDispatchRun(model: string, log: (m: string) => void): Promise<GpuDispatchChildResult> {
  let adapter;
  const w = await import('./backend-webgpu-node');
  try {
    tf.env().set('PROD', true);
    adapter = await w.setNodeWebGpuBackend();
  } catch (e) {
    return { counts: null, note: `WebGPU dispatches not counted: ${(e as Error).message}` };
  }
  registerFusedAdamKernels();
  const { countGpuDispatches } = await import('../bench/perf/dispatch');
  const modelDir = resolveModel(model);
  const label = w.adapterLabel(adapter);
  try {
    const counts = await countGpuDispatches({
      adapter: label,
      software: adapter.software,
      buildTinyTrainer: (o) =>
        buildTrainer(validateConfig({ model: modelDir, task: 'sentiment', ...o }, 'bench'), nodeResources),
      log,
    });
    return {
      counts,
      note: `WebGPU dispatches counted on Node WebGPU (Dawn), adapter ${label}: dispatchWorkgroups and mapAsync calls (they do not depend on the adapter's speed).`,
    };
  } catch (e) {
    return { counts: null, note: `WebGPU dispatches not counted: ${(e as Error).message}` };
  }
}

/** gpuDispatchRun in a child process (`bench --gpu-dispatch-only --json`). */
function gpuDispatchChild(
  model: string | undefined,
  log: (m: string) => void,
): Promise<GpuDispatchChildResult> {
  const args = ['bench', '--gpu-dispatch-only'];
  if (model) args.push('--model', model);
  return childJson(args, '(dispatch)', log, (code) => ({
    counts: null,
    note: `WebGPU dispatches not counted: the child process exited with ${code} and no result.`,
  }));
}

/** Run `cli <args>` in a child process with this one's Node flags; its last stdout line is the JSON result. */
function childJson<T>(
  cliArgs: string[],
  tag: string,
  log: (m: string) => void,
  onFail: (code: number | null) => T,
): Promise<T> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...cliArgs], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const kill = (): void => void child.kill('SIGTERM');
    process.once('exit', kill);
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    let errBuf = '';
    child.stderr.on('data', (d: Buffer) => {
      errBuf += d.toString();
      const lines = errBuf.split('\n');
      errBuf = lines.pop() ?? '';
      for (const l of lines) if (l.trim()) log(`${tag} ${l.replace(/^\[\s*\d+ s\] /, '')}`);
    });
    child.on('close', (code) => {
      process.off('exit', kill);
      try {
        resolve(JSON.parse(stdout.trim().split('\n').pop() ?? ''));
      } catch {
        resolve(onFail(code));
      }
    });
  });
}

/**
 * The batch of each GPT-2-sized memory run: the LoRA runs at the app's defaults (batch 16, 24 tokens) with
 * micro-batches of 4 (issue #20's keys), GRPO in groups of 4; the same PPO run at batch 64 (peakGrowthBatch) and
 * with recompute off (recomputeSlowdown).
 */
const BIG_MEMORY_RUNS: Record<
  MemorySetup,
  {
    batchSize: number;
    responseLength: number;
    groupSize?: number;
    overrides?: Partial<TrainConfig>;
    /** The shapes it runs at (default: every --big-memory shape but gpt2-medium, which runs lora-ppo only). */
    shapes?: string[];
  }
> = {
  'four-model': { batchSize: 2, responseLength: 2 },
  'lora-ppo': { batchSize: 16, responseLength: 24, overrides: { microBatchSize: 4 } },
  'grpo-lora': { batchSize: 16, responseLength: 24, groupSize: 4, overrides: { microBatchSize: 4 } },
  'lora-ppo-b64': {
    batchSize: 64,
    responseLength: 24,
    overrides: { microBatchSize: 4 },
    shapes: ['gpt2'],
  },
  'lora-ppo-recompute-off': {
    batchSize: 16,
    responseLength: 24,
    overrides: { microBatchSize: 4, recompute: 'off' },
    shapes: ['gpt2'],
  },
};
export const MEMORY_SETUPS = Object.keys(BIG_MEMORY_RUNS) as MemorySetup[];

interface MemoryChildResult {
  tiny: FourModelMemory | null;
  bigMemory: FourModelMemory[];
  notes: string[];
}

/**
 * The memory section: the tiny shape on WASM (one step, then growth to step 200), then the GPT-2-sized shapes:
 * the LoRA setups (PPO with a shared value model, GRPO) on WASM, the four-model setup on the CPU backend (four
 * models and two Adams exceed WASM's 4 GiB heap; numBytes counts the same tensors on every backend) with
 * perf/cpu-kernels.ts (products on the WASM kernel) and, by default, the fused Adam (the same optimizer state as
 * tfjs's Adam, so the same bytes after a step).
 */
async function memoryRuns(
  names: string[],
  setups: MemorySetup[],
  adam: string,
  quick: boolean,
  prompts: string[],
  model: string | undefined,
  log: (m: string) => void,
): Promise<MemoryChildResult> {
  const notes: string[] = [];
  const backend = await setNodeBackend('wasm');
  registerFusedAdamKernels();
  const tinyConfig = gpt2Only(await readConfig(nodeFiles(resolveModel(model ?? 'tiny'))), 'bench');
  const m = planFor('node', backend, quick).memoryTiny;
  let tiny: FourModelMemory | null = null;
  try {
    tiny = await benchFourModelMemory({
      label: 'tiny',
      config: tinyConfig,
      tokenizer: tokenizerFor(tinyConfig),
      prompts,
      ...m,
      profilePeak: true,
      onProgress: (x) => log(`node/${backend} memory ${x}`),
    });
  } catch (e) {
    notes.push(`memory tiny: ${(e as Error).message}`);
  }
  const bigMemory: FourModelMemory[] = [];
  if (names.length) {
    // The LoRA setups on WASM (one frozen base: they fit its heap, and the CPU backend's broadcasting element-wise
    // ops, a per-element index walk, take minutes over GPT-2's [rows, 50257] logits); four models on CPU.
    // Shape by shape (GPT-2 before gpt2-medium): the WASM heap only grows, so a run's heap figure is the
    // high-water mark of its own shape's runs so far, never of a larger model's.
    // The CPU runs (four-model) last: once on the CPU backend the process stays there.
    const onWasm = setups.filter((x) => x !== 'four-model');
    const cpu = setups.includes('four-model') ? (['four-model'] as MemorySetup[]) : [];
    // gpt2-medium runs the LoRA PPO setup only; the batch-64 and recompute-off runs only at GPT-2 124M.
    const runsAt = (setup: MemorySetup, name: string): boolean =>
      (
        BIG_MEMORY_RUNS[setup].shapes ?? names.filter((n) => n !== 'gpt2-medium' || setup === 'lora-ppo')
      ).includes(name);
    const byShape = [
      ...names.flatMap((name) => onWasm.map((setup) => ({ setup, name }))),
      ...names.flatMap((name) => cpu.map((setup) => ({ setup, name }))),
    ].filter(({ setup, name }) => runsAt(setup, name));
    for (const { setup, name } of byShape) {
      const onCpu = setup === 'four-model';
      if (onCpu && tf.getBackend() !== 'cpu') {
        await setNodeBackend('cpu');
        registerFastCpuKernels({ matmulOnWasm: true });
      }
      const config = shapeConfig(SHAPES[name as keyof typeof SHAPES]);
      try {
        bigMemory.push(
          await benchFourModelMemory({
            label: name,
            setup,
            config,
            tokenizer: tokenizerFor(config),
            prompts,
            ...BIG_MEMORY_RUNS[setup],
            steps: 1,
            tfjsAdam: onCpu && adam === 'tfjs',
            profilePeak: true,
            onProgress: (x) => log(`node/${tf.getBackend()} memory ${setup} ${x}`),
          }),
        );
      } catch (e) {
        notes.push(`memory ${name} ${setup}: ${(e as Error).message}`);
      }
    }
    notes.push(
      'GPT-2-sized memory (numBytes counts the same tensors on every backend): four-model on the CPU backend (four models and two Adams ' +
        "exceed WASM's 4 GiB heap), batch 2, responseLength 2, 1 epoch of 1 minibatch, with perf/cpu-kernels.ts (matmuls on the WASM kernel, the rest in JS) and " +
        (adam === 'fused'
          ? "the trainer's fused Adam (the same optimizer state as tf.train.adam, so the same bytes after a step; --big-memory-adam tfjs swaps in tf.train.adam); "
          : "tf.train.adam swapped in for the trainer's fused Adam; ") +
        'LoRA PPO (r 8, value model shared, reward function) and GRPO LoRA (r 8, reward function, 4 prompts × 4 samples) on WASM: batch 16, ' +
        'responseLength 24, 2 minibatches (the default), 1 epoch (a second repeats the same tensors).',
    );
  }
  return { tiny, bigMemory, notes };
}

/** Run memoryRuns in a child process (its own heap: GPT-2's four models take ~4 GB of it). */
function memoryChild(
  names: string[],
  setups: MemorySetup[],
  adam: string,
  quick: boolean,
  model: string | undefined,
  log: (m: string) => void,
): Promise<MemoryChildResult> {
  const args = [
    'bench',
    '--memory-child',
    names.length ? names.join(',') : 'none',
    '--big-memory-adam',
    adam,
    '--big-memory-setups',
    setups.join(','),
  ];
  if (quick) args.push('--quick');
  if (model) args.push('--model', model);
  return childJson(args, '(memory)', log, (code) => ({
    tiny: null,
    bigMemory: [],
    notes: [`the memory child process exited with ${code} and no result.`],
  }));
}

/** `bench --gpu`: src/bench/webgpu-gpu.ts on Node WebGPU; markdown to stdout and --out, JSON last with --json. */
async function gpuBench(
  model: string,
  json: boolean,
  out: string | undefined,
  log: (m: string) => void,
): Promise<void> {
  const { setNodeWebGpuBackend } = await import('./backend-webgpu-node');
  const { runGpuBench, gpuMarkdown } = await import('../bench/webgpu-gpu');
  tf.env().set('PROD', true);
  const adapter = await setNodeWebGpuBackend();
  registerFusedAdamKernels();
  const modelDir = resolveModel(model);
  // wte in vocabulary chunks where it exceeds the device's binding limit (docs/tfjs.md trap 8).
  const limits = (tf.backend() as unknown as { device: { limits: { maxStorageBufferBindingSize: number } } })
    .device.limits;
  const res = { ...nodeResources, maxBindingBytes: limits.maxStorageBufferBindingSize };
  const dryRun = adapter.software && process.env.PPO_GPU_BENCH_DRYRUN === '1';
  if (process.env.PPO_GPU_BENCH_ROWS === 'f16') {
    await f16GpuBench({ adapter, res, dryRun, json, out, log });
    return;
  }
  // GPT-2 124M's shapes with random weights, written once to a temporary folder (hardware adapters only).
  let gpt2Dir: string | null = null;
  const gpt2Folder = async (): Promise<string> => {
    if (gpt2Dir) return gpt2Dir;
    const { mkdtemp } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { GPT2 } = await import('../core/model/gpt2');
    const { exportLM } = await import('../core/model/folder');
    const { writeFolder } = await import('./files-node');
    const { SHAPES, shapeConfig } = await import('../bench/perf/memory');
    const dir = join(await mkdtemp(join(tmpdir(), 'ppo-gpu-bench-')), 'gpt2-124m');
    // A dry run (PPO_GPU_BENCH_DRYRUN=1 on a software adapter) keeps the vocabulary and shrinks the trunk.
    const shape = dryRun ? { ...SHAPES.gpt2, n_embd: 64, n_layer: 2, n_head: 2 } : SHAPES.gpt2;
    log(`writing a GPT-2 ${dryRun ? 'small (dry run)' : '124M'}-shaped model with random weights to ${dir}`);
    const m = GPT2.random(shapeConfig(shape), 1234);
    try {
      await writeFolder(dir, await exportLM(m));
    } finally {
      m.dispose();
    }
    return (gpt2Dir = dir);
  };
  // The Qwen GRPO row: its Qwen2.5-0.5B-shaped folder (written once, at its first build), trainer and PyTorch step.
  const qwen = qwenGrpoBenchHooks({ dryRun, res, python: resolvePython(), log });
  const r = await runGpuBench({
    adapter,
    buildTinyTrainer: (o) =>
      buildTrainer(validateConfig({ model: modelDir, task: 'sentiment', ...o }, 'bench'), res),
    buildGpt2Trainer: async (o) =>
      buildTrainer(validateConfig({ model: await gpt2Folder(), task: 'sentiment', ...o }, 'bench'), res),
    probeTorch: async () => {
      const { probeTorchCuda } = await import('./torch-probe');
      const p = probeTorchCuda(resolvePython());
      // A dry run checks the PyTorch side on the CPU when torch imports at all.
      return dryRun && !p.ok && p.reason.includes('CUDA is not available')
        ? {
            ok: true,
            reason: `${p.reason.replace(' is installed but CUDA is not available', '')} on the CPU (dry run)`,
          }
        : p;
    },
    runTorch: async (cfg, Tq) => {
      const { runTorchPpoStep } = await import('./torch-probe');
      const { torchSpec } = await import('../bench/torch-ppo');
      const spec = torchSpec(cfg, {
        model: await gpt2Folder(),
        Tq,
        device: dryRun ? 'cpu' : 'cuda',
        warmup: 1,
        steps: dryRun ? 1 : 3,
        decodeBatches: [1, 16],
        sampledBatch: 16,
        decodeTokens: dryRun ? 6 : 32,
      });
      return runTorchPpoStep(resolvePython(), spec, log);
    },
    buildQwenTrainer: qwen.buildQwenTrainer,
    runTorchGrpo: qwen.runTorchGrpo,
    dryRun,
    repeat: Number(process.env.PPO_GPU_BENCH_REPEAT ?? 1) || 1,
    skipPlain: process.env.PPO_GPU_BENCH_SKIP_PLAIN === '1',
    log,
  }).finally(() => qwen.cleanup());
  if (gpt2Dir) {
    const { rm } = await import('node:fs/promises');
    const { dirname } = await import('node:path');
    await rm(dirname(gpt2Dir), { recursive: true, force: true });
  }
  const md = gpuMarkdown(r);
  process.stdout.write(md + '\n');
  if (out) await writeFile(out, md);
  if (json) {
    const { ppo, layers, ...rest } = r;
    process.stdout.write(JSON.stringify({ ...rest, layers, ppo }) + '\n');
  }
}

/**
 * `PPO_GPU_BENCH_ROWS=f16 bench --gpu`: only issue #36's f16-base rows (src/bench/f16-gpu.ts), the shapes in
 * PPO_GPU_BENCH_F16_MODELS (comma-separated; default both), the decode comparison on the first of them unless
 * PPO_GPU_BENCH_F16_DECODE=0, at the plans in PPO_GPU_BENCH_F16_PLANS (comma-separated, in order: defaultPlan,
 * boundedPlan; default defaultPlan; the first gets the GPU memory reading), boundedPlan at micro-batches of
 * PPO_GPU_BENCH_BOUNDED_MICRO (default 4). On a software adapter only as a dry run (PPO_GPU_BENCH_DRYRUN=1: 2 layers of width 64).
 */
async function f16GpuBench(o: {
  adapter: Awaited<ReturnType<typeof import('./backend-webgpu-node').setNodeWebGpuBackend>>;
  res: typeof nodeResources;
  dryRun: boolean;
  json: boolean;
  out: string | undefined;
  log: (m: string) => void;
}): Promise<void> {
  const { runF16Bench, f16Markdown } = await import('../bench/f16-gpu');
  const { F16_BENCH_SHAPES } = await import('../bench/torch-grpo');
  const { f16GrpoBenchHooks, probeTorchCuda } = await import('./torch-probe');
  if (o.adapter.software && !o.dryRun)
    throw new UserError(
      'the f16-base rows need a hardware adapter (a 1.5B model on a software adapter would take hours); set PPO_GPU_BENCH_DRYRUN=1 for a dry run of 2 layers of width 64.',
    );
  const asked = (process.env.PPO_GPU_BENCH_F16_MODELS ?? F16_BENCH_SHAPES.join(','))
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  const bad = asked.filter((x) => !(F16_BENCH_SHAPES as readonly string[]).includes(x));
  if (bad.length)
    throw new UserError(
      `PPO_GPU_BENCH_F16_MODELS: ${bad.join(', ')} is not one of ${F16_BENCH_SHAPES.join(', ')}.`,
    );
  const names = asked as (typeof F16_BENCH_SHAPES)[number][];
  const { F16_BENCH_PLANS } = await import('../bench/f16-gpu');
  const plans = (process.env.PPO_GPU_BENCH_F16_PLANS ?? 'defaultPlan')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  const badPlans = plans.filter((x) => !(F16_BENCH_PLANS as readonly string[]).includes(x));
  if (badPlans.length || plans.length === 0)
    throw new UserError(
      `PPO_GPU_BENCH_F16_PLANS: ${badPlans.join(', ') || '(none)'} is not a list of ${F16_BENCH_PLANS.join(', ')}.`,
    );
  const microRaw = process.env.PPO_GPU_BENCH_BOUNDED_MICRO ?? '';
  const boundedMicro = microRaw === '' ? undefined : Number(microRaw);
  if (boundedMicro !== undefined && !(Number.isInteger(boundedMicro) && boundedMicro >= 1))
    throw new UserError(
      `PPO_GPU_BENCH_BOUNDED_MICRO must be a positive integer (samples per micro-batch of boundedPlan), got "${microRaw}".`,
    );
  const python = resolvePython();
  const p = probeTorchCuda(python);
  const torch =
    o.dryRun && !p.ok && p.reason.includes('CUDA is not available')
      ? {
          ok: true,
          reason: `${p.reason.replace(' is installed but CUDA is not available', '')} on the CPU (dry run)`,
        }
      : p;
  const hooks = f16GrpoBenchHooks({ dryRun: o.dryRun, res: o.res, python, log: o.log });
  try {
    const r = await runF16Bench({
      adapter: o.adapter,
      names,
      decodeModel: process.env.PPO_GPU_BENCH_F16_DECODE === '0' ? null : (names[0] ?? null),
      plans: plans as (typeof F16_BENCH_PLANS)[number][],
      ...(boundedMicro ? { boundedMicro } : {}),
      // PyTorch's step is beside the default plan; a process timing only other plans does not run it again.
      hooks: torch.ok && plans.includes('defaultPlan') ? hooks : { ...hooks, runTorchGrpo: undefined },
      torch,
      dryRun: o.dryRun,
      log: o.log,
    });
    const md = f16Markdown(r);
    process.stdout.write(md + '\n');
    if (o.out) await writeFile(o.out, md);
    if (o.json) process.stdout.write(JSON.stringify(r) + '\n');
  } finally {
    await hooks.cleanup();
  }
}

// ---- bench --vs-trl (issue #24, docs/vs-trl.md) ---------------------------------------------------------

/**
 * The Python that runs the TRL side: $PPO_PYTHON when set (a path or a name on PATH), else /tmp/venv/bin/python
 * when it exists (the venv our machines make), else python3.
 */
export function resolvePython(
  env: Record<string, string | undefined> = process.env,
  exists: (p: string) => boolean = existsSync,
): string {
  if (env.PPO_PYTHON) return env.PPO_PYTHON;
  if (exists('/tmp/venv/bin/python')) return '/tmp/venv/bin/python';
  return 'python3';
}

export type PythonProbe = { ok: true; versions: Record<string, string> } | { ok: false; reason: string };

/** Whether `python` can import torch, transformers, peft and trl (scripts/trl_grpo_step.py --probe); why not. */
export function probePython(python: string, script: string): PythonProbe {
  const r = spawnSync(python, [script, '--probe'], { encoding: 'utf8', timeout: 120_000 });
  if (r.error) {
    const code = (r.error as NodeJS.ErrnoException).code;
    return {
      ok: false,
      reason:
        code === 'ENOENT'
          ? `no Python at "${python}" (set PPO_PYTHON to a Python with torch, transformers, peft and trl)`
          : `"${python}" could not run: ${r.error.message}`,
    };
  }
  const out = (r.stdout ?? '').trim();
  if (r.status !== 0)
    return {
      ok: false,
      reason: `"${python}" cannot import torch, transformers, peft and trl: ${out || (r.stderr ?? '').trim().split('\n').pop() || `exit ${r.status}`} (pip install torch transformers peft trl)`,
    };
  try {
    return { ok: true, versions: JSON.parse(out.split('\n').pop()!) };
  } catch {
    return {
      ok: false,
      reason: `"${python}" --probe printed no versions (${JSON.stringify(out.slice(0, 80))})`,
    };
  }
}

interface VsTrlChildSpec {
  config: Record<string, unknown>;
  warmup: number;
  steps: number;
  threads: number;
  matmulSizes: [number, number, number][];
}

/**
 * Our side of --vs-trl, in its own process (its resident peak is its own): the CLI train path (validateConfig,
 * TrainingSession.build with nodeResources and the heap budget, session.run) on WASM with `threads` threads,
 * without the disk writes (no metrics file, no checkpoints); then tfjs-wasm's matmul on the same shapes as torch's.
 */
async function vsTrlOursChild(
  file: string,
  log: (m: string) => void,
): Promise<Omit<OursResult, 'Tq' | 'promptLengths'>> {
  const { readFile } = await import('node:fs/promises');
  const spec = JSON.parse(await readFile(file, 'utf8')) as VsTrlChildSpec;
  const wasm = await import('@tensorflow/tfjs-backend-wasm');
  wasm.setThreadsCount(spec.threads);
  await setNodeBackend('wasm');
  const { TrainingSession } = await import('../core/run/session');
  const { defaultHeapBudget } = await import('../core/model/oom');
  const cfg = validateConfig(spec.config, 'bench --vs-trl');
  const steps: PhaseSeconds[] = [];
  let n = 0;
  // CPU seconds of this process in each phase (the trainer's phase events: generating → scoring → updating →
  // idle): on a machine shared with other jobs, wall seconds grow with the load and CPU seconds much less.
  const cpuNow = (): number => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  };
  const at: Partial<Record<string, number>> = {};
  const budget = defaultHeapBudget();
  const session = await TrainingSession.build(cfg, nodeResources, {
    hooks: {
      phase: (p) => void (at[p] = cpuNow()),
      step: async (r) => {
        const m = r.metrics;
        const cpuPhases = {
          generate: at.scoring! - at.generating!,
          score: at.updating! - at.scoring!,
          update: at.idle! - at.updating!,
        };
        const cpu = at.idle! - at.generating!;
        n++;
        log(
          `${n <= spec.warmup ? 'warm-up' : 'step'} ${n}: ${m.timeStep.toFixed(2)} s, CPU ${cpu.toFixed(2)} s (generate ${m.timeGenerate.toFixed(2)}, ` +
            `score ${m.timeScore.toFixed(2)}, update ${m.timeUpdate.toFixed(2)})`,
        );
        if (n > spec.warmup)
          steps.push({
            step: m.timeStep,
            cpu,
            cpuPhases,
            generate: m.timeGenerate,
            score: m.timeScore,
            update: m.timeUpdate,
          });
      },
    },
    heapBudget: () => budget,
  });
  try {
    const end = await session.run({ until: spec.warmup + spec.steps });
    if (end.reason === 'error') throw end.error;
    if (end.reason === 'nonfinite') throw new Error(end.message);
    const plan = session.trainer.stepPlan();
    const { benchMatmulShape } = await import('../bench/perf/matmul');
    const matmul = [];
    for (const [m, k, nn] of spec.matmulSizes) {
      const r = await benchMatmulShape(m, k, nn, { cpuClock: cpuNow });
      matmul.push({ m, k, n: nn, gflops: r.gflops, gflopsCpu: r.gflopsCpu });
    }
    return {
      steps,
      maxRssBytes: process.resourceUsage().maxRSS * 1024,
      matmul,
      wasmThreads: wasm.getThreadsCount(),
      microBatchSize: plan.microBatchSize,
      recompute: plan.recompute,
      // Scoring ran the reference alone (the old log-probs came from the update): the FLOP count follows it.
      oldLogprobsFromUpdate: session.trainer.lastStepOldLogprobsFromUpdate,
    };
  } finally {
    session.dispose();
  }
}

/** A random GPT-2-shaped folder (scripts/make-random-model.ts), made once per shape under .bench/models/. */
async function vsTrlModelFolder(
  shape: ReturnType<typeof parseShape>,
  given: string | undefined,
  log: (m: string) => void,
): Promise<string> {
  if (given) return path.resolve(given);
  const s = [shape.n_layer, shape.n_embd, shape.n_head, shape.n_positions, shape.vocab_size];
  const dir = path.join(ROOT, '.bench/models', `gpt2-random-${s.join('-')}`);
  if (existsSync(path.join(dir, 'config.json')) && existsSync(path.join(dir, 'model.safetensors')))
    return dir;
  log(`writing a random model of shape ${s.join(',')} to ${dir}`);
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'scripts/make-random-model.ts', dir, ...s.map(String)],
    { cwd: ROOT, encoding: 'utf8' },
  );
  if (r.status !== 0)
    throw new Error(`scripts/make-random-model.ts failed (exit ${r.status}): ${(r.stderr ?? '').trim()}`);
  return dir;
}

/** `bench --vs-trl`: both sides one after the other (never at once: each has the machine to itself). */
async function vsTrlBench(
  o: {
    shape: string | undefined;
    model: string | undefined;
    steps: number;
    warmup: number;
    /** Our micro-batch: the batch (TRL's arithmetic, no recompute), or 0 = `cli train`'s default (auto, recompute auto). */
    microBatch: number;
    json: boolean;
    out: string;
  },
  log: (m: string) => void,
): Promise<void> {
  const { mkdtemp, rm } = await import('node:fs/promises');
  let shape: ReturnType<typeof parseShape>;
  try {
    shape = parseShape(o.shape ?? VS_TRL_GPT2_SHAPE.join(','));
  } catch (e) {
    throw new UserError((e as Error).message);
  }
  const mach = machine();
  const cpu = `${mach.cpu}, load average at start ${mach['load average at start']}`;
  const emit = async (r: VsTrl | null, skipped: string | null): Promise<void> => {
    const md = vsTrlMarkdown(r, skipped, cpu);
    await mkdir(path.dirname(o.out), { recursive: true });
    await writeFile(o.out, md);
    process.stdout.write(md);
    if (o.json)
      process.stdout.write(
        JSON.stringify({
          vsTrlCpu: r?.vsTrlCpu ?? null,
          vsTrlCpuTime: r?.vsTrlCpuTime ?? null,
          vsTrlPeakRatio: r?.peakRatio ?? null,
          vsTrl: r ? { ...r, machine: cpu } : { skipped },
        }) + '\n',
      );
  };
  const python = resolvePython();
  const script = path.join(ROOT, 'scripts/trl_grpo_step.py');
  const probe = probePython(python, script);
  if (!probe.ok) {
    log(`bench --vs-trl: skipped: ${probe.reason}`);
    await emit(null, probe.reason);
    return;
  }
  log(
    `TRL side: ${python} (${Object.entries(probe.versions)
      .map(([k, x]) => `${k} ${x}`)
      .join(', ')})`,
  );
  const dir = await vsTrlModelFolder(shape, o.model, log);
  const config = gpt2Only(await readConfig(nodeFiles(dir)), 'bench --vs-trl');
  const tokenizer = tokenizerFor(config);
  const promptLengths = VS_TRL_PROMPTS.map((p) => tokenizer.encode(p).length);
  const trlPrompts = byteMatchedPrompts(VS_TRL_PROMPTS, promptLengths);
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'ppo-vs-trl-'));
  try {
    const sizes = matmulShapes(config);
    const childSpec: VsTrlChildSpec = {
      config: ourConfig(dir, VS_TRL_PROMPTS, o.warmup + o.steps, {
        microBatchSize: o.microBatch,
        recompute: o.microBatch === 0 ? 'auto' : 'off',
      }),
      warmup: o.warmup,
      steps: o.steps,
      threads: VS_TRL_SETUP.threads,
      matmulSizes: sizes,
    };
    const childFile = path.join(tmp, 'ours.json');
    await writeFile(childFile, JSON.stringify(childSpec));
    log(
      `ours: ${o.warmup} warm-up + ${o.steps} timed GRPO LoRA steps on WASM, ${VS_TRL_SETUP.threads} thread`,
    );
    const child = await childJson<Omit<OursResult, 'Tq' | 'promptLengths'> | { error: string }>(
      ['bench', '--vs-trl-child', childFile],
      '(ours)',
      log,
      (code) => ({ error: `our side's child process exited with ${code} and no result` }),
    );
    if ('error' in child) throw new Error(`bench --vs-trl: ${child.error}.`);
    const ours: OursResult = {
      ...child,
      promptLengths,
      Tq: ourQueryLength(promptLengths, config.n_positions, VS_TRL_SETUP.responseLength),
    };
    const specFile = path.join(tmp, 'trl.json');
    await writeFile(
      specFile,
      JSON.stringify(
        trlSpec({
          model: dir,
          prompts: trlPrompts,
          warmup: o.warmup,
          steps: o.steps,
          matmulSizes: sizes,
          outputDir: path.join(tmp, 'trl-out'),
        }),
      ),
    );
    log(`TRL: ${o.warmup} warm-up + ${o.steps} timed steps on PyTorch CPU, ${VS_TRL_SETUP.threads} thread`);
    const stdout = await runPython(python, [script, specFile], log, 'trl');
    const trl = parseTrlResult(stdout, { steps: o.steps, responseLength: VS_TRL_SETUP.responseLength });
    if (trl.promptLengths.join() !== promptLengths.join())
      throw new Error(
        `bench --vs-trl: prompt lengths differ: ours ${promptLengths.join(',')} tokens, TRL's ${trl.promptLengths.join(',')}.`,
      );
    await emit(summariseVsTrl({ ...config }, ours, trl, { warmup: o.warmup }), null);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
