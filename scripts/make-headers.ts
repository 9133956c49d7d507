/**
 * Writes public/_headers (the cross-origin isolation and Content-Security-Policy headers for static hosts) from
 * vite.config.ts:
 * `npx tsx scripts/make-headers.ts`. tests/csp-headers.test.ts fails when the file is out of date.
 */
import { writeFileSync } from 'node:fs';
import { staticHostHeaders } from '../vite.config';

writeFileSync('public/_headers', staticHostHeaders());
console.log('wrote public/_headers');
