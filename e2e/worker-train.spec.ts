import { test, expect, type Page } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { unzipSync } from 'fflate';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';
import { REQUIRED_METRICS } from '../src/common/metrics';
import type { BackendPref, BackendReport, RunStatus, TrainerEvent } from '../src/worker/protocol';

/**
 * The training side of the model worker (src/worker/protocol.ts WorkerApi), driven directly through
 * e2e/pages/worker.html: PPO steps on WebGPU (SwiftShader here: tiny shapes), live hyperparameters, checkpoint
 * export / import, and user reward code in its sandbox worker.
 */

type Status = RunStatus;
type Event = TrainerEvent;

declare global {
  interface Window {
    trainEvents: Event[];
  }
}

/** Tiny shapes: SwiftShader generates ~0.4 tokens/s on the tiny model. */
const TINY = {
  model: 'tiny',
  task: 'sentiment',
  batchSize: 2,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: 4,
  seed: 5,
};

/**
 * Open the worker page and subscribe to the worker's events into window.trainEvents. The callback must be a
 * comlink proxy made by the page's own comlink instance (its proxy marker is a module-local Symbol), so the
 * module is imported again from the URL the page loaded it from.
 */
async function openAndSubscribe(page: Page, backend: BackendPref): Promise<BackendReport> {
  await openWorkerPage(page);
  return page.evaluate(async (pref) => {
    const w = window.modelWorker;
    const report = await w.init(pref);
    const url = performance
      .getEntriesByType('resource')
      .map((e) => e.name)
      .find(
        (n) =>
          /\/comlink(\.js|\.mjs)?(\?|$)/.test(new URL(n).pathname + new URL(n).search) ||
          /deps\/comlink\.js/.test(n),
      );
    if (!url) throw new Error('the page did not load comlink');
    const { proxy } = (await import(/* @vite-ignore */ url)) as { proxy: <T>(x: T) => T };
    window.trainEvents = [];
    await w.subscribe(proxy((e: Event) => void window.trainEvents.push(e)));
    return report;
  }, backend);
}

async function stepEvents(page: Page): Promise<Extract<Event, { type: 'step' }>[]> {
  return page.evaluate(
    () => window.trainEvents.filter((e) => e.type === 'step') as Extract<Event, { type: 'step' }>[],
  );
}

