// Browser benchmark of the waterfall (not a test: it prints figures for docs/BENCHMARKS.md).
// Opens a window of about 10,000 requests in Debian's Chromium at 1280×800, then drives 200
// frames of zoom and pan (wheel and keys, one per animation frame, with a pause every 50 frames
// so new data arrives mid-run) and reports main-thread time per frame, long tasks, the time from
// a reply's arrival to its first paint, and the page's transfer sizes.
//
// usage: node waterfall.mjs BASE_URL INSTANCE FROM_NS TO_NS   (scripts/bench runs it)
import { chromium } from "playwright-core";

const [base, instance, from, to] = process.argv.slice(2);
const FRAMES = 200;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
const transfer = {};
page.on("response", async (r) => {
  const url = new URL(r.url());
  if (url.pathname.startsWith("/pkg/")) {
    const h = await r.allHeaders();
    transfer[url.pathname] = { encoding: h["content-encoding"] ?? "identity", bytes: (await r.body()).length };
  }
});
const t0 = Date.now();
await page.goto(`${base}/waterfall?instance=${encodeURIComponent(instance)}&from=${from}&to=${to}`);
await page.waitForFunction(() => (window.__tsFrameMs ?? []).length > 0, null, { timeout: 60_000 });
const firstScreenMs = Date.now() - t0;
await page.waitForTimeout(500);
const requests = await page.locator(".wf-controls .muted").first().innerText();

const result = await page.evaluate(async (frames) => {
  const canvas = document.querySelector('[data-testid="wf-canvas"]');
  const r = canvas.getBoundingClientRect();
  const longTasks = [];
  new PerformanceObserver((l) => longTasks.push(...l.getEntries().map((e) => e.duration)))
    .observe({ type: "longtask", buffered: false });
  // The end of a frame's work: every microtask (where the app's effects run) has drained.
  const settled = () => new Promise((res) => { const c = new MessageChannel(); c.port1.onmessage = res; c.port2.postMessage(0); });
  const nextFrame = () => new Promise((res) => requestAnimationFrame(res));
  const perFrame = [];
  for (let i = 0; i < frames; i++) {
    await nextFrame();
    const x = r.left + r.width * (0.2 + 0.6 * ((i * 37) % 100) / 100);
    const y = r.top + 120;
    const t = performance.now();
    if (i % 4 === 3) {
      window.dispatchEvent(new KeyboardEvent("keydown", { key: i % 8 === 3 ? "d" : "a", bubbles: true }));
    } else {
      // Zoom in for a while, then out again: a user homing in on a moment and back.
      const dy = (Math.floor(i / 25) % 2 === 0 ? -1 : 1) * 60;
      canvas.dispatchEvent(new WheelEvent("wheel", { deltaY: dy, clientX: x, clientY: y, bubbles: true, cancelable: true }));
    }
    await settled();
    perFrame.push(performance.now() - t);
    if (i % 50 === 49) await new Promise((res) => setTimeout(res, 400)); // data for the new view arrives
  }
  await new Promise((res) => setTimeout(res, 500));
  return { perFrame, longTasks, drawMs: window.__tsFrameMs, paintAfterData: window.__tsPaintAfterDataMs };
}, FRAMES);

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)]; };
const f = (v) => v.toFixed(2);
console.log(`browser: waterfall of ${instance}, ${requests} in the opening window, 1280×800, ${FRAMES} frames of wheel zoom / key pan`);
console.log(`  main thread per frame (input → effects drained): p50 ${f(pct(result.perFrame, 50))} ms, p95 ${f(pct(result.perFrame, 95))} ms, max ${f(Math.max(...result.perFrame))} ms`);
console.log(`  canvas draw alone: p50 ${f(pct(result.drawMs, 50))} ms, p95 ${f(pct(result.drawMs, 95))} ms over ${result.drawMs.length} paints`);
console.log(`  long tasks (> 50 ms) during the run: ${result.longTasks.length}${result.longTasks.length ? ` (max ${f(Math.max(...result.longTasks))} ms)` : ""}`);
console.log(`  reply arrival → first paint: first ${f(result.paintAfterData[0])} ms, max ${f(Math.max(...result.paintAfterData))} ms over ${result.paintAfterData.length} replies`);
console.log(`  navigation → first waterfall paint: ${firstScreenMs} ms`);
for (const [path, t] of Object.entries(transfer)) {
  console.log(`  ${path}: ${t.bytes.toLocaleString("en")} bytes, sent with content-encoding ${t.encoding}`);
}
await browser.close();
