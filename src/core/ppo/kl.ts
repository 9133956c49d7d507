/**
 * KL-penalty controllers (step 8 of docs/engine.md). The coefficient β they hold multiplies the per-token
 * KL estimate in the reward. Their state goes into `trainer_state.json` so that a resumed run continues with the
 * same β.
 */
import type { TrainConfig } from '../../common/config';
import { UserError } from '../../common/errors';

export type KlControllerState =
  { kind: 'fixed'; value: number } | { kind: 'adaptive'; value: number; target: number; horizon: number };

export interface KlController {
  /** The current coefficient β. */
  readonly value: number;
  /** Feed the KL measured this step (nats per sample, mean over the batch) for `nSteps` samples. */
  update(currentKl: number, nSteps: number): void;
  /** A JSON-serialisable snapshot for checkpoints. */
  state(): KlControllerState;
}

/** β stays what it was set to. */
export class FixedKlController implements KlController {
  constructor(public value: number) {}

  update(_currentKl: number, _nSteps: number): void {}

  state(): KlControllerState {
    return { kind: 'fixed', value: this.value };
  }

  static fromState(s: unknown): FixedKlController {
    const st = klControllerFromState(s);
    if (!(st instanceof FixedKlController))
      throw new UserError('KL controller state: expected kind "fixed".');
    return st;
  }
}

/**
 * Ziegler et al. (2019), as TRL's AdaptiveKLController:
 *   err = clip(KL/target − 1, −0.2, 0.2);  β ← β·(1 + err·n/horizon)
 * where n is the number of samples behind the measurement (TRL passes the batch size) and `horizon` is in
 * samples. A non-finite KL (a diverged step) leaves β unchanged rather than poisoning it.
 */
export class AdaptiveKlController implements KlController {
  constructor(
    public value: number,
    readonly target: number,
    readonly horizon: number,
  ) {}

  update(currentKl: number, nSteps: number): void {
    if (!Number.isFinite(currentKl)) return;
    const err = Math.min(0.2, Math.max(-0.2, currentKl / this.target - 1));
    this.value *= 1 + (err * nSteps) / this.horizon;
  }

  state(): KlControllerState {
    return { kind: 'adaptive', value: this.value, target: this.target, horizon: this.horizon };
  }

  static fromState(s: unknown): AdaptiveKlController {
    const st = klControllerFromState(s);
    if (!(st instanceof AdaptiveKlController)) {
      throw new UserError('KL controller state: expected kind "adaptive".');
    }
    return st;
  }
}

/** The controller the config asks for, starting from `klCoef`. */
export function makeKlController(
  cfg: Pick<TrainConfig, 'klCoef' | 'adaptiveKl' | 'targetKl' | 'klHorizon'>,
): KlController {
  return cfg.adaptiveKl
    ? new AdaptiveKlController(cfg.klCoef, cfg.targetKl, cfg.klHorizon)
    : new FixedKlController(cfg.klCoef);
}

/**
 * The controller after a live config change (`adaptiveKl` itself is not live). Fixed: β = the new klCoef.
 * Adaptive: the new targetKl and klHorizon apply from the next update; β keeps its adapted value unless klCoef
 * itself changed, in which case it restarts from the new klCoef.
 */
export function liveKlController(
  current: KlController,
  prev: Pick<TrainConfig, 'klCoef'>,
  next: Pick<TrainConfig, 'klCoef' | 'adaptiveKl' | 'targetKl' | 'klHorizon'>,
): KlController {
  if (!next.adaptiveKl) return new FixedKlController(next.klCoef);
  const beta =
    next.klCoef !== prev.klCoef || !(current instanceof AdaptiveKlController) ? next.klCoef : current.value;
  return new AdaptiveKlController(beta, next.targetKl, next.klHorizon);
}

/** Rebuild a controller from `state()` output (e.g. read from trainer_state.json); errors name the field. */
export function klControllerFromState(s: unknown): KlController {
  const where = 'KL controller state (trainer_state.json)';
  if (typeof s !== 'object' || s === null)
    throw new UserError(`${where}: expected an object, got ${String(s)}.`);
  const r = s as Record<string, unknown>;
  const finite = (k: string, positive: boolean): number => {
    const v = r[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || (positive && v === 0)) {
      throw new UserError(
        `${where}: "${k}" must be a ${positive ? 'positive' : 'non-negative'} finite number, got ${JSON.stringify(v)}.`,
      );
    }
    return v;
  };
  if (r.kind === 'fixed') return new FixedKlController(finite('value', false));
  if (r.kind === 'adaptive') {
    return new AdaptiveKlController(finite('value', false), finite('target', true), finite('horizon', true));
  }
  throw new UserError(`${where}: "kind" must be "fixed" or "adaptive", got ${JSON.stringify(r.kind)}.`);
}