test.describe('training in the model worker', () => {
  // Each test opens its own page and run, so a free Playwright worker may take any of them: this file comes late in
  // the tier's order, and in one file's sequence its ~135 s ran while the other worker sat idle.
  test.describe.configure({ mode: 'parallel' });
  let consoleWatch: { errors: string[] };
  test.beforeEach(({ page }) => {
    consoleWatch = watchConsole(page);
  });
  test.afterEach(() => {
    expect(consoleWatch.errors, 'console errors').toEqual([]);
  });

  test('(a) WebGPU: a PPO step reports every contract metric; setHyperparameters shows in the next step', async ({
    page,
  }) => {
    test.setTimeout(480_000);
    const report = await openAndSubscribe(page, 'webgpu');
    expect(report.backend).toBe('webgpu');
    const r = await page.evaluate(async (cfg) => {
      const w = window.modelWorker;
      // configure / setHyperparameters answer with the change's number; its status comes as an event.
      const changed = async (seq: number) => {
        for (;;) {
          const s = window.trainEvents.find((e) => e.type === 'status' && e.status.configSeq === seq);
          if (s?.type === 'status') return s.status;
          await new Promise((res) => setTimeout(res, 10));
        }
      };
      const configured = await changed(await w.configure(cfg));
      const first = await w.stepOnce();
      const live = await changed(await w.setHyperparameters({ klCoef: 0.3, learningRate: 2e-4 }));
      const second = await w.stepOnce();
      const mem = await w.memory();
      return { configured, first, live, second, mem };
    }, TINY);
    expect(r.configured).toMatchObject({ state: 'idle', step: 0, steps: 100 });
    expect(r.configured.config).toMatchObject(TINY);
    expect(r.first).toMatchObject({ state: 'paused', phase: 'idle', step: 1 });
    expect(r.live.config).toMatchObject({ klCoef: 0.3, learningRate: 2e-4 });
    expect(r.second.step).toBe(2);
    expect(r.mem.backend).toBe('webgpu');

    const steps = await stepEvents(page);
    expect(steps).toHaveLength(2);
    for (const name of REQUIRED_METRICS) expect(typeof steps[0].metrics[name], name).toBe('number');
    expect(steps[0].metrics.step).toBe(1);
    expect(steps[0].metrics.klCoef).toBe(0.05);
    expect(steps[1].metrics.klCoef).toBe(0.3);
    expect(steps[1].metrics.learningRate).toBe(2e-4);
    const samples = steps[0].samples;
    expect(samples).toHaveLength(2);
    for (const s of samples) {
      expect(s.prompt.length).toBeGreaterThan(0);
      expect(s.tokens.length).toBeGreaterThan(0);
      expect(s.tokens.length).toBeLessThanOrEqual(4);
      expect(Number.isFinite(s.score) && Number.isFinite(s.kl)).toBe(true);
      for (const t of s.tokens)
        expect(Number.isFinite(t.logprob) && Number.isFinite(t.kl) && Number.isFinite(t.advantage)).toBe(
          true,
        );
    }
    // Phases were reported as status events, in order, for each step.
    const phases = await page.evaluate(() =>
      window.trainEvents
        .flatMap((e) => (e.type === 'status' ? [e.status.phase] : []))
        .filter((p, i, a) => p !== a[i - 1]),
    );
    expect(phases.join(' ')).toContain('generating scoring updating idle generating scoring updating idle');
  });

  test('(a2) WebGPU: the run decodes by replaying its recorded first token, with the unrecorded path’s tokens', async ({
    page,
  }) => {
    test.setTimeout(480_000);
    const report = await openAndSubscribe(page, 'webgpu');
    expect(report.backend).toBe('webgpu');
    // The same seed twice: decodeReplay on (the default), then a fresh run with it off.
    const r = await page.evaluate(async (cfg) => {
      const w = window.modelWorker;
      // configure answers with the change's number; its status comes as an event.
      const changed = async (seq: number) => {
        for (;;) {
          const s = window.trainEvents.find((e) => e.type === 'status' && e.status.configSeq === seq);
          if (s?.type === 'status') return s.status;
          await new Promise((res) => setTimeout(res, 10));
        }
      };
      const on = await changed(await w.configure(cfg));
      await w.stepOnce();
      await w.reset();
      const off = await changed(await w.configure({ ...cfg, decodeReplay: false }));
      await w.stepOnce();
      return { on: on.config.decodeReplay, off: off.config.decodeReplay };
    }, TINY);
    expect(r).toEqual({ on: true, off: false });
    const steps = await stepEvents(page);
    expect(steps).toHaveLength(2);
    const [replayed, plain] = steps;
    expect(replayed.metrics.step).toBe(1);
    expect(plain.metrics.step).toBe(1);
    // 4 response tokens: the first comes from the prompt's logits, the next is recorded, then replays.
    expect(replayed.metrics.decodeReplays).toBeGreaterThan(0);
    expect(plain.metrics.decodeReplays).toBe(0);
    expect(replayed.samples.map((s) => s.response)).toEqual(plain.samples.map((s) => s.response));
    expect(replayed.samples.map((s) => s.tokens.map((t) => t.text))).toEqual(
      plain.samples.map((s) => s.tokens.map((t) => t.text)),
    );
    for (let i = 0; i < plain.samples.length; i++)
      for (let t = 0; t < plain.samples[i].tokens.length; t++)
        expect(
          Math.abs(replayed.samples[i].tokens[t].logprob - plain.samples[i].tokens[t].logprob),
        ).toBeLessThan(1e-5);
    expect(replayed.metrics.reward).toBe(plain.metrics.reward);
  });

  test('(b) export a checkpoint zip, then import it: the run resumes at its step with its history', async ({
    page,
  }) => {
    test.setTimeout(300_000);
    await openAndSubscribe(page, 'wasm');
    const r = await page.evaluate(
      async (cfg) => {
        const w = window.modelWorker;
        await w.configure(cfg);
        await w.stepOnce();
        await w.stepOnce();
        const history = await w.history();
        const zip = await w.exportCheckpoint();
        (window as unknown as { zip: Uint8Array }).zip = zip.bytes;
        let binary = '';
        for (let i = 0; i < zip.bytes.length; i += 0x8000)
          binary += String.fromCharCode(...zip.bytes.subarray(i, i + 0x8000));
        const csv = await w.exportMetrics('csv');
        const trl = JSON.parse(await w.exportTrlConfig()) as Record<string, unknown>;
        await w.reset();
        const afterReset = await w.history();
        const summary = await w.importCheckpoint(zip.bytes);
        const restored = await w.history();
        const status = await w.stepOnce();
        const errors: { name: string; message: string }[] = [];
        for (const bad of [
          new TextEncoder().encode('not a zip'),
          new Uint8Array([0x50, 0x4b, 0x05, 0x06, ...new Array(18).fill(0)]),
        ]) {
          try {
            await w.importCheckpoint(bad);
          } catch (e) {
            errors.push({ name: (e as Error).name, message: (e as Error).message });
          }
        }
        const afterBad = await w.history();
        // Switching backend carries the run over (saved as checkpoint files, restored on the new backend).
        const switched = await w.setBackend('cpu');
        const afterSwitch = await w.history();
        const onCpu = await w.stepOnce();
        return {
          switched: switched.backend,
          afterSwitch: afterSwitch.length,
          onCpu,
          name: zip.name,
          base64: btoa(binary),
          history,
          csv,
          trl,
          afterReset,
          summary,
          restored,
          status,
          errors,
          afterBad,
        };
      },
      { ...TINY, saveEvery: 0 },
    );

    expect(r.name).toBe('ppo-playground-step-2.zip');
    const files = unzipSync(new Uint8Array(Buffer.from(r.base64, 'base64')));
    const names = Object.keys(files);
    for (const f of [
      'config.json',
      'model.safetensors',
      'value_model.safetensors',
      'ref_model.safetensors',
      'optimizer.safetensors',
      'trainer_state.json',
    ]) {
      expect(names).toContain(`ppo-playground-step-2/${f}`);
    }
    const state = JSON.parse(new TextDecoder().decode(files['ppo-playground-step-2/trainer_state.json'])) as {
      step: number;
      history: unknown[];
    };
    expect(state.step).toBe(2);
    expect(state.history).toHaveLength(2);
    // The policy's config is the built-in tiny model's (whatever its current size), in HF names.
    const tinyConfig = JSON.parse(readFileSync('public/models/tiny/config.json', 'utf8')) as Record<
      string,
      unknown
    >;
    expect(JSON.parse(new TextDecoder().decode(files['ppo-playground-step-2/config.json']))).toMatchObject({
      model_type: 'gpt2',
      n_embd: tinyConfig.n_embd,
      n_layer: tinyConfig.n_layer,
    });

    expect(r.csv.split('\n')[0].split(',').slice(0, REQUIRED_METRICS.length)).toEqual([...REQUIRED_METRICS]);
    expect(r.csv.trimEnd().split('\n')).toHaveLength(3);
    expect(r.trl).toMatchObject({
      per_device_train_batch_size: 2,
      num_mini_batches: 1,
      response_length: 4,
      total_episodes: 200,
    });

    expect(r.afterReset).toEqual([]);
    expect(r.summary).toMatchObject({ step: 2, historyLength: 2 });
    expect(r.summary.config).toMatchObject(TINY);
    expect(r.restored).toEqual(r.history);
    expect(r.status.step).toBe(3);
    const steps = await stepEvents(page);
    expect(steps.map((e) => e.metrics.step)).toEqual([1, 2, 3, 4]); // 3 after the import, 4 on the CPU backend

    expect(r.errors).toEqual([
      {
        name: 'UserError',
        message: 'The chosen file is not a zip file; choose a checkpoint .zip exported by PPO Playground.',
      },
      {
        name: 'UserError',
        message: expect.stringContaining(
          'This zip has no trainer_state.json, so it is not a PPO Playground checkpoint',
        ) as unknown as string,
      },
    ]);
    expect(r.afterBad).toHaveLength(3); // a bad file leaves the run as it was
    expect(r.switched).toBe('cpu');
    expect(r.afterSwitch).toBe(3);
    expect(r.onCpu).toMatchObject({ state: 'paused', step: 4 });
  });

  test('(c) reward code: an infinite loop is stopped and pauses the run; working code scores the step', async ({
    page,
  }) => {
    test.setTimeout(300_000);
    await openAndSubscribe(page, 'wasm');
    const r = await page.evaluate(async (cfg) => {
      const w = window.modelWorker;
      await w.configure(cfg);
      const caught: string[] = [];
      try {
        await w.setRewardCode('return (');
      } catch (e) {
        caught.push(`${(e as Error).name}: ${(e as Error).message}`);
      }
      await w.setRewardCode('while (true) {}');
      const t0 = performance.now();
      await w.start();
      const deadline = Date.now() + 240_000;
      while (!window.trainEvents.some((e) => e.type === 'error') && Date.now() < deadline)
        await new Promise((res) => setTimeout(res, 100));
      const waited = performance.now() - t0;
      await new Promise((res) => setTimeout(res, 200));
      const statuses = window.trainEvents.filter((e) => e.type === 'status');
      const afterLoop = statuses.length ? (statuses.at(-1) as { status: Status }).status : null;
      const errors = window.trainEvents.filter((e) => e.type === 'error');

      // The fixed code scores in a fresh sandbox, with no network in reach.
      const fixed = await w.setRewardCode(
        '(sample) => (typeof fetch === "undefined" && typeof XMLHttpRequest === "undefined" && typeof WebSocket === "undefined" && typeof indexedDB === "undefined" ? 0.5 : -1)',
      );
      await w.stepOnce();
      const m1 = await w.memory();
      await w.setRewardCode('return sample.response.length + sample.responseTokens.length;');
      await w.stepOnce();
      const m2 = await w.memory();
      await w.setRewardCode('return NaN;');
      const nanStatus = await w.stepOnce();
      return { caught, waited, afterLoop, errors, fixed, m1, m2, nanStatus };
    }, TINY);

    expect(r.caught).toEqual([
      expect.stringMatching(/^UserError: Your reward code does not compile: syntax error: /),
    ]);
    expect(r.errors[0]).toEqual({
      type: 'error',
      message:
        'Your reward code did not return within 2 s (an infinite loop?). The run is paused; fix the code and press Start.',
      userError: true,
    });
    expect(r.afterLoop).toMatchObject({ state: 'paused', phase: 'idle', step: 0 });
    expect(r.fixed.reward).toBe('your reward code');
    const steps = await stepEvents(page);
    expect(steps).toHaveLength(2);
    expect(steps[0].metrics.reward).toBe(0.5);
    expect(steps[0].samples.map((s) => s.score)).toEqual([0.5, 0.5]);
    for (const s of steps[1].samples) expect(s.score).toBe(s.response.length + s.tokens.length);
    // Memory is flat from one step to the next.
    expect(r.m2.numTensors).toBe(r.m1.numTensors);
    expect(r.m2.numBytes).toBe(r.m1.numBytes);
    // A non-finite score names the sample; the run stays paused at its step.
    expect(r.errors).toHaveLength(1);
    const last = await page.evaluate(() => window.trainEvents.filter((e) => e.type === 'error').at(-1));
    expect(last).toMatchObject({
      userError: true,
      message: expect.stringMatching(
        /^Your reward code returned NaN for sample 0 \(prompt ".*"\); it must return a finite number\.$/,
      ),
    });
    expect(r.nanStatus).toMatchObject({ state: 'paused', step: 2 });
  });
});

