// Live: a waterfall or explorer on "now" follows requests as they are stored (server-sent
// events, no reload); panning pins the waterfall (the URL gets its window) and "back to live"
// returns. Each test has an instance of its own, sent to just now.
import { test, expect, Page, APIRequestContext } from "@playwright/test";
import { hydrated } from "./helpers";

/** One finished request on `instance`, arriving `agoMs` before now; returns its id. */
async function send(request: APIRequestContext, instance: string, id: string, agoMs = 300) {
  await sendMany(request, instance, [[id, agoMs]]);
  return id;
}

/** Finished requests on `instance`, each [id, arriving ms before now], in one batch. */
async function sendMany(request: APIRequestContext, instance: string, reqs: [string, number][]) {
  const body = {
    resource_traces: [{
      resource: { engine: "ENGINE_KIND_VLLM", engine_version: "0.11.0", model: "llama-3.1-8b", instance_id: instance, host: "e2e-host" },
      requests: reqs.map(([id, agoMs]) => request1(id, agoMs)),
    }],
  };
  const r = await request.post("/api/v1/traces", { data: body });
  expect(r.status()).toBe(200);
}

function request1(id: string, agoMs: number) {
  const t0 = BigInt(Date.now() - agoMs) * 1_000_000n;
  const emitted = [t0 + 80_000_000n, t0 + 105_000_000n, t0 + 131_000_000n];
  return {
    request_id: id,
    arrival_ns: t0.toString(),
    first_scheduled_ns: (t0 + 5_000_000n).toString(),
    finished_ns: emitted[2].toString(),
    finish_reason: "FINISH_REASON_STOP",
    prompt_tokens: 512,
    tokens: {
      token_id: [9906, 1917, 128009],
      emitted_ns: emitted.map(String),
      text: ["Hello", " world", "<|eot_id|>"],
      special: ["SPECIAL_TOKEN_NONE", "SPECIAL_TOKEN_NONE", "SPECIAL_TOKEN_EOS"],
    },
  };
}

test("a live waterfall shows new requests, pins when panned and returns to live", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const instance = `e2e-live-${Date.now()}`;
  await send(request, instance, "live-a", 5_000);
  await page.goto(`/waterfall?instance=${instance}`);
  await hydrated(page);
  const live = page.getByTestId("live");
  await expect(live).toHaveText("● live");
  await expect(live).toHaveAttribute("data-link", "open");
  await expect(page.locator('.wf-row-label[data-request="live-a"]')).toBeVisible();

  // Sent while the page is open: on screen without a reload, and the URL still says "now".
  await send(request, instance, "live-b");
  await expect(page.locator('.wf-row-label[data-request="live-b"]')).toBeVisible({ timeout: 5_000 });
  expect(new URL(page.url()).searchParams.get("from")).toBeNull();

  // Panning holds the view still: the URL gets the window, and news waits behind the control.
  await page.getByTestId("wf-canvas").focus();
  await page.keyboard.press("a");
  await expect(page).toHaveURL(/from=\d+&to=\d+/);
  await expect(live).toHaveText("▸ back to live");
  await page.waitForTimeout(300);
  await send(request, instance, "live-c");
  await expect(live).toHaveText("▸ back to live · new data");
  await expect(page.locator('.wf-row-label[data-request="live-c"]')).toHaveCount(0);
  await page.screenshot({ path: "test-results/live-waterfall-pinned.png" });

  await live.click();
  await expect(live).toHaveText("● live");
  await expect(page.locator('.wf-row-label[data-request="live-c"]')).toBeVisible({ timeout: 5_000 });
  await expect.poll(() => new URL(page.url()).searchParams.get("from")).toBeNull();
  await page.screenshot({ path: "test-results/live-waterfall.png" });
  expect(errors).toEqual([]);
});

test("the explorer on the latest requests lists new ones as they come", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const instance = `e2e-live-x-${Date.now()}`;
  await send(request, instance, "x-first", 5_000);
  await page.goto(`/?instance=${instance}`);
  await hydrated(page);
  const live = page.getByTestId("live");
  await expect(live).toHaveAttribute("data-link", "open");
  await expect(page.getByTestId("requests").locator('tr[data-request="x-first"]')).toBeVisible();
  await send(request, instance, "x-second");
  await expect(page.getByTestId("requests").locator('tr[data-request="x-second"]')).toBeVisible({ timeout: 5_000 });
  await page.screenshot({ path: "test-results/live-explorer.png" });

  // A fixed window is not live; the control clears it.
  await page.goto(`/?instance=${instance}&from=0&to=1000`);
  await hydrated(page);
  await expect(live).toHaveText("▸ back to live");
  await live.click();
  await expect(page).not.toHaveURL(/from=/);
  await expect(live).toHaveText("● live");
  expect(errors).toEqual([]);
});

test("a live view longer than the screen keeps its newest request in view", async ({ page, request }) => {
  const instance = `e2e-live-long-${Date.now()}`;
  // More requests than rows fit at 1280×800, a second apart.
  await sendMany(request, instance, Array.from({ length: 60 }, (_, k): [string, number] => [`long-${k}`, 70_000 - k * 1000]));
  await page.goto(`/waterfall?instance=${instance}`);
  await hydrated(page);
  await expect(page.getByTestId("live")).toHaveAttribute("data-link", "open");
  await expect(page.locator('.wf-row-label[data-request="long-59"]')).toBeVisible();
  await send(request, instance, "long-newest");
  const newest = page.locator('.wf-row-label[data-request="long-newest"]');
  await expect(newest).toBeVisible({ timeout: 5_000 });
  // On screen, not only in the page: inside the scrolled area's visible box.
  const box = (await newest.boundingBox())!;
  const area = (await page.getByTestId("wf-scroll").boundingBox())!;
  expect(box.y + box.height).toBeLessThanOrEqual(area.y + area.height + 1);
  await page.screenshot({ path: "test-results/live-waterfall-long.png" });
});
