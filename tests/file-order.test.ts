/**
 * The unit tier's order of files (tests/helpers/file-order.ts): unknown slow files first, then the measured ones from
 * the longest, then the rest, each group in Vitest's order; and the table names only files that exist.
 */
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { FILE_SECONDS, orderFiles } from './helpers/file-order';

describe('the order in which the unit tier starts its files', () => {
  it('new slow files, then the measured ones longest first, then the rest in the order given', () => {
    const given = [
      'tests/a.test.ts',
      'tests/cli.test.ts', // 45 s
      'tests/new-one.slow.test.ts', // not measured
      'tests/size.test.ts', // 18 s
      'tests/b.test.ts',
      'tests/default-run-health.slow.test.ts', // 310 s
      'tests/another-new.slow.test.ts',
      'tests/qwen-0.5b.slow.test.ts', // 233 s
    ];
    expect(orderFiles(given)).toEqual([
      'tests/new-one.slow.test.ts',
      'tests/another-new.slow.test.ts',
      'tests/default-run-health.slow.test.ts',
      'tests/qwen-0.5b.slow.test.ts',
      'tests/cli.test.ts',
      'tests/size.test.ts',
      'tests/a.test.ts',
      'tests/b.test.ts',
    ]);
  });

  it('files of equal measured time keep the order given; nothing is added or lost', () => {
    const zeros = ['tests/bench-vs-trl.slow.test.ts', 'tests/torch-ppo-step.slow.test.ts'];
    expect(orderFiles(zeros)).toEqual(zeros);
    expect(orderFiles([...zeros].reverse())).toEqual([...zeros].reverse());
    expect(orderFiles([])).toEqual([]);
    const some = ['tests/x.test.ts', 'tests/soak.slow.test.ts', 'tests/y.slow.test.ts', 'tests/z.test.ts'];
    expect([...orderFiles(some)].sort()).toEqual([...some].sort());
  });

  it('every file the table names exists', () => {
    const missing = Object.keys(FILE_SECONDS).filter((f) => !existsSync(f));
    expect(missing, 'files in FILE_SECONDS that are gone (remove or rename them there)').toEqual([]);
  });
});
