/**
 * The one training config (docs/formats.md §5). Like TensorFlow Playground's `state.ts`, a single table,
 * `CONFIG_FIELDS`, drives the defaults, the one-line docs shown in the UI, the allowed ranges, the sliders'
 * scale, which keys may change on a running job, and the URL hash. Everything else reads from it.
 *
 * Split by concern: config/fields.ts (the table and the types), config/validate.ts (validateConfig and its
 * messages), config/derived.ts (what follows from a config), config/hash.ts (the URL hash). This module is
 * what the rest of the code imports.
 */
export * from './config/fields';
export { validateConfig, describeAllowed, closeKeys } from './config/validate';
export * from './config/derived';
export { configToHash, configFromHash } from './config/hash';
