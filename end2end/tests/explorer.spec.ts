// The explorer page loads in Chromium, hydrates, and shows what was ingested.
import { test, expect } from "@playwright/test";

const T0 = 1796022000000000000n; // 2026-11-30T07:00:00Z in ns

function trace(requestId: string) {
  const emitted = [T0 + 80_000_000n, T0 + 105_000_000n, T0 + 131_000_000n];
  return {
    resource_traces: [{
      resource: { engine: "ENGINE_KIND_VLLM", engine_version: "0.11.0", model: "llama-3.1-8b", instance_id: "e2e-gpu-0", host: "e2e-host" },
      requests: [{
        request_id: requestId,
        arrival_ns: T0.toString(),
        first_scheduled_ns: (T0 + 5_000_000n).toString(),
        finished_ns: emitted[2].toString(),
        finish_reason: "FINISH_REASON_STOP",
        prompt_tokens: 96000,
        tokens: {
          token_id: [9906, 1917, 128009],
          emitted_ns: emitted.map(String),
          text: ["Hello", " world", "<|eot_id|>"],
          special: ["SPECIAL_TOKEN_NONE", "SPECIAL_TOKEN_NONE", "SPECIAL_TOKEN_EOS"],
        },
      }],
    }],
  };
}

test("explorer shows ingested instances and requests after hydration", async ({ page, request }) => {
  const id = `e2e-${Date.now()}`;
  const ingest = await request.post("/api/v1/traces", { data: trace(id) });
  expect(ingest.status()).toBe(200);
  expect((await ingest.json()).acceptedRequests).toBe("1");

  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto("/");
  await expect(page).toHaveTitle("tokenscope");
  // The rows are fetched by the wasm app after hydration, so seeing them proves hydration worked.
  const instances = page.getByTestId("instances");
  await expect(instances).toContainText("e2e-gpu-0");
  await expect(instances).toContainText("vllm 0.11.0");
  const row = page.getByTestId("requests").locator("tr", { hasText: id });
  await expect(row).toContainText("80.0 ms"); // TTFT
  await expect(row).toContainText("25.5 ms"); // TPOT = (131 − 80) / 2
  await expect(row).toContainText("96,000"); // prompt tokens, thousands separated
  await page.screenshot({ path: "test-results/explorer.png", fullPage: true });
  expect(errors).toEqual([]);
});

test("unknown pages say so", async ({ page }) => {
  const resp = await page.goto("/no/such/page");
  expect(resp?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});
