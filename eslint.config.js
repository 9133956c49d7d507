import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist',
      'node_modules',
      'public',
      '.tsbuild',
      'test-results',
      'playwright-report',
      '.gpu',
      '.gl',
      'gpu-out',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The layers of docs/architecture.md: core imports common and none of the others.
    files: ['src/core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            '**/ui/**',
            '**/worker/**',
            '**/cli/**',
            '**/services/**',
            '**/bench/**',
            'react',
            'node:*',
          ],
        },
      ],
    },
  },
  {
    // Services (autosave, hub) are shared by the worker and the CLI: they may import core, nothing above it.
    files: ['src/services/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: ['**/ui/**', '**/worker/**', '**/cli/**', '**/bench/**', 'react', 'node:*'] },
      ],
    },
  },
  {
    // The benchmarks run in Node (cli bench) and in Chromium (e2e/pages/bench.ts): core only, no Node modules.
    files: ['src/bench/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: ['**/ui/**', '**/worker/**', '**/cli/**', '**/services/**', 'react', 'node:*'] },
      ],
    },
  },
  {
    // Common (src/common/): the pure modules every layer may use (config, metric names, exports, errors): nothing
    // of the other layers, no tfjs, no Node.
    files: ['src/common/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            '**/core/**',
            '**/ui/**',
            '**/worker/**',
            '**/cli/**',
            '**/services/**',
            '**/bench/**',
            '@tensorflow/*',
            'react',
            'node:*',
          ],
        },
      ],
    },
  },
  {
    // The UI imports the common folder and, for types only, the worker's protocol; never tensor code
    // (tests/import-cycles.test.ts checks the whole import closure).
    files: ['src/ui/**/*.ts', 'src/ui/**/*.tsx'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['@tensorflow/*', '**/core/**', '**/services/**', '**/bench/**', '**/cli/**'] },
            { group: ['**/worker/**'], allowTypeImports: true },
          ],
        },
      ],
    },
  },
);
