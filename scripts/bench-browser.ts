/**
 * Run the browser bench page in Debian Chromium (WebGPU through SwiftShader here) against a running dev
 * server. Usage: npx vite --port 5199 & ; tsx scripts/bench-browser.ts [http://localhost:5199] [backend] [batch] [tokens]
 */
import { chromium } from '@playwright/test';

const [base = 'http://localhost:5199', backend = 'webgpu', batch = '8', tokens = '64'] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-vulkan=swiftshader',
    '--use-webgpu-adapter=swiftshader', '--use-angle=swiftshader', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage();
await page.goto(`${base}/e2e/pages/bench.html?backend=${backend}&batch=${batch}&tokens=${tokens}`);
await page.waitForFunction(() => window.benchResult || window.benchError, undefined, { timeout: 1_800_000 });
const out = await page.evaluate(() => window.benchResult ?? window.benchError);
console.log(JSON.stringify(out));
await browser.close();
