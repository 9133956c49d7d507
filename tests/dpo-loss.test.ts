/**
 * DPO's loss, gradients and TRL metrics (src/core/dpo/loss.ts) against hand-worked values and a plain-loop
 * reference, for sigmoid (with cDPO label smoothing), IPO (length-averaged, TRL 1.13) and hinge, to 1e-6.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { dpoLoss } from '../src/core/dpo/loss';
import type { DpoLossType } from '../src/common/config/jobs';

beforeAll(async () => {
  await useCpu();
});

const logSigmoid = (x: number) => -Math.log1p(Math.exp(-x));
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/** Plain loop: loss, d loss / d π_c, d loss / d π_r per pair, and the metrics. */
function reference(
  pc: number[],
  pr: number[],
  rc: number[],
  rr: number[],
  beta: number,
  type: DpoLossType,
  eps: number,
  nc: number[],
  nr: number[],
) {
  const n = pc.length;
  let loss = 0;
  const gc: number[] = [];
  const gr: number[] = [];
  const m = { rc: 0, rr: 0, acc: 0, margin: 0, lc: 0, lr: 0 };
  for (let i = 0; i < n; i++) {
    const h = pc[i] - rc[i] - (pr[i] - rr[i]);
    if (type === 'sigmoid') {
      loss += (-(1 - eps) * logSigmoid(beta * h) - eps * logSigmoid(-beta * h)) / n;
      const dh = (-(1 - eps) * beta * sigmoid(-beta * h) + eps * beta * sigmoid(beta * h)) / n;
      gc.push(dh);
      gr.push(-dh);
    } else if (type === 'ipo') {
      const hb = (pc[i] - rc[i]) / nc[i] - (pr[i] - rr[i]) / nr[i];
      const d = hb - 1 / (2 * beta);
      loss += (d * d) / n;
      gc.push((2 * d) / nc[i] / n);
      gr.push((-2 * d) / nr[i] / n);
    } else {
      loss += Math.max(0, 1 - beta * h) / n;
      const dh = 1 - beta * h > 0 ? -beta / n : 0;
      gc.push(dh);
      gr.push(-dh);
    }
    const rwc = beta * (pc[i] - rc[i]);
    const rwr = beta * (pr[i] - rr[i]);
    m.rc += rwc / n;
    m.rr += rwr / n;
    m.acc += (rwc > rwr ? 1 : 0) / n;
    m.margin += (rwc - rwr) / n;
    m.lc += pc[i] / n;
    m.lr += pr[i] / n;
  }
  return { loss, gc, gr, m };
}

const PC = [-10.5, -7.25, -20, -3];
const PR = [-12, -7, -18.5, -9];
const RC = [-11, -7.5, -19, -4];
const RR = [-11.5, -7.5, -19, -8];
const NC = [5, 3, 9, 2];
const NR = [6, 3, 8, 4];

function run(type: DpoLossType, beta: number, eps = 0, pairs?: number, rows = [0, 1, 2, 3]) {
  const pc = tf.variable(tf.tensor1d(rows.map((i) => PC[i])));
  const pr = tf.variable(tf.tensor1d(rows.map((i) => PR[i])));
  let metrics: Record<string, number> = {};
  const { value, grads } = tf.variableGrads(() => {
    const out = dpoLoss(
      pc as unknown as tf.Tensor1D,
      pr as unknown as tf.Tensor1D,
      rows.map((i) => RC[i]),
      rows.map((i) => RR[i]),
      {
        beta,
        loss: type,
        labelSmoothing: eps,
        chosenTokens: rows.map((i) => NC[i]),
        rejectedTokens: rows.map((i) => NR[i]),
        pairs,
      },
    );
    metrics = Object.fromEntries(Object.entries(out.metrics).map(([k, t]) => [k, t.dataSync()[0]]));
    return out.loss;
  }, [pc, pr]);
  const res = {
    loss: value.dataSync()[0],
    gc: Array.from(grads[pc.name].dataSync()),
    gr: Array.from(grads[pr.name].dataSync()),
    metrics,
  };
  tf.dispose([pc, pr, value, ...Object.values(grads)]);
  return res;
}

