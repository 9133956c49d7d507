/**
 * The memory estimate shown before Start (the worker computes it from config.json and the config:
 * api.estimateMemory) and LoRA preselected when a big model is loaded, with the sentence saying why; the model
 * picker's verdicts on which Llama / Qwen sizes fit this device (api.modelFits).
 */
import type { ModelSummary } from '../../worker/protocol';
import { loraPreselection, loraReason } from '../lib/memory-estimate';
import { configProblem, toWire } from './config-sync';
import type { SliceContext } from './context';
import type { PlaygroundActions } from './types';

type EstimateActions = Pick<
  PlaygroundActions,
  'refreshEstimate' | 'refreshModelFits' | 'preselectLora' | 'trainAllWeights' | 'dismissLoraNote'
>;

export function createEstimateActions(ctx: SliceContext): EstimateActions {
  const { api, set, get } = ctx;
  /** Answers can come back out of order: only the newest request's is kept. */
  let asked = 0;
  let askedFits = 0;

  return {
    async refreshEstimate() {
      const { editedConfig: config, model } = get();
      const ask = ++asked;
      if (model === null || configProblem(config) !== null) {
        set({ estimate: null });
        return;
      }
      try {
        const estimate = await api.estimateMemory(toWire(config));
        if (ask === asked) set({ estimate });
      } catch {
        // Informative only (e.g. a Hub config.json that cannot be read right now): show none.
        if (ask === asked) set({ estimate: null });
      }
    },

    async refreshModelFits() {
      const { editedConfig: config } = get();
      const ask = ++askedFits;
      if (configProblem(config) !== null) return; // the last verdicts stay until the config is valid again
      try {
        const modelFits = await api.modelFits(toWire(config));
        if (ask === askedFits) set({ modelFits });
      } catch {
        if (ask === askedFits) set({ modelFits: null });
      }
    },

    async preselectLora(model: ModelSummary) {
      const pre = loraPreselection(model, get().editedConfig);
      if (!pre) {
        set({ loraNote: null });
        return;
      }
      const wire = toWire(get().editedConfig);
      const [full, lora] = await Promise.all(
        [{ lora: 0 }, { lora: pre.patch.lora }].map((o) =>
          api.estimateMemory({ ...wire, ...o }).catch(() => null),
        ),
      );
      const { setConfigValue } = get().actions;
      setConfigValue('lora', pre.patch.lora);
      if (pre.patch.learningRate !== undefined) setConfigValue('learningRate', pre.patch.learningRate);
      set({
        loraNote: {
          text: loraReason(model, pre, full, lora),
          previousLearningRate: pre.previousLearningRate,
          learningRateChanged: pre.patch.learningRate !== undefined,
        },
      });
    },

    trainAllWeights() {
      const note = get().loraNote;
      const { setConfigValue } = get().actions;
      setConfigValue('lora', 0);
      if (note?.learningRateChanged) setConfigValue('learningRate', note.previousLearningRate);
      set({ loraNote: null });
    },

    dismissLoraNote() {
      set({ loraNote: null });
    },
  };
}
