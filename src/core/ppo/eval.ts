/**
 * Held-out evaluation of an RL run (docs/eval.md; contracts §9). Every `evalEvery` steps and at the run's last
 * step the policy and the reference answer the same held-out prompts with the same seeds (greedy when
 * `evalTemperature` is 0, else sampled at it with per-prompt seeds fixed for the whole run), the run's reward
 * scores both answers, and the step's metrics line gains
 *   eval/reward  = mean over the eval prompts of the policy's score,
 *   eval/kl      = mean over the eval prompts of Σ_t (log π(y_t) − log π_ref(y_t)) over the tokens y of the
 *                  policy's answer (log softmax(logits / T), T = evalTemperature, or 1 when greedy),
 *   eval/winRate = fraction of the eval prompts where the policy's score > the reference's score (ties lose).
 * One line per evaluation goes to `eval.jsonl` (EvalRecord).
 *
 * Evaluation never draws from the training random stream (its seeds come from a stream of its own) and changes
 * no training state, so a run with evaluation trains exactly like the same run without (tests/eval.test.ts).
 * Under LoRA the reference is the base with the adapters off, as in training (models.ref).
 */
import type { TrainConfig } from '../../common/config';
import type { Task } from '../tasks';
import { encodePrompt } from '../tokenizer';
import { generateInMicroBatches } from '../model/sampling';
import { scoreSamples } from '../reward/module';
import type { Sample } from '../reward/functions';
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';
import type { PpoTrainer } from './trainer';
import { HELDOUT, type EvalMetrics, type EvalRecord } from '../../common/eval-record';

export * from '../../common/eval-record';

/** The evaluation steps: every `evalEvery` steps and the run's last step; none when evalEvery is 0. */
export function isEvalStep(step: number, evalEvery: number, last: number): boolean {
  if (evalEvery <= 0 || step <= 0) return false;
  return step === last || step % evalEvery === 0;
}

/** Prompts of a prompts file: one a line, trailing whitespace (and \r) cut, blank lines skipped. */
export function parseEvalPromptsFile(text: string, file: string): string[] {
  const prompts = text
    .split('\n')
    .map((l) => l.replace(/\s+$/, ''))
    .filter((l) => l.trim() !== '');
  if (prompts.length === 0) {
    throw new UserError(
      `evalPrompts file ${file} has no prompts; write one prompt a line (blank lines are skipped), or set ` +
        '"evalPrompts" to "heldout" for a task with a held-out split.',
    );
  }
  return prompts;
}

/** How the eval prompts are found: the task (for "heldout") and the text of a prompts file (the CLI reads it). */
export interface EvalPromptSources {
  loadTask(name: string): Promise<Task>;
  /** The text of a prompts file (a path as the config holds it); absent where files cannot be read (the app). */
  readText?: (path: string) => Promise<string>;
}

/** The eval prompts of a validated config; null when evaluation is off. UserErrors name what would be right. */
export async function resolveEvalPrompts(cfg: TrainConfig, src: EvalPromptSources): Promise<string[] | null> {
  if (cfg.evalEvery === 0) return null;
  const spec = cfg.evalPrompts;
  if (spec === null) {
    throw new UserError(
      `"evalEvery" (${cfg.evalEvery}) needs "evalPrompts": "heldout" or a file of prompts, one a line.`,
    );
  }
  if (spec === HELDOUT) {
    if (cfg.task === null) {
      throw new UserError(
        '"evalPrompts" "heldout" takes the held-out split of the run\'s task, but "task" is null; set "task" to a ' +
          'task with a held-out split (e.g. "arithmetic-chat") or give "evalPrompts" a file of prompts, one a line.',
      );
    }
    const task = await src.loadTask(cfg.task);
    if (!task.evalPrompts || task.evalPrompts.length === 0) {
      throw new UserError(
        `"evalPrompts" "heldout": the task "${cfg.task}" has no held-out split (no "evalPrompts" in its task file); ` +
          'give "evalPrompts" a file of prompts, one a line, or use a task that has one (e.g. "arithmetic-chat").',
      );
    }
    return [...task.evalPrompts];
  }
  if (!src.readText) {
    throw new UserError(
      `"evalPrompts" ${JSON.stringify(spec)}: a prompts file is read by the CLI only; here use "heldout" (the ` +
        "task's held-out split).",
    );
  }
  let text: string;
  try {
    text = await src.readText(spec);
  } catch (e) {
    throw new UserError(
      `"evalPrompts" file ${spec} could not be read (${(e as Error).message}); give a file of prompts, one a ` +
        'line (its path relative to the config file), or "heldout".',
    );
  }
  return parseEvalPromptsFile(text, spec);
}

