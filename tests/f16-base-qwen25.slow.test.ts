/** Issue #36 on a 2-layer slice of the qwen2.5-1.5b shape: tests/helpers/f16-slice.ts. */
import { describeF16Slice } from './helpers/f16-slice';

await describeF16Slice('qwen2.5-1.5b');
