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
    expect(out).toMatch(/PPOConfig, TRL 0\.12–1\.9 only/);
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
