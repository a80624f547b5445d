// Browser benchmark of the request page (not a test: it prints figures for docs/BENCHMARKS.md).
// Opens the page of a request with thousands of tokens in Debian's Chromium at 1280×800: time
// from the page's data arriving (the server-rendered HTML carries it) to the token timeline's
// first paint, then a brush dragged across the timeline, one pointer move per animation frame,
// with the main-thread time of each (input → effects drained → style and layout), the release
// (the word-choice view marks the range), and hovering over the bars with the range marked.
//
// usage: node request.mjs BASE_URL REQUEST_ID INSTANCE   (scripts/bench runs it)
import { chromium } from "playwright-core";

const [base, id, instance] = process.argv.slice(2);
const MOVES = 200;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
let htmlBytes = 0;
page.on("response", async (r) => {
  if (new URL(r.url()).pathname.startsWith("/requests/")) htmlBytes = (await r.body()).length;
});
await page.goto(`${base}/requests/${encodeURIComponent(id)}?instance=${encodeURIComponent(instance)}`);
await page.waitForFunction(() => (window.__tsTimelinePaintMs ?? []).length > 0, null, { timeout: 60_000 });
await page.waitForTimeout(300);
const load = await page.evaluate(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const fcp = performance.getEntriesByName("first-contentful-paint")[0];
  return {
    tokens: document.querySelectorAll('[data-testid="word-flow"] .tk').length,
    responseEnd: nav.responseEnd,
    fcp: fcp ? fcp.startTime : NaN,
    paint: window.__tsTimelinePaintMs[0],
  };
});

const result = await page.evaluate(async (moves) => {
  const canvas = document.querySelector('[data-testid="token-timeline"]');
  const r = canvas.getBoundingClientRect();
  const longTasks = [];
  new PerformanceObserver((l) => longTasks.push(...l.getEntries().map((e) => e.duration)))
    .observe({ type: "longtask", buffered: false });
  const settled = () => new Promise((res) => { const c = new MessageChannel(); c.port1.onmessage = res; c.port2.postMessage(0); });
  const nextFrame = () => new Promise((res) => requestAnimationFrame(res));
  window.__tsFrameMs = [];
  const y = r.top + 90;
  const x0 = r.left + 80;
  canvas.dispatchEvent(new MouseEvent("mousedown", { clientX: x0, clientY: y, button: 0, bubbles: true }));
  const perFrame = [];
  for (let i = 1; i <= moves; i++) {
    await nextFrame();
    // Out to the right edge and half way back: ranges grow and shrink.
    const k = i <= moves * 2 / 3 ? i / (moves * 2 / 3) : 1 - (i - moves * 2 / 3) / moves;
    const x = x0 + (r.width - 90) * k;
    const t = performance.now();
    canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: x, clientY: y, bubbles: true }));
    await settled();
    document.body.getBoundingClientRect(); // style and layout of the spans that changed class
    perFrame.push(performance.now() - t);
  }
  const t = performance.now();
  window.dispatchEvent(new MouseEvent("mouseup", { clientX: x0 + r.width / 3, clientY: y, button: 0, bubbles: true }));
  await settled();
  document.body.getBoundingClientRect();
  const release = performance.now() - t;
  const [a, b] = (document.querySelector('[data-testid="word-flow"]').getAttribute("data-range") || "0--1").split("-").map(Number);
  const selected = b - a + 1;
  const hover = [];
  for (let i = 0; i < 100; i++) {
    await nextFrame();
    const t = performance.now();
    canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: x0 + (r.width - 90) * (i / 100), clientY: y, bubbles: true }));
    await settled();
    document.body.getBoundingClientRect();
    hover.push(performance.now() - t);
  }
  return { perFrame, longTasks, drawMs: window.__tsFrameMs, release, selected, hover };
}, MOVES);

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)]; };
const f = (v) => v.toFixed(2);
console.log(`browser: request page of ${id} (${load.tokens.toLocaleString("en")} tokens), 1280×800, HTML ${htmlBytes.toLocaleString("en")} bytes`);
console.log(`  response end → timeline painted: ${f(load.paint - load.responseEnd)} ms (navigation → paint ${f(load.paint)} ms, first contentful paint ${f(load.fcp)} ms)`);
console.log(`  brushing, main thread per move (input → effects → style/layout): p50 ${f(pct(result.perFrame, 50))} ms, p95 ${f(pct(result.perFrame, 95))} ms, max ${f(Math.max(...result.perFrame))} ms over ${MOVES} moves`);
console.log(`  canvas draw alone: p50 ${f(pct(result.drawMs, 50))} ms, p95 ${f(pct(result.drawMs, 95))} ms; release (words marked, URL, scroll): ${f(result.release)} ms; ${result.selected.toLocaleString("en")} tokens left selected`);
console.log(`  hover over the bars afterwards (tooltip + paint): p50 ${f(pct(result.hover, 50))} ms, p95 ${f(pct(result.hover, 95))} ms over ${result.hover.length} moves`);
console.log(`  long tasks (> 50 ms) while brushing: ${result.longTasks.length}${result.longTasks.length ? ` (max ${f(Math.max(...result.longTasks))} ms)` : ""}`);
await browser.close();
