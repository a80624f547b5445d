// A customer's view: a reader whose token is bound to tenant acme (a second server on the demo
// data, scripts/test) sees acme's requests only, sees that another tenant's prompts stalled its
// request's decode (aliased, with their share; on the waterfall too), and not one byte of any reply the browser gets
// names a globex request or trace, or globex, or holds the words of a globex answer planted
// beside acme's requests. An unscoped reader sees both tenants, and those words.
import { test, expect, Page, request as pw } from "@playwright/test";
import { hydrated } from "./helpers";

const SCOPED = process.env.TOKENSCOPE_E2E_SCOPED_URL as string;
const ACME = "e2e-acme-token-0001";
const SRE = "e2e-sre-token-000001";

async function signIn(page: Page, token: string) {
  await page.goto(`${SCOPED}/login`);
  await page.locator('input[name="token"]').fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
}

/// Every id and trace id of globex's requests, from the unscoped server.
async function globex(): Promise<string[]> {
  const api = await pw.newContext();
  const body = await (await api.get(`${process.env.TOKENSCOPE_E2E_URL}/api/v1/requests?tenant=globex&from=0&to=4000000000000000000&limit=10000`)).json();
  const out: string[] = [];
  for (const r of body.requests) out.push(r.request_id);
  expect(out.length).toBeGreaterThan(10);
  return out;
}

/// Whether `body` holds `id` as a whole word (an instance sim-pid-control is not request pid-control).
function mentions(body: string, id: string): boolean {
  const esc = id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`(^|[^A-Za-z0-9_-])${esc}($|[^A-Za-z0-9_-])`).test(body);
}

/// Words only a globex answer holds: the simulator draws every tenant's words from one
/// vocabulary, so a search for globex's ordinary words would find acme's own answers.
const SECRET = "Zanzibar-globex-only";
let planted = { from: 0n, to: 0n };

// One more globex request on the instance acme's explorer and GPU time look at, answering in
// words nobody else uses; stored through the unscoped server.
test.beforeAll(async () => {
  const api = await pw.newContext();
  const base = process.env.TOKENSCOPE_E2E_URL;
  const newest = await (await api.get(`${base}/api/v1/requests?instance=sim-azure-conv&order=recent&limit=1`)).json();
  const at = BigInt(newest.requests[0].arrival_ns) + 1_000_000n;
  const ms = (n: number) => (at + BigInt(n) * 1_000_000n).toString();
  const words = [0, 1, 2, 3, 4, 5].map((i) => ` ${SECRET}${i}`);
  const body = {
    resource_traces: [{
      resource: { engine: "ENGINE_KIND_OTHER", engine_version: "tokenscope-sim", model: "sim/llama-8b (cl100k vocabulary)", instance_id: "sim-azure-conv" },
      requests: [{
        request_id: "globex-secret-answer", arrival_ns: ms(0), first_scheduled_ns: ms(1), finished_ns: ms(60),
        finish_reason: "FINISH_REASON_STOP", prompt_tokens: 40, tenant: "globex",
        // Ids unknown (0xFFFFFFFF): the words are texts only, never the vocabulary's.
        tokens: { token_id: words.map(() => 4294967295), emitted_ns: words.map((_, i) => ms(10 + 10 * i)), text: words, logprob: words.map(() => -0.2) },
      }],
    }],
  };
  const stored = await api.post(`${base}/api/v1/traces`, { data: JSON.stringify(body), headers: { "content-type": "application/json" } });
  expect(stored.status(), await stored.text()).toBe(200);
  planted = { from: at - 30_000_000_000n, to: at + 30_000_000_000n };
});

