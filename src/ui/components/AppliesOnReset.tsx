import type { ConfigKey } from '../../common/config';
import { useAppliesOnReset } from '../store/hooks';

/** The "applies on reset" tag of a non-live key edited during a run. */
export function AppliesOnReset({ name }: { name: ConfigKey }) {
  const waiting = useAppliesOnReset(name);
  return waiting ? <span className="tag tag-warn">applies on reset</span> : null;
}
