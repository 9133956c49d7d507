import { test, expect, type Page } from '@playwright/test';
import { watchConsole } from './console';
import { openWorkerPage } from './worker-page';
import type { AutosaveInfoWire, BackendPref, ModelWorkerApi, RunStatus } from '../src/worker/protocol';

/**
 * Reliability of the model worker (src/worker/reliability.ts), driven through e2e/pages/worker.html:
 *  - autosave to IndexedDB, a page reload, and resumeAutosave at the saved step with the history;
 *  - two tabs training at once: each keeps its own autosave (Web Locks), a closed tab's run is resumed elsewhere;
 *  - a bad model upload while a model is loaded and a run exists: a clear error, the model and the run intact;
 *  - a WebGPU device loss mid-run (device.destroy()): the event, the backend rebuilt, the run resumed from its
 *    autosave and running on.
 */

/** The worker's own types (src/worker/protocol.ts). */
type RelWorker = ModelWorkerApi;
type Status = RunStatus;
type AutosaveInfo = AutosaveInfoWire;
type Ev = { type: string; [k: string]: unknown };

declare global {
  interface Window {
    relEvents: Ev[];
    relTrainEvents: Ev[];
  }
}

const TINY = {
  model: 'tiny',
  task: 'sentiment',
  batchSize: 2,
  miniBatches: 1,
  ppoEpochs: 1,
  responseLength: 4,
  seed: 7,
};

/** Open the worker page, choose a backend, and collect both event streams (see e2e/worker-train.spec.ts). */
async function open(page: Page, backend: BackendPref, navigate = true) {
  if (navigate) await openWorkerPage(page);
  return page.evaluate(async (pref) => {
    const w = window.modelWorker as unknown as RelWorker;
    const report = await w.init(pref);
    const url = performance
      .getEntriesByType('resource')
      .map((e) => e.name)
      .find((n) => /\/comlink(\.js|\.mjs)?(\?|$)/.test(new URL(n).pathname) || /deps\/comlink\.js/.test(n));
    if (!url) throw new Error('the page did not load comlink');
    const { proxy } = (await import(/* @vite-ignore */ url)) as { proxy: <T>(x: T) => T };
    window.relEvents = [];
    window.relTrainEvents = [];
    await w.subscribe(proxy((e: Ev) => void window.relTrainEvents.push(e)));
    const saved = await w.subscribeReliability(proxy((e: Ev) => void window.relEvents.push(e)));
    return { report, saved };
  }, backend);
}