test("a reader bound to acme sees acme only, and the other tenant's culprits as aliases with their share", async ({ page }) => {
  expect(SCOPED, "TOKENSCOPE_E2E_SCOPED_URL: the scoped server (scripts/test starts it)").toBeTruthy();
  const theirs = await globex();
  const bodies: { url: string; body: string }[] = [];
  page.on("response", async (r) => {
    try {
      bodies.push({ url: r.url(), body: await r.text() });
    } catch {}
  });
  await page.setViewportSize({ width: 1280, height: 800 });
  await signIn(page, ACME);

  // The explorer: acme's requests only; the top bar says whose, and offers no upload.
  await page.goto(`${SCOPED}/?instance=sim-azure-conv`);
  await expect(page.getByTestId("tenant-cell").first()).toBeVisible();
  await expect(page.getByTestId("reader-scope")).toHaveText("tenant: acme");
  await expect(page.locator('nav a[href="/upload"]')).toHaveCount(0);
  for (const t of await page.getByTestId("tenant-cell").allInnerTexts()) expect(t.startsWith("acme")).toBe(true);

  // Its stalled request: the diagnosis names globex's prompts as another tenant's, with shares.
  await page.goto(`${SCOPED}/requests/pid-victim?instance=sim-pid`);
  await hydrated(page);
  const finding = page.locator('li.finding[data-cause="prefill_interrupted_decode"]');
  await expect(finding).toContainText(/another tenant's request [0-9a-f]{6} [0-9.]+ s \(\d+ %\)/);
  await expect(finding.locator(".culprit.alias").first()).toBeVisible();
  await expect(finding.locator("a.culprit").first()).toContainText("pid-prefill-02"); // acme's own prompt, by id
  await page.screenshot({ path: "test-results/scoped-request.png" });

  // GPU time: acme's only.
  await page.goto(`${SCOPED}/usage?instance=sim-azure-conv`);
  await expect(page.getByTestId("usage-row").first()).toBeVisible();
  for (const t of await page.getByTestId("usage-row").allInnerTexts()) expect(t.startsWith("acme")).toBe(true);

  // The waterfall: its request among the others, which are there (they held the engine) under
  // their aliases.
  await page.goto(`${SCOPED}/?instance=sim-pid`);
  await hydrated(page);
  await page.getByTestId("requests").locator('tbody tr[data-request="pid-victim"]').getByTestId("waterfall-link").click();
  await expect(page).toHaveURL(/\/waterfall\?instance=sim-pid.*focus=pid-victim/);
  await page.waitForFunction(() => ((window as any).__tsFrameMs ?? []).length > 0, null, { timeout: 15_000 });
  await expect(page.locator(".wf-row-label", { hasText: "another tenant's request" }).first()).toBeVisible();
  await page.screenshot({ path: "test-results/scoped-waterfall.png" });

  // The waterfall where globex's planted answer ran: its track is there, aliased, its words not.
  await page.goto(`${SCOPED}/waterfall?instance=sim-azure-conv&from=${planted.from}&to=${planted.to}`);
  await hydrated(page);
  await page.waitForFunction(() => ((window as any).__tsFrameMs ?? []).length > 0, null, { timeout: 15_000 });
  await page.goto(`${SCOPED}/api/v1/waterfall?instance=sim-azure-conv&from=${planted.from}&to=${planted.to}&width_px=1000`);

  // The other tenant's request does not exist for this reader; uploading is closed to it.
  const other = await page.goto(`${SCOPED}/api/v1/requests/pid-prefill-00?instance=sim-pid`);
  expect(other?.status()).toBe(404);
  const upload = await page.goto(`${SCOPED}/upload`);
  expect(upload?.status()).toBe(403);

  // Not a byte of what the browser received names globex's requests or globex.
  expect(bodies.length).toBeGreaterThan(5);
  for (const { url, body } of bodies) {
    if (url.includes("pid-prefill-00")) continue; // the 404 repeats the id it was asked for
    expect(body.includes("globex"), `${url} names globex`).toBe(false);
    expect(body.includes(SECRET), `${url} holds globex's words`).toBe(false);
    for (const id of theirs) expect(mentions(body, id), `${url} shows ${id}`).toBe(false);
  }
});

test("an unscoped reader on the same server sees both tenants and the culprits by id", async ({ page }) => {
  await signIn(page, SRE);
  await page.goto(`${SCOPED}/requests/pid-victim?instance=sim-pid`);
  const finding = page.locator('li.finding[data-cause="prefill_interrupted_decode"]');
  await expect(finding).toContainText("pid-prefill-00");
  await expect(finding.locator(".culprit.alias")).toHaveCount(0);
  await page.goto(`${SCOPED}/?instance=sim-azure-conv&tenant=globex`);
  await expect(page.getByTestId("tenant-cell").first()).toContainText("globex");
  await expect(page.locator('nav a[href="/upload"]')).toBeVisible();
  await expect(page.getByTestId("reader-scope")).toHaveCount(0);
  // The planted answer is stored, words and all: the scoped reader's search above could fail.
  const csv = await page.request.get(`${SCOPED}/api/v1/requests/globex-secret-answer/tokens.csv?instance=sim-azure-conv`);
  expect(await csv.text()).toContain(`${SECRET}3`);
});
