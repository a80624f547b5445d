// Live benchmark (not a test: it prints figures for docs/BENCHMARKS.md).
//  1. Ingest to pixel: a live waterfall open in Debian's Chromium at 1280×800 while the
//     OpenTelemetry Python SDK sends 100 vLLM-shaped requests, one every 0.5 s; for each, the
//     time from the start of its export to the first paint that has it on screen (the page's
//     window.__tsSeen, on the same machine's clock).
//  2. The server's cost per open live page: its CPU time (from /proc) over a quiet minute with
//     no page, then with 50 live pages open in one browser (tabs share one stream through the
//     shared worker), then with those 50 pages while one request a second arrives.
//
// usage: node live.mjs BASE_URL GRPC_ENDPOINT SERVER_PID PYTHON   (scripts/bench runs it)
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

const [base, grpc, serverPid, python] = process.argv.slice(2);
const INSTANCE = "bench-live";
const SENDS = 100;
const PAGES = 50;
const QUIET_S = 60;
const TICK_HZ = 100; // USER_HZ: /proc's clock ticks per second on Linux

/** Runs the SDK sender; resolves with its lines ({id, sent_ms}). */
function send(count, interval, prefix) {
  return new Promise((resolve, reject) => {
    const p = spawn(python, ["bench/live_send.py", grpc, INSTANCE, String(count), String(interval), prefix]);
    let out = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => process.stderr.write(d));
    p.on("close", (code) =>
      code === 0 ? resolve(out.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l))) : reject(new Error(`sender exited ${code}`)));
  });
}

/** The server's CPU seconds so far (user + system). */
function cpuSeconds() {
  const fields = readFileSync(`/proc/${serverPid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / TICK_HZ; // utime, stime (fields 14, 15)
}

async function cpuOver(seconds, during = Promise.resolve()) {
  const [c0, t0] = [cpuSeconds(), Date.now()];
  await Promise.all([new Promise((r) => setTimeout(r, seconds * 1000)), during]);
  const [c1, t1] = [cpuSeconds(), Date.now()];
  return (100 * (c1 - c0)) / ((t1 - t0) / 1000);
}

const quantile = (xs, q) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))];

async function livePage(context) {
  const page = await context.newPage();
  await page.goto(`${base}/waterfall?instance=${INSTANCE}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="live"]')?.dataset.link === "open", null, { timeout: 60_000 });
  return page;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });

// The instance exists before the page opens (a live view starts from its latest minutes).
await send(1, 0, "warm");
const page = await livePage(context);
const sends = await send(SENDS, 0.5, "live");
await page.waitForTimeout(3000);
const seen = await page.evaluate(() => window.__tsSeen ?? {});
const lat = sends.filter((s) => seen[s.id] !== undefined).map((s) => seen[s.id] - s.sent_ms).sort((a, b) => a - b);
const unseen = sends.filter((s) => seen[s.id] === undefined).map((s) => s.id);
const missing = unseen.length ? `${unseen.length} (${unseen.join(", ")})` : "0";
console.log(`live ingest → pixel over ${sends.length} OTel SDK sends: p50 ${quantile(lat, 0.5).toFixed(0)} ms, ` +
  `p95 ${quantile(lat, 0.95).toFixed(0)} ms, max ${lat[lat.length - 1].toFixed(0)} ms; never on screen: ${missing}`);
await page.close();

const none = await cpuOver(QUIET_S);
const pages = [];
for (let i = 0; i < PAGES; i++) pages.push(await livePage(context));
const metrics = await (await fetch(`${base}/metrics`)).text();
const streams = metrics.split("\n").find((l) => l.startsWith("tokenscope_live_pages "));
await new Promise((r) => setTimeout(r, 5000)); // the pages' first reads are over
const quiet = await cpuOver(QUIET_S);
const trickle = await cpuOver(30, send(30, 1.0, "trickle"));
console.log(`server CPU (% of one core): no page ${none.toFixed(2)}; ${PAGES} live tabs, quiet ${quiet.toFixed(2)}; ` +
  `${PAGES} live tabs, 1 request/s ${trickle.toFixed(1)}  (${streams ?? "tokenscope_live_pages ?"} stream(s))`);
await browser.close();
