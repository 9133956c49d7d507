/** Where the e2e web servers listen (playwright.config.ts starts them; specs address the preview one). */
export const DEV_PORT = 5173;
export const PREVIEW_PORT = 4173;
