/**
 * What loading a policy for generation holds at its peak: the process's peak resident memory (VmHWM) while
 * `loadLM` (core/model/folder.ts) reads a folder from disk and every weight goes to the backend's memory (on
 * WebGPU each weight uploaded, as its first use would). On SwiftShader and on WASM a device buffer / the WASM heap
 * is this process's memory, so the peak is the weights plus whatever the load held besides them.
 *
 *   npx tsx scripts/load-memory.ts DIR [--half] [--backend webgpu|wasm] [--together] [--make SHAPE]
 *
 * --half: the base in f16 (WebGPU, Llama family). --together: the load as it was before 2026-11-30 (every tensor
 * decoded first, then the model built, then uploaded: readWeights + lmFromArrays), for comparison. --make SHAPE:
 * first write DIR as a full-size folder of that LLAMA_SHAPES shape with random BF16 weights
 * (src/cli/random-bf16-folder.ts), unless DIR already has its model.safetensors (scripts/gpu-device-run.sh load).
 * Prints one JSON line: {mode, backend, half, weightBytes, loadSeconds, baselineRss, peakOverBaseline,
 * residentOverBaseline, peakOverWeights, gpuMemoryMiB}. On a GPU the device's memory is not this process's: there
 * the peak is the load's host side, and gpuMemoryMiB what nvidia-smi says this process holds on the device after the
 * load (null without nvidia-smi).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs-core';
import { loadLM, mapFamilyTensors, readConfig, readWeights } from '../src/core/model/folder';
import type { SafetensorsFile } from '../src/core/model/safetensors';
import { isF16Matrix } from '../src/core/model/f16-base';
import { lmFromArrays, lmParamSpecs } from '../src/core/model/causal-lm';
import { mapLlamaTensors } from '../src/core/model/hfnames';
import { isLlamaConfig } from '../src/core/model/config';
import { nodeFiles } from '../src/cli/files-node';
import { nodeBindingLimit, setNodeBackend } from '../src/cli/backend-node';
import { flushTfjs, replayBackend, tensorBuffer } from '../src/core/kernels/webgpu-replay';
import { writeRandomBf16LlamaFolder } from '../src/cli/random-bf16-folder';
import { LLAMA_SHAPES, type LlamaShapeName } from '../src/core/model/llama-config';

const args = process.argv.slice(2);
const dir = args[0];
const half = args.includes('--half');
const together = args.includes('--together');
const backendAt = args.indexOf('--backend');
const backend = backendAt >= 0 ? args[backendAt + 1] : 'webgpu';
const makeAt = args.indexOf('--make');
const make = makeAt >= 0 ? args[makeAt + 1] : null;
if (!dir || dir.startsWith('--') || (make !== null && !(make in LLAMA_SHAPES))) {
  console.error(
    'usage: tsx scripts/load-memory.ts DIR [--half] [--backend webgpu|wasm] [--together] ' +
      `[--make ${Object.keys(LLAMA_SHAPES).join('|')}]`,
  );
  process.exit(2);
}
if (make !== null && !existsSync(`${dir}/model.safetensors`)) {
  await writeRandomBf16LlamaFolder(dir, {
    ...LLAMA_SHAPES[make as LlamaShapeName],
    bos_token_id: 510,
    eos_token_id: 511,
    pad_token_id: 509,
  });
}

/** Kilobytes of a /proc/self/status field, as bytes. */
function status(field: 'VmHWM' | 'VmRSS'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

await setNodeBackend(backend);
// Warm the backend up so that its own start-up is in the baseline.
tf.tidy(() => tf.add(tf.ones([4]), 1).dataSync());
const files = nodeFiles(dir);
const opts = {
  trainable: false,
  label: 'policy',
  maxBindingBytes: nodeBindingLimit(),
  ...(half ? { baseDtype: 'f16' as const } : {}),
};
const baselineRss = status('VmRSS');
const t0 = performance.now();
let model;
if (together) {
  const config = await readConfig(files);
  const { file, path } = await readWeights(
    files,
    'model.safetensors',
    'model.safetensors',
    half ? (n) => isF16Matrix(n.startsWith('model.') ? n.slice('model.'.length) : n) : undefined,
  );
  const arrays = isLlamaConfig(config)
    ? mapLlamaTensors(file, lmParamSpecs(config), path, { tied: config.tie_word_embeddings })
    : mapFamilyTensors(config, file as SafetensorsFile, lmParamSpecs(config), path);
  file.tensors.clear();
  model = lmFromArrays(config, arrays, false, 'policy', opts);
  arrays.clear();
} else {
  model = (await loadLM(files, opts)).model;
}
const gpu = replayBackend();
let weightBytes = 0;
for (const v of model.params.values()) {
  weightBytes += v.size * 4; // f32 and packed words (int32) alike
  if (gpu) tensorBuffer(gpu, v);
}
if (gpu) {
  flushTfjs(gpu);
  await gpu.queue.onSubmittedWorkDone();
}
const loadSeconds = (performance.now() - t0) / 1000;

/** This process's memory on an NVIDIA device after the load, by nvidia-smi (MiB), or null. */
function gpuMemoryMiB(): number | null {
  const r = spawnSync(
    'nvidia-smi',
    ['--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits'],
    {
      encoding: 'utf8',
    },
  );
  if (r.status !== 0 || !r.stdout) return null;
  for (const line of r.stdout.trim().split('\n')) {
    const [pid, mib] = line.split(',').map((x) => Number(x.trim()));
    if (pid === process.pid) return mib;
  }
  return null;
}
const global = globalThis as { gc?: () => void };
global.gc?.();
console.log(
  JSON.stringify({
    mode: together ? 'together' : 'loadLM',
    backend,
    half,
    weightBytes,
    loadSeconds: Number(loadSeconds.toFixed(2)),
    baselineRss,
    peakOverBaseline: status('VmHWM') - baselineRss,
    residentOverBaseline: status('VmRSS') - baselineRss,
    peakOverWeights: status('VmHWM') - baselineRss - weightBytes,
    gpuMemoryMiB: gpuMemoryMiB(),
  }),
);
