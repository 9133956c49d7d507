/**
 * Browser benchmark page, driven by `npm run bench` (src/cli/bench-browser.ts) or by hand on a dev server:
 *   /e2e/pages/bench.html?backend=webgpu&quick=1&sections=matmul,gen,ppo,lm,memory
 * Other parameters: `flags` (JSON of tfjs flags to set first, e.g. {"WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE":32}),
 * `mode=adamcheck` (only the fused-Adam-vs-tfjs-Adam check), `batch`/`tokens` (one generation size),
 * `wasmThreads=N` (WASM's thread count, as the app's `?wasmThreads=N`; default the app's: the logical cores less one, at
 * most 8; one thread where the page is not cross-origin isolated), `mode=threads` (only the PPO step's timing,
 * for the 1-thread ÷ N-thread ratio src/cli/bench-browser.ts makes; with `profile=1` also one step's kernel
 * times by kernel).
 * Runs on the page's main thread (fine for timing) and leaves the result on window.benchResult; progress lines
 * go to the console as "[bench] …".
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-core/dist/register_all_gradients';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import '@tensorflow/tfjs-backend-wasm';
import '@tensorflow/tfjs-backend-cpu';
import { getThreadsCount, setThreadsCount, setWasmPaths } from '@tensorflow/tfjs-backend-wasm';
import wasmSimd from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm?url';
import wasmPlain from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm?url';
import wasmThreaded from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-threaded-simd.wasm?url';
import { registerWasmExtraKernels } from '../../src/core/kernels/wasm-extra';
import { registerFusedAdamKernels } from '../../src/core/optim/fused-adam';
import {
  checkFusedAdam,
  planFor,
  runBenchSections,
  SECTIONS,
  type BenchEnv,
  type Section,
} from '../../src/bench/bench';
import type { NanoGptPeer } from '../../src/bench/perf/lm-train';
import { readConfig, loadLM, type ModelFiles } from '../../src/core/model/folder';
import { tokenizerFor } from '../../src/core/tokenizer';
import { gpt2Only } from '../../src/core/model/config';
import type { GPT2 } from '../../src/core/model/gpt2';
import { parseTask, taskUrl } from '../../src/core/tasks';
import { validateConfig } from '../../src/common/config';
import { buildTrainer, type Resources } from '../../src/core/ppo/setup';
import { benchPpoStep } from '../../src/bench/perf/ppo';
import { benchMatmul } from '../../src/bench/perf/matmul';
import { bmmStats } from '../../src/core/kernels/wasm-simd';
import { startWasmWithThreads, wasmThreadsFor, wasmThreadsParam } from '../../src/worker/wasm-threads';
import { useWebGpuDeviceLimits } from '../../src/core/backend/webgpu-device';

declare global {
  interface Window {
    benchResult?: unknown;
    benchError?: string;
    /** The sections finished so far (the runner reads it when the page runs out of time). */
    benchPartial?: unknown;
  }
}

const log = (msg: string): void => console.log(`[bench] ${msg}`);

/** A model folder served by the dev server (public/models/NAME/). */
function httpFiles(base: string): ModelFiles {
  return {
    label: base,
    async read(name) {
      const res = await fetch(new URL(name, new URL(base, location.origin)), {
        headers: { Accept: 'application/octet-stream, application/json' },
      });
      if (!res.ok || (res.headers.get('content-type') ?? '').includes('text/html')) return null;
      return new Uint8Array(await res.arrayBuffer());
    },
  };
}

const resources: Resources = {
  modelFiles: (name) => httpFiles(`/models/${name}/`),
  loadTask: async (name) => parseTask(await (await fetch(`/${taskUrl(name)}`)).json(), `/${taskUrl(name)}`),
};

const NANO = '/node_modules/@genai-fi/nanogpt/dist/';

/** nanogpt's files loaded as they are (not pre-bundled), so main.js and BasicTrainer.js share its modules. */
async function loadNanoGpt(): Promise<NanoGptPeer & { selectBackend(b: string): Promise<void> }> {
  const main = await import(/* @vite-ignore */ `${NANO}main.js`);
  const trainer = await import(/* @vite-ignore */ `${NANO}training/BasicTrainer.js`);
  return {
    NanoGPTV1: main.models.NanoGPTV1,
    BasicTrainer: trainer.default,
    selectBackend: (b) => main.TeachableLLM.selectBackend(b),
  };
}

