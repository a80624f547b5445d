// Slices: the explorer filters by tenant, LoRA adapter and priority; the URL holds the filter,
// every row says whose request it is, and a tenant in a row is one click from its requests.
// The demo's simulated traffic (sim-azure-conv) gives each request a tenant from its id.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

const tenants = (page: Page) => page.getByTestId("tenant-cell").allInnerTexts();

test("the tenant filter is in the URL, narrows every row, and a row's tenant links to its slice", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto("/?instance=sim-azure-conv&tenant=globex");
  await expect(page.getByTestId("tenant-filter")).toHaveValue("globex");
  await expect(page.getByTestId("tenant-cell").first()).toBeVisible();
  const first = await tenants(page);
  expect(first.length).toBeGreaterThan(0);
  for (const t of first) expect(t.startsWith("globex")).toBe(true);
  await page.screenshot({ path: "test-results/slices-tenant.png" });

  // Typing a tenant (and Enter) navigates: the URL changes, so do the rows.
  await hydrated(page);
  await page.getByTestId("tenant-filter").fill("initech");
  await page.getByTestId("tenant-filter").press("Enter");
  await expect(page).toHaveURL(/tenant=initech/);
  await expect(page.getByTestId("tenant-cell").first()).toContainText("initech");
  const second = await tenants(page);
  for (const t of second) expect(t).toContain("support-lora"); // initech's adapter, under its name

  // Unfiltered, a row's tenant is a link to that tenant's requests.
  await page.goto("/?instance=sim-azure-conv");
  await hydrated(page);
  const link = page.getByTestId("tenant-cell").locator("a").first();
  const name = (await link.innerText()).trim();
  await link.click();
  await expect(page).toHaveURL(new RegExp(`tenant=${name}`));
  // The last rows stay (dimmed, busy) until the slice's arrive: then every row is the tenant's.
  await expect.poll(async () => {
    const busy = await page.locator('.explorer-data[aria-busy="true"]').count();
    const ts = await tenants(page);
    return busy === 0 && ts.length > 0 && ts.every((t) => t.startsWith(name));
  }).toBe(true);
  expect(errors).toEqual([]);
});

test("a tenant that closes the element it sits in stays text", async ({ page }) => {
  const hostile = '"></title><script>window.__pwned=1</script>';
  await page.goto(`/?tenant=${encodeURIComponent(hostile)}`);
  await expect(page.getByTestId("tenant-filter")).toHaveValue(hostile);
  await hydrated(page);
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
});
