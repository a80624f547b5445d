// Prompt families (explorer): on the demo's three-instance fleet with a prefix cache, the panel
// opened from the explorer lists the system prompt's family first with the API's counts, the RAG
// template nested in it, and says why warm requests computed the prefix again: the replica that
// joined cold, and the storm of long prompts that evicted the family on cache-1. One click
// filters the explorer to a family; the URL holds it; a hostile fingerprint is refused as text.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

const FLEET = "cache-0,cache-1,cache-2";

test("prompt families show their cache hits and why warm ones missed", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/?instance=${encodeURIComponent(FLEET)}`);
  await hydrated(page);
  await page.getByTestId("families-open").click();
  await expect(page).toHaveURL(/families=1/);
  const panel = page.getByTestId("families");
  await expect(panel).toBeVisible();

  // The same figures as the API over the window the page shows.
  const series = await (await request.get(`/api/v1/latency?instance=${FLEET}&width_px=280`)).json();
  const api = await (await request.get(`/api/v1/fingerprints?instance=${FLEET}&from=${series.from_ns}&to=${series.to_ns}`)).json();
  const system = api.families[0];
  const template = api.families.find((f: any) => f.parent === system.fingerprint);
  expect(system.tokens).toBe(512);
  expect(template.tokens).toBe(768);
  const rows = panel.getByTestId("family-row");
  await expect(rows.first()).toHaveAttribute("data-fingerprint", system.fingerprint);
  await expect(rows.first()).toContainText(`${system.hits} of ${system.requests}`);
  const nested = panel.locator(`[data-testid="family-row"][data-fingerprint="${template.fingerprint}"]`);
  await expect(nested).toHaveClass(/nested/);
  await expect(nested).toContainText(`after family ${system.fingerprint.slice(0, 8)}`);

  // Why warm requests computed the prefix: a cold replica, and an eviction with its culprits.
  await expect(page.getByTestId("families-lead")).toContainText(`${system.requests} requests share its 512-token prefix`);
  const cold = panel.locator('[data-testid="warm-miss"][data-kind="cold"]').filter({ hasText: "cache-2 had never computed it" });
  await expect(cold.first()).toBeVisible();
  const evicted = panel.locator('[data-testid="warm-miss"][data-kind="evicted"]').first();
  await expect(evicted).toContainText("cache-1 had it");
  await expect(evicted).toContainText("cache-1-storm-");
  await page.screenshot({ path: "test-results/families.png" });
  await panel.screenshot({ path: "test-results/families-panel.png" });

  // A pasted link renders the panel on the server, before any script runs.
  const html = await (await request.get(page.url())).text();
  expect(html).toContain('data-testid="families"');
  expect(html).toContain(system.fingerprint);

  // One click: the explorer shows the template's family only; its filter holds the hash.
  await nested.getByRole("link").first().click();
  await expect(page).toHaveURL(new RegExp(`fingerprint=${template.fingerprint}`));
  await expect(page.getByTestId("family-filter")).toHaveValue(template.fingerprint);
  await expect(panel.getByTestId("family-row").first()).toHaveAttribute("data-fingerprint", template.fingerprint);
  expect(errors).toEqual([]);
});

// Compare groups each side by family: the warm replica against the one that joined cold, and from
// B one click to B's own families (the panel over B's instance and window, as the API has them).
test("compare opens each side's prompt families", async ({ page, request }) => {
  const series = await (await request.get(`/api/v1/latency?instance=${FLEET}&width_px=280`)).json();
  const w = (s: string) => `${s}_from=${series.from_ns}&${s}_to=${series.to_ns}`;
  const q = `a_instance=cache-0&b_instance=cache-2&${w("a")}&${w("b")}`;
  const b = (await (await request.get(`/api/v1/compare?${q}`)).json()).b;
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/compare?${q}`);
  await hydrated(page);
  await expect(page.getByTestId("a-families")).toHaveText("its prompt families");
  await page.screenshot({ path: "test-results/compare-side-links.png" });
  await page.getByTestId("b-families").click();
  await expect(page).toHaveURL(/families=1/);
  await expect(page).toHaveURL(/instance=cache-2/);
  await expect(page).toHaveURL(new RegExp(`from=${b.from_ns}&to=${b.to_ns}`));
  const api = await (await request.get(`/api/v1/fingerprints?instance=cache-2&from=${b.from_ns}&to=${b.to_ns}`)).json();
  const panel = page.getByTestId("families");
  await expect(panel.getByTestId("family-row").first()).toHaveAttribute("data-fingerprint", api.families[0].fingerprint);
  await expect(panel.getByTestId("family-row").first()).toContainText(`${api.families[0].hits} of ${api.families[0].requests}`);
  await page.screenshot({ path: "test-results/compare-side-families.png" });
});

test("a fingerprint that closes its element is refused and shown as text", async ({ page }) => {
  const hostile = '</td></title><script>window.__pwned=1</script>';
  await page.goto(`/?families=1&fingerprint=${encodeURIComponent(hostile)}`);
  await hydrated(page);
  await expect(page.getByTestId("explorer-error")).toContainText("not a block hash");
  await expect(page.getByTestId("family-filter")).toHaveValue(hostile);
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
});
