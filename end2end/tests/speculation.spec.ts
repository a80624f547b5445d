// What the engine plugins capture, where it explains something. Speculative decoding on the
// request page: a request whose decode steps verified draft tokens; the word flow marks the
// accepted drafts, the section says how many were accepted over how many steps, and the token
// panel says of a token whether it was an accepted draft or the target model's own, with its
// step's counts. Who asked and what the prefix cache served, in the waterfall's hover; the
// lane's draft acceptance over the steps shown.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

const T0 = 1793577600000000000n; // 2026-11-02T00:00:00Z: a day of its own
const ms = (n: number) => (T0 + BigInt(n) * 1_000_000n).toString();
const INSTANCE = "spec-gpu-0";
const ID = "spec-req-1";

// Steps: 1 prefills the prompt and samples token 0; 2 verifies 3 drafts and keeps 2 (tokens 1–3);
// 3 keeps all 3 (tokens 4–7); 4 keeps none (token 8).
const steps: [number, number, number, number][] = [[1, 0, 0, 1], [2, 3, 2, 3], [3, 3, 3, 4], [4, 3, 0, 1]];
const words = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog"];

function traces() {
  const iteration_id: string[] = [];
  const emitted_ns: string[] = [];
  steps.forEach(([it, , , made]) => {
    for (let k = 0; k < made; k++) {
      iteration_id.push(String(it));
      emitted_ns.push(ms(it * 20));
    }
  });
  return {
    resource_traces: [{
      resource: { engine: "ENGINE_KIND_VLLM", model: "llama-8b", instance_id: INSTANCE },
      request_ids: [ID],
      iterations: steps.map(([it, draft, accepted]) => ({
        iteration_id: String(it), start_ns: ms(it * 20 - 18), end_ns: ms(it * 20), running: 1,
        batch: [it === 1
          ? { request_ref: 1, phase: "PHASE_PREFILL", tokens: 120 }
          : { request_ref: 1, phase: "PHASE_DECODE", tokens: 1 + draft, draft_tokens: draft, accepted_tokens: accepted }],
      })),
      requests: [{
        request_id: ID, arrival_ns: ms(0), first_scheduled_ns: ms(2), finished_ns: ms(80),
        finish_reason: "FINISH_REASON_STOP", prompt_tokens: 120, cached_tokens: 64,
        lora_adapter: "sql-adapter", priority: 2, tenant: "acme",
        prefill_chunks: [{ start_ns: ms(2), end_ns: ms(20), tokens: 120, iteration_id: "1" }],
        tokens: { token_id: words.map((_, i) => 500 + i), emitted_ns, iteration_id, text: words, logprob: words.map(() => -0.1) },
      }],
    }],
  };
}

test.beforeAll(async ({ request }) => {
  const stored = await request.post("/api/v1/traces", { data: JSON.stringify(traces()), headers: { "content-type": "application/json" } });
  expect(stored.status(), await stored.text()).toBe(200);
});

test("the request page shows which tokens were accepted drafts", async ({ page }) => {
  await page.goto(`/requests/${ID}?instance=${INSTANCE}`);
  await expect(page.getByTestId("spec-summary")).toHaveText(
    "Speculative decoding: 5 of 9 draft tokens accepted (56 %) over 3 steps, 2.7 tokens a step",
  );
  await expect(page.locator(".rq-timeline .legend")).toContainText("accepted draft");
  const flow = page.getByTestId("word-flow");
  // Tokens 1, 2 (step 2) and 4, 5, 6 (step 3) were drafts the target model accepted.
  await expect(flow.locator(".tk.draft")).toHaveCount(5);
  expect(await flow.locator(".tk.draft").evaluateAll((els) => els.map((e) => e.getAttribute("data-i")))).toEqual(["1", "2", "4", "5", "6"]);
  await hydrated(page);
  await flow.locator('[data-i="2"]').click();
  await expect(page.getByTestId("tp-draft")).toHaveText("An accepted draft token: its step verified 3 drafts for this request and kept 2.");
  await flow.locator('[data-i="3"]').click();
  await expect(page.getByTestId("tp-draft")).toHaveText("Sampled by the target model, after 2 of the step's 3 drafts were accepted.");
  await flow.locator('[data-i="8"]').click();
  await expect(page.getByTestId("tp-draft")).toHaveText("Sampled by the target model, after 0 of the step's 3 drafts were accepted.");
  await flow.locator('[data-i="0"]').click();
  await expect(page.getByTestId("tp-draft")).toHaveCount(0);
  await flow.locator('[data-i="5"]').click();
  await page.screenshot({ path: "test-results/speculation.png" });
});