async function adapterInfo(): Promise<Record<string, unknown> | null> {
  type AdapterLike = { info?: Record<string, unknown>; isFallbackAdapter?: boolean };
  const gpu = (navigator as unknown as { gpu?: { requestAdapter(): Promise<AdapterLike | null> } }).gpu;
  if (!gpu) return null;
  const a = await gpu.requestAdapter();
  if (!a) return null;
  const info = a.info ?? {};
  return {
    vendor: info.vendor,
    architecture: info.architecture,
    description: info.description,
    isFallbackAdapter: a.isFallbackAdapter ?? info.isFallbackAdapter,
  };
}

/** Kernel time of one PPO step, by kernel (batched products, our SIMD kernel, apart from XNNPACK's 2-D ones). */
interface KernelShare {
  name: string;
  ms: number;
  calls: number;
}

/**
 * The PPO step of the WASM page's plan, timed as the ppo section times it (benchPpoStep's timeUpdate), on the
 * page's thread count; with `profile`, one more step under tf.profile, its kernel time summed by kernel.
 */
async function timePpoUpdate(quick: boolean, profile: boolean): Promise<Record<string, unknown>> {
  const plan = planFor('chromium', 'wasm', quick);
  const trainer = await buildTrainer(
    validateConfig({ model: 'tiny', task: 'sentiment', ...plan.ppoConfig }, 'bench'),
    resources,
  );
  try {
    const threads = getThreadsCount();
    log(`PPO step on ${threads} thread(s) (${plan.ppoWarmup} warm-up + ${plan.ppoSteps} timed)`);
    const calls = bmmStats.calls;
    const ppo = await benchPpoStep(trainer, {
      steps: plan.ppoSteps,
      warmup: plan.ppoWarmup,
      onStep: (i, secs) => log(`  ${i < 0 ? 'warm-up' : 'step'} ${secs.toFixed(2)} s`),
    });
    // XNNPACK's own scaling in this page, for comparison: a 512² product (the matmul section's smallest).
    const matmul512 = await benchMatmul(512, { iters: 1, minSeconds: 1 });
    const out: Record<string, unknown> = {
      threads,
      isolated: self.crossOriginIsolated,
      ppoConfig: plan.ppoConfig,
      ppo,
      bmmCalls: bmmStats.calls - calls,
      matmul512Gflops: matmul512.gflops,
    };
    if (profile) {
      let update = 0;
      const info = await tf.profile(async () => {
        const r = await trainer.trainStep();
        update = r.metrics.timeUpdate;
        return [];
      });
      const by = new Map<string, KernelShare>();
      for (const k of info.kernels) {
        const batched =
          k.name === 'BatchMatMul' && k.inputShapes.some((s) => s != null && s.length === 3 && s[0] > 1);
        const name = batched ? 'BatchMatMul (batched: our SIMD bmm)' : k.name;
        const e = by.get(name) ?? { name, ms: 0, calls: 0 };
        e.ms += Number(await k.kernelTimeMs);
        e.calls++;
        by.set(name, e);
      }
      const kernels = [...by.values()].sort((a, b) => b.ms - a.ms);
      out.profile = {
        stepUpdateSeconds: update,
        totalKernelMs: kernels.reduce((a, k) => a + k.ms, 0),
        kernels: kernels.slice(0, 15),
      };
    }
    return out;
  } finally {
    const { policy, ref, value } = trainer.models;
    trainer.disposeOptimizers();
    policy.dispose();
    ref.dispose();
    value?.dispose();
  }
}

