// Playwright drives Debian's Chromium (/usr/bin/chromium); it never downloads a browser.
// scripts/test starts the server and sets TOKENSCOPE_E2E_URL.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "./tests",
  timeout: 30_000,
  // What the browser app shows comes after it starts: the debug build's 17 MB wasm takes about
  // 5 s to start on the 2-core machine, right at Playwright's default 5 s. Speed is measured by
  // the benchmarks (scripts/bench browser, release build), not here.
  expect: { timeout: 15_000 },
  retries: 0,
  workers: 1,
  reporter: [["list"]],
  use: {
    baseURL: process.env.TOKENSCOPE_E2E_URL ?? "http://127.0.0.1:3000",
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
      args: [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
      ],
    },
  },
});
