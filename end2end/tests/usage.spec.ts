// GPU time (/usage): the first line names who used most of the engines, the stacked chart and the
// table agree with the API, the CSV is the chart's data, "by" and the window are in the URL, and a
// tenant is one click from its requests. The demo's simulated traffic gives requests tenants.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

const INSTANCE = "sim-azure-conv";

test("GPU time by tenant: who used most, the chart, the table, the CSV and the way to the requests", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  // The findings worker accounts the demo once it has settled.
  let usage: any;
  await expect
    .poll(async () => {
      usage = await (await request.get(`/api/v1/usage?instance=${INSTANCE}&width_px=1160`)).json();
      return usage.busy_s;
    }, { timeout: 60_000 })
    .toBeGreaterThan(0);
  // The default window (the hour up to the newest accounted minute), pinned in the URL.
  const q = `instance=${INSTANCE}&from=${usage.from_ns}&to=${usage.to_ns}`;
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/usage?${q}`);
  const top = usage.groups[0];
  await expect(page.getByTestId("usage-answer")).toContainText(`${top.key} used ${Math.round(top.share * 100)} %`);
  await expect(page.getByTestId("usage-chart")).toBeVisible();
  const rows = page.getByTestId("usage-row");
  await expect(rows).toHaveCount(usage.groups.length);
  await expect(rows.first()).toContainText(top.key);
  await page.screenshot({ path: "test-results/usage-tenant.png" });

  // The CSV is the chart's rows: per tenant they add up to the table's GPU time.
  const csv = await (await request.get(await page.getByTestId("usage-csv").getAttribute("href") as string)).text();
  const sums: Record<string, number> = {};
  for (const line of csv.trim().split("\r\n").slice(1)) {
    const [, , key, , s] = line.split(",");
    sums[key] = (sums[key] ?? 0) + Number(s);
  }
  for (const g of usage.groups) {
    if (g.key) expect(Math.abs(sums[g.key] - g.gpu_s)).toBeLessThan(0.01);
  }

  // By adapter: the URL says so, and so does the page.
  await hydrated(page);
  await page.getByRole("link", { name: "adapter", exact: true }).click();
  await expect(page).toHaveURL(/by=adapter/);
  await expect(page.locator("h1")).toHaveText("GPU time by adapter");
  await expect(page.getByTestId("usage-table")).toContainText("base model (no adapter)");

  // Back by tenant: a tenant's name opens its requests in the explorer, same window.
  await page.goto(`/usage?${q}`);
  await hydrated(page);
  await rows.first().locator("a").click();
  await expect(page).toHaveURL(new RegExp(`tenant=${top.key}`));
  await expect(page.getByTestId("tenant-cell").first()).toContainText(top.key);
  expect(errors).toEqual([]);
});

test("a tenant filter that closes the element it sits in stays text on the GPU time page", async ({ page }) => {
  const hostile = '"></title><script>window.__pwned=1</script>';
  await page.goto(`/usage?tenant=${encodeURIComponent(hostile)}`);
  await expect(page.locator('input[name="tenant"]')).toHaveValue(hostile);
  await hydrated(page);
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
});
