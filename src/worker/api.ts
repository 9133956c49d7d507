/**
 * The object the model worker exposes (protocol.ts's WorkerApi). It owns the tfjs state of the worker: the
 * chosen backend, the loaded policy and the training run (./run.ts). Calls that touch tfjs run one at a
 * time (comlink would otherwise interleave them at every await); pause / setHyperparameters / subscribe answer
 * at once. Every error leaves the worker as an Error whose message is fit to show.
 */
import * as tf from '@tensorflow/tfjs-core';
import { transfer } from 'comlink';
import { generate as sample } from '../core/model/sampling';
import { isUserError, UserError } from '../common/errors';
import { encodePrompt, stopIdsOf } from '../core/tokenizer';
import { applyBackendOptions, currentDeviceLimits, selectBackend } from './backend-web';
import { checkDeviceLimits, rewardIsModel, runMemoryOptions } from './device-limits';
import { mergeConfig } from '../common/config/live';
import { ModelSources, PREFERENCE_REWARD_MODEL, type ProgressSink, type SourcesOptions } from './sources';
import { RunEvents } from './events';
import type { DeviceLimits } from './device-limits';
import { Run } from './run';
import { memoryReport } from './memory';
import { Reliability } from './reliability';
import { browserAutosave } from './autosave-web';
import type { TabAutosave } from '../services/autosave-tabs';
import { exportCheckpoint, exportMetrics, exportTrlConfig, importCheckpoint } from './exports';
import { trainPreferenceRewardModel } from './preference-reward';
import type {
  BackendPref,
  BackendReport,
  GenerateReply,
  GenerateRequest,
  MemoryReport,
  ModelWorkerApi,
} from './protocol';

/** Runs async jobs strictly one after another. */
function serialQueue() {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(job: () => Promise<T>): Promise<T> => {
    const run = tail.then(job, job);
    tail = run.catch(() => undefined);
    return run;
  };
}

/**
 * What crosses to the UI: comlink sends an Error's name, message and stack. A UserError keeps its name and
 * loses the stack (the message is the whole story); anything else becomes an Error (a thrown string or a
 * GPU error object would otherwise arrive as a bare value).
 */
function forTransfer(e: unknown): Error {
  if (isUserError(e)) {
    const out = new UserError(e.message);
    out.stack = undefined;
    return out;
  }
  if (e instanceof Error) return e;
  const message =
    typeof e === 'object' && e !== null && 'message' in e
      ? String((e as { message: unknown }).message)
      : String(e);
  return new Error(message);
}

export interface WorkerApiOptions {
  /** Where autosaves go (default: IndexedDB with Web Locks, src/worker/autosave-web.ts). */
  autosave?: TabAutosave;
  /**
   * Where models and tasks come from (default: the browser's ModelSources, made with `progress` and `opts`). Tests
   * in Node pass a subclass that reads folders from disk (tests/helpers/worker.ts).
   */
  sources?: (progress: ProgressSink, opts: SourcesOptions) => ModelSources;
}

/** The backend tfjs runs on, and the person's preference; what the chosen one can hold. */
class BackendChoice {
  report: BackendReport | null = null;
  pref: BackendPref = 'auto';
  limits: DeviceLimits | null = null;

  /** Select a backend and note what it can hold. */
  async choose(pref: BackendPref): Promise<BackendReport> {
    this.pref = pref;
    this.report = await selectBackend(pref);
    this.limits = currentDeviceLimits();
    return this.report;
  }
}

