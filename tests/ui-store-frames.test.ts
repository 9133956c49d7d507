/**
 * Many steps a second (a tiny model on WASM runs tens, each with several events): the store applies every worker
 * event at once and in order, but tells its subscribers (React) at most once per frame (src/ui/store/store.ts
 * eventFrames), so the charts advance while the run goes on instead of staying at step 1 until pause.
 */
import { describe, expect, it } from 'vitest';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';

const STEPS = 400;
const FRAME_MS = 50;

describe('worker events at a high step rate', () => {
  it(`${STEPS} steps as fast as the fake worker runs them: the state reaches the last step, renders stay few`, async () => {
    const fake = createFakeWorker({ stepMs: 1 });
    const store = createPlaygroundStore(fake as unknown as ModelWorker, 'auto', {
      hash: `#batchSize=1&miniBatches=1&steps=${STEPS}`,
      writeHash: () => {},
      sendDelayMs: 0,
      eventFrameMs: FRAME_MS,
    });
    const a = store.getState().actions;
    await a.start();
    let told = 0;
    const toldSteps: number[] = [];
    store.subscribe((s) => {
      told += 1;
      toldSteps.push(s.metrics.at(-1)?.step ?? 0);
    });
    const t0 = Date.now();
    // Every step sends five events: its three phases, the step and a status.
    await a.startRun();
    const deadline = Date.now() + 60_000;
    while (store.getState().runStatus?.state !== 'paused' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await new Promise((r) => setTimeout(r, 2 * FRAME_MS));
    const elapsed = Date.now() - t0;
    const s = store.getState();
    expect(s.runStatus).toMatchObject({ state: 'paused', step: STEPS });
    expect(s.metrics.map((m) => m.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    // The subscribers saw the last step too, and were told far less often than once per event.
    expect(toldSteps.at(-1)).toBe(STEPS);
    expect(told).toBeLessThanOrEqual(Math.ceil(elapsed / FRAME_MS) + 10);
    expect(told).toBeLessThan(STEPS / 4);
    // While the run went on (not only at its end), the told state advanced.
    expect(new Set(toldSteps.filter((x) => x > 0 && x < STEPS)).size).toBeGreaterThan(1);
  }, 90_000);
});
