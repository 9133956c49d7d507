/** The export menu (CheckpointPanel) names the engine of every file it offers (issue #23 point 5). */
import { describe, expect, it } from 'vitest';
import { renderToString } from 'react-dom/server';
import type { ModelWorker } from '../src/ui/bridge';
import { createFakeWorker } from '../src/ui/dev/fake-worker';
import { createPlaygroundStore } from '../src/ui/store/store';
import { StoreContext } from '../src/ui/store/hooks';
import { CheckpointPanel } from '../src/ui/components/CheckpointPanel';

function render(hash: string): string {
  const store = createPlaygroundStore(createFakeWorker() as unknown as ModelWorker, 'auto', {
    hash,
    writeHash: () => {},
    sendDelayMs: 0,
  });
  store.getInitialState = () => store.getState();
  return renderToString(
    <StoreContext.Provider value={store}>
      <CheckpointPanel />
    </StoreContext.Provider>,
  ).replace(/<!-- -->/g, '');
}

describe('export menu', () => {
  it('ppo: TRL PPOConfig says its TRL versions; OpenRLHF and verl files named with their engines', () => {
    const out = render('#algorithm=ppo');
    expect(out).toMatch(
      /TRL PPOConfig \(trl 0\.12–0\.28; trl\.experimental\.ppo 0\.26–1\.9; not in 1\.13\): trl-ppo-config\.json/,
    );
    // One button per file (issue #33, defect 9): no near-twin "Export as TRL config (PPOConfig…)".
    expect(out.match(/<button[^>]*>[^<]*PPOConfig/g)).toHaveLength(1);
    expect(out).not.toContain('Export as TRL config');
    expect(out).toMatch(/OpenRLHF train_ppo_ray \(flags of commit 3c3be62\): openrlhf-ppo\.sh/);
    expect(out).toMatch(/verl main_ppo \(config keys of commit b178a3c\): verl-ppo\.sh/);
    expect(out).toMatch(/aria-label="Export for other engines"/);
  });

  it('grpo: the TRL file is a TRL 1.13 GRPOConfig', () => {
    const out = render('#algorithm=grpo');
    expect(out).toMatch(/TRL 1\.13\.0 GRPOConfig: trl-grpo-config\.json/);
    expect(out).toMatch(/verl-grpo\.sh/);
  });
});
