/**
 * The flags that launch Debian's Chromium with WebGPU through SwiftShader, a software Vulkan (without them tfjs
 * silently falls back to WebGL): the browser benchmark (bench-browser.ts) and the end-to-end tests
 * (e2e/chromium.ts) both start from these.
 */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan=swiftshader',
  '--use-webgpu-adapter=swiftshader',
  '--use-angle=swiftshader',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
