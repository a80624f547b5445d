// What the slow requests have in common (explorer): on the demo's fleet, where a release
// candidate slowed two of four instances, the panel opened from the explorer names that engine
// version first, with the counts the API gives, and one click filters the explorer to it; the
// URL holds the open panel, and a pasted link renders it on the server.
import { test, expect, Page } from "@playwright/test";
import { hydrated } from "./helpers";

const FLEET = "fleet-0,fleet-1,fleet-2,fleet-3";

test("the slow requests of the fleet have the release candidate in common", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/?instance=${encodeURIComponent(FLEET)}`);
  await hydrated(page);
  await page.getByTestId("slow-set-open").click();
  await expect(page).toHaveURL(/common=1/);
  const panel = page.getByTestId("slow-set");
  await expect(panel).toBeVisible();
  const first = panel.getByTestId("common-row").first();
  await expect(first).toHaveAttribute("data-attribute", "engine_version");
  await expect(first.getByTestId("common-value")).toHaveText("0.12.0-rc1");
  await expect(page.getByTestId("slow-set-lead")).toContainText("engine version 0.12.0-rc1 is on 100 % of the slow requests and 0 % of the others");

  // The same figures as the API over the window the page shows.
  const series = await (await request.get(`/api/v1/latency?instance=${FLEET}&width_px=280`)).json();
  const api = await (await request.get(`/api/v1/slow-set?instance=${FLEET}&from=${series.from_ns}&to=${series.to_ns}`)).json();
  expect(api.separators[0].value).toBe("0.12.0-rc1");
  await expect(page.getByTestId("slow-set-head")).toContainText(`${api.slow} slow (${api.definition}) against`);
  await expect(first).toContainText(`${api.separators[0].slow} of ${api.slow}`);
  await page.screenshot({ path: "test-results/slow-set.png" });

  // A pasted link renders the panel on the server, before any script runs.
  const html = await (await request.get(page.url())).text();
  expect(html).toContain('data-testid="slow-set"');
  expect(html).toContain("0.12.0-rc1");

  // A bucket is one click from a filter too: the batch at arrival, shown as a chip that removes it.
  const batch = page.locator('[data-testid="common-row"][data-attribute="batch_at_arrival"]').first();
  const label = (await batch.getByTestId("common-value").innerText()).trim();
  const [lo, hi] = label.replace(" requests", "").split("–").map(Number);
  await batch.getByTestId("common-value").locator("a").click();
  await expect(page).toHaveURL(new RegExp(`batch_min=${lo}&batch_max=${hi + 1}`));
  const chip = page.getByTestId("bucket-filter");
  await expect(chip).toHaveText(`batch at arrival ${lo}–${hi} requests ✕`);
  const narrowed = await (await request.get(`/api/v1/requests?instance=${FLEET}&from=${series.from_ns}&to=${series.to_ns}&batch_min=${lo}&batch_max=${hi + 1}&limit=1`)).json();
  const row = api.separators.find((x: any) => x.attribute === "batch_at_arrival");
  expect(narrowed.total).toBe(row.slow + row.rest);
  await page.screenshot({ path: "test-results/slow-set-bucket.png" });
  await chip.click();
  await expect(page).not.toHaveURL(/batch_min/);
  await expect(page.getByTestId("bucket-filter")).toHaveCount(0);

  // One click: the explorer shows the release candidate's requests only, panel still open.
  await first.getByTestId("common-value").locator("a").click();
  await expect(page).toHaveURL(/version=0\.12\.0-rc1/);
  await expect(page).toHaveURL(/common=1/);
  await expect(page.getByTestId("slow-set")).toBeVisible();
  await expect(page.locator('[data-testid="common-row"][data-attribute="engine_version"]')).toHaveCount(0);
  // "hide" closes it.
  await page.getByTestId("slow-set").getByRole("link", { name: "hide" }).click();
  await expect(page.getByTestId("slow-set")).toHaveCount(0);
  await expect(page).not.toHaveURL(/common=1/);
  expect(errors).toEqual([]);
});

// The same fleet in compare: the release candidate's side decodes slower and its answers end
// sooner; the word-choice table and the headline say so, and the same prompts' answers side by
// side show where B's part from A's.
test("compare shows the release candidate's shorter answers beside its slower decode", async ({ page, request }) => {
  const series = await (await request.get(`/api/v1/latency?instance=${FLEET}&width_px=280`)).json();
  const w = (s: string) => `${s}_from=${series.from_ns}&${s}_to=${series.to_ns}`;
  const q = `a_instance=fleet-0,fleet-1&b_instance=fleet-2,fleet-3&${w("a")}&${w("b")}`;
  const api = await (await request.get(`/api/v1/compare?${q}`)).json();
  expect(api.b.words.mean_answer_tokens).toBeLessThan(0.7 * api.a.words.mean_answer_tokens);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/compare?${q}`);
  await expect(page.getByTestId("headline")).toContainText(
    `answers ${Math.round(api.a.words.mean_answer_tokens)} → ${Math.round(api.b.words.mean_answer_tokens)} tokens`);
  const words = page.getByTestId("compare-words");
  const length = words.locator('tr[data-metric="mean answer length"]');
  await expect(length.locator("td").nth(1)).toHaveText(`${Math.round(api.a.words.mean_answer_tokens)} tokens`);
  await expect(length.locator("td.bad")).toHaveCount(1);
  await words.scrollIntoViewIfNeeded();
  await page.screenshot({ path: "test-results/compare-words.png" });

  // The same prompts, answered on both sides: B's answers part from A's where B ends; A answers
  // a prompt alike each time it is asked.
  const d = api.answers;
  expect(d.differ).toBe(d.compared);
  expect(d.within_a_differ).toBe(0);
  const same = page.getByTestId("same-prompt");
  await expect(page.getByTestId("same-prompt-lead")).toContainText(
    `For ${d.differ} of the ${d.compared} prompts both sides were asked, B's answer differed from A's: they part at token ${d.position[1]}`);
  await expect(page.getByTestId("same-prompt-lead")).toContainText(
    `answered differently 0 of ${d.within_a_compared} times (0 %): the difference is B's.`);
  const pair = page.getByTestId("answer-pair");
  await expect(pair.locator('[data-side="A"] a')).toHaveText(d.example.a.request_id);
  await expect(pair.locator('[data-side="B"] a')).toHaveText(d.example.b.request_id);
  await expect(pair.locator('[data-side="B"] .tk.part')).toHaveText(/<\|endoftext\|>|\(ended\)/);
  await same.scrollIntoViewIfNeeded();
  await page.screenshot({ path: "test-results/compare-same-prompt.png" });

  // From a side, one click to what its slow requests have in common (the explorer over that
  // side's window); there, "slow" can be a TPOT range instead of the SLO.
  await page.getByTestId("b-slow-set").click();
  await expect(page).toHaveURL(/common=1/);
  await expect(page).toHaveURL(/instance=fleet-2%2Cfleet-3/);
  await hydrated(page);
  await expect(page.getByTestId("slow-set")).toBeVisible();
  await page.getByTestId("slow-kind").selectOption("tpot");
  await page.getByTestId("slow-min").fill("60");
  await page.getByTestId("slow-def").getByRole("button", { name: "Apply" }).click();
  await expect(page).toHaveURL(/slow=tpot&slow_min=60/);
  await expect(page.getByTestId("slow-set-head")).toContainText("slow (TPOT of 60 ms or more) against");
  const ranged = await (await request.get(`/api/v1/slow-set?instance=fleet-2,fleet-3&from=${api.b.from_ns}&to=${api.b.to_ns}&slow=tpot&min_ms=60`)).json();
  await expect(page.getByTestId("slow-set-head")).toContainText(`${ranged.slow} slow (`);
  await page.screenshot({ path: "test-results/slow-set-range.png" });
});