describe('DPO loss', () => {
  it('at the reference: sigmoid ln 2, IPO (1/(2β))², hinge 1, margins 0, accuracies 0', () => {
    const at = (type: DpoLossType) => {
      const pc = tf.tensor1d([-3, -5]);
      const pr = tf.tensor1d([-4, -2]);
      const out = dpoLoss(pc, pr, [-3, -5], [-4, -2], {
        beta: 0.1,
        loss: type,
        chosenTokens: [3, 4],
        rejectedTokens: [2, 5],
      });
      return {
        loss: out.loss.dataSync()[0],
        margins: out.metrics['rewards/margins'].dataSync()[0],
        acc: out.metrics['rewards/accuracies'].dataSync()[0],
      };
    };
    expect(at('sigmoid').loss).toBeCloseTo(Math.LN2, 6);
    expect(at('ipo').loss).toBeCloseTo(25, 4); // (1 / 0.2)² = 25
    expect(at('hinge').loss).toBeCloseTo(1, 6);
    for (const t of ['sigmoid', 'ipo', 'hinge'] as const) {
      expect(at(t).margins).toBe(0);
      expect(at(t).acc).toBe(0);
    }
  });

  it('hand-worked pair: β 0.5, h = 2', () => {
    // π_c − ref_c = 0.5, π_r − ref_r = −1.5 → h = 2, βh = 1.
    // sigmoid: −log σ(1) = log(1 + e^−1) = 0.3132616875; dL/dπ_c = −β·σ(−1) = −0.5·0.2689414214 = −0.1344707107.
    // cDPO ε 0.1: 0.9·0.3132616875 + 0.1·log(1 + e) = 0.9·0.3132616875 + 0.1·1.3132616875 = 0.4132616875.
    // hinge: max(0, 1 − 1) = 0, no gradient. IPO with 5 and 3 tokens: h̄ = 0.1 + 0.5 = 0.6, (0.6 − 1)² = 0.16,
    // dL/dπ_c = 2·(−0.4)/5 = −0.16, dL/dπ_r = −2·(−0.4)/3 = 0.2666666667.
    const one = (type: DpoLossType, eps = 0) => {
      const pc = tf.variable(tf.tensor1d([-9.5]));
      const pr = tf.variable(tf.tensor1d([-12.5]));
      const { value, grads } = tf.variableGrads(
        () =>
          dpoLoss(pc as unknown as tf.Tensor1D, pr as unknown as tf.Tensor1D, [-10], [-11], {
            beta: 0.5,
            loss: type,
            labelSmoothing: eps,
            chosenTokens: [5],
            rejectedTokens: [3],
          }).loss,
        [pc, pr],
      );
      const r = {
        loss: value.dataSync()[0],
        gc: grads[pc.name].dataSync()[0],
        gr: grads[pr.name].dataSync()[0],
      };
      tf.dispose([pc, pr, value, ...Object.values(grads)]);
      return r;
    };
    const s = one('sigmoid');
    expect(s.loss).toBeCloseTo(0.3132616875, 6);
    expect(s.gc).toBeCloseTo(-0.1344707107, 6);
    expect(s.gr).toBeCloseTo(0.1344707107, 6);
    expect(one('sigmoid', 0.1).loss).toBeCloseTo(0.4132616875, 6);
    const h = one('hinge');
    expect(h.loss).toBeCloseTo(0, 6);
    expect(Math.abs(h.gc)).toBe(0);
    const ipo = one('ipo');
    expect(ipo.loss).toBeCloseTo(0.16, 6);
    expect(ipo.gc).toBeCloseTo(-0.16, 6);
    expect(ipo.gr).toBeCloseTo(0.2666666667, 6);
  });

  for (const [type, beta, eps] of [
    ['sigmoid', 0.1, 0],
    ['sigmoid', 0.3, 0.2],
    ['ipo', 0.1, 0],
    ['hinge', 0.4, 0],
  ] as const) {
    it(`${type} β ${beta} ε ${eps}: loss, gradients and metrics equal the plain loop to 1e-6`, () => {
      const got = run(type, beta, eps);
      const ref = reference(PC, PR, RC, RR, beta, type, eps, NC, NR);
      expect(got.loss).toBeCloseTo(ref.loss, 6);
      got.gc.forEach((g, i) => expect(g).toBeCloseTo(ref.gc[i], 6));
      got.gr.forEach((g, i) => expect(g).toBeCloseTo(ref.gr[i], 6));
      expect(got.metrics['rewards/chosen']).toBeCloseTo(ref.m.rc, 6);
      expect(got.metrics['rewards/rejected']).toBeCloseTo(ref.m.rr, 6);
      expect(got.metrics['rewards/accuracies']).toBeCloseTo(ref.m.acc, 6);
      expect(got.metrics['rewards/margins']).toBeCloseTo(ref.m.margin, 6);
      expect(got.metrics['logps/chosen']).toBeCloseTo(ref.m.lc, 6);
      expect(got.metrics['logps/rejected']).toBeCloseTo(ref.m.lr, 6);
    });
  }

  it('micro-batches: shares over the whole batch’s pair count sum to the batch’s loss, gradients and metrics', () => {
    for (const type of ['sigmoid', 'ipo', 'hinge'] as const) {
      const whole = run(type, 0.2);
      const a = run(type, 0.2, 0, 4, [0, 1]);
      const b = run(type, 0.2, 0, 4, [2, 3]);
      expect(a.loss + b.loss).toBeCloseTo(whole.loss, 6);
      [...a.gc, ...b.gc].forEach((g, i) => expect(g).toBeCloseTo(whole.gc[i], 6));
      for (const k of Object.keys(whole.metrics))
        expect(a.metrics[k] + b.metrics[k]).toBeCloseTo(whole.metrics[k], 6);
    }
  });

  it('clear errors for bad options', () => {
    const t = tf.tensor1d([-1]);
    expect(() => dpoLoss(t, t, [-1], [-1], { beta: 0, loss: 'sigmoid' })).toThrow(
      /beta must be a number > 0/,
    );
    expect(() => dpoLoss(t, t, [-1], [-1], { beta: 0.1, loss: 'ipo' })).toThrow(/needs chosenTokens/);
    expect(() => dpoLoss(t, t, [-1], [-1], { beta: 0.1, loss: 'hinge', labelSmoothing: 0.1 })).toThrow(
      /labelSmoothing applies to dpoLoss "sigmoid" only/,
    );
    expect(() => dpoLoss(t, t, [-1], [-1], { beta: 0.1, loss: 'x' as DpoLossType })).toThrow(
      /dpoLoss must be one of/,
    );
  });
});
