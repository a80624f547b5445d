// The request page: the seed cases tell their story without JSON (a decode interrupted by
// prefills, an EOS sampled at about 10 %), token text is never markup, an upload lands on its
// word choice, and the timeline brushes tokens into the word-choice view.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

async function painted(page: Page) {
  await page.waitForFunction(() => ((window as any).__tsTimelinePaintMs ?? []).length > 0, null, { timeout: 15_000 });
}

/** An OpenAI chat completion with logprobs: one entry per [token, logprob, alternatives]. */
function chatResponse(id: string, tokens: [string, number, [string, number][]][]) {
  return {
    id, object: "chat.completion", created: 1796000000, model: "test-model",
    choices: [{
      index: 0, finish_reason: "stop",
      message: { role: "assistant", content: tokens.map((t) => t[0]).join("") },
      logprobs: { content: tokens.map(([token, logprob, top]) => ({
        token, logprob, top_logprobs: top.map(([t, l]) => ({ token: t, logprob: l })),
      })) },
    }],
    usage: { prompt_tokens: 12, completion_tokens: tokens.length },
  };
}

test("low-probability-eos: the EOS is flagged, selected, with its rank and probability", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto("/requests/eos-victim?instance=sim-eos");
  await hydrated(page);
  await expect(page.getByTestId("findings").locator('[data-cause="low_probability_eos"]')).toBeVisible();
  // The words come first and the flagged EOS is already selected.
  const eos = page.getByTestId("word-flow").locator(".tk.special.flag");
  await expect(eos).toHaveText(/⟨EOS⟩/);
  await expect(eos).toHaveClass(/\bsel\b/);
  // Fast, oddly worded: two verdicts, not one.
  await expect(page.getByTestId("verdict-speed")).toHaveText("speed: met SLOs");
  await expect(page.getByTestId("verdict-words")).toHaveText("words: odd");
  const panel = page.getByTestId("token-panel");
  await expect(panel).toContainText("⟨EOS⟩");
  await expect(panel.getByTestId("tp-rank")).toHaveText("2");
  await expect(panel.getByTestId("tp-probability")).toHaveText(/^0\.(09|10)\d$/);
  await expect(panel.getByTestId("candidates").locator("tr.chosen")).toContainText("⟨EOS⟩");
  await expect(page.getByTestId("flagged")).toContainText("unlikely end of answer");
  await expect(page).toHaveURL(/tok=\d+/);
  // N steps through the flags (one here: it stays), → moves off it, P comes back.
  await page.keyboard.press("ArrowLeft");
  await expect(panel.getByTestId("tp-rank")).not.toHaveText("2");
  await page.keyboard.press("n");
  await expect(panel.getByTestId("tp-rank")).toHaveText("2");
  await page.screenshot({ path: "test-results/request-low-probability-eos.png", fullPage: true });
  expect(errors).toEqual([]);
});

test("token text is shown as text: markup in a token never runs", async ({ page, request }) => {
  const id = `chatcmpl-xss-${Date.now()}`;
  const evil = "<img src=x onerror=alert(1)>";
  const body = chatResponse(id, [
    ["Sure", -0.01, [["Sure", -0.01], ["<script>alert(2)</script>", -5.0]]],
    [evil, -2.5, [[" fine", -0.2], [evil, -2.5]]],
    ["\u202e\u200b", -0.3, [["\u202e\u200b", -0.3]]],
  ]);
  const reply = await request.post("/api/v1/import?format=openai", { data: JSON.stringify(body) });
  expect(reply.status()).toBe(200);
  let dialogs = 0;
  page.on("dialog", (d) => { dialogs += 1; d.dismiss(); });
  await page.goto(`/requests/${id}?instance=openai-import&tok=1`);
  await hydrated(page);
  const flow = page.getByTestId("word-flow");
  await expect(flow).toContainText(evil);
  await expect(flow.locator("img")).toHaveCount(0);
  // Invisible characters are shown as escapes.
  await expect(flow.locator(".odd")).toHaveText(["U+202E", "U+200B"]);
  const panel = page.getByTestId("token-panel");
  await expect(panel).toContainText("<img␣src=x␣onerror=alert(1)>");
  await page.locator('[data-i="0"]').click();
  await expect(panel.getByTestId("candidates")).toContainText("<script>alert(2)</script>");
  await expect(page.locator("script:not([src])", { hasText: "alert(2)" })).toHaveCount(0);
  await page.screenshot({ path: "test-results/request-markup-as-text.png", fullPage: true });
  expect(dialogs).toBe(0);
});