test("the waterfall's hover says who asked and what the cache served", async ({ page }) => {
  await page.goto(`/waterfall?instance=${INSTANCE}&from=${ms(-5)}&to=${ms(85)}`);
  await page.waitForFunction(() => ((window as any).__tsFrameMs ?? []).length > 0, null, { timeout: 15_000 });
  const box = (await page.getByTestId("wf-canvas").boundingBox())!;
  // The request's row, the first under the step lane (56 px) and the axis (22 px).
  await page.mouse.move(box.x + box.width / 2, box.y + 56 + 22 + 9);
  const tip = page.getByTestId("wf-tip");
  await expect(tip).toContainText(ID);
  await expect(tip).toContainText("tenant acme · LoRA sql-adapter · priority 2 · 64 of 120 prompt tokens from the cache");
  await page.screenshot({ path: "test-results/waterfall-hover-who.png" });
});

// The lane says how speculation went in the steps shown: three decode steps verified 3 drafts
// each and kept 2, 3 and 0 (5 of 9, 56 %; (3 + 5) / 3 = 2.7 tokens a step); a step's hover has
// its own counts.
test("the waterfall's lane shows the steps' draft acceptance", async ({ page }) => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/waterfall?instance=${INSTANCE}&from=${ms(-5)}&to=${ms(85)}`);
  await page.waitForFunction(() => ((window as any).__tsFrameMs ?? []).length > 0, null, { timeout: 15_000 });
  await expect(page.getByTestId("lane-spec")).toHaveText("56 % of drafts accepted · 2.7 tok/step");
  const box = (await page.getByTestId("wf-canvas").boundingBox())!;
  // Step 3 runs from 42 to 60 ms of the window's 90: hover its middle, in the lane.
  await page.mouse.move(box.x + box.width * (51 + 5) / 90, box.y + 30);
  await expect(page.getByTestId("wf-tip")).toContainText("drafts: 3 of 3 accepted (100 %), 4.0 tok/step");
  await page.screenshot({ path: "test-results/waterfall-lane-spec.png" });
  // The demo's speculating instance: one request's drafts mostly rejected among accepted ones.
  await page.goto("/waterfall?instance=sim-spec");
  await page.waitForFunction(() => ((window as any).__tsFrameMs ?? []).length > 0, null, { timeout: 15_000 });
  await expect(page.getByTestId("lane-spec")).toContainText("% of drafts accepted");
  await page.screenshot({ path: "test-results/waterfall-sim-spec.png" });
});

// The demo's speculation scenarios: one request whose drafts the target model nearly always
// rejected while its neighbours' were mostly kept, and one that fell into a loop the draft model
// guessed; the findings say so, and the loop is marked in the answer.
test("a request whose drafts were rejected, and one whose answer loops, are named", async ({ page }) => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto("/requests/spec-victim?instance=sim-spec");
  await hydrated(page);
  const low = page.getByTestId("findings").locator('[data-cause="speculation_low_acceptance"]');
  await expect(low).toContainText(/Speculation cost more than it saved: \d+ of \d+ draft tokens accepted \(\d %\)/);
  await expect(low).toContainText(/other requests had \d+ % of theirs accepted/);
  await page.screenshot({ path: "test-results/speculation-low.png" });

  await page.goto("/requests/loop-victim?instance=sim-loop");
  await hydrated(page);
  const loop = page.getByTestId("findings").locator('[data-cause="speculation_high_acceptance"]');
  await expect(loop).toContainText("The answer repeats itself: a 7-token span");
  await expect(loop).toContainText("72 times from position 90 to 600");
  // The loop's 510 tokens are marked in the answer, the 90 before it are not.
  const flow = page.getByTestId("word-flow");
  await expect(flow.locator(".tk.loop")).toHaveCount(510);
  await expect(flow.locator('.tk[data-i="89"]')).not.toHaveClass(/loop/);
  await expect(flow.locator('.tk[data-i="90"]')).toHaveClass(/loop/);
  await flow.locator('.tk[data-i="90"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: "test-results/speculation-loop.png" });
  // The control, the same request answering normally, is healthy.
  await page.goto("/requests/loop-control?instance=sim-loop-control");
  await expect(page.getByTestId("findings").locator('[data-cause="speculation_high_acceptance"]')).toHaveCount(0);
  await expect(page.getByTestId("word-flow").locator(".tk.loop")).toHaveCount(0);
});