/** A seed for each eval prompt, the same at every evaluation of a run: a stream of its own, not the training one. */
export function evalSeeds(seed: number, n: number): number[] {
  const r = new Rng((seed ^ 0x6576616c) >>> 0); // "eval"
  return Array.from({ length: n }, () => r.seed());
}

/**
 * Evaluates a trainer's policy against its reference on fixed prompts (built once per session; holds no
 * tensors). `run(step)` does one evaluation.
 */
export class Evaluator {
  readonly promptTokens: number[][];
  private readonly seeds: number[];

  constructor(
    private readonly trainer: PpoTrainer,
    readonly prompts: string[],
  ) {
    const cfg = trainer.cfg;
    const nPos = trainer.models.policy.config.n_positions;
    const maxPrompt = nPos - cfg.responseLength;
    this.promptTokens = prompts.map((p, i) => {
      let ids = encodePrompt(trainer.tokenizer, p, cfg.chatTemplate);
      if (ids.length === 0) ids = [trainer.models.policy.config.bos_token_id];
      if (ids.length > maxPrompt) {
        throw new UserError(
          `eval prompt ${i + 1} ("${p.slice(0, 40)}…") is ${ids.length} tokens; with responseLength ` +
            `${cfg.responseLength} it must be at most ${maxPrompt} (the model's n_positions is ${nPos}).`,
        );
      }
      return ids;
    });
    this.seeds = evalSeeds(cfg.seed, prompts.length);
  }

  /** One evaluation after `step`: the metrics for that step's line and the eval.jsonl record. */
  async run(step: number): Promise<EvalRecord> {
    const t = this.trainer;
    const cfg = t.cfg;
    const { policy, ref, reward } = t.models;
    const queries = this.promptTokens;
    // Generation and the forwards run with the plan in force, inside the device's error scope: a device that runs
    // out redoes them smaller (PpoTrainer.withDevicePlan; fresh random streams from the same seeds each try).
    const answer = (model: typeof policy) =>
      t.withDevicePlan('generate', queries.length, (plan) =>
        generateInMicroBatches(
          model,
          queries,
          {
            maxNewTokens: cfg.responseLength,
            temperature: cfg.evalTemperature,
            topK: cfg.topK,
            topP: cfg.topP,
            stopToken: t.stopIds(cfg),
            padId: t.tokenizer.padId,
            // Fresh streams with the same seeds for both models, at every evaluation.
            rng: this.seeds.map((s) => new Rng(s)),
            sharePrompts: t.sharedPrefix,
          },
          plan.generateMicroBatchSize,
        ),
      );
    const forward = (tokens: number[][]) =>
      t.withDevicePlan('score', queries.length, (plan) =>
        t.evalForward(queries, tokens, cfg.evalTemperature, plan.microBatchSize),
      );
    const pol = await answer(policy);
    const refGen = await answer(ref);
    const onPolicy = await forward(pol.tokens);
    const score = async (tokens: number[][]): Promise<number[]> => {
      if (reward.kind === 'fn') {
        const samples: Sample[] = tokens.map((y, k) => ({
          prompt: this.prompts[k],
          response: t.tokenizer.decode(y),
          promptTokens: queries[k],
          responseTokens: y,
        }));
        return scoreSamples(reward.fn, samples, reward.label);
      }
      const rm = tokens === pol.tokens ? onPolicy.rewardModel! : (await forward(tokens)).rewardModel!;
      const centre = cfg.rewardModelCenter && t.rewardMean !== null ? t.rewardMean : 0;
      return rm.map((x) => x - centre);
    };
    const policyScores = await score(pol.tokens);
    const refScores = await score(refGen.tokens);
    const n = queries.length;
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    return {
      step,
      'eval/reward': mean(policyScores),
      'eval/kl': mean(onPolicy.policy.map((lp, k) => lp - onPolicy.ref[k])),
      'eval/winRate': policyScores.filter((s, k) => s > refScores[k]).length / n,
      samples: this.prompts.map((prompt, k) => ({
        prompt,
        reference: t.tokenizer.decode(refGen.tokens[k]),
        policy: t.tokenizer.decode(pol.tokens[k]),
        referenceReward: refScores[k],
        policyReward: policyScores[k],
      })),
    };
  }
}

/** The three metrics of a record (what goes on the step's metrics line). */
export function evalMetricsOf(r: EvalRecord): EvalMetrics {
  return { 'eval/reward': r['eval/reward'], 'eval/kl': r['eval/kl'], 'eval/winRate': r['eval/winRate'] };
}
