// Hostile text never runs. Strings that close the element or attribute they sit in are stored in
// every field a sender or a reader controls (request ids, instance, model, engine version, host,
// token and candidate texts, incident title and note, upload contents, URL query parameters),
// then every page that shows them is opened in Chromium. The sweep fails on a dialog, on any
// element or attribute the strings created, on an inline script without the response's nonce,
// on a page without the Content-Security-Policy, and on any violation of that policy by the
// pages themselves (hydration, canvases, clipboard and previews must work under it). The same
// strings go through the exports: Markdown, CSV, Chrome trace, SVG and PNG previews.
import { test, expect, Page, APIRequestContext } from "@playwright/test";
import { hydrated } from "./helpers";

// Each payload marks what it would create with `data-pwned`, so a created element is found by
// attribute whatever its tag.
const H = {
  title: '</title><script data-pwned>alert("title")</script><title>x',
  script: '</script><script data-pwned>alert("script")</script>',
  attr: '"><img src=x onerror=alert("attr") data-pwned>',
  single: "'><svg onload=alert('single') data-pwned>",
  url: 'javascript:alert("url")',
  template: "{{7*7}} ${7*7} <%= 7*7 %>",
  bidi: "\u202e\u200b\u2066gpj.exe\u2069\u200d",
  long: "<b data-pwned>" + "W".repeat(9_900) + "</b>",
  formula: '=HYPERLINK("javascript:alert(1)","click")',
};

const T0 = 1793491200000000000n; // 2026-11-01T00:00:00Z: a day of its own, away from the demo's
const ms = (n: number) => T0 + BigInt(n) * 1_000_000n;
const FROM = (T0 - 60_000_000_000n).toString();
const TO = (T0 + 120_000_000_000n).toString();

const INSTANCE = `gpu-${H.attr}`.slice(0, 200);
const CULPRIT = H.title;
const VICTIM = `${H.script}${H.single}`;
const MODEL = `${H.script} ${H.template}`;

/** The two requests as native JSON: a 90k-token prompt holding the engine, a victim whose first
 * token waited behind it, its tokens and candidates all hostile. */
function traces() {
  const texts = [H.title, H.attr, H.bidi, H.formula, H.long, H.url];
  const victimTimes = texts.map((_, i) => ms(2600 + 40 * i));
  const candidates = texts.flatMap((t) => [H.script, t]);
  return {
    resource_traces: [{
      resource: { engine: "ENGINE_KIND_VLLM", engine_version: `${H.template} ${H.long}`, model: MODEL, instance_id: INSTANCE, host: H.url },
      requests: [
        {
          request_id: CULPRIT,
          arrival_ns: T0.toString(), first_scheduled_ns: ms(1).toString(), finished_ns: ms(2500).toString(),
          finish_reason: "FINISH_REASON_STOP", prompt_tokens: 90000,
          tokens: { token_id: [11, 12], emitted_ns: [ms(2450), ms(2500)].map(String), text: [H.single, H.script] },
        },
        {
          request_id: VICTIM,
          arrival_ns: ms(50).toString(), first_scheduled_ns: ms(2450).toString(),
          finished_ns: victimTimes[victimTimes.length - 1].toString(),
          finish_reason: "FINISH_REASON_STOP", prompt_tokens: 200,
          tokens: {
            token_id: texts.map((_, i) => 100 + i),
            emitted_ns: victimTimes.map(String),
            text: texts,
            logprob: texts.map(() => -2.5),
            candidate_count: texts.map(() => 2),
            candidate_token_id: texts.flatMap((_, i) => [900 + i, 100 + i]),
            candidate_logprob: texts.flatMap(() => [-0.2, -2.5]),
            candidate_text: candidates,
          },
        },
      ],
    }],
  };
}

/** An OpenAI chat completion with logprobs, for the upload. */
function chat(id: string) {
  const tokens = [H.attr, H.script, H.url];
  return {
    id, object: "chat.completion", created: 1793491300, model: MODEL,
    choices: [{
      index: 0, finish_reason: "stop", message: { role: "assistant", content: tokens.join("") },
      logprobs: { content: tokens.map((t) => ({ token: t, logprob: -0.5, top_logprobs: [{ token: t, logprob: -0.5 }, { token: H.title, logprob: -1.5 }] })) },
    }],
    usage: { prompt_tokens: 5, completion_tokens: tokens.length },
  };
}

