/** Issue #36 on a 2-layer slice of the qwen3-1.7b shape: tests/helpers/f16-slice.ts. */
import { describeF16Slice } from './helpers/f16-slice';

await describeF16Slice('qwen3-1.7b');
