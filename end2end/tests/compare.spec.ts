// Compare: two windows of the demo data on one screen — the answer first, then deltas, causes and
// the tenants' GPU time.
import { test, expect } from "@playwright/test";

test("two windows of the demo: percentile deltas, cause counts and tenants' GPU time on one screen", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  // The findings worker accounts GPU time once the demo has settled.
  await expect
    .poll(async () => (await (await request.get("/api/v1/usage")).json()).busy_s, { timeout: 60_000 })
    .toBeGreaterThan(0);
  await page.goto("/compare");
  await page.getByTestId("quick-picks").getByText("last 10 min vs the 10 before").click();
  await expect(page).toHaveURL(/span_s=600/);
  await expect(page.getByTestId("headline")).not.toContainText("has no requests");
  const deltas = page.getByTestId("deltas").locator("tbody tr");
  await expect(deltas).toHaveCount(12); // TTFT, TPOT, queue, e2e × p50/p90/p99
  await expect(page.getByTestId("deltas").locator('tr[data-metric="ttft_p90"] td').nth(3)).toHaveText(/^[+−]/);
  await expect(page.getByTestId("causes").locator("tbody tr").first()).toBeVisible();
  await expect(page.getByTestId("compare-usage").locator('tr[data-tenant="acme"] td').nth(2)).toHaveText(/ s|min/);
  await page.screenshot({ path: "test-results/compare.png", fullPage: true });
  expect(errors).toEqual([]);
});

test("two instances, chosen in the form, compare and the comparison is a link", async ({ page }) => {
  await page.goto("/compare");
  await page.waitForFunction(() => (window as any).__tsHydrated === true);
  await page.getByTestId("a_instance").fill("sim-pid-control");
  await page.getByTestId("b_instance").fill("sim-pid");
  for (const side of ["a", "b"]) {
    await page.getByTestId(`${side}_from`).fill("2020-01-01T00:00:00");
    await page.getByTestId(`${side}_to`).fill("2099-01-01T00:00:00");
  }
  await page.getByTestId("compare-submit").click();
  await expect(page).toHaveURL(/a_instance=sim-pid-control.*b_instance=sim-pid/);
  const pid = page.getByTestId("causes").locator('tr[data-cause="prefill_interrupted_decode"] td');
  await expect(pid.nth(1)).toHaveText("0");
  await expect(pid.nth(2)).not.toHaveText("0");
  const link = page.url();
  await page.goto(link);
  await expect(pid.nth(2)).not.toHaveText("0");
});