test("a token sampled outside the returned top-k ranks \"> k\" and is flagged by its probability", async ({ page, request }) => {
  const id = `chatcmpl-beyond-${Date.now()}`;
  const body = chatResponse(id, [
    ["The", -0.05, [["The", -0.05], ["A", -3.2], ["This", -4.0]]],
    [" zebra", -4.6, [[" cat", -0.3], [" dog", -1.6], [" bird", -2.9]]],
    [" ran", -0.1, [[" ran", -0.1], [" sat", -2.5], [" slept", -3.0]]],
  ]);
  const reply = await request.post("/api/v1/import?format=openai", { data: JSON.stringify(body) });
  expect(reply.status()).toBe(200);
  await page.goto(`/requests/${id}?instance=openai-import`);
  await hydrated(page);
  await expect(page.getByTestId("flagged")).toContainText("rank > 3");
  await page.getByTestId("word-flow").locator('[data-i="1"]').click();
  await expect(page.getByTestId("token-panel").getByTestId("tp-rank")).toHaveText("> 3");
  // One unlikely word in a sampled answer is noted, not a verdict.
  await expect(page.getByTestId("findings").locator('[data-cause="low_probability_token"]')).toBeVisible();
  await expect(page.getByTestId("verdict-words")).toHaveText("words: as expected");
  await page.screenshot({ path: "test-results/request-rank-beyond-top-k.png" });
});

test("an uploaded OpenAI response lands on its word choice; a bad one says what is wrong", async ({ page }) => {
  const id = `chatcmpl-upload-${Date.now()}`;
  await page.goto("/upload");
  await hydrated(page);
  await page.getByTestId("upload-text").fill('{"hello": 1}');
  await page.getByTestId("upload-submit").click();
  await expect(page.getByTestId("upload-error")).toContainText("not a format tokenscope reads");
  const body = chatResponse(id, [
    ["The", -0.05, [["The", -0.05], ["A", -3.1]]],
    [" answer", -1.2, [[" reply", -0.6], [" answer", -1.2]]],
    ["<|eot_id|>", -1.9, [[" is", -0.2], ["<|eot_id|>", -1.9]]],
  ]);
  await page.getByTestId("upload-text").fill(JSON.stringify(body, null, 2));
  await page.getByTestId("upload-submit").click();
  await expect(page).toHaveURL(new RegExp(`/requests/${id}\\?instance=openai-import`));
  await hydrated(page);
  await expect(page.getByTestId("request-id")).toHaveText(id);
  await expect(page.getByTestId("no-timeline")).toBeVisible();
  await expect(page.getByTestId("word-flow").locator(".tk")).toHaveCount(3);
  await expect(page.getByTestId("word-flow").locator(".tk.special")).toHaveText("⟨EOS⟩");
  await expect(page.getByTestId("token-panel").getByTestId("tp-rank")).toHaveText("2");
  await page.screenshot({ path: "test-results/upload-landed.png", fullPage: true });
});

test("prefill-interrupts-decode: the stalled token names its culprits; brushing selects words", async ({ page }) => {
  await page.goto("/requests/pid-victim?instance=sim-pid");
  await hydrated(page);
  await painted(page);
  await expect(page.getByTestId("findings").locator('[data-cause="prefill_interrupted_decode"]')).toBeVisible();
  await expect(page.getByTestId("verdict-speed")).toHaveText("speed: slow");
  await expect(page.getByTestId("verdict-words")).toHaveText("words: as expected");
  const stalled = page.getByTestId("stalled-tokens").locator("li");
  await expect(stalled.first()).toContainText("pid-prefill-00");
  const token = await stalled.first().getAttribute("data-token");
  await stalled.first().getByRole("button").click();
  await expect(page).toHaveURL(new RegExp(`tok=${token}`));
  await expect(page.getByTestId("prefilled-meanwhile")).toContainText("6 other requests");
  await expect(page.locator(`[data-i="${token}"]`)).toHaveClass(/\bslow\b/);
  // Brush the first half of the bars.
  const box = (await page.getByTestId("token-timeline").boundingBox())!;
  const y = box.y + 100;
  await page.mouse.move(box.x + 80, y);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width / 2, y, { steps: 8 });
  await page.mouse.up();
  await expect(page.getByTestId("range-readout")).toContainText(/tokens \d+–\d+ selected/);
  await expect(page).toHaveURL(/range=\d+-\d+/);
  const [a, b] = (await page.getByTestId("word-flow").getAttribute("data-range"))!.split("-").map(Number);
  expect(b - a + 1).toBeGreaterThan(20);
  expect(b - a + 1).toBeLessThan(80);
  expect(await highlighted(page)).toBe(b - a + 1);
  await page.screenshot({ path: "test-results/request-prefill-interrupts-decode.png", fullPage: true });
  await page.keyboard.press("Escape");
  await expect(page.getByTestId("word-flow")).toHaveAttribute("data-range", "");
  expect(await highlighted(page)).toBe(0);
});

