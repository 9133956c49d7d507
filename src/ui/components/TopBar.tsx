import { useEffect, useState } from 'react';
import { formatBytes, formatNumber } from '../lib/format';
import { formatTimeLeft, stepTimeLeft } from '../lib/step-eta';
import {
  useActions,
  useCanTrain,
  useCommand,
  useLatestMetric,
  useMemory,
  useProgress,
  usePhaseProgress,
  useRunPhase,
  useRunState,
  useStep,
  useTargetSteps,
} from '../store/hooks';
import { BackendBadge } from './BackendBadge';
import { PauseIcon, PlayIcon, ResetIcon, StepIcon } from './icons';

/** Start, Pause, Step and Reset (their accessible names are exactly these words). */
function RunControls() {
  const state = useRunState();
  const command = useCommand();
  const canTrain = useCanTrain();
  const { startRun, pauseRun, stepRun, resetRun } = useActions();
  const running = state === 'running';
  const waiting = command !== null;
  return (
    <div className="run-controls" role="group" aria-label="Run">
      <button
        type="button"
        className="primary"
        onClick={() => void startRun()}
        disabled={!canTrain || running || waiting}
      >
        <PlayIcon />
        Start
      </button>
      <button type="button" onClick={() => void pauseRun()} disabled={!running && command !== 'step'}>
        <PauseIcon />
        Pause
      </button>
      <button type="button" onClick={() => void stepRun()} disabled={!canTrain || running || waiting}>
        <StepIcon />
        Step
      </button>
      <button
        type="button"
        onClick={() => void resetRun()}
        disabled={waiting}
        title="Drop the run and start over; settings marked 'applies on reset' take effect"
      >
        <ResetIcon />
        Reset
      </button>
    </div>
  );
}

const PHASE_WORDS: Record<string, string> = {
  generating: 'generating',
  scoring: 'scoring',
  updating: 'updating',
};

/**
 * Time left in the step in flight, from the last step's phase times, ticking once a second; null between steps
 * or before the first step finished.
 */
function useStepTimeLeft(phase: string): number | null {
  const timeGenerate = useLatestMetric('timeGenerate');
  const timeScore = useLatestMetric('timeScore');
  const timeUpdate = useLatestMetric('timeUpdate');
  // When the phase began: reset during render when it changes (React's derived-state pattern).
  const [since, setSince] = useState(() => ({ phase, at: Date.now() }));
  const [now, setNow] = useState(() => Date.now());
  if (since.phase !== phase) setSince({ phase, at: Date.now() });
  const active = phase !== 'idle';
  useEffect(() => {
    if (!active) return;
    const id = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(id);
  }, [active]);
  if (!active || timeGenerate === null || timeScore === null || timeUpdate === null) return null;
  return stepTimeLeft(phase, Math.max(0, (now - since.at) / 1000), {
    timeGenerate,
    timeScore,
    timeUpdate,
  });
}

/** Step counter ("Step N", read by the tests), phase, throughput and the worker's tensor memory. */
function RunReadout() {
  const step = useStep();
  const steps = useTargetSteps();
  const state = useRunState();
  const phase = useRunPhase();
  const inPhase = usePhaseProgress();
  const command = useCommand();
  const tokensPerSecond = useLatestMetric('tokensPerSecond');
  const memory = useMemory();
  const progress = useProgress();
  const left = useStepTimeLeft(phase);
  // Loading the run's models before its first step takes a while on a big model: say so.
  const building = progress?.task === 'build' && progress.fraction !== 1 ? progress.message : null;
  // After Pause the step in flight still finishes: "pausing" until its phase returns to idle.
  const phaseText =
    state === 'running' || command === 'step'
      ? (PHASE_WORDS[phase] ?? 'running')
      : phase !== 'idle'
        ? 'pausing'
        : state === 'paused'
          ? 'paused'
          : 'idle';
  return (
    <div className="run-readout" aria-label="Run status" role="group">
      <span className="step-counter">
        <span data-testid="step-counter" aria-live="off">
          Step {step}
        </span>
        <span className="muted"> / {steps}</span>
      </span>
      <span className={`pill phase phase-${phaseText}`} data-testid="run-phase">
        {phaseText}
      </span>
      {inPhase && phase !== 'idle' && (
        <span
          className="readout phase-progress"
          data-testid="phase-progress"
          title="work done in this phase of the step: samples generated or scored, or minibatch updates made"
        >
          {inPhase.done} / {inPhase.total} {inPhase.unit}
        </span>
      )}
      {building && <span className="readout building">{building}</span>}
      {/* Throughput over memory, two short lines: the whole readout fits beside the backend badge at 1280 px. */}
      <div className="readout-stack">
        <span className="readout" title="response tokens generated per second of the last step">
          <span className="muted">tokens/s</span> {formatNumber(tokensPerSecond)}
          {left !== null && left >= 2 && (
            <span
              data-testid="step-time-left"
              title="from the last step's times for generating, scoring and updating"
            >
              {' '}
              · {formatTimeLeft(left)} left in step
            </span>
          )}
        </span>
        {memory && (
          <span
            className="readout readout-memory"
            data-testid="memory-line"
            title={
              'tensors held by the worker between steps (a leak shows as a growing count)' +
              (memory.peakBytes !== undefined
                ? ', and the most the last step held at any moment (each buffer once)'
                : '') +
              (memory.heapBytes !== undefined
                ? `; WASM heap ${formatBytes(memory.heapBytes)} (its high-water mark: tensors, packed matmul weights, free gaps)`
                : '')
            }
          >
            <span className="muted">memory</span> {memory.numTensors} tensors ·{' '}
            <span className="memory-held">held </span>
            {formatBytes(memory.numBytes)}
            {memory.peakBytes !== undefined && <> · peak {formatBytes(memory.peakBytes)}</>}
          </span>
        )}
      </div>
    </div>
  );
}

export function TopBar() {
  return (
    <header className="topbar">
      <div className="brand">
        <h1>PPO Playground</h1>
        <span className="tagline">RLHF on GPT-2, in your browser</span>
      </div>
      <RunControls />
      <RunReadout />
      <BackendBadge />
    </header>
  );
}
