/** Models, rewards and files: loading a policy, reward code and models, checkpoints and metrics in and out. */
import { validateConfig, type TrainConfig } from '../../common/config';
import { describeError } from '../errors';
import { configProblem } from './config-sync';
import type { SliceContext } from './context';
import { EMPTY_HISTORY } from './training-slice';
import type { IoTask, PlaygroundActions } from './types';

type IoActions = Pick<
  PlaygroundActions,
  | 'chooseModel'
  | 'loadModel'
  | 'editRewardCode'
  | 'applyRewardCode'
  | 'clearRewardCode'
  | 'trainRewardModel'
  | 'setSupervisedJob'
  | 'continueFromSft'
  | 'exportCheckpoint'
  | 'exportMetrics'
  | 'exportTrlConfig'
  | 'importCheckpoint'
  | 'autosaveResumed'
  | 'restoring'
>;

const stepTag = (step: number | undefined) => `step-${step ?? 0}`;

/**
 * A restored run's config as the person's edited config; `fallback` when this UI cannot read it (the worker
 * accepted it: a key this UI does not know must not block the import or the resume).
 */
function configOf(config: unknown, where: 'checkpoint' | 'autosave', fallback: TrainConfig): TrainConfig {
  try {
    return validateConfig(config, where);
  } catch {
    return fallback;
  }
}

export function createIoActions(ctx: SliceContext): IoActions {
  const { api, set, get } = ctx;

  /**
   * One file/reward job at a time; its error goes to the banner. It runs after the page's start and in turn with
   * the config messages (ctx.afterStart, ctx.exclusive): an import, a reward model or a DPO/SFT job replaces the
   * run, and a configure queued before or after it in the worker would drop or undo what it brought in.
   */
  const task = async (name: IoTask, job: () => Promise<void>) => {
    if (get().ioTask !== null) return;
    set({ ioTask: name, error: null });
    try {
      await ctx.afterStart();
      await ctx.exclusive(job);
    } catch (e) {
      set({ error: describeError(e) });
    } finally {
      set({ ioTask: null });
    }
  };

  return {
    chooseModel(choice) {
      set({ modelChoice: choice });
    },

    async loadModel(source) {
      // After the page's own model load (which would replace this one), in turn with the config messages.
      await ctx.afterStart();
      if (get().modelLoadState === 'busy') return;
      set({ modelLoadState: 'busy', progress: null, error: null });
      try {
        // The worker makes it config `model` and restarts the run (its status event updates the controls).
        const model = await ctx.exclusive(() => api.loadModel(source));
        set({ model, modelLoadState: 'ready', progress: null });
        await get().actions.preselectLora(model);
      } catch (e) {
        set({ modelLoadState: get().model ? 'ready' : 'error', progress: null, error: describeError(e) });
      }
      await ctx.refreshMemory();
    },

    editRewardCode(code) {
      set({ rewardCode: code });
    },

    applyRewardCode: () =>
      task('reward-code', async () => {
        ctx.takeWorkerStatus(await api.setRewardCode(get().rewardCode));
        set({ rewardCodeInUse: true });
      }),

    clearRewardCode: () =>
      task('reward-code', async () => {
        ctx.takeWorkerStatus(await api.setRewardCode(null));
        set({ rewardCodeInUse: false });
      }),

    trainRewardModel: (jsonl) =>
      task('reward-model', async () => {
        set({ progress: null });
        const report = await api.trainRewardModel(jsonl);
        set({ rewardModel: report, progress: null });
      }),

    setSupervisedJob: (job) =>
      task('supervised', async () => {
        set({ progress: null });
        const status = await api.setSupervisedJob(job);
        set({ ...EMPTY_HISTORY, progress: null });
        ctx.takeWorkerStatus(status);
      }),

    continueFromSft: (next) =>
      task('supervised', async () => {
        set({ progress: null });
        const status = await api.continueFromSft(next);
        set({ ...EMPTY_HISTORY, progress: null });
        ctx.takeWorkerStatus(status);
      }),

    exportCheckpoint: () =>
      task('export', async () => {
        const { name, bytes } = await api.exportCheckpoint();
        const file = name.toLowerCase().endsWith('.zip') ? name : `${name || 'checkpoint'}.zip`;
        ctx.opts.download(file, bytes, 'application/zip');
      }),

    exportMetrics: (format) =>
      task('metrics', async () => {
        const text = await api.exportMetrics(format);
        const type = format === 'csv' ? 'text/csv' : 'application/json';
        ctx.opts.download(`ppo-metrics-${stepTag(get().runStatus?.step)}.${format}`, text, type);
      }),

    exportTrlConfig: () =>
      task('metrics', async () => {
        const text = await api.exportTrlConfig();
        const name = get().runStatus?.job?.kind === 'dpo' ? 'trl-dpo-config.json' : 'trl-ppo-config.json';
        ctx.opts.download(name, text, 'application/json');
      }),

    importCheckpoint: (bytes) =>
      task('import', async () => {
        // A linked comparison being re-run stops here: its next run would replace the imported one (the import's
        // status event, a finished run, comes before its answer).
        set({ rerunQueue: [], autoCompare: 0 });
        const summary = await api.importCheckpoint(bytes);
        const metrics = await api.history();
        const config = configOf(summary.config, 'checkpoint', get().editedConfig);
        // The imported run's config becomes the one the person edits. Its step, state and config in force
        // are the worker's to say: it sends a status event with them (`runStatus`); none is made up here.
        set({
          ...EMPTY_HISTORY,
          metrics,
          editedConfig: config,
          configProblem: configProblem(config),
        });
        ctx.writeHash();
        await ctx.refreshMemory();
      }),

    async restoring(job) {
      await ctx.afterStart();
      return ctx.exclusive(() => {
        // As an import: a linked comparison being re-run stops before the restored run's status arrives.
        set({ rerunQueue: [], autoCompare: 0 });
        return job();
      });
    },

    autosaveResumed(status, metrics) {
      const config = configOf(status.config, 'autosave', get().editedConfig);
      set({
        ...EMPTY_HISTORY,
        metrics,
        editedConfig: config,
        configProblem: configProblem(config),
        error: null,
      });
      ctx.writeHash();
      ctx.takeWorkerStatus(status);
    },
  };
}