const q = (pairs: Record<string, string>) => "?" + new URLSearchParams(pairs).toString();
const reqPage = (id: string, instance: string, extra: Record<string, string> = {}) =>
  `/requests/${encodeURIComponent(id)}${q({ instance, ...extra })}`;

let incidentPath = "";
let revokedPath = "";

test.beforeAll(async ({ request }) => {
  const stored = await request.post("/api/v1/traces", { data: JSON.stringify(traces()), headers: { "content-type": "application/json" } });
  expect(stored.status(), await stored.text()).toBe(200);
  const reply = await stored.json();
  // Stored now, or by an earlier run against the same database.
  expect(Number(reply.acceptedRequests ?? 0) + Number(reply.duplicateRequests ?? 0), JSON.stringify(reply)).toBe(2);
  const make = async (title: string) => {
    const created = await request.post("/api/v1/incidents", {
      data: JSON.stringify({ title, note: `${H.long} ${H.attr}\n${H.bidi}`, instance: INSTANCE, requests: [VICTIM] }),
    });
    expect(created.status(), await created.text()).toBe(201);
    return (await created.json()).path as string;
  };
  incidentPath = await make(H.title);
  revokedPath = await make(`${H.attr} revoked`);
  expect((await request.delete(`/api/v1${revokedPath}`)).status()).toBe(204);
});

