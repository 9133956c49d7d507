/**
 * `bench --gpu`'s PyTorch side (issue #22, `vsTorchEager`; docs/gpu.md): the probe runs `python -c` with
 * TORCH_PROBE_CODE (src/bench/webgpu-gpu.ts) and reads whether torch imports and CUDA is available
 * (torchProbeFromRun); runTorchPpoStep runs scripts/torch_ppo_step.py, the same PPO step in PyTorch eager;
 * runTorchGrpoStep runs scripts/torch_grpo_step.py, the Qwen row's GRPO step in PyTorch eager + PEFT, and
 * qwenGrpoBenchHooks gives runGpuBench that row's model (written once to a temporary folder), trainer and PyTorch.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  TORCH_PROBE_CODE,
  torchProbeFromRun,
  type ProbeRun,
  type TorchProbe,
  type QwenTrainerBuilder,
} from '../bench/webgpu-gpu';
import { parseTorchResult, type TorchPpoResult, type TorchPpoSpec } from '../bench/torch-ppo';
import {
  f16BenchShape,
  parseTorchGrpoResult,
  qwenBenchShape,
  type F16BenchShapeName,
  type TorchGrpoResult,
  type TorchGrpoSpec,
} from '../bench/torch-grpo';
import type { F16BenchHooks } from '../bench/f16-gpu';
import type { GpuMemorySampler } from '../bench/webgpu-gpu';
import { loadLM } from '../core/model/folder';
import { nodeFiles } from './files-node';
import { writeRandomBf16LlamaFolder } from './random-bf16-folder';
import { validateConfig } from '../common/config';
import { parseModelConfig } from '../core/model/config';
import { exportLM } from '../core/model/folder';
import { Llama } from '../core/model/llama';
import type { LlamaConfig } from '../core/model/llama-config';
import { buildTrainer, type Resources } from '../core/ppo/setup';
import { writeFolder } from './files-node';
import { ROOT } from './models';

/** Whether `python` can import torch with CUDA available, and why not. */
export function probeTorchCuda(python: string): TorchProbe {
  const r = spawnSync(python, ['-c', TORCH_PROBE_CODE], { encoding: 'utf8', timeout: 120_000 });
  return torchProbeFromRun(python, {
    error: (r.error as ProbeRun['error']) ?? null,
    status: r.status,
    stdout: r.stdout ?? '',
    stderr: r.stderr ?? '',
  });
}

/**
 * Run `python SCRIPT SPEC` (scripts/trl_grpo_step.py, scripts/torch_ppo_step.py) offline, with the script's
 * `[tag]` stderr lines (and errors) as progress; resolves its stdout, rejects on a non-zero exit.
 */
