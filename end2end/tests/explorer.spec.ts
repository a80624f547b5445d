// The explorer: server-rendered with its data, hydrated; filters, sorting, paging and find are
// links or navigations, so every state is a URL. The demo data is loaded by scripts/test.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

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

function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  return errors;
}

test("an ingested request shows with its numbers, in a window given by the URL", async ({ page, request }) => {
  const id = `e2e-${Date.now()}`;
  const ingest = await request.post("/api/v1/traces", { data: trace(id) });
  expect(ingest.status()).toBe(200);
  expect((await ingest.json()).acceptedRequests).toBe("1");
  const errors = watchErrors(page);
  const from = (T0 - 1_000_000_000n).toString();
  const to = (T0 + 1_000_000_000n).toString();
  await page.goto(`/?instance=e2e-gpu-0&from=${from}&to=${to}`);
  await expect(page).toHaveTitle("tokenscope");
  const row = page.getByTestId("requests").locator("tr", { hasText: id });
  await expect(row).toContainText("80.0 ms"); // TTFT
  await expect(row).toContainText("25.5 ms"); // TPOT = (131 − 80) / 2
  await expect(row).toContainText("96,000"); // prompt tokens, thousands separated
  await expect(page.getByTestId("instance-chips").getByText("e2e-gpu-0")).toHaveClass(/on/);
  await hydrated(page);
  expect(errors).toEqual([]);
});

test("the first screen is rendered on the server with its data", async ({ request }) => {
  const html = await (await request.get("/")).text();
  expect(html).toContain('data-testid="requests"');
  expect(html).toContain("pid-prefill-00"); // a demo request, slowest TPOT first
  expect(html).toContain("Latency over time");
});

test("the explorer lists the demo data; sorting, SLO filter, paging and find work", async ({ page }) => {
  const errors = watchErrors(page);
  await page.goto("/");
  await hydrated(page);
  const rows = page.getByTestId("requests").locator("tbody tr");
  await expect(rows).toHaveCount(100);
  await expect(page.getByTestId("pager")).toContainText(/1–100 of [\d,]+ requests/);
  const tpots = async () => // the 6th column: request, instance, tenant, arrival, TTFT, TPOT
    (await page.getByTestId("requests").locator("tbody tr td:nth-child(6)").allInnerTexts()).slice(0, 20);
  const msOf = (t: string) => (t.endsWith(" s") ? parseFloat(t) * 1000 : t.endsWith("µs") ? parseFloat(t) / 1000 : parseFloat(t));
  const desc = (await tpots()).map(msOf);
  expect(desc).toEqual([...desc].sort((a, b) => b - a)); // slowest first by default

  await page.locator('th a[data-sort="tpot"]').click();
  await expect(page).toHaveURL(/order=tpot_asc/);
  await expect.poll(async () => { const v = (await tpots()).map(msOf); return v[0] <= v[v.length - 1]; }).toBe(true);

  await page.getByTestId("slo-filter").selectOption("breach");
  await expect(page).toHaveURL(/slo=breach/);
  await expect(page.getByTestId("requests").locator("tbody tr").first().locator(".verdict")).toHaveClass(/bad/);

  await page.goto("/?order=arrival_asc");
  await page.getByTestId("pager").getByText("next ›").click();
  await expect(page).toHaveURL(/page=1/);
  await expect(page.getByTestId("pager")).toContainText("101–");

  await hydrated(page);
  await page.getByTestId("find").fill("pid-victim");
  await page.getByTestId("find").press("Enter");
  await expect(page).toHaveURL(/\/waterfall\?instance=sim-pid.*focus=pid-victim/);
  await page.screenshot({ path: "test-results/explorer-find-landed.png" });
  expect(errors).toEqual([]);
});

test("dragging across the latency chart narrows the range", async ({ page }) => {
  await page.goto("/");
  await hydrated(page);
  await page.screenshot({ path: "test-results/explorer.png" });
  const chart = page.getByTestId("latency-charts").locator("svg").first();
  const box = (await chart.boundingBox())!;
  await page.mouse.move(box.x + box.width * 0.4, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.7, box.y + box.height * 0.5, { steps: 5 });
  await page.mouse.up();
  await expect(page).toHaveURL(/from=\d+&to=\d+/);
  const url = new URL(page.url());
  expect(BigInt(url.searchParams.get("to")!) > BigInt(url.searchParams.get("from")!)).toBe(true);
});

test("unknown pages say so", async ({ page }) => {
  const resp = await page.goto("/no/such/page");
  expect(resp?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});

test("at fleet size the instance picker is a search box: a typed name adds its chip", async ({ page, request }) => {
  // Seventeen instances more than whatever the demo has: past the chips' limit of 16.
  const t = T0 + 3_600_000_000_000n;
  const names = Array.from({ length: 17 }, (_, k) => `pick-${String(k).padStart(2, "0")}`);
  const body = {
    resource_traces: names.map((name) => ({
      resource: { engine: "ENGINE_KIND_VLLM", engine_version: "0.11.0", model: "llama-3.1-8b", instance_id: name, host: "e2e-host" },
      requests: [{
        request_id: `${name}-req`,
        arrival_ns: t.toString(),
        first_scheduled_ns: (t + 1_000_000n).toString(),
        finished_ns: (t + 50_000_000n).toString(),
        finish_reason: "FINISH_REASON_STOP",
        prompt_tokens: 10,
        tokens: { token_id: [9906], emitted_ns: [(t + 50_000_000n).toString()], text: ["Hi"], special: ["SPECIAL_TOKEN_NONE"] },
      }],
    })),
  };
  expect((await request.post("/api/v1/traces", { data: body })).status()).toBe(200);
  const errors = watchErrors(page);
  await page.goto(`/?from=${t - 1_000_000_000n}&to=${t + 1_000_000_000n}`);
  await hydrated(page);
  const chips = page.getByTestId("instance-chips");
  await expect(chips.locator("a.chip")).toHaveCount(0); // none chosen, none shown
  await expect(page.getByTestId("all-instances")).not.toHaveAttribute("open", "");
  const box = page.getByTestId("instance-search");
  await expect(box).toHaveAttribute("placeholder", /add one of \d+/);
  await box.fill("pick-07");
  await box.press("Tab");
  await expect(page).toHaveURL(/instance=pick-07/);
  await expect(chips.locator("a.chip.on")).toHaveText(["pick-07"]);
  await expect(page.getByTestId("requests").locator("tbody tr")).toHaveCount(1);
  await expect(page.getByTestId("requests")).toContainText("pick-07-req");
  // A name that is no instance changes nothing.
  await page.getByTestId("instance-search").fill("pick-99");
  await page.getByTestId("instance-search").press("Tab");
  await expect(page.getByTestId("instance-search")).toHaveAttribute("aria-invalid", "true");
  await expect(chips.locator("a.chip.on")).toHaveText(["pick-07"]);
  await page.screenshot({ path: "test-results/explorer-instance-picker.png" });
  // Every instance is one click away, folded.
  await page.getByTestId("all-instances").locator("summary").click();
  await expect(page.getByTestId("all-instances").locator("a.chip")).not.toHaveCount(0);
  expect(errors).toEqual([]);
});