/** Counts dialogs and the page's own CSP violations from before its first script runs. */
async function watch(page: Page) {
  const seen = { dialogs: [] as string[], errors: [] as string[] };
  page.on("dialog", (d) => { seen.dialogs.push(d.message()); d.dismiss(); });
  page.on("pageerror", (e) => seen.errors.push(e.message));
  await page.addInitScript(() => {
    (window as any).__csp = [];
    document.addEventListener("securitypolicyviolation", (e) =>
      (window as any).__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`));
  });
  return seen;
}

/** What the strings made of the page: elements and attributes that are not ours. */
async function injected(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const found: string[] = [];
    for (const el of Array.from(document.querySelectorAll("*"))) {
      for (const a of Array.from(el.attributes)) {
        if (a.name === "data-pwned" || /^on/i.test(a.name)) found.push(`<${el.tagName} ${a.name}>`);
        if ((a.name === "href" || a.name === "src" || a.name === "action") && /^\s*javascript:/i.test(a.value)) {
          found.push(`<${el.tagName} ${a.name}=${a.value}>`);
        }
      }
      // Every inline script is one Leptos wrote, with this response's nonce.
      if (el.tagName === "SCRIPT" && !el.hasAttribute("src") && !(el as HTMLScriptElement).nonce) {
        found.push(`inline script without a nonce: ${el.textContent?.slice(0, 80)}`);
      }
    }
    return found;
  });
}

async function open(page: Page, path: string, status = 200) {
  const seen = await watch(page);
  const resp = await page.goto(path);
  expect(resp!.status(), path).toBe(status);
  const policy = resp!.headers()["content-security-policy"] ?? "";
  expect(policy, `${path}: the page's policy`).toMatch(/script-src 'self' 'nonce-[A-Za-z0-9_-]{16,}'/);
  expect(resp!.headers()["x-content-type-options"]).toBe("nosniff");
  expect(resp!.headers()["referrer-policy"]).toBe("same-origin");
  return seen;
}

async function clean(page: Page, path: string, seen: { dialogs: string[]; errors: string[] }) {
  // Give anything injected its chance to run: a timer, an image error, the canvases' paint.
  await page.waitForTimeout(300);
  expect(await injected(page), path).toEqual([]);
  expect(seen.dialogs, path).toEqual([]);
  expect(await page.evaluate(() => (window as any).__csp), `${path}: CSP violations`).toEqual([]);
  expect(seen.errors, path).toEqual([]);
}

test("every page shows hostile stored text as text, under a policy it keeps", async ({ page }) => {
  test.setTimeout(180_000);
  const pages: [string, string, () => Promise<void>][] = [
    ["explorer", `/${q({ instance: INSTANCE, from: FROM, to: TO })}`, async () => {
      await expect(page.getByTestId("requests")).toContainText(H.script);
    }],
    ["explorer, find", `/${q({ find: VICTIM })}`, async () => {}],
    ["waterfall with the victim selected", `/waterfall${q({ instance: INSTANCE, from: FROM, to: TO, focus: VICTIM })}`, async () => {
      await expect(page.getByTestId("selected-request")).toHaveText(VICTIM);
    }],
    ["request page", reqPage(VICTIM, INSTANCE, { tok: "4" }), async () => {
      await expect(page.getByTestId("request-id")).toHaveText(VICTIM);
      await expect(page.getByTestId("word-flow")).toContainText(H.attr);
      await page.locator('[data-i="0"]').click();
      // Spaces in a token are shown as ␣ (ui/request/token_text).
      await expect(page.getByTestId("candidates")).toContainText(H.script.replaceAll(" ", "␣"));
    }],
    ["the culprit's page", reqPage(CULPRIT, INSTANCE), async () => {
      await expect(page.getByTestId("request-id")).toHaveText(CULPRIT);
    }],
    ["compare", `/compare${q({ a_instance: INSTANCE, b_instance: INSTANCE, a_from: FROM, a_to: TO, b_from: FROM, b_to: TO })}`, async () => {
      await expect(page.getByTestId("headline")).toBeVisible();
    }],
    ["incidents list", `/incidents${q({ q: "title" })}`, async () => {
      await expect(page.getByTestId("incidents")).toContainText(H.title);
    }],
    ["incident page", incidentPath, async () => {
      await expect(page.getByTestId("incident-title")).toHaveText(H.title);
      await expect(page.getByTestId("incident-note")).toContainText(H.attr);
      await expect(page).toHaveTitle(`${H.title} · tokenscope incident`);
      expect(await page.locator('meta[property="og:title"]').getAttribute("content")).toBe(H.title);
      const img = page.getByTestId("incident-waterfall");
      await expect.poll(() => img.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth)).toBe(1200);
      // "Copy for ticket" works under the policy and gives the title as inert Markdown.
      await page.getByTestId("copy-for-ticket").click();
      await expect.poll(() => page.evaluate(() => (window as any).__tsCopied ?? "")).toContain("### \\</title\\>");
    }],
    // URL parameters are the reader's input: every page with them hostile.
    ["explorer, hostile query", `/${q({ instance: H.title, model: H.script, order: H.attr, range: H.url, slo: H.single, find: "", page: H.template })}`, async () => {}],
    ["waterfall, hostile query", `/waterfall${q({ instance: H.title, focus: H.attr, from: H.script, to: H.url, sort: H.single })}`, async () => {}],
    ["request, hostile query", reqPage(H.attr, H.title, { tok: H.script, range: H.url, log: H.single }), async () => {}],
    ["compare, hostile query", `/compare${q({ a_instance: H.title, b_model: H.attr, span_s: H.script, a_from: H.url })}`, async () => {}],
    ["incidents, hostile query", `/incidents${q({ q: H.title, limit: H.attr })}`, async () => {}],
    ["an incident that does not exist", `/incidents/${encodeURIComponent(H.title)}`, async () => {}],
    ["sign-in", `/login${q({ next: `/${H.title}` })}`, async () => {}],
  ];
  for (const [name, path, check] of pages) {
    await test.step(name, async () => {
      const seen = await open(page, path);
      if (name !== "sign-in") await hydrated(page);
      await check();
      await clean(page, name, seen);
    });
  }
  await page.goto(incidentPath);
  await page.screenshot({ path: "test-results/hostile-incident.png" });
});

test("the revoked page and an upload's report keep hostile text as text", async ({ page }) => {
  let seen = await open(page, revokedPath, 410);
  await expect(page.getByRole("heading", { name: "This incident was revoked" })).toBeVisible();
  await clean(page, "revoked", seen);

  seen = await open(page, "/upload");
  await hydrated(page);
  const stamp = Date.now();
  const lines = [chat(`${H.attr}-${stamp}`), chat(`${H.title}-${stamp}`)].map((c) => JSON.stringify(c));
  lines.push(JSON.stringify({ id: H.script, object: "chat.completion", choices: [{ index: 0, message: { content: H.attr } }] }));
  await page.getByTestId("upload-text").fill(lines.join("\n"));
  await page.getByTestId("upload-submit").click();
  const report = page.getByTestId("upload-report");
  await expect(report).toContainText(`${H.attr}-${stamp}`);
  await expect(report).toContainText(`${H.title}-${stamp}`);
  await page.screenshot({ path: "test-results/hostile-upload.png" });
  await clean(page, "upload report", seen);

  // A bad upload's error names what was wrong, as text.
  await page.getByTestId("upload-text").fill(`{"${H.script}": "${H.attr.replaceAll('"', '\\"')}"}`);
  await page.getByTestId("upload-submit").click();
  await expect(page.getByTestId("upload-error")).toBeVisible();
  await clean(page, "upload error", seen);
});

async function text(request: APIRequestContext, path: string, type: RegExp) {
  const resp = await request.get(path);
  expect(resp.status(), path).toBe(200);
  expect(resp.headers()["content-type"], path).toMatch(type);
  expect(resp.headers()["content-security-policy"], path).toMatch(/^default-src 'none'/);
  return resp.text();
}

test("the exports keep hostile text as text: Markdown, CSV, Chrome trace, previews", async ({ page, request }) => {
  const md = await text(request, `/api/v1${incidentPath}/markdown`, /^text\/markdown/);
  expect(md.split("\n")[0]).toBe('### \\</title\\>\\<script data-pwned\\>alert("title")\\</script\\>\\<title\\>x');
  // Ids stand in code spans, where markup is inert (a backtick in one becomes a quote); outside
  // them every `<` is escaped, and no link or image can be made. The link itself is an autolink.
  const prose = md.replace(/`[^`\n]*`/g, "").replace(/<http:\/\/[^>\s]+>/g, "");
  expect(prose).not.toMatch(/(^|[^\\])</m);
  expect(prose).not.toMatch(/\]\(/);

  const rq = `/api/v1/requests/${encodeURIComponent(VICTIM)}`;
  const csv = await text(request, `${rq}/tokens.csv${q({ instance: INSTANCE })}`, /^text\/csv/);
  expect(csv).toContain(`"'${H.formula.replaceAll('"', '""')}"`);
  for (const line of csv.trim().split("\n").slice(1)) {
    const textCell = line.split(",")[2] ?? "";
    expect(textCell, line.slice(0, 120)).not.toMatch(/^[=+@]/);
  }

  const trace = JSON.parse(await text(request, `${rq}/trace.json${q({ instance: INSTANCE })}`, /json/));
  const names = JSON.stringify(trace);
  for (const s of [H.title, H.attr, H.formula]) expect(names).toContain(JSON.stringify(s).slice(1, -1));

  const svg = await text(request, `${incidentPath}/preview.svg`, /^image\/svg\+xml/);
  expect(svg.startsWith("<svg")).toBe(true);
  // Parsed as the browser would: only drawing elements, no handler attributes, the title as text.
  const parsed = await page.evaluate((svg) => {
    const doc = new DOMParser().parseFromString(svg, "image/svg+xml");
    const all = Array.from(doc.querySelectorAll("*"));
    return {
      tags: [...new Set(all.map((e) => e.tagName))].sort(),
      attrs: [...new Set(all.flatMap((e) => Array.from(e.attributes).map((a) => a.name)))].filter((a) => /^on|pwned|href/i.test(a)),
      text: doc.documentElement.textContent ?? "",
    };
  }, svg);
  expect(parsed.tags.filter((t) => !["svg", "rect", "text", "line", "polyline", "polygon", "path", "circle", "g"].includes(t))).toEqual([]);
  expect(parsed.attrs).toEqual([]);
  expect(parsed.text).toContain("</title><script data-pwned>");
  const png = await request.get(`${incidentPath}/preview.png`);
  expect(png.status()).toBe(200);
  expect(png.headers()["content-type"]).toBe("image/png");
});

test("under the policy an injected inline script is refused, not run", async ({ page }) => {
  // The fixture: the real incident page with its real headers, and one inline script added into
  // its head, as a missed escape would. Chromium must refuse it (a CSP violation), not run it.
  await page.route("**/incidents/*", async (route) => {
    if (route.request().resourceType() !== "document") return route.continue();
    const resp = await route.fetch();
    const body = (await resp.text()).replace("<head>", '<head><script>alert("injected")</script>');
    const headers = { ...resp.headers() };
    delete headers["content-encoding"]; // the body is handed over decoded
    delete headers["content-length"];
    expect(headers["content-security-policy"]).toContain("'nonce-");
    await route.fulfill({ status: resp.status(), headers, body });
  });
  const seen = await watch(page);
  await page.goto(incidentPath);
  await hydrated(page);
  await expect.poll(() => page.evaluate(() => (window as any).__csp.length)).toBeGreaterThan(0);
  const violations: string[] = await page.evaluate(() => (window as any).__csp);
  expect(violations.join("\n")).toMatch(/script-src/);
  expect(seen.dialogs).toEqual([]);
  // The page itself still works under the same policy: hydrated, its story shown.
  await expect(page.getByTestId("incident-title")).toHaveText(H.title);
});