// The slow set picked on the chart: a band dragged along the TPOT axis, from the SLO line to the
// top, calls the requests at or above it slow; the URL holds it, and the panel names the release
// candidate first, with the API's counts for that band.
test("a band dragged along the latency axis is the slow set", async ({ page, request }) => {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`/?instance=${encodeURIComponent(FLEET)}`);
  await hydrated(page);
  const chart = page.locator('svg.chart[data-metric="tpot"]');
  const box = (await chart.boundingBox())!;
  const slo = Number(await chart.locator("line.slo").getAttribute("y1"));
  // SVG units (560 × 170, the axis 52 wide, the plot from y = 12) to the page's pixels.
  const px = (sx: number, sy: number) => [box.x + (sx / 560) * box.width, box.y + (sy / 170) * box.height];
  const [ax, ay] = px(30, slo);
  const [, top] = px(30, 4);
  await page.mouse.move(ax, ay);
  await page.mouse.down();
  // Halfway up, the band is closed above; at the top of the plot, open.
  await page.mouse.move(ax, (ay + top) / 2, { steps: 4 });
  await expect(chart.locator("text.band-label")).toHaveText(/^[\d.]+ m?s – [\d.]+ m?s$/);
  await page.mouse.move(ax, top, { steps: 4 });
  await expect(chart.locator("text.band-label")).toHaveText(/^[\d.]+ m?s – any$/);
  await page.mouse.up();
  await expect(page).toHaveURL(/common=1/);
  await expect(page).toHaveURL(/slow=tpot&slow_min=\d/);
  expect(page.url()).not.toMatch(/slow_max=\d/);
  const min = Number(new URL(page.url()).searchParams.get("slow_min"));
  // Two significant digits of the SLO line's latency (50 ms), give or take a pixel.
  expect(min).toBeGreaterThanOrEqual(45);
  expect(min).toBeLessThanOrEqual(55);
  await hydrated(page);
  const first = page.getByTestId("common-row").first();
  await expect(first.getByTestId("common-value")).toHaveText("0.12.0-rc1");
  const series = await (await request.get(`/api/v1/latency?instance=${FLEET}&width_px=280`)).json();
  const api = await (await request.get(`/api/v1/slow-set?instance=${FLEET}&from=${series.from_ns}&to=${series.to_ns}&slow=tpot&min_ms=${min}`)).json();
  await expect(page.getByTestId("slow-set-head")).toContainText(`${api.slow} slow (TPOT of ${min} ms or more) against`);
  await expect(page.getByTestId("slow-kind")).toHaveValue("tpot");
  await expect(page.getByTestId("slow-min")).toHaveValue(String(min));
  await page.screenshot({ path: "test-results/slow-set-band.png" });
  expect(errors).toEqual([]);
});
