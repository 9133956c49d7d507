/**
 * The CLI's `--backend webgpu` (Dawn in Node, src/cli/backend-webgpu-node.ts) end to end: greedy decoding equals
 * WASM's, a 2-step PPO run trains, and a missing adapter is a one-line error naming what to install. Slow on a
 * software adapter (SwiftShader: every shader compiles on the CPU), hence this tier.
 */
import { describe, it, expect } from 'vitest';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';
import { makeTinyFolder } from './helpers/tiny';
import { cliSpawned } from './helpers/spawn';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter } from './helpers/webgpu-node';
import { loadLM } from '../src/core/model/folder';
import { generate } from '../src/core/model/sampling';
import { nodeFiles } from '../src/cli/files-node';
import { countDispatches, gpt2LayerDispatches } from '../src/bench/webgpu-dispatch';
import { setWebGpuLayerNormFused } from '../src/core/kernels/webgpu-layernorm';
import { layerNormPlain } from '../src/core/model/ops';
import { dawnWaitStats, isDawnPoll } from '../src/cli/dawn-wait';

const adapter = await webGpuAdapter();

const cli = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
  cliSpawned(args, { timeout: 500_000, env });

describe('CLI --backend webgpu in Node', () => {
  it('without an adapter: exit 1 and one line naming what to install', async () => {
    // No driver for the system loader and no Chromium fallback: no adapter on any machine.
    const env = { ...process.env, PPO_WEBGPU_VULKAN: 'system', VK_ICD_FILENAMES: '/nonexistent/icd.json' };
    const r = await cli(
      ['generate', '--model', 'tiny', '--prompt', 'Hi', '--max-new-tokens', '2', '--backend', 'webgpu'],
      env,
    );
    expect(r.code, r.stderr).toBe(1);
    const err = r.stderr.split('\n').find((l) => l.startsWith('error:')) ?? '';
    expect(err).toMatch(/found no adapter/);
    expect(err).toMatch(/apt-get install chromium/);
    expect(err).toMatch(/libvulkan1 mesa-vulkan-drivers/);
    expect(err).toMatch(/VK_ICD_FILENAMES/);
    // No JavaScript stack (Dawn's own warning names a .cpp line; that is not ours).
    expect(r.stderr).not.toMatch(/\n\s+at .*\.[jt]s:\d+/);
  });

  if (!adapter) return skipWithoutAdapter();

  it('greedy decoding on WebGPU equals WASM: tokens, and logprobs to float32 rounding', async () => {
    tf.env().set('PROD', true);
    await tf.setBackend('wasm');
    const dir = await makeTinyFolder({ n_layer: 2, n_embd: 32, seed: 5 });
    const run = async () => {
      const { model, config } = await loadLM(nodeFiles(dir), { trainable: false });
      const r = await generate(model, [[72, 105, 32], [config.bos_token_id]], {
        maxNewTokens: 6,
        temperature: 0,
        rng: 1,
        padId: 257,
        stopToken: null,
      });
      model.dispose();
      return r;
    };
    const wasm = await run();
    await useNodeWebGpu();
    const gpu = await run();
    expect(gpu.tokens).toEqual(wasm.tokens);
    expect(wasm.tokens[0].length).toBe(6);
    for (let b = 0; b < 2; b++)
      for (let i = 0; i < 6; i++) expect(gpu.logprobs[b][i]).toBeCloseTo(wasm.logprobs[b][i], 4);
  });

  it('train --backend webgpu --steps 2: finite metrics, and the policy moves', async () => {
    await tf.setBackend('wasm');
    const model = await makeTinyFolder({ n_layer: 1, n_embd: 16, seed: 7 });
    const out = mkdtempSync(path.join(tmpdir(), 'ppo-webgpu-'));
    const cfgFile = path.join(out, 'config.json');
    writeFileSync(
      cfgFile,
      JSON.stringify({
        model,
        prompts: ['Hi', 'Yo'],
        task: null,
        steps: 2,
        batchSize: 4,
        miniBatches: 1,
        ppoEpochs: 1,
        responseLength: 4,
        saveEvery: 2,
      }),
    );
    // A reward that varies between samples (random bytes score 0 on sentiment: zero advantages, zero gradient).
    const reward = path.join(out, 'even.mjs');
    writeFileSync(reward, 'export default (s) => s.responseTokens.filter((t) => t % 2 === 0).length;\n');
    const run = path.join(out, 'run');
    const r = await cli([
      'train',
      '--config',
      cfgFile,
      '--out',
      run,
      '--reward-module',
      reward,
      '--backend',
      'webgpu',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^webgpu: .*\(Vulkan: (system|chromium)/m);
    // No invalid WebGPU pipeline (the CLI stops with exit 70 on one: it would have dropped its command batch).
    expect(r.stderr).not.toMatch(/validation|Invalid/);
    const lines = readFileSync(path.join(run, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.step)).toEqual([1, 2]);
    for (const l of lines) {
      for (const k of ['reward', 'kl', 'policyLoss', 'valueLoss', 'entropy', 'gradNorm', 'approxKl'])
        expect(Number.isFinite(l[k]), k).toBe(true);
      expect(l.gradNorm).toBeGreaterThan(0);
    }
    expect(lines[0].rewardStd).toBeGreaterThan(0);
    const w0 = readFileSync(path.join(run, 'checkpoint-0', 'model.safetensors'));
    const w2 = readFileSync(path.join(run, 'checkpoint-2', 'model.safetensors'));
    expect(w2.length).toBe(w0.length);
    expect(w2.equals(w0)).toBe(false);
  });

  it("Dawn's waits: on a software adapter they poll about once a millisecond, and the product read back is right", async () => {
    await useNodeWebGpu();
    const chosen = process.env.PPO_DAWN_WAIT?.trim();
    expect(adapter.wait).toBe(chosen || (adapter.software ? 'sleep' : 'spin'));
    const n = 512;
    const aData = Float32Array.from({ length: n * n }, (_, i) => Math.sin(i * 0.37));
    const a = tf.tensor2d(aData, [n, n]);
    // Once first, so that the timed read waits on the product itself (about half a second on SwiftShader here),
    // not on its program compiling, which holds the thread before any wait begins.
    const warm = tf.matMul(a, a);
    await warm.data();
    warm.dispose();
    const seen: unknown[] = [];
    const current = globalThis.setImmediate;
    globalThis.setImmediate = ((fn: (...args: unknown[]) => void, ...args: unknown[]) => {
      seen.push(fn);
      return current(fn, ...args);
    }) as typeof setImmediate;
    const before = { ...dawnWaitStats };
    let got: Float32Array;
    const t0 = performance.now();
    let ms = 0;
    try {
      const y = tf.matMul(a, a);
      got = (await y.data()) as Float32Array;
      ms = performance.now() - t0;
      y.dispose();
    } finally {
      globalThis.setImmediate = current;
      a.dispose();
    }
    // Dawn polled through the global setImmediate while the product ran, with callbacks isDawnPoll knows.
    expect(seen.some(isDawnPoll)).toBe(true);
    const polls = seen.filter(isDawnPoll).length;
    if (adapter.wait === 'sleep') {
      // Put off by a timer (a wait that began before this one may be the one this read joins, so not every wait
      // starts with an immediate poll): about one poll a millisecond, where the spin made dozens.
      expect(dawnWaitStats.deferred - before.deferred).toBeGreaterThan(0);
      expect(polls, `${polls} polls in ${ms.toFixed(1)} ms`).toBeLessThanOrEqual(ms + 5);
    }
    let worst = 0;
    for (let i = 0; i < n; i += 37) {
      for (let j = 0; j < n; j += 29) {
        let want = 0;
        for (let k = 0; k < n; k++) want += aData[i * n + k] * aData[k * n + j];
        worst = Math.max(worst, Math.abs(got[i * n + j] - want) / (1 + Math.abs(want)));
      }
    }
    expect(worst).toBeLessThan(1e-5);
  });

  it('GPT-2 dispatches per layer: the fused layer norm saves (plain layer norm − 1) for each of the 2 per layer', async () => {
    await useNodeWebGpu();
    const x = tf.randomNormal([32, 64]);
    const g = tf.ones([64]);
    const b = tf.zeros([64]);
    const plainLn = await countDispatches(() => layerNormPlain(x, g, b, 1e-5));
    tf.dispose([plainLn.result, x, g, b]);
    const fused = await gpt2LayerDispatches();
    setWebGpuLayerNormFused(false);
    const plain = await gpt2LayerDispatches().finally(() => setWebGpuLayerNormFused(true));
    expect(Number.isInteger(plain.webgpuDispatchesPerLayerFwd)).toBe(true);
    expect(plain.webgpuDispatchesPerLayerFwd - fused.webgpuDispatchesPerLayerFwd).toBe(
      2 * (plainLn.dispatches - 1),
    );
    expect(fused.webgpuDispatchesPerLayerFwdBwd).toBeLessThan(plain.webgpuDispatchesPerLayerFwdBwd);
  });
});