export function runPython(
  python: string,
  args: string[],
  log: (m: string) => void,
  tag: 'trl' | 'torch',
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1', HF_DATASETS_OFFLINE: '1' },
    });
    const kill = (): void => void child.kill('SIGTERM');
    process.once('exit', kill);
    let stdout = '';
    let tail = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    let errBuf = '';
    child.stderr.on('data', (d: Buffer) => {
      errBuf += d.toString();
      const lines = errBuf.split(/\r?\n|\r/);
      errBuf = lines.pop() ?? '';
      for (const l of lines)
        if (l.trim()) {
          tail = l;
          if (l.startsWith(`[${tag}]`) || /Error|Traceback/.test(l))
            log(`(${tag}) ${l.replace(`[${tag}] `, '')}`);
        }
    });
    child.on('error', reject);
    child.on('close', (code) => {
      process.off('exit', kill);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${python} ${args[0]} exited with ${code}: ${(errBuf || tail).trim()}`));
    });
  });
}

/**
 * Run scripts/torch_ppo_step.py on `spec` with `python` (`bench --gpu`'s PyTorch column): the spec goes to a
 * temporary file, progress lines go to `log`, and the last JSON line of stdout is parsed (parseTorchResult).
 */
export async function runTorchPpoStep(
  python: string,
  spec: TorchPpoSpec,
  log: (m: string) => void,
): Promise<TorchPpoResult> {
  const dir = await mkdtemp(join(tmpdir(), 'ppo-torch-'));
  const specPath = join(dir, 'spec.json');
  try {
    await writeFile(specPath, JSON.stringify(spec));
    const script = fileURLToPath(new URL('../../scripts/torch_ppo_step.py', import.meta.url));
    return parseTorchResult(await runPython(python, [script, specPath], log, 'torch'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Run scripts/torch_grpo_step.py on `spec` with `python` (`bench --gpu`'s `qwenGrpo.torchEagerPeft`): as
 * runTorchPpoStep, parsed by parseTorchGrpoResult.
 */
export async function runTorchGrpoStep(
  python: string,
  spec: TorchGrpoSpec,
  log: (m: string) => void,
): Promise<TorchGrpoResult> {
  const dir = await mkdtemp(join(tmpdir(), 'ppo-torch-grpo-'));
  const specPath = join(dir, 'spec.json');
  try {
    await writeFile(specPath, JSON.stringify(spec));
    const script = fileURLToPath(new URL('../../scripts/torch_grpo_step.py', import.meta.url));
    return parseTorchGrpoResult(await runPython(python, [script, specPath], log, 'torch'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Write a Llama/Qwen2/Qwen3 model folder with random weights (Llama.random, seed 1234) for `raw` (a config.json:
 * torch-grpo.ts qwenBenchShape) and the 512-id ChatML tokenizer of tests/fixtures/hf-tokenizer, as
 * scripts/make-random-model.ts --shape writes it. `maxBindingBytes`: the embedding in chunks that fit the device's
 * binding limit (on WebGPU). Returns the parsed config.
 */
export async function writeRandomLlamaFolder(
  dir: string,
  raw: Record<string, unknown>,
  o: { maxBindingBytes?: number } = {},
): Promise<LlamaConfig> {
  const config = parseModelConfig(raw) as LlamaConfig;
  const model = Llama.random(config, 1234, false, 'bench-random', { maxBindingBytes: o.maxBindingBytes });
  let files: Map<string, Uint8Array>;
  try {
    files = await exportLM(model);
  } finally {
    model.dispose();
  }
  const tok = join(ROOT, 'tests', 'fixtures', 'hf-tokenizer');
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'])
    files.set(f, new Uint8Array(await readFile(join(tok, f))));
  await writeFolder(dir, files);
  return config;
}

/**
 * What `bench --gpu` gives runGpuBench for its Qwen GRPO row (src/cli/bench.ts gpuBench): a trainer on a folder of
 * Qwen2.5-0.5B's shapes with random weights (a dry run: qwenBenchShape's 2 layers of width 64), written once to a
 * temporary folder at the first build, with the sentiment task as the GPT-2 rows have it; the same step in PyTorch
 * eager + PEFT through `python`; `cleanup` removes the folder.
 */
export function qwenGrpoBenchHooks(o: {
  dryRun: boolean;
  res: Resources;
  python: string;
  log: (m: string) => void;
}): {
  buildQwenTrainer: QwenTrainerBuilder;
  runTorchGrpo: (spec: TorchGrpoSpec) => Promise<TorchGrpoResult>;
  cleanup: () => Promise<void>;
} {
  let dir: string | null = null;
  const folder = async (): Promise<string> => {
    if (dir) return dir;
    const d = join(await mkdtemp(join(tmpdir(), 'ppo-gpu-bench-')), 'qwen2.5-0.5b');
    o.log(
      `writing a Qwen2.5-0.5B${o.dryRun ? ' (dry run: 2 layers, width 64)' : ''}-shaped model with random weights to ${d}`,
    );
    const t0 = performance.now();
    await writeRandomLlamaFolder(d, qwenBenchShape(o.dryRun), { maxBindingBytes: o.res.maxBindingBytes });
    o.log(`  written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    return (dir = d);
  };
  return {
    buildQwenTrainer: async (over, owner) =>
      buildTrainer(validateConfig({ model: await folder(), task: 'sentiment', ...over }, 'bench'), o.res, {
        owner,
      }),
    runTorchGrpo: (spec) => runTorchGrpoStep(o.python, spec, o.log),
    cleanup: async () => {
      if (dir) await rm(dirname(dir), { recursive: true, force: true });
      dir = null;
    },
  };
}

/**
 * What `bench --gpu`'s f16-base rows (issue #36; PPO_GPU_BENCH_ROWS=f16, src/cli/bench.ts) need: a folder of each
 * shape (f16BenchShape: Qwen2.5-1.5B or Qwen3-1.7B with random weights in BF16, written once at its first use by
 * writeRandomBf16LlamaFolder), a trainer on it with the base in f16, the bare model loaded in f16 or f32 (the
 * decode comparison), the same GRPO step in PyTorch eager + PEFT, and the GPU's used memory (nvidia-smi).
 */
