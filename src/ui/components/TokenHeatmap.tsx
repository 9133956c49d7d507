import { memo } from 'react';
import type { TokenView } from '../../worker/protocol';
import { formatNumber } from '../lib/format';
import { heatColor, heatTextColor, tokenValue, type HeatScale } from '../lib/heat';

/** How a token's text shows: whitespace made visible, nothing empty. */
export function visibleToken(text: string): string {
  if (text === '') return '∅';
  return text.replace(/\n/g, '↵').replace(/\t/g, '→');
}

/** One response's tokens, each coloured by its advantage, KL or log-prob; the numbers on hover. */
export const TokenHeatmap = memo(function TokenHeatmap(props: { tokens: TokenView[]; scale: HeatScale }) {
  return (
    <span className="heat-tokens">
      {props.tokens.map((t, i) => {
        const v = tokenValue(t, props.scale.mode);
        return (
          <span
            key={i}
            className="heat-token"
            style={{ background: heatColor(v, props.scale), color: heatTextColor(v, props.scale) }}
            title={`${JSON.stringify(t.text)} · advantage ${formatNumber(t.advantage)} · KL ${formatNumber(t.kl)} · log p ${formatNumber(t.logprob)}`}
          >
            {visibleToken(t.text)}
          </span>
        );
      })}
    </span>
  );
});

/** The colour scale's key: its two ends and the middle. */
export function HeatLegend({ scale }: { scale: HeatScale }) {
  const stops =
    scale.mode === 'logprob' ? [scale.extent, scale.extent / 2, 0] : [-scale.extent, 0, scale.extent];
  return (
    <span className="heat-legend" aria-label="Colour scale">
      {stops.map((v, i) => (
        <span
          key={i}
          className="heat-stop"
          style={{ background: heatColor(v, scale), color: heatTextColor(v, scale) }}
        >
          {formatNumber(v)}
        </span>
      ))}
    </span>
  );
}
