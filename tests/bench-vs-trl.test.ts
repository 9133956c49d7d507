/**
 * `bench --vs-trl` (issue #24, src/bench/vs-trl.ts): the pure parts. FLOP counts against hand-worked numbers, the
 * prompts' token counts on both sides, the spec and the parse of scripts/trl_grpo_step.py's answer, the summary's
 * ratios, which Python runs, and the clean skip when that Python cannot run TRL. No Python is needed: the skip
 * paths use a missing binary and a shell script standing in for a Python without trl.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { generateFlops, grpoScoreFlops, grpoUpdateFlops } from '../src/bench/perf/flops';
import {
  byteMatchedPrompts,
  ourConfig,
  ourQueryLength,
  parseShape,
  parseTrlResult,
  summariseVsTrl,
  trlSpec,
  vsTrlMarkdown,
  VS_TRL_PROMPTS,
  VS_TRL_SETUP,
  type OursResult,
  type TrlResult,
} from '../src/bench/vs-trl';
import { probePython, resolvePython } from '../src/cli/bench';
import { tokenizerFor } from '../src/core/tokenizer';
import { parseGPT2Config } from '../src/core/model/config';
import { validateConfig } from '../src/common/config';

const SCRIPT = path.resolve(__dirname, '../scripts/trl_grpo_step.py');
// L 1, C 2, V 3: small enough to work every term out by hand.
const S = { n_layer: 1, n_embd: 2, vocab_size: 3 };

describe('FLOP counts per phase (hand-worked, L 1, C 2, V 3)', () => {
  it('generate: prefill over Tp, then R − 1 cached decode steps, LM head once per new token', () => {
    // Per row: prefill Tp·L·(24C² + 4·Tp·C) = 2·(96 + 16) = 224, head 2CV = 12 → 236;
    // decode k = 1: 96 + 4·3·2 = 120, + 12 = 132; k = 2: 96 + 4·4·2 = 128, + 12 = 140. Row total 508.
    expect(generateFlops(S, { batch: 1, Tp: 2, R: 3 })).toBe(508);
    expect(generateFlops(S, { batch: 2, Tp: 2, R: 3 })).toBe(1016);
    // R = 1: the prefill alone.
    expect(generateFlops(S, { batch: 1, Tp: 2, R: 1 })).toBe(236);
  });

  it('score: forwards × (trunk over Tq + R, LM head on the R response rows)', () => {
    // T = 5: 5·(96 + 4·5·2) = 680, head 3 rows · 12 = 36 → 716 per forward.
    expect(grpoScoreFlops(S, { batch: 1, Tq: 2, R: 3, forwards: 1 })).toBe(716);
    expect(grpoScoreFlops(S, { batch: 1, Tq: 2, R: 3, forwards: 2 })).toBe(1432);
    expect(grpoScoreFlops(S, { batch: 4, Tq: 2, R: 3, forwards: 2 })).toBe(4 * 1432);
  });

  it('update: 3 × the forward per epoch', () => {
    expect(grpoUpdateFlops(S, { batch: 1, Tq: 2, R: 3, epochs: 1 })).toBe(3 * 716);
    expect(grpoUpdateFlops(S, { batch: 2, Tq: 2, R: 3, epochs: 2 })).toBe(2 * 3 * 2 * 716);
  });

  it('GPT-2 124M, batch 8, 13 + 24 tokens: near 2·N per generated or scored token plus the head', () => {
    const g = { n_layer: 12, n_embd: 768, vocab_size: 50257 };
    const N = 12 * 12 * 768 * 768; // 84,934,656 non-embedding matmul parameters
    const head = 2 * 768 * 50257;
    // Generation: 8 rows × (13 prompt tokens + 23 decode tokens) through the trunk, 24 heads per row; attention
    // is the rest, under 1 % at these lengths.
    const trunkAndHeads = 8 * (36 * 2 * N + 24 * head);
    const gen = generateFlops(g, { batch: 8, Tp: 13, R: 24 });
    expect(gen).toBeGreaterThan(trunkAndHeads);
    expect(gen / trunkAndHeads - 1).toBeLessThan(0.01);
  });
});

describe('prompts', () => {
  const bpe = tokenizerFor(
    parseGPT2Config({
      vocab_size: 50257,
      n_positions: 64,
      n_embd: 64,
      n_layer: 2,
      n_head: 2,
      tokenizer: 'gpt2-bpe',
      bos_token_id: 50256,
      eos_token_id: 50256,
    }),
  );

  it('our prompts are 12–13 GPT-2 BPE tokens; the TRL side gets as many bytes', () => {
    const counts = VS_TRL_PROMPTS.map((p) => bpe.encode(p).length);
    for (const n of counts) expect([12, 13]).toContain(n);
    const trl = byteMatchedPrompts(VS_TRL_PROMPTS, counts);
    expect(trl.map((p) => new TextEncoder().encode(p).length)).toEqual(counts);
    trl.forEach((p, i) => expect(VS_TRL_PROMPTS[i].startsWith(p)).toBe(true));
    // The trainer pads queries to a multiple of 8: 13 → 16.
    expect(ourQueryLength(counts, 1024, 24)).toBe(16);
  });

  it('byteMatchedPrompts refuses what it cannot cut', () => {
    expect(() => byteMatchedPrompts(['abc'], [4])).toThrow(/3 characters, cannot cut it to 4 bytes/);
    expect(() => byteMatchedPrompts(['abc', 'd'], [1])).toThrow(/2 texts but 1 token counts/);
    expect(() => byteMatchedPrompts(['café'], [2])).toThrow(/not ASCII/);
  });
});

describe('the two sides run the same step', () => {
  it("our config is a valid training config with TRL's spec's numbers", () => {
    const cfg = validateConfig(ourConfig('tiny', VS_TRL_PROMPTS, 3), 'test');
    const spec = trlSpec({
      model: '/m',
      prompts: ['ab'],
      warmup: 1,
      steps: 2,
      matmulSizes: [[8, 768, 2304]],
      outputDir: '/o',
    });
    expect(cfg.algorithm).toBe('grpo');
    expect(cfg.batchSize).toBe(spec.batchSize);
    expect(cfg.groupSize).toBe(spec.groupSize);
    expect(cfg.responseLength).toBe(spec.responseLength);
    expect(cfg.lora).toBe(spec.lora);
    expect(cfg.loraAlpha).toBe(spec.loraAlpha);
    expect([...cfg.loraTargets].sort()).toEqual([...spec.loraTargets].sort());
    expect(cfg.klCoef).toBe(spec.beta);
    expect(cfg.learningRate).toBe(spec.learningRate);
    expect(cfg.stopToken).toBeNull();
    expect(cfg.ppoEpochs).toBe(1);
    expect(cfg.miniBatches).toBe(1);
    expect(cfg.recompute).toBe('off');
    // The whole batch at once, as TRL's per_device_train_batch_size 8; 0 + auto is cli train's default.
    expect(cfg.microBatchSize).toBe(8);
    const dflt = validateConfig(
      ourConfig('tiny', VS_TRL_PROMPTS, 3, { microBatchSize: 0, recompute: 'auto' }),
      'test',
    );
    expect([dflt.microBatchSize, dflt.recompute]).toEqual([0, 'auto']);
    expect(spec.threads).toBe(1);
    expect(spec.batchSize).toBe(8);
    expect(spec.groupSize).toBe(4);
  });

  it('parseShape reads L,C,H,P,V and names what is wrong', () => {
    expect(parseShape('12,768,12,1024,50257')).toEqual({
      n_layer: 12,
      n_embd: 768,
      n_head: 12,
      n_positions: 1024,
      vocab_size: 50257,
    });
    expect(() => parseShape('12,768,12')).toThrow(/five positive integers/);
    expect(() => parseShape('2,64,3,64,50257')).toThrow(/multiple of n_head 3/);
    expect(() => parseShape('2,64,2,64,258')).toThrow(/at least GPT-2's 50257/);
    expect(() => parseShape('2,64,2,32,50257')).toThrow(/n_positions must be at least 40/);
  });
});

const trlAnswer = (over: Record<string, unknown> = {}): string =>
  JSON.stringify({
    ok: true,
    threads: 1,
    steps: [
      { step: 5, cpu: 4, generate: 2, score: 1, update: 2, completionLengths: Array(8).fill(24) },
      { step: 3, cpu: 2, generate: 1, score: 1, update: 1, completionLengths: Array(8).fill(24) },
    ],
    promptLengths: [13, 12, 12, 13],
    maxRssBytes: 1.5e9,
    matmul: [{ m: 512, k: 512, n: 512, gflops: 110, iters: 3, seconds: 1 }],
    versions: { trl: '1.13.0' },
    ...over,
  });

describe('parseTrlResult', () => {
  const expectOk = { steps: 2, responseLength: 24 };

  it('reads the last stdout line (TRL prints its logs above it)', () => {
    const r = parseTrlResult(`{'loss': 0.1}\n${trlAnswer()}\n`, expectOk);
    expect(r.steps).toHaveLength(2);
    expect(r.maxRssBytes).toBe(1.5e9);
    expect(r.matmul).toEqual([{ m: 512, k: 512, n: 512, gflops: 110, gflopsCpu: null }]);
    const withCpu = parseTrlResult(
      trlAnswer({ matmul: [{ m: 8, k: 768, n: 2304, gflops: 40, gflopsCpu: 44 }] }),
      expectOk,
    );
    expect(withCpu.matmul[0].gflopsCpu).toBe(44);
    expect(r.promptLengths).toEqual([13, 12, 12, 13]);
  });

  it('refuses an answer that would not compare the same work', () => {
    expect(() => parseTrlResult('Traceback ...', expectOk)).toThrow(/last stdout line is not JSON/);
    expect(() => parseTrlResult(trlAnswer({ ok: false }), expectOk)).toThrow(/"ok": true/);
    expect(() => parseTrlResult(trlAnswer(), { steps: 3, responseLength: 24 })).toThrow(
      /expected 3 timed steps, got 2/,
    );
    const short = trlAnswer({
      steps: [
        { step: 1, generate: 1, score: 0, update: 0, completionLengths: [24, 23] },
        { step: 1, generate: 1, score: 0, update: 0, completionLengths: [24, 24] },
      ],
    });
    expect(() => parseTrlResult(short, expectOk)).toThrow(/not all 24 tokens long/);
    const noTime = trlAnswer({
      steps: [
        { step: 1, generate: 1, score: 0, completionLengths: [24] },
        { step: 1, generate: 1, score: 0, update: 0, completionLengths: [24] },
      ],
    });
    expect(() => parseTrlResult(noTime, expectOk)).toThrow(/step 0 has no non-negative "update"/);
    expect(() => parseTrlResult(trlAnswer({ maxRssBytes: 0 }), expectOk)).toThrow(/maxRssBytes/);
    const badCpu = trlAnswer({
      steps: [
        { step: 1, cpu: -1, generate: 1, score: 0, update: 0, completionLengths: [24] },
        { step: 1, generate: 1, score: 0, update: 0, completionLengths: [24] },
      ],
    });
    expect(() => parseTrlResult(badCpu, expectOk)).toThrow(/step 0's "cpu" seconds/);
    const badPhases = trlAnswer({
      steps: [
        {
          step: 1,
          cpuPhases: { generate: 1, score: 0 },
          generate: 1,
          score: 0,
          update: 0,
          completionLengths: [24],
        },
        { step: 1, generate: 1, score: 0, update: 0, completionLengths: [24] },
      ],
    });
    expect(() => parseTrlResult(badPhases, expectOk)).toThrow(/step 0's "cpuPhases"/);
    expect(() => parseTrlResult(trlAnswer({ matmul: [{ m: 1 }] }), expectOk)).toThrow(/matmul/);
  });
});

describe('summariseVsTrl', () => {
  it('ratios of the mean seconds and of the peaks; GFLOP/s = each phase’s FLOPs ÷ its mean seconds', () => {
    const shape = { n_layer: 1, n_embd: 2, n_head: 1, n_positions: 64, vocab_size: 3 };
    const ours: OursResult = {
      steps: [
        {
          step: 10,
          cpu: 8,
          cpuPhases: { generate: 3, score: 1, update: 4 },
          generate: 4,
          score: 2,
          update: 4,
        },
        {
          step: 14,
          cpu: 10,
          cpuPhases: { generate: 5, score: 1, update: 4 },
          generate: 6,
          score: 2,
          update: 6,
        },
      ],
      Tq: 16,
      promptLengths: [13, 12],
      maxRssBytes: 3e9,
      matmul: [],
      wasmThreads: 1,
      microBatchSize: 8,
      recompute: false,
    };
    const trl: TrlResult = parseTrlResult(trlAnswer({ promptLengths: [13, 12] }), {
      steps: 2,
      responseLength: 24,
    });
    const r = summariseVsTrl(shape, ours, trl, { warmup: 1 });
    const gen = generateFlops(shape, { batch: 8, Tp: 13, R: 24 });
    expect(r.ours.secondsPerStep).toBe(12);
    expect(r.trl.secondsPerStep).toBe(4);
    expect(r.vsTrlCpu).toBe(3);
    expect(r.peakRatio).toBe(2);
    // CPU seconds: ours (8 + 10) / 2 = 9, TRL's (4 + 2) / 2 = 3.
    expect(r.ours.cpuSecondsPerStep).toBe(9);
    expect(r.trl.cpuSecondsPerStep).toBe(3);
    expect(r.vsTrlCpuTime).toBe(3);
    // Per CPU second: ours generate (3 + 5) / 2 = 4 s; TRL's steps carry no phase CPU seconds.
    expect(r.ours.cpuPhases).toEqual({ generate: 4, score: 1, update: 4 });
    expect(r.ours.gflopsPerCpuSecond!.generate).toBe(gen / 4 / 1e9);
    // Ours: policy and reference forwards at the bucketed 16, one update epoch over the batch at 16.
    const score = grpoScoreFlops(shape, { batch: 8, Tq: 16, R: 24, forwards: 2 });
    const update = grpoUpdateFlops(shape, { batch: 8, Tq: 16, R: 24, epochs: 1 });
    expect(r.ours.gflopsPerCpuSecond!.step).toBe((gen + score + update) / 9 / 1e9);
    expect(r.trl.gflopsPerCpuSecond).toBeNull();
    expect(r.ours.phases).toEqual({ generate: 5, score: 2, update: 5 });
    expect(r.ours.flops.generate).toBe(gen);
    expect(r.ours.gflopsPerSecond.generate).toBe(gen / 5 / 1e9);
    // Ours scores with the policy and the reference at the bucketed 16; TRL with the reference at 13.
    expect(r.ours.flops.score).toBe(score);
    expect(r.trl.flops.score).toBe(grpoScoreFlops(shape, { batch: 8, Tq: 13, R: 24, forwards: 1 }));
    expect(r.trl.flops.update).toBe(grpoUpdateFlops(shape, { batch: 8, Tq: 13, R: 24, epochs: 1 }));
    expect(r.ours.flops.update).toBe(update);
    expect(r.ours.gflopsPerSecond.update).toBe(update / 5 / 1e9);
    expect(r.ours.flops.step).toBe(gen + score + update);
    // TRL generates the same prompts (13 and 12 tokens): the same generation FLOPs.
    expect(r.trl.flops.generate).toBe(gen);
    expect(r.trl.gflopsPerSecond.step).toBe((gen + r.trl.flops.score + r.trl.flops.update) / 4 / 1e9);
    const md = vsTrlMarkdown(r, null, 'Test CPU × 2');
    expect(md).toContain('vsTrlCpu (ours ÷ TRL, s/step) = 3.00');
    expect(md).toContain('the same in CPU seconds = 3.00');
    expect(md).toContain('Test CPU × 2');
    expect(md).toContain('prompts of 12–13 tokens');
    expect(md).toContain('our micro-batch 8 with recompute off');
    expect(md).toContain("against tfjs's own matmul peak");
  });
});

describe('which Python, and the skip', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    vi.restoreAllMocks();
  });

  it('resolvePython: $PPO_PYTHON, else /tmp/venv/bin/python when present, else python3', () => {
    expect(resolvePython({ PPO_PYTHON: '/x/py' }, () => true)).toBe('/x/py');
    expect(resolvePython({}, (p) => p === '/tmp/venv/bin/python')).toBe('/tmp/venv/bin/python');
    expect(resolvePython({}, () => false)).toBe('python3');
  });

  it('a missing binary is a clean "no Python" reason', () => {
    const r = probePython('/nonexistent/python-for-test', SCRIPT);
    expect(r).toEqual({
      ok: false,
      reason: expect.stringMatching(/^no Python at "\/nonexistent\/python-for-test" \(set PPO_PYTHON/),
    });
  });

  it('a Python without trl: the import error is the reason', () => {
    const d = mkdtempSync(path.join(tmpdir(), 'vs-trl-'));
    dirs.push(d);
    const fake = path.join(d, 'python');
    writeFileSync(fake, `#!/bin/sh\necho "ModuleNotFoundError: No module named 'trl'"\nexit 1\n`);
    chmodSync(fake, 0o755);
    const r = probePython(fake, SCRIPT);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason).toMatch(
      /cannot import torch, transformers, peft and trl: ModuleNotFoundError: No module named 'trl'/,
    );
  });

  it('bench --vs-trl --json with PPO_PYTHON missing: says skipped and why, vsTrlCpu null', async () => {
    const d = mkdtempSync(path.join(tmpdir(), 'vs-trl-'));
    dirs.push(d);
    const out = path.join(d, 'vs-trl.md');
    const written: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => {
      written.push(String(s));
      return true;
    });
    vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    vi.stubEnv('PPO_PYTHON', '/nonexistent/python-for-test');
    try {
      const { cmdBench } = await import('../src/cli/bench');
      await cmdBench(['--vs-trl', '--json', '--out', out]);
    } finally {
      vi.unstubAllEnvs();
    }
    const json = JSON.parse(written.join('').trim().split('\n').pop()!);
    expect(json.vsTrlCpu).toBeNull();
    expect(json.vsTrlPeakRatio).toBeNull();
    expect(json.vsTrl.skipped).toMatch(/no Python at "\/nonexistent\/python-for-test"/);
    expect(readFileSync(out, 'utf8')).toMatch(/Skipped: no Python at/);
  }, 60_000);
});

describe('setup', () => {
  it('batch 8 completions = 2 prompts × group 4 on both sides', () => {
    expect(VS_TRL_SETUP.batchSize / VS_TRL_SETUP.groupSize).toBe(2);
  });
});
