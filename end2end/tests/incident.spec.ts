// Incidents: a request page freezes into a link; the link opens in a fresh browser with the same
// story and unfurls (Open Graph tags, a 1200×630 preview); "copy for ticket" gives Markdown; a
// revoked link answers 410. Hostile titles and notes: hostile.spec.ts.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

test("a request page becomes an incident link that tells the story to a colleague", async ({ page, browser }) => {
  await page.goto("/requests/pid-victim?instance=sim-pid");
  await hydrated(page);
  await page.getByTestId("incident-open").click();
  const title = `Decode stalls on sim-pid ${Date.now()}`;
  await page.getByTestId("incident-title-input").fill(title);
  await page.getByTestId("incident-note-input").fill("Paged at 14:02 <b>not bold</b>");
  await page.getByTestId("incident-create").click();
  await expect(page).toHaveURL(/\/incidents\/[0-9a-f]{32}$/);
  const url = page.url();
  await expect(page.getByTestId("incident-title")).toHaveText(title);
  await expect(page.getByTestId("incident-note")).toHaveText("Paged at 14:02 <b>not bold</b>");

  // A colleague opens the link: nothing shared but the URL.
  const other = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const fresh = await other.newPage();
  const resp = await fresh.goto(url);
  expect(resp!.status()).toBe(200);
  await expect(fresh.getByTestId("incident-story")).toContainText("TPOT 87.6 ms > 50 ms SLO");
  await expect(fresh.getByTestId("incident-story")).toContainText("pid-prefill-00");
  await expect(fresh.getByTestId("request-id")).toHaveText("pid-victim");
  const img = fresh.getByTestId("incident-waterfall");
  await expect.poll(() => img.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth)).toBe(1200);
  // The head unfurls in chat and ticket tools.
  const meta = (p: string) => fresh.locator(`meta[property="${p}"], meta[name="${p}"]`).first().getAttribute("content");
  expect(await meta("og:title")).toBe(title);
  expect(await meta("og:description")).toContain("TPOT 87.6 ms");
  expect(await meta("og:image")).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/incidents\/[0-9a-f]{32}\/preview\.png$/);
  expect(await meta("twitter:card")).toBe("summary_large_image");
  const png = await fresh.request.get((await meta("og:image"))!);
  expect(png.status()).toBe(200);
  expect(png.headers()["content-type"]).toBe("image/png");
  await fresh.screenshot({ path: "test-results/incident-fresh-context.png", fullPage: true });

  // Copy for ticket: Markdown with the sentence and the link.
  await hydrated(fresh);
  await fresh.getByTestId("copy-for-ticket").click();
  await expect.poll(() => fresh.evaluate(() => (window as any).__tsCopied ?? "")).toContain(`### ${title}`);
  const md: string = await fresh.evaluate(() => (window as any).__tsCopied);
  expect(md).toContain("TPOT 87.6 ms \\> 50 ms SLO");
  expect(md).toContain(`<${url}>`);
  await other.close();

  // The list finds it; revoking makes the link answer 410.
  await page.goto(`/incidents?q=${encodeURIComponent(title)}`);
  await expect(page.getByTestId("incidents").locator("tbody tr")).toHaveCount(1);
  await page.goto(url);
  await hydrated(page);
  page.once("dialog", (d) => d.accept());
  await page.getByTestId("incident-revoke").click();
  await expect(page.getByRole("heading", { name: "This incident was revoked" })).toBeVisible();
  const gone = await page.request.get(url);
  expect(gone.status()).toBe(410);
});
