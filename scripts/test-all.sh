#!/usr/bin/env bash
# `npm test`: everything CI runs after lint. The typecheck (`tsc -b`) and the production build the end-to-end tier
# serves (`vite build`) run side by side, each mostly on one core; then the unit tier; then the end-to-end tier on
# that build (PPO_E2E_PREBUILT: playwright.config.ts serves dist/ without building it again). A failing stage stops
# the run, as `a && b && c` would.
set -uo pipefail
cd "$(dirname "$0")/.."

npx tsc -b &
tsc=$!
npx vite build --logLevel warn &
build=$!
wait "$tsc" || { echo "npm test: tsc -b failed" >&2; wait "$build"; exit 1; }
wait "$build" || { echo "npm test: vite build failed" >&2; exit 1; }

npm run test:unit || exit $?
PPO_E2E_PREBUILT=1 npm run test:e2e
