/**
 * One table per job (src/common/config/jobs.ts): DPO's and SFT's settings have one owner. For every key, the core's
 * default (the CLI's DPO config, the worker's DPO and SFT jobs) and the app's (the DPO and SFT card's controls, as
 * rendered) equal the table's; a value out of range is refused naming the key and its range.
 */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import { cardControls, DPO_FIELDS, jobKeys, SFT_FIELDS, type JobField } from '../src/common/config/jobs';
import { validateDpoConfig, DPO_DEFAULTS } from '../src/common/config/dpo';
import { validateConfig } from '../src/common/config';
import { checkJob, dpoConfigOf, sftOptionsOf } from '../src/worker/supervised';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { SupervisedPanel } from '../src/ui/components/SupervisedPanel';
import type { ModelWorker } from '../src/ui/bridge';

const rl = validateConfig({});
const dpoJob = { kind: 'dpo' as const, data: 'x', dataName: 'p.jsonl' };
const sftJob = { kind: 'sft' as const, data: 'x', dataName: 's.jsonl' };

/** The card as rendered: each control's label → its value (an input's `value`, a select's selected option). */
function cardValues(): Map<string, string> {
  const store = createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash: '',
    writeHash: () => {},
    sendDelayMs: 0,
  });
  const page = renderToString(
    <StoreContext.Provider value={store}>
      <SupervisedPanel />
    </StoreContext.Provider>,
  );
  const out = new Map<string, string>();
  for (const m of page.matchAll(/<label for="([^"]+)"[^>]*>([^<]+)<\/label>/g)) {
    const [, id, label] = m;
    const esc = id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const input = new RegExp(`<input[^>]*id="${esc}"[^>]*>`).exec(page)?.[0];
    const value = input && /value="([^"]*)"/.exec(input)?.[1];
    if (value !== undefined) {
      out.set(label, value);
      continue;
    }
    const select = new RegExp(`<select[^>]*id="${esc}"[^>]*>([\\s\\S]*?)</select>`).exec(page)?.[1];
    const selected = select && /<option[^>]*value="([^"]*)"[^>]*selected/.exec(select)?.[1];
    if (selected !== undefined) out.set(label, selected);
  }
  return out;
}

const asShown = (f: JobField, v: string): unknown => (f.type === 'number' ? Number(v) : v);

describe('DPO and SFT settings: one table', () => {
  it("the CLI's DPO config defaults to the table, key by key", () => {
    const cfg = validateDpoConfig({ algorithm: 'dpo', data: 'p.jsonl' });
    for (const [k, f] of Object.entries(DPO_FIELDS))
      expect({ k, v: cfg[k as keyof typeof cfg] }).toEqual({ k, v: f.default });
    expect(DPO_DEFAULTS.steps).toBe(DPO_FIELDS.steps.default);
  });

  it("the worker's DPO and SFT jobs default to the table for every key they take", () => {
    const dpo = dpoConfigOf(checkJob(dpoJob) as typeof dpoJob, rl);
    for (const k of jobKeys(DPO_FIELDS)) expect({ k, v: dpo[k] }).toEqual({ k, v: DPO_FIELDS[k].default });
    const sft = sftOptionsOf(checkJob(sftJob) as typeof sftJob, rl);
    for (const k of jobKeys(SFT_FIELDS)) expect({ k, v: sft[k] }).toEqual({ k, v: SFT_FIELDS[k].default });
  });

  it("the app's card starts every control at the core's default", () => {
    const shown = cardValues();
    const controls = [...cardControls(DPO_FIELDS), ...cardControls(SFT_FIELDS)];
    expect(controls.length).toBeGreaterThanOrEqual(9);
    for (const { key, label, field } of controls) {
      expect(shown.has(label), `no control labelled "${label}" (${key}) on the card`).toBe(true);
      expect({ key, v: asShown(field, shown.get(label)!) }).toEqual({ key, v: field.default });
    }
  });

  it('a job key out of range is refused naming the key and its range; an unknown key too', () => {
    expect(() => sftOptionsOf({ ...sftJob, batchSize: 0 }, rl)).toThrow(
      /SFT settings: "batchSize" must be a whole number >= 1 and <= 4096, got 0/,
    );
    expect(() => dpoConfigOf({ ...dpoJob, beta: -1 }, rl)).toThrow(
      /"beta" must be a number > 0 and <= 1000, got -1/,
    );
    expect(() => dpoConfigOf({ ...dpoJob, dpoLoss: 'x' as never }, rl)).toThrow(
      /"dpoLoss" must be one of "sigmoid", "ipo", "hinge", got "x"/,
    );
    expect(() => checkJob({ ...sftJob, beta: 0.2 })).toThrow(/unknown key "beta" for "sft"/);
  });
});