export function f16GrpoBenchHooks(o: {
  dryRun: boolean;
  res: Resources;
  python: string;
  log: (m: string) => void;
}): Required<F16BenchHooks> & { cleanup: () => Promise<void> } {
  const dirs = new Map<F16BenchShapeName, string>();
  const folder = async (name: F16BenchShapeName): Promise<string> => {
    const had = dirs.get(name);
    if (had) return had;
    const d = join(await mkdtemp(join(tmpdir(), 'ppo-gpu-bench-')), name);
    o.log(
      `writing a ${name}${o.dryRun ? ' (dry run: 2 layers, width 64)' : ''}-shaped model with random BF16 weights to ${d}`,
    );
    const t0 = performance.now();
    await writeRandomBf16LlamaFolder(d, f16BenchShape(name, o.dryRun));
    o.log(`  written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    dirs.set(name, d);
    return d;
  };
  return {
    buildTrainer: async (name, over, owner) =>
      buildTrainer(
        validateConfig({ model: await folder(name), task: 'sentiment', baseDtype: 'f16', ...over }, 'bench'),
        o.res,
        { owner },
      ),
    loadModel: async (name, baseDtype) =>
      (
        await loadLM(nodeFiles(await folder(name)), {
          trainable: false,
          maxBindingBytes: o.res.maxBindingBytes,
          ...(baseDtype === 'f16' ? { baseDtype } : {}),
        })
      ).model,
    runTorchGrpo: (spec) => runTorchGrpoStep(o.python, spec, o.log),
    gpuMemoryUsedBytes,
    sampleGpuMemory: () => sampleGpuMemory(),
    cleanup: async () => {
      for (const d of dirs.values()) await rm(dirname(d), { recursive: true, force: true });
      dirs.clear();
    },
  };
}

/**
 * The GPU's used memory sampled while something runs: `nvidia-smi -i 0 … -lms PERIOD` in the background (the first
 * GPU's memory.used, as gpuMemoryUsedBytes reads it: MiB, a line each period). `samples()` counts the readings so
 * far (a caller can wait for the first before what it measures starts); `stop()` ends the command (SIGTERM, then
 * SIGKILL after STOP_GRACE_MS; it resolves by then whatever the command does) and gives the most it printed, in
 * bytes (null where it printed nothing: no nvidia-smi, or it failed). At the period's resolution: a buffer that
 * lived less than a period may be missed. `command` and `args` are for tests.
 */
export function sampleGpuMemory(
  periodMs = 50,
  command = 'nvidia-smi',
  args = ['-i', '0', '--query-gpu=memory.used', '--format=csv,noheader,nounits', '-lms', String(periodMs)],
): GpuMemorySampler {
  let most: number | null = null;
  let count = 0;
  let partial = '';
  const take = (line: string) => {
    const mib = Number(line.trim());
    if (line.trim() === '' || !Number.isFinite(mib)) return;
    most = Math.max(most ?? 0, mib * 1024 * 1024);
    count++;
  };
  let child: ReturnType<typeof spawn> | null = null;
  let done = false;
  const exited = new Promise<void>((resolve) => {
    const end = () => {
      done = true;
      resolve();
    };
    try {
      child = spawn(command, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    } catch {
      end();
      return;
    }
    child.on('error', end);
    child.on('close', end);
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const l of lines) take(l);
    });
  });
  /** Signal the command only while it runs: with no pid (a start that failed, reported on a later tick) a kill
   * would signal this process's whole group. */
  const signal = (sig: NodeJS.Signals) => {
    const c = child as ReturnType<typeof spawn> | null;
    if (!done && c && c.pid !== undefined && c.exitCode === null && c.signalCode === null) c.kill(sig);
  };
  return {
    samples: () => count,
    async stop() {
      signal('SIGTERM');
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        exited,
        new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            signal('SIGKILL');
            resolve();
          }, STOP_GRACE_MS);
        }),
      ]);
      clearTimeout(timer);
      take(partial);
      partial = '';
      return most;
    },
  };
}

/** How long sampleGpuMemory's stop() waits for the command to end after SIGTERM. */
export const STOP_GRACE_MS = 3000;

/**
 * The GPU's used memory in bytes as nvidia-smi reports it (the first GPU), or null where there is none. Nothing
 * else runs on the bench's machine, so a difference of two readings is what this process added between them.
 */
export function gpuMemoryUsedBytes(): number | null {
  const r = spawnSync('nvidia-smi', ['--query-gpu=memory.used', '--format=csv,noheader,nounits'], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  if (r.error || r.status !== 0) return null;
  const mib = Number((r.stdout ?? '').trim().split('\n')[0]);
  return Number.isFinite(mib) ? mib * 1024 * 1024 : null;
}