test('(e) uploaded model files, and a reward model trained from a preference file', async ({ page }) => {
  test.setTimeout(300_000);
  const consoleWatch = watchConsole(page);
  await openAndSubscribe(page, 'wasm');
  const r = await page.evaluate(async (cfg) => {
    const w = window.modelWorker;
    const read = async (f: string) => new Uint8Array(await (await fetch(`/models/tiny/${f}`)).arrayBuffer());
    const files = [
      { name: 'my-tiny/config.json', bytes: await read('config.json') },
      { name: 'my-tiny/model.safetensors', bytes: await read('model.safetensors') },
      { name: 'my-tiny/pytorch_model.bin', bytes: new Uint8Array([1, 2, 3]) },
    ];
    const summary = await w.loadModel({ kind: 'files', files });
    let missing = '';
    try {
      await w.loadModel({ kind: 'files', files: files.slice(0, 1) });
    } catch (e) {
      missing = (e as Error).message;
    }
    await w.configure({ ...cfg, model: undefined }); // keeps the uploaded model
    const lines = [];
    for (let i = 0; i < 10; i++) {
      lines.push(JSON.stringify({ prompt: `Day ${i}:`, chosen: ' good good', rejected: ' bad bad' }));
    }
    lines.splice(3, 0, '{"prompt": "broken"');
    const report = await w.trainRewardModel(lines.join('\n'), { steps: 4, batchSize: 4 });
    const status = await w.stepOnce();
    const zip = await w.exportCheckpoint();
    const text = new TextDecoder('latin1').decode(zip.bytes);
    return {
      summary,
      missing,
      report,
      status,
      hasRewardFile: text.includes('reward_model.safetensors'),
      progress: window.trainEvents.filter((e) => e.type === 'progress' && e.task === 'reward-model').length,
    };
  }, TINY);
  expect(r.summary.label).toBe('uploaded:my-tiny');
  expect(r.summary.params).toBeGreaterThan(0);
  expect(r.missing).toMatch(/^The chosen files have no model\.safetensors; pick a model folder/);
  expect(r.report).toMatchObject({ pairs: 10, heldOut: 1 });
  expect(r.report.skipped).toEqual([expect.stringMatching(/^line 4: not valid JSON/)]);
  // Every pair prefers " good good". The score head starts at zero (every pair a tie, counted wrong), so ranking all
  // of them so, the held-out one too, takes steps in the file's direction (with the loss's sign flipped, it reads 0).
  // How well it learns is tests/reward-model.test.ts's: ≥ 0.8 on held-out pairs.
  expect(r.report.trainAccuracy).toBe(1);
  expect(r.report.heldOutAccuracy).toBe(1);
  expect(r.progress).toBeGreaterThan(1);
  expect(r.status).toMatchObject({ step: 1, reward: 'reward model from preferences' });
  expect(r.status.config).toMatchObject({
    model: 'uploaded:my-tiny',
    reward: { model: 'preference-reward-model' },
  });
  expect(r.hasRewardFile).toBe(true);
  const steps = await stepEvents(page);
  expect(steps).toHaveLength(1);
  expect(Number.isFinite(steps[0].metrics.reward)).toBe(true);
  expect(consoleWatch.errors).toEqual([]);
});