export function createWorkerApi(opts: WorkerApiOptions = {}): ModelWorkerApi {
  // Built in order, each with what it needs: the queue, the event stream, the backend, the model sources, and
  // the run, which its reliability helper (autosave, device loss) builds with itself as the run's hooks.
  const serial = serialQueue();
  const events = new RunEvents();
  const backends = new BackendChoice();
  const sourcesOptions: SourcesOptions = { deviceLimits: () => backends.limits };
  const sources =
    opts.sources?.(events.progress, sourcesOptions) ?? new ModelSources(events.progress, sourcesOptions);
  const reliability = new Reliability(
    (hooks) =>
      new Run(sources, serial, {
        events,
        hooks,
        memory: () => memoryReport(backends.report?.backend ?? 'cpu'),
      }),
    serial,
    { reselect: () => backends.choose(backends.pref) },
    opts.autosave ?? browserAutosave(),
  );
  const run = reliability.run;

  /** Errors leave as displayable Errors. */
  const guard = async <T>(job: () => T | Promise<T>): Promise<T> => {
    try {
      return await job();
    } catch (e) {
      // A call that failed because the GPU went away mid-way: say so instead of a WebGPU internal error.
      if (reliability.deviceTrouble && !isUserError(e)) {
        throw forTransfer(
          new UserError('The GPU was lost while this ran; the app is recovering. Try again in a moment.'),
        );
      }
      throw forTransfer(e);
    }
  };
  /** Run `job` in turn (it touches tfjs). */
  const call = <T>(job: () => Promise<T>): Promise<T> => guard(() => serial(job));
  /**
   * For jobs that replace the run (load a model, import, resume, train a reward model): pause first; if the job
   * fails, a run that was running runs on, as if nothing had been tried.
   */
  const replacing = <T>(job: () => Promise<T>): Promise<T> => {
    const wasRunning = run.state === 'running';
    run.pause();
    return call(job).catch((e: unknown) => {
      if (wasRunning && run.trainer && run.is('paused')) {
        try {
          run.start();
        } catch {
          /* at its last step: stays paused */
        }
      }
      throw e;
    });
  };

  /** Select a backend; its GPU device (if any) is watched for loss. */
  async function choose(pref: BackendPref): Promise<BackendReport> {
    const report = await backends.choose(pref);
    reliability.watchDevice();
    return report;
  }

  async function ensureBackend(): Promise<void> {
    if (!backends.report) await choose('auto');
  }

  /** Weights live on the backend that made them: save the run as checkpoint files, switch, restore. */
  async function switchBackend(pref: BackendPref): Promise<BackendReport> {
    // The RL run, or a DPO job (its checkpoint holds its pairs): Run.savable.
    const saved = run.savable()
      ? { files: (await run.checkpoint('resume')).files, label: run.model?.label ?? 'run' }
      : null;
    const hadModel = run.model !== null;
    const runId = run.runId ?? undefined;
    const modelConfig = run.modelConfig();
    const previous = backends.report ? backends.pref : null;
    run.dropTrainer();
    run.disposeLm();
    await choose(pref);
    let refused: unknown = null;
    if (modelConfig) {
      try {
        // The model must fit the new backend too (WebGPU buffer limits, the WASM heap).
        const opts = runMemoryOptions(run.cfg, rewardIsModel(run.cfg));
        checkDeviceLimits(modelConfig, run.model?.label ?? 'The model', sources.deviceLimits, 'train', opts);
      } catch (e) {
        refused = e;
        if (previous) await choose(previous);
      }
    }
    if (saved) {
      await run.restoreSaved(saved.files, saved.label, saved.label, runId);
    } else if (hadModel) {
      await run.generator(); // reload the model on the new backend
    }
    run.emitStatus();
    if (refused) throw refused;
    return backends.report!;
  }

  return {
    init: (pref, options) => (run.pause(), call(() => (applyBackendOptions(options), switchBackend(pref)))),
    setBackend: (pref) => (run.pause(), call(() => switchBackend(pref))),

    subscribe: (cb) => guard(() => run.subscribe(cb)),
    configure: (config) =>
      call(async () => {
        if (typeof config !== 'object' || config === null || Array.isArray(config)) {
          throw new UserError('configure: expected an object of config keys.');
        }
        return run.configure(config);
      }),
    start: () =>
      guard(async () => {
        if (!backends.report) await serial(ensureBackend);
        return run.start();
      }),
    pause: () => guard(() => run.pause()),
    stepOnce: () =>
      guard(async () => {
        await serial(ensureBackend);
        return run.stepOnce();
      }),
    reset: () => (run.pause(), call(async () => run.reset())),
    setHyperparameters: (patch) => guard(() => run.setHyperparameters(patch)),
    setRewardCode: (code) => call(() => run.setRewardCode(code)),

    trainRewardModel: (jsonl, opts = {}) =>
      replacing(async () => {
        await ensureBackend();
        if (typeof jsonl !== 'string')
          throw new UserError('trainRewardModel: the preference file must be text (JSONL).');
        await sources.checkMemory(run.cfg.model);
        const { report, files } = await trainPreferenceRewardModel(
          sources.files(run.cfg.model),
          jsonl,
          opts,
          run.cfg.seed,
          (fraction, message) => run.progress('reward-model', fraction, message),
        );
        sources.hold(PREFERENCE_REWARD_MODEL, files);
        // A new reward is a new run, even when the name is the same as before.
        await run.startOverWithReward({ model: PREFERENCE_REWARD_MODEL });
        return report;
      }),

    exportCheckpoint: () =>
      call(async () => {
        await ensureBackend();
        const zip = await exportCheckpoint(run);
        // Hand the buffer over instead of copying it (checkpoints of real models are hundreds of MB).
        return transfer(zip, [zip.bytes.buffer]);
      }),
    importCheckpoint: (bytes) =>
      replacing(async () => {
        await ensureBackend();
        if (!(bytes instanceof Uint8Array))
          throw new UserError('importCheckpoint: expected the zip file as bytes (Uint8Array).');
        return importCheckpoint(run, bytes);
      }),
    exportMetrics: (format) => guard(() => exportMetrics(run, format)),
    exportTrlConfig: () => guard(() => exportTrlConfig(run)),
    history: () => guard(() => run.historyNow().map((m) => ({ ...m }))),

    setSupervisedJob: (job) =>
      replacing(async () => {
        await ensureBackend();
        return run.setSupervisedJob(job);
      }),
    continueFromSft: (next) =>
      replacing(async () => {
        await ensureBackend();
        return run.continueFromSft(next);
      }),

    loadModel: (source, opts = {}) =>
      replacing(async () => {
        await ensureBackend();
        if (opts.memoryBudgetBytes !== undefined) {
          if (!(opts.memoryBudgetBytes > 0))
            throw new UserError('loadModel: memoryBudgetBytes must be a positive number.');
          sources.setMemoryBudget(opts.memoryBudgetBytes);
        }
        if (typeof source !== 'object' || source === null || typeof source.kind !== 'string') {
          throw new UserError('loadModel: expected a model source such as {kind: "builtin", name: "tiny"}.');
        }
        // Uploaded files replace those held under the same name only once they loaded.
        return sources.tentatively(source, (name) => run.loadModel(name));
      }),

    generate: (req: GenerateRequest) =>
      call(async (): Promise<GenerateReply> => {
        const { model, tokenizer } = await run.generator();
        if (!Number.isInteger(req.seed) || req.seed < 0) {
          throw new UserError(`Seed must be a whole number of 0 or more, got ${req.seed}.`);
        }
        const encoded = encodePrompt(tokenizer, req.prompt, req.chatTemplate ?? true);
        // An empty prompt means "unconditional": start from the beginning-of-text token, as GPT-2 does.
        const prompt = encoded.length > 0 ? encoded : [model.config.bos_token_id];
        const t0 = performance.now();
        const out = await sample(model, [prompt], {
          maxNewTokens: req.maxNewTokens,
          temperature: req.temperature,
          topK: req.topK,
          topP: req.topP,
          stopToken: stopIdsOf(tokenizer),
          padId: tokenizer.padId,
          rng: req.seed,
        });
        const millis = performance.now() - t0;
        const tokens = out.tokens[0];
        return {
          text: tokenizer.decode(tokens),
          tokens,
          tokenTexts: tokens.map((id) => tokenizer.decodeToken(id)),
          logprobs: out.logprobs[0],
          promptTokens: prompt.length,
          tokensPerSecond: tokens.length / Math.max(millis / 1000, 1e-9),
          millis,
        };
      }),

    memory: () => call(async (): Promise<MemoryReport> => memoryReport(backends.report?.backend ?? 'cpu')),
    // Not serial: reads config.json and the task only, so it answers while a step runs.
    estimateMemory: (config = {}) =>
      guard(() => sources.estimateReport(mergeConfig(run.cfg, config, 'estimateMemory').config)),
    // Not serial either: pure arithmetic on the known shapes, the backend's limits and the budget.
    modelFits: (config = {}) =>
      guard(() => sources.modelFits(mergeConfig(run.cfg, config, 'modelFits').config)),

    // ---- reliability (protocol.ts ReliabilityApi) ----
    subscribeReliability: (cb) =>
      guard(async () => {
        reliability.subscribe(cb);
        return reliability.info();
      }),
    autosaveInfo: () => guard(() => reliability.info()),
    resumeAutosave: () =>
      replacing(async () => {
        await ensureBackend();
        return reliability.resume();
      }),
    discardAutosave: () => call(() => reliability.discard()),
    setAutosave: (o) =>
      guard(async () => {
        if (typeof o !== 'object' || o === null || typeof o.enabled !== 'boolean') {
          throw new UserError('setAutosave: expected {enabled: true | false}.');
        }
        reliability.setEnabled(o.enabled);
        return reliability.info();
      }),
    debugLoseDevice: () => guard(async () => reliability.loseDevice()),

    forwardLogits: (ids, mask) =>
      call(async () => {
        const { model } = await run.generator();
        const out = tf.tidy(() =>
          model.logits(tf.tensor2d(ids, undefined, 'int32'), tf.tensor2d(mask, undefined, 'int32')),
        );
        try {
          return (await out.array()) as number[][][];
        } finally {
          out.dispose();
        }
      }),
  };
}
