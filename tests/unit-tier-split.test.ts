/**
 * `npm run test:unit` runs in two halves (vitest.unit-shared.config.ts: the fast tier's shared files in shared
 * workers; vitest.unit-isolated.config.ts: every slow and own-worker file, each isolated). Together they must be
 * every file vitest.config.ts runs, each once: listed by Vitest itself (`vitest list --filesOnly`).
 */
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { spawnAsync } from './helpers/spawn';

async function files(config: string): Promise<string[]> {
  const r = await spawnAsync(
    process.execPath,
    ['node_modules/vitest/vitest.mjs', 'list', '--config', config, '--filesOnly'],
    { timeout: 120_000 },
  );
  expect(r.status, r.stderr).toBe(0);
  return r.stdout
    .split('\n')
    .map((l) => l.replace(/^\[[^\]]+\] /, '').trim())
    .filter((l) => /\.test\.tsx?$/.test(l));
}

describe('the unit tier in two halves', () => {
  it('shared + isolated = every unit test file, none twice; the slow ones isolated', async () => {
    const [all, shared, isolated] = await Promise.all([
      files('vitest.config.ts'),
      files('vitest.unit-shared.config.ts'),
      files('vitest.unit-isolated.config.ts'),
    ]);
    expect(all.length).toBeGreaterThan(150);
    expect(shared.length).toBeGreaterThan(50);
    expect([...shared, ...isolated].sort()).toEqual([...all].sort());
    expect(shared.filter((f) => isolated.includes(f))).toEqual([]);
    expect(shared.filter((f) => /\.slow\.test\.tsx?$/.test(f))).toEqual([]);
    expect(isolated).toContain('tests/size.test.ts'); // an own-worker file
  }, 300_000);

  it('npm run test:unit runs both halves and fails when either fails', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
    const cmd = pkg.scripts['test:unit'];
    expect(cmd).toContain('--config vitest.unit-shared.config.ts');
    expect(cmd).toContain('--config vitest.unit-isolated.config.ts');
    // The script under sh with `vitest` a stand-in that exits with the given code for each half.
    for (const [a, b] of [
      [0, 0],
      [1, 0],
      [0, 1],
      [1, 1],
    ]) {
      const stub = `vitest() { case "$3" in *shared*) return ${a};; *) return ${b};; esac; }; ${cmd}`;
      const r = spawnSync('sh', ['-c', stub]);
      expect(r.status === 0, `halves exiting ${a}, ${b}`).toBe(a === 0 && b === 0);
    }
  });
});