/** Word-choice spans marked as in the brushed range. */
async function highlighted(page: Page): Promise<number> {
  return page.getByTestId("word-flow").locator(".tk.in-range").count();
}

test("a request that does not exist says so; a PD request opens joined; an id reused on two instances offers both", async ({ page, request }) => {
  await page.goto("/requests/no-such-request");
  await expect(page.getByTestId("request-error")).toContainText("no-such-request");
  // A PD request has a part on its prefill instance and one on its decode instance: one page.
  await page.goto("/requests/pd-slow");
  await hydrated(page);
  const parts = page.getByTestId("pd-parts");
  await expect(parts).toContainText("prefilled on sim-pd-prefill");
  await expect(parts).toContainText(/KV transfer 2\.5\d* s/);
  await expect(parts).toContainText("decoded on sim-pd-decode");
  await expect(page.getByTestId("findings").locator('[data-cause="kv_transfer_slow"]')).toBeVisible();
  await page.screenshot({ path: "test-results/request-pd-joined.png", fullPage: true });
  await parts.getByRole("link", { name: "sim-pd-decode" }).click();
  await expect(page).toHaveURL(/\/requests\/pd-slow\?instance=sim-pd-decode/);
  await expect(page.getByTestId("request-id")).toHaveText("pd-slow");
  await expect(page.getByTestId("pd-parts")).toHaveCount(0);
  // The same id on two ordinary instances is two requests: the page asks which.
  const id = `chatcmpl-twice-${Date.now()}`;
  for (const instance of ["replica-a", "replica-b"]) {
    const body = chatResponse(id, [["Hi", -0.1, [["Hi", -0.1]]]]);
    const reply = await request.post(`/api/v1/import?format=openai&instance=${instance}`, { data: JSON.stringify(body) });
    expect(reply.status()).toBe(200);
  }
  await page.goto(`/requests/${id}`);
  await expect(page.getByTestId("request-several")).toBeVisible();
  const choices = page.locator("main li a");
  await expect(choices).toHaveCount(2);
  await choices.filter({ hasText: "replica-b" }).click();
  await expect(page).toHaveURL(new RegExp(`/requests/${id}\\?instance=replica-b`));
  await expect(page.getByTestId("request-id")).toHaveText(id);
});

test("long-prompt-monopolizes: the short request's first token waited on the long prompt", async ({ page }) => {
  await page.goto("/requests/lpm-short?instance=sim-lpm");
  await hydrated(page);
  await expect(page.getByTestId("findings").locator('[data-cause="prefill_monopolized"]')).toContainText("lpm-long");
  await expect(page.getByTestId("kpi-ttft")).toHaveClass(/\bover\b/);
  const first = page.getByTestId("stalled-tokens").locator('li[data-token="0"]');
  await expect(first).toContainText("lpm-long");
  await page.screenshot({ path: "test-results/request-long-prompt-monopolizes.png", fullPage: true });
});

test("stored findings: the explorer names each request's cause and a culprit's page lists whom it held up", async ({ page }) => {
  // The server stores findings a few seconds after the data settled: wait for the demo's.
  await expect(async () => {
    await page.goto("/?cause=prefill_interrupted_decode");
    await hydrated(page);
    await expect(page.locator('tr[data-request="pid-victim"] [data-testid="cause"]')).toHaveText("prefill interrupted decode", { timeout: 1_000 });
  }).toPass({ timeout: 90_000 });
  // Every row the filter leaves has the cause.
  const causes = await page.getByTestId("cause").allTextContents();
  expect(causes.length).toBeGreaterThan(0);
  expect(causes.every((c) => c === "prefill interrupted decode")).toBe(true);

  await page.goto("/requests/pid-prefill-02?instance=sim-pid");
  await hydrated(page);
  const held = page.getByTestId("held-up");
  await expect(held).toContainText("Held up");
  await expect(held.getByRole("link", { name: "pid-victim" })).toHaveAttribute("href", /\/requests\/pid-victim/);
  await expect(page.getByTestId("request-id")).toHaveText("pid-prefill-02");
});

