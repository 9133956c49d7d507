import { useId } from 'react';
import { BACKEND_LABEL, BACKEND_OPTIONS, isBackendPref } from '../backend-prefs';
import {
  useActions,
  useBackend,
  useBackendLoadState,
  useBackendPref,
  useGenerating,
  useRunState,
} from '../store/hooks';
import type { AdapterReport, BackendReport } from '../../worker/protocol';
import { describeKernelTuning } from '../../common/kernel-tuning';

function adapterText(a: AdapterReport): string {
  const name = [a.vendor, a.architecture].filter(Boolean).join(' · ') || 'unnamed adapter';
  const desc = a.description && !name.includes(a.description) ? ` (${a.description})` : '';
  return `${name}${desc}${a.isSoftware ? ' — software' : ''}`;
}

/**
 * The WASM backend's threads in words — "8 threads", or "1 thread (page not cross-origin isolated)" where the
 * page cannot have tfjs's threaded build — or null on other backends (docs/tfjs.md, WASM threads).
 */
export function wasmThreadsText(report: BackendReport | null): string | null {
  const w = report?.backend === 'wasm' ? report.wasm : undefined;
  if (!w) return null;
  const n = `${w.threads} thread${w.threads === 1 ? '' : 's'}`;
  return w.isolated ? n : `${n} (page not cross-origin isolated)`;
}

/** Which tfjs backend the worker runs on (with WASM's threads), and a way to switch (top bar). */
export function BackendBadge() {
  const report = useBackend();
  const loadState = useBackendLoadState();
  const pref = useBackendPref();
  const generating = useGenerating();
  const running = useRunState() === 'running';
  const { chooseBackend } = useActions();
  const selectId = useId();

  const busy = loadState === 'busy' || loadState === 'idle';
  const threads = wasmThreadsText(report);
  return (
    <section
      className="backend"
      aria-label="Compute backend"
      data-testid="backend-badge"
      data-backend={report?.backend ?? ''}
    >
      <span className={`pill ${report ? `pill-${report.backend}` : ''}`} data-testid="backend-name">
        {busy ? 'starting…' : report ? BACKEND_LABEL[report.backend] : 'no backend'}
      </span>
      {!busy && threads && (
        <span className="backend-threads" data-testid="backend-threads">
          · {threads}
        </span>
      )}
      <span className="backend-select">
        <label htmlFor={selectId}>Backend</label>
        <select
          id={selectId}
          value={pref}
          disabled={busy || generating || running}
          title={running ? 'Pause the run to switch backend' : undefined}
          onChange={(e) => {
            if (isBackendPref(e.target.value)) void chooseBackend(e.target.value);
          }}
        >
          {BACKEND_OPTIONS.map((o) => (
            <option key={o.value} value={o.value}>
              {o.label}
            </option>
          ))}
        </select>
      </span>
    </section>
  );
}

/** The WebGPU adapter and any plain-words notice about the backend (software adapter, fallback). */
export function BackendNotice() {
  const report = useBackend();
  if (!report) return null;
  return (
    <div className="backend-notice-strip">
      <p className="adapter" data-testid="backend-adapter">
        WebGPU adapter: {report.adapter ? adapterText(report.adapter) : 'none'}
      </p>
      {report.kernels && (
        <p className="kernels" data-testid="backend-kernels">
          Kernels: {describeKernelTuning(report.kernels)}
        </p>
      )}
      {report.notice && (
        <p className="notice" data-testid="backend-notice">
          {report.notice}
        </p>
      )}
    </div>
  );
}