test.describe('reliability of the model worker', () => {
  let consoleWatch: { errors: string[] };
  test.beforeEach(({ page }) => {
    consoleWatch = watchConsole(page);
  });

  test('autosave: reload mid-run, then resume at the saved step with the history', async ({ page }) => {
    test.setTimeout(300_000);
    await open(page, 'wasm');
    const before = await page.evaluate(async (cfg) => {
      const w = window.modelWorker as unknown as RelWorker;
      await w.discardAutosave();
      await w.configure(cfg);
      await w.stepOnce();
      const s = await w.stepOnce();
      return {
        status: s,
        info: await w.autosaveInfo(),
        history: await w.history(),
        events: window.relEvents,
      };
    }, TINY);
    expect(before.status.step).toBe(2);
    expect(before.info).toMatchObject({ step: 2, historyLength: 2, label: 'built-in tiny', current: true });
    expect(before.info!.bytes).toBeGreaterThan(1e6);
    expect(
      before.events.filter((e) => e.type === 'autosaved').map((e) => (e.info as AutosaveInfo).step),
    ).toEqual([1, 2]);

    await page.reload();
    const after = await open(page, 'wasm');
    expect(after.saved).toMatchObject({ step: 2, historyLength: 2, current: false });
    expect(after.saved!.config).toMatchObject(TINY);

    const r = await page.evaluate(async () => {
      const w = window.modelWorker as unknown as RelWorker;
      const info = await w.autosaveInfo();
      const resumed = await w.resumeAutosave();
      const history = await w.history();
      const infoAfter = await w.autosaveInfo();
      const next = await w.stepOnce();
      return { info, resumed, history, infoAfter, next, historyNext: await w.history() };
    });
    expect(r.info!.step).toBe(2);
    expect(r.resumed).toMatchObject({ state: 'paused', step: 2 });
    expect(r.resumed.config).toMatchObject(TINY);
    expect(r.history.map((m) => m.step)).toEqual([1, 2]);
    expect(r.history.map((m) => m.reward)).toEqual(before.history.map((m) => m.reward));
    expect(r.infoAfter!.current).toBe(true);
    expect(r.next.step).toBe(3);
    expect(r.historyNext.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(consoleWatch.errors).toEqual([]);
  });

  test("two tabs training at once keep both autosaves; a closed tab's run is offered and resumed in a new tab", async ({
    page,
    context,
  }) => {
    test.setTimeout(300_000);
    const tabs = [page, await context.newPage()];
    const watches = [consoleWatch, watchConsole(tabs[1])];
    for (const tab of tabs) await open(tab, 'wasm');
    const steps = (tab: Page, cfg: Record<string, unknown>, n: number) =>
      tab.evaluate(
        async ({ cfg, n }) => {
          const w = window.modelWorker as unknown as RelWorker;
          if (Object.keys(cfg).length > 0) await w.configure(cfg);
          for (let i = 0; i < n; i++) await w.stepOnce();
          return { info: await w.autosaveInfo(), history: await w.history() };
        },
        { cfg, n },
      );
    const info = (tab: Page) =>
      tab.evaluate(() => (window.modelWorker as unknown as RelWorker).autosaveInfo());
    // One after the other, so that each tab saves after the other did (with one slot per site, the last
    // writer's save would be the only one left).
    const a1 = await steps(tabs[0], { ...TINY, seed: 7 }, 2);
    const b = await steps(tabs[1], { ...TINY, seed: 8 }, 2);
    const a = await steps(tabs[0], {}, 1);
    expect(a1.info).toMatchObject({ step: 2, current: true });
    expect(b.info).toMatchObject({ step: 2, current: true });
    expect(a.info).toMatchObject({ step: 3, current: true });
    expect(await info(tabs[1])).toMatchObject({ step: 2, current: true });
    expect((await info(tabs[1]))!.config).toMatchObject({ seed: 8 });

    // A third tab while both are open: nothing of theirs is offered, and resuming says why.
    const third = await context.newPage();
    watches.push(watchConsole(third));
    const t = await open(third, 'wasm');
    expect(t.saved).toBeNull();
    const refused = await third.evaluate(() =>
      (window.modelWorker as unknown as RelWorker).resumeAutosave().then(
        () => '',
        (e: Error) => e.message,
      ),
    );
    expect(refused).toMatch(
      /^The autosaved runs in this browser belong to another tab of this app that is still open/,
    );

    // The first tab closes: its run is offered in the third tab at once (the worker waits the moment the browser
    // takes to give a closed tab's lock back), and resumes there with its history.
    await tabs[0].close();
    expect(await info(third)).toMatchObject({ step: 3, current: false });
    expect((await info(third))!.config).toMatchObject({ seed: 7 });
    const r = await third.evaluate(async () => {
      const w = window.modelWorker as unknown as RelWorker;
      const resumed = await w.resumeAutosave();
      const next = await w.stepOnce();
      return { resumed, next, history: await w.history(), info: await w.autosaveInfo() };
    });
    expect(r.resumed).toMatchObject({ state: 'paused', step: 3 });
    expect(r.history.slice(0, 3).map((m) => m.reward)).toEqual(a.history.map((m) => m.reward));
    expect(r.next.step).toBe(4);
    expect(r.info).toMatchObject({ step: 4, current: true });
    // The second tab's save was never touched; once that tab closes, a new tab finds it.
    expect(await info(tabs[1])).toMatchObject({ step: 2, current: true });
    await tabs[1].close();
    const fourth = await context.newPage();
    watches.push(watchConsole(fourth));
    await open(fourth, 'wasm');
    expect(await info(fourth)).toMatchObject({ step: 2, current: false });
    expect((await info(fourth))!.config).toMatchObject({ seed: 8 });
    for (const w of watches) expect(w.errors).toEqual([]);
  });

  test('storage full (a real QuotaExceededError from IndexedDB): told in words, training goes on', async ({
    page,
  }) => {
    // Chromium applies a quota override only before the origin first touches storage, and counts large IndexedDB
    // values lazily, so the browser can only show the first save refused; that an older save survives a refused
    // one is tests/reliability-autosave.test.ts.
    test.setTimeout(300_000);
    await openWorkerPage(page);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Storage.overrideQuotaForOrigin', {
      origin: new URL(page.url()).origin,
      quotaSize: 1_000_000,
    });
    await open(page, 'wasm', false);
    const r = await page.evaluate(async (cfg) => {
      const w = window.modelWorker as unknown as RelWorker;
      await w.configure(cfg);
      const first = await w.stepOnce();
      const second = await w.stepOnce();
      return {
        first,
        second,
        info: await w.autosaveInfo(),
        failed: window.relEvents.filter((e) => e.type === 'autosave-failed'),
        errors: window.relTrainEvents.filter((e) => e.type === 'error').map((e) => e.message as string),
      };
    }, TINY);
    expect(r.first).toMatchObject({ step: 1, state: 'paused' });
    expect(r.second).toMatchObject({ step: 2, state: 'paused' });
    expect(r.info).toBeNull();
    expect(r.failed.map((e) => [e.reason, e.kept])).toEqual([
      ['quota', null],
      ['quota', null],
    ]);
    expect(r.errors).toHaveLength(2);
    expect(r.errors[0]).toMatch(
      /^Autosave failed at step 1: the browser's storage for this site is full \(the save needs \d+ MB\)\. There is no earlier autosave of this run\. Free some space/,
    );
    expect(consoleWatch.errors).toEqual([]);
  });

  test('a garbage model upload while a model is loaded: clear error; the model and the run are intact', async ({
    page,
  }) => {
    test.setTimeout(300_000);
    await open(page, 'wasm');
    const r = await page.evaluate(async (cfg) => {
      const w = window.modelWorker as unknown as RelWorker;
      await w.discardAutosave();
      const read = async (f: string) =>
        new Uint8Array(await (await fetch(`/models/tiny/${f}`)).arrayBuffer());
      const config = await read('config.json');
      const weights = await read('model.safetensors');
      const loaded = await w.loadModel({
        kind: 'files',
        files: [
          { name: 'my-model/config.json', bytes: config },
          { name: 'my-model/model.safetensors', bytes: weights },
        ],
      });
      await w.configure({ ...cfg, model: undefined });
      const first = await w.stepOnce();
      const garbage = new Uint8Array(4096).map((_, i) => (i * 7919) % 251);
      const t0 = performance.now();
      let error = { name: '', message: '' };
      try {
        await w.loadModel({
          kind: 'files',
          files: [
            { name: 'my-model/config.json', bytes: config },
            { name: 'my-model/model.safetensors', bytes: garbage },
          ],
        });
      } catch (e) {
        error = { name: (e as Error).name, message: (e as Error).message };
      }
      const ms = performance.now() - t0;
      // The same while the run is running: it runs on.
      await w.start();
      let whileRunning = '';
      try {
        await w.loadModel({
          kind: 'files',
          files: [{ name: 'my-model/config.json', bytes: new Uint8Array([123]) }],
        });
      } catch (e) {
        whileRunning = (e as Error).message;
      }
      // configure answers with the change's number; the status it caused comes as an event carrying it.
      const seq = await w.configure({});
      let running: RunStatus | undefined;
      while (!running) {
        const e = window.relTrainEvents.find(
          (x) => x.type === 'status' && (x.status as RunStatus).configSeq === seq,
        );
        running = e?.status as RunStatus | undefined;
        if (!running) await new Promise((res) => setTimeout(res, 10));
      }
      await w.pause();
      await new Promise((res) => setTimeout(res, 50));
      await w.stepOnce(); // waits for the step in flight, then pauses
      const stepped = (await w.history()).length;
      const second = await w.stepOnce();
      const history = await w.history();
      // A fresh run from the held files: they are still the good ones, not the garbage.
      await w.reset();
      const fresh = await w.stepOnce();
      return { loaded, first, error, ms, whileRunning, running, stepped, second, history, fresh };
    }, TINY);
    expect(r.loaded.label).toBe('uploaded:my-model');
    expect(r.first).toMatchObject({ step: 1, state: 'paused' });
    expect(r.error.name).toBe('UserError');
    expect(r.error.message).toMatch(/^uploaded:my-model\/model\.safetensors: not a safetensors file/);
    expect(r.ms).toBeLessThan(5_000);
    expect(r.whileRunning).toMatch(/^The chosen files have no model\.safetensors/);
    expect(r.running.state).toBe('running');
    expect(r.second).toMatchObject({ step: r.stepped + 1, state: 'paused' });
    expect(r.second.model?.label).toBe('uploaded:my-model');
    expect(r.second.config.model).toBe('uploaded:my-model');
    expect(r.history.map((m) => m.step)).toEqual(Array.from({ length: r.stepped + 1 }, (_, i) => i + 1));
    expect(r.fresh.step).toBe(1);
    expect(consoleWatch.errors).toEqual([]);
  });

  test("WebGPU: a model with a weight over the adapter's buffer limits is refused before its weights are read", async ({
    page,
  }) => {
    test.setTimeout(120_000);
    const { report } = await open(page, 'webgpu');
    test.skip(report.backend !== 'webgpu', `no WebGPU here: ${report.notice}`);
    const r = await page.evaluate(async () => {
      const w = window.modelWorker as unknown as RelWorker;
      // Each model's weights are a fake 16-byte file: a load that reads them fails on the file, not on the limits.
      const load = async (name: string, config: object) => {
        const t0 = performance.now();
        try {
          await w.loadModel({
            kind: 'files',
            files: [
              { name: `${name}/config.json`, bytes: new TextEncoder().encode(JSON.stringify(config)) },
              { name: `${name}/model.safetensors`, bytes: new Uint8Array(16) },
            ],
          });
          return { message: 'loaded', name: '', ms: performance.now() - t0 };
        } catch (e) {
          return { message: (e as Error).message, name: (e as Error).name, ms: performance.now() - t0 };
        }
      };
      return {
        // GPT-2's wte (154 MB, over WebGPU's guaranteed 128 MiB) is held in vocabulary chunks: within the limits.
        gpt2: await load('gpt2', {
          vocab_size: 50257,
          n_positions: 1024,
          n_embd: 768,
          n_layer: 12,
          n_head: 12,
        }),
        // mlp.c_fc at the widest width a config may give, 16384, is 16384 × 65536 floats: 4 GiB in one tensor.
        wide: await load('wide', {
          vocab_size: 50257,
          n_positions: 64,
          n_embd: 16384,
          n_layer: 1,
          n_head: 16,
        }),
      };
    });
    console.log(`on this adapter: GPT-2: ${r.gpt2.message}; the wide model: ${r.wide.message}`);
    expect(r.gpt2.name).toBe('UserError');
    expect(r.gpt2.message).toMatch(/^uploaded:gpt2\/model\.safetensors: /);
    expect(r.wide.name).toBe('UserError');
    expect(r.wide.message).toMatch(
      /^uploaded:wide cannot run on this GPU with WebGPU: its weight \S*c_fc\.weight \[16384 × 65536\] takes 4096 MiB, over this device's \d+ MiB limit for one buffer \(max(StorageBufferBinding|Buffer)Size\)/,
    );
    expect(r.wide.ms).toBeLessThan(5_000);
    expect(consoleWatch.errors).toEqual([]);
  });

  test('WebGPU device loss mid-run: told in words, backend rebuilt, run resumed from its autosave and running on', async ({
    page,
  }) => {
    test.setTimeout(600_000);
    const { report } = await open(page, 'webgpu');
    test.skip(report.backend !== 'webgpu', `no WebGPU here: ${report.notice}`);
    await page.evaluate(async (cfg) => {
      const w = window.modelWorker as unknown as RelWorker;
      await w.discardAutosave();
      await w.configure({ ...cfg, steps: 3, saveEvery: 1 });
      await w.start();
    }, TINY);
    // Lose the device once step 1 is safely autosaved (the loss then hits step 2 or the wait before it).
    await page.waitForFunction(
      () => window.relEvents.some((e) => e.type === 'autosaved' && (e.info as { step: number }).step === 1),
      undefined,
      { timeout: 300_000 },
    );
    await page.evaluate(() => (window.modelWorker as unknown as RelWorker).debugLoseDevice());
    await page.waitForFunction(
      () => window.relEvents.some((e) => e.type === 'recovered' || e.type === 'recovery-failed'),
      undefined,
      {
        timeout: 120_000,
      },
    );
    const rec = await page.evaluate(() => ({
      lost: window.relEvents.find((e) => e.type === 'device-lost'),
      done: window.relEvents.find((e) => e.type === 'recovered' || e.type === 'recovery-failed'),
      errors: window.relTrainEvents.filter((e) => e.type === 'error').map((e) => e.message as string),
    }));
    expect(rec.lost).toMatchObject({ type: 'device-lost', reason: 'destroyed' });
    expect(rec.lost!.message).toMatch(/^The GPU stopped working for this page/);
    expect(rec.done).toMatchObject({ type: 'recovered', fromStep: expect.any(Number) });
    const done = rec.done as unknown as {
      message: string;
      fromStep: number;
      backend: { backend: string };
      status: Status;
    };
    console.log(
      `device-lost: ${rec.lost!.message as string}\nrecovered: ${done.message}\nerrors: ${JSON.stringify(rec.errors)}`,
    );
    expect(done.fromStep).toBeGreaterThanOrEqual(1);
    expect(done.backend.backend).toBe('webgpu');
    expect(done.message).toMatch(
      /^Recovered from the GPU loss on WebGPU: the run continues from its autosave at step \d/,
    );
    expect(done.status.state).toBe('running');
    // The person saw it through the ordinary error channel too. (On a very busy machine the loss can be
    // reported > 5 s after the step's reads failed; that step's own error then comes first.)
    expect(rec.errors).toContain(rec.lost!.message);
    expect(rec.errors.length).toBeLessThanOrEqual(2);

    // It runs on to the end on the new device.
    await page.waitForFunction(
      () =>
        window.relTrainEvents.some(
          (e) =>
            e.type === 'status' && (e.status as Status).step === 3 && (e.status as Status).state === 'paused',
        ),
      undefined,
      { timeout: 400_000 },
    );
    const end = await page.evaluate(async () => {
      const w = window.modelWorker as unknown as RelWorker;
      return { history: await w.history(), mem: await w.memory(), info: await w.autosaveInfo() };
    });
    expect(end.history.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(end.mem.backend).toBe('webgpu');
    expect(end.info).toMatchObject({ step: 3, current: true });
    // WebGPU may log about the destroyed device; nothing else.
    expect(consoleWatch.errors.filter((e) => !/destroyed|lost|GPU|WebGPU|mapAsync|Device/i.test(e))).toEqual(
      [],
    );
  });
});
