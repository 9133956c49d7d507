/** The run buttons' icons: inline SVG (font glyphs for "step" are missing on many systems). */
const common = {
  width: 12,
  height: 12,
  viewBox: '0 0 12 12',
  'aria-hidden': true,
  className: 'icon',
} as const;

export const PlayIcon = () => (
  <svg {...common}>
    <path d="M2 1 L11 6 L2 11 Z" fill="currentColor" />
  </svg>
);
export const PauseIcon = () => (
  <svg {...common}>
    <rect x="2" y="1" width="3" height="10" fill="currentColor" />
    <rect x="7" y="1" width="3" height="10" fill="currentColor" />
  </svg>
);
export const StepIcon = () => (
  <svg {...common}>
    <path d="M1 1 L8 6 L1 11 Z" fill="currentColor" />
    <rect x="9" y="1" width="2.2" height="10" fill="currentColor" />
  </svg>
);
export const ResetIcon = () => (
  <svg {...common}>
    <path
      d="M10 6 A4 4 0 1 1 6 2 L8 2"
      fill="none"
      stroke="currentColor"
      strokeWidth="1.8"
      strokeLinecap="round"
    />
    <path d="M7 0 L10 2 L7 4 Z" fill="currentColor" />
  </svg>
);
