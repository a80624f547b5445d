// The waterfall: from the explorer to the moment a request stalled, its culprits marked; zoom
// and pan by keyboard and wheel; the URL holds the view and a reload restores it.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

/** The canvas has been painted with data at least once. */
async function painted(page: Page) {
  await page.waitForFunction(() => ((window as any).__tsFrameMs ?? []).length > 0, null, { timeout: 15_000 });
}

test("the slowest-TPOT row opens a waterfall with its interrupting prefills marked", async ({ page }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto("/?instance=sim-pid");
  await hydrated(page);
  const first = page.getByTestId("requests").locator("tbody tr").first();
  const id = await first.getAttribute("data-request");
  await first.getByTestId("waterfall-link").click();
  await expect(page).toHaveURL(new RegExp(`/waterfall\\?instance=sim-pid.*focus=${id}`));
  await painted(page);
  const panel = page.getByTestId("wf-panel");
  await expect(panel.getByTestId("selected-request")).toHaveText(id!);
  await expect(panel.locator('[data-cause="prefill_interrupted_decode"]')).toBeVisible();
  // Its culprits are marked in the track labels and listed in the panel.
  const culprits = await panel.getByTestId("culprit").allInnerTexts();
  expect(culprits.length).toBeGreaterThan(0);
  await expect(page.locator(".wf-row-label.culprit").first()).toBeVisible();
  await page.screenshot({ path: "test-results/waterfall-worst-tpot.png" });
  expect(errors).toEqual([]);
});

test("the victim of prefill-interrupts-decode: stalls shaded, culprits pulled next to it", async ({ page }) => {
  await page.goto("/?find=pid-victim");
  await expect(page).toHaveURL(/focus=pid-victim/);
  await painted(page);
  await expect(page.getByTestId("findings")).toContainText("TPOT");
  await expect(page.getByTestId("findings")).toContainText("pid-prefill-00");
  await page.getByTestId("pull").check();
  await expect(page).toHaveURL(/pull=1/);
  // The rows right below the victim are its culprits.
  await expect.poll(async () => {
    const labels = await page.locator(".wf-row-label").evaluateAll((els) =>
      els.map((e) => ({ id: e.getAttribute("data-request"), top: parseFloat((e as HTMLElement).style.top), culprit: e.classList.contains("culprit") })));
    labels.sort((a, b) => a.top - b.top);
    const at = labels.findIndex((l) => l.id === "pid-victim");
    return at >= 0 && labels[at + 1]?.culprit === true;
  }, { timeout: 10_000 }).toBe(true);
  // Rows by TPOT (culprits no longer pulled): the slowest request of the window comes first.
  await page.getByTestId("pull").uncheck();
  await page.getByTestId("sort").selectOption("tpot");
  await expect(page).toHaveURL(/sort=tpot/);
  await expect.poll(async () => {
    const labels = await page.locator(".wf-row-label").evaluateAll((els) =>
      els.map((e) => ({ id: e.getAttribute("data-request"), top: parseFloat((e as HTMLElement).style.top) })));
    labels.sort((a, b) => a.top - b.top);
    return labels[0]?.id;
  }, { timeout: 10_000 }).toBe("pid-prefill-00");
  // Hover shows what is under the pointer.
  const canvas = page.getByTestId("wf-canvas");
  const box = (await canvas.boundingBox())!;
  await page.mouse.move(box.x + box.width / 2, box.y + 30);
  await expect(page.getByTestId("wf-tip")).toContainText(/engine step/);
  await page.screenshot({ path: "test-results/waterfall-victim.png" });
});

test("keyboard and wheel zoom change the URL, and a reload restores the view", async ({ page }) => {
  await page.goto("/?find=pid-victim");
  await expect(page).toHaveURL(/focus=pid-victim/);
  await painted(page);
  const canvas = page.getByTestId("wf-canvas");
  const box = (await canvas.boundingBox())!;
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.keyboard.press("w");
  await page.keyboard.press("w");
  await expect(page).toHaveURL(/zfrom=\d+&zto=\d+/);
  const afterKeys = new URL(page.url());
  const span = (u: URL) => Number(BigInt(u.searchParams.get("zto")!) - BigInt(u.searchParams.get("zfrom")!));
  const full = Number(BigInt(afterKeys.searchParams.get("to")!) - BigInt(afterKeys.searchParams.get("from")!));
  expect(span(afterKeys)).toBeLessThan(full * 0.7);

  await page.mouse.wheel(0, 300); // zoom out at the cursor
  await expect.poll(() => span(new URL(page.url()))).toBeGreaterThan(span(afterKeys));
  await page.keyboard.press("d"); // pan later
  await expect.poll(() => new URL(page.url()).searchParams.get("zfrom")).not.toBe(afterKeys.searchParams.get("zfrom"));

  await page.waitForTimeout(400);
  const url = page.url();
  const window = await page.getByTestId("wf-window").innerText();
  await page.reload();
  await painted(page);
  expect(page.url()).toBe(url);
  await expect(page.getByTestId("wf-window")).toHaveText(window);
  await expect(page.getByTestId("selected-request")).toHaveText("pid-victim");

  await page.keyboard.press("Escape");
  await expect(page).not.toHaveURL(/focus=/);
  await page.goBack();
  await expect(page).toHaveURL(/focus=pid-victim/);
  await expect(page.getByTestId("selected-request")).toHaveText("pid-victim");
});

test("an unknown instance and an empty window say what to do", async ({ page }) => {
  await page.goto("/waterfall?instance=no-such-gpu");
  await expect(page.getByTestId("wf-error")).toContainText("no instance");
  await page.goto("/waterfall?instance=sim-pid&from=1000000000000000000&to=1000000001000000000");
  await expect(page.getByTestId("wf-empty")).toContainText("No requests in this window");
});

test("a PD request's prefill and decode parts are joined when both instances are in view", async ({ page }) => {
  await page.goto("/?find=pd-slow");
  // pd-slow ran on two instances, so the find lists both parts instead of jumping.
  const rows = page.getByTestId("requests").locator("tbody tr");
  await expect(rows).toHaveCount(2);
  await rows.filter({ hasText: "sim-pd-decode" }).getByTestId("waterfall-link").click();
  await expect(page).toHaveURL(/instance=sim-pd-decode.*focus=pd-slow/);
  await expect(page.getByTestId("findings")).toContainText("KV-cache transfer");
  await page.getByTestId("show-joined").getByRole("link").click();
  await expect(page).toHaveURL(/instance=sim-pd-decode%2Csim-pd-prefill/);
  await painted(page);
  await expect(page.getByTestId("selected-request")).toHaveText("pd-slow");
  // One track for both parts: the label appears once.
  await expect(page.locator('.wf-row-label[data-request="pd-slow"]')).toHaveCount(1);
  await page.screenshot({ path: "test-results/waterfall-pd-joined.png" });
});