test("who asked, the prefix cache and a preemption's aggressor: shown, linked, and text stays text", async ({ page, request }) => {
  const id = `signals-${Date.now()}`;
  const t0 = BigInt(Date.now() - 10_000) * 1_000_000n;
  const at = (ms: number) => (t0 + BigInt(ms) * 1_000_000n).toString();
  const aggressor = "big-prompt</a><script>alert(3)</script>";
  const body = { resource_traces: [{
    resource: { engine: "ENGINE_KIND_VLLM", model: "llama-3.1-8b", instance_id: "gpu-signals", role: "ROLE_COLOCATED" },
    requests: [{
      request_id: id, arrival_ns: at(0), first_scheduled_ns: at(20), first_token_ns: at(300), finished_ns: at(2000),
      finish_reason: "FINISH_REASON_STOP", prompt_tokens: 1360, cached_tokens: 1024, output_tokens: 120,
      lora_adapter: "sql</title><script>alert(1)</script>", priority: 2, tenant: "acme</p><b>x",
      prefix_cache: { gpu_tokens: 768, cpu_tokens: 256, block_size: 16, block_hashes: ["18446744073709551615", "1"], blocks: 85 },
      preemptions: [{ at_ns: at(900), resumed_ns: at(1400), recompute: true, aggressor_request_id: aggressor, recompute_tokens: 1500 }],
    }],
  }] };
  const reply = await request.post("/api/v1/traces", { data: JSON.stringify(body), headers: { "content-type": "application/json" } });
  expect(reply.status()).toBe(200);
  let dialogs = 0;
  page.on("dialog", (d) => { dialogs += 1; d.dismiss(); });
  await page.goto(`/requests/${id}?instance=gpu-signals`);
  await hydrated(page);
  const who = page.getByTestId("who");
  await expect(who).toContainText("LoRA sql</title><script>alert(1)</script> · tenant acme</p><b>x · priority 2");
  await expect(who).toContainText("prefix cache: 1,024 of 1,360 prompt tokens (GPU 768, CPU 256)");
  // The prompt as blocks: 768 from the GPU cache, 256 from the CPU's, the rest computed.
  const strip = page.getByTestId("prompt-strip");
  await expect(strip).toContainText("Prompt: 1,360 tokens in 85 blocks of 16");
  await expect(strip).toContainText("GPU cache 768");
  await expect(strip).toContainText("CPU cache 256");
  await expect(strip).toContainText(/computed 336 in 280(\.0)? ms/);
  await expect(strip.locator(".seg")).toHaveCount(3);
  const widths = await strip.locator(".seg").evaluateAll((els) => els.map((e) => e.getBoundingClientRect().width));
  expect(widths[0] / widths[2]).toBeCloseTo(768 / 336, 1);
  await strip.screenshot({ path: "test-results/prompt-strip.png" });
  // A u64 past a JSON number's precision keeps every digit.
  await expect(who).toContainText("prompt fingerprint ffffffffffffffff… (85 blocks of 16)");
  // The preemption names whom the scheduler made room for, in the finding and under the stages.
  await expect(page.getByTestId("findings").locator('[data-cause="kv_preempted"]')).toContainText("computing 1,500 tokens again: the scheduler made room for");
  const by = page.getByTestId("preempted-by");
  await expect(by).toContainText(`Preempted to make room for ${aggressor} (1,500 tokens to compute again)`);
  await expect(by.locator("a")).toHaveAttribute("href", /\/requests\/big-prompt/);
  // (The page's hydration data holds the strings too, escaped inside JSON: no element is one.)
  await expect(page.locator("script", { hasText: /^alert\([13]\)$/ })).toHaveCount(0);
  await expect(page.locator("b", { hasText: /^x$/ })).toHaveCount(0);
  await expect(page).toHaveTitle(/^[^<]*$/);
  expect(dialogs).toBe(0);
});