async function main(): Promise<void> {
  const q = new URLSearchParams(location.search);
  const backend = q.get('backend') ?? 'webgpu';
  const quick = q.get('quick') === '1';
  setWasmPaths({
    'tfjs-backend-wasm.wasm': wasmPlain,
    'tfjs-backend-wasm-simd.wasm': wasmSimd,
    'tfjs-backend-wasm-threaded-simd.wasm': wasmThreaded,
  });
  registerWasmExtraKernels();
  registerFusedAdamKernels();
  // The device the app's worker makes (src/worker/backend-web.ts): the adapter's storage buffers per program.
  useWebGpuDeviceLimits(WebGPUBackend as never);
  const flags = JSON.parse(q.get('flags') ?? '{}') as Record<string, number | boolean | string>;
  for (const [k, v] of Object.entries(flags)) tf.env().set(k, v);
  // WASM on the app's thread count (src/worker/backend-web.ts does the same in the worker).
  const threadsAsked = wasmThreadsFor(navigator.hardwareConcurrency, wasmThreadsParam(location.search));
  const set = () => tf.setBackend(backend);
  if (!(await (backend === 'wasm' ? startWasmWithThreads(threadsAsked, setThreadsCount, set) : set())))
    throw new Error(`backend ${backend} unavailable`);
  await tf.ready();
  if (tf.getBackend() !== backend) throw new Error(`asked for ${backend}, got ${tf.getBackend()}`);
  const adapter = backend === 'webgpu' ? await adapterInfo() : null;
  const env = tf.env();
  const header = {
    backend,
    quick,
    flags,
    adapter,
    userAgent: navigator.userAgent,
    hardwareConcurrency: navigator.hardwareConcurrency,
    crossOriginIsolated: self.crossOriginIsolated,
    wasmSimd: backend === 'wasm' ? env.getBool('WASM_HAS_SIMD_SUPPORT') : undefined,
    wasmThreadsSupported: backend === 'wasm' ? env.getBool('WASM_HAS_MULTITHREAD_SUPPORT') : undefined,
    wasmThreadsUsed: backend === 'wasm' ? getThreadsCount() : undefined,
  };
  if (q.get('mode') === 'threads') {
    window.benchResult = { ...header, threadsRun: await timePpoUpdate(quick, q.get('profile') === '1') };
    return;
  }
  if (q.get('mode') === 'adamcheck') {
    window.benchResult = { ...header, fusedAdamCheck: await checkFusedAdam() };
    return;
  }

  const tinyFiles = resources.modelFiles('tiny');
  const tinyConfig = gpt2Only(await readConfig(tinyFiles), 'bench');
  const task = await resources.loadTask('sentiment');
  let nano: Awaited<ReturnType<typeof loadNanoGpt>> | null = null;
  const benchEnv: BenchEnv = {
    platform: 'chromium',
    tinyConfig,
    tinyTokenizer: tokenizerFor(tinyConfig),
    prompts: task.prompts,
    buildPpoTrainer: (o) =>
      buildTrainer(validateConfig({ model: 'tiny', task: 'sentiment', ...o }, 'bench'), resources),
    loadTinyModel: async () => (await loadLM(tinyFiles, { trainable: false, label: 'bench' })).model as GPT2,
    nanogpt: async () => (nano ??= await loadNanoGpt()),
    // nanogpt ships its own patched WebGPU backend and kernels; it runs on them, after ours ran on the app's device.
    beforeNanogpt:
      backend === 'webgpu'
        ? async () => {
            await tf.setBackend('cpu');
            tf.removeBackend('webgpu');
            await nano!.selectBackend('webgpu');
            if (tf.getBackend() !== 'webgpu')
              throw new Error(`nanogpt's selectBackend left ${tf.getBackend()}`);
          }
        : undefined,
    log,
  };
  const sections = (q.get('sections')?.split(',').filter(Boolean) ?? SECTIONS) as Section[];
  const plan = planFor('chromium', backend, quick);
  if (q.get('batch') && q.get('tokens')) plan.gen = [[Number(q.get('batch')), Number(q.get('tokens'))]];
  const results = await runBenchSections(benchEnv, sections, plan, {
    fusedAdamCheck: true,
    onPartial: (r) =>
      (window.benchPartial = { ...header, plan, ...JSON.parse(JSON.stringify(r)), partial: true }),
  });
  window.benchResult = { ...header, plan, ...results };
}

main()
  .catch((e) => {
    window.benchError = String((e as Error)?.stack ?? e);
  })
  .finally(() => {
    document.getElementById('out')!.textContent =
      window.benchError ?? JSON.stringify(window.benchResult, null, 2);
  });
