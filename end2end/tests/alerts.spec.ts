// Alertmanager's webhook: a body in its documented format (version 4) for a firing alert on the
// demo's prefill-interrupts-decode instance opens an incident; the link in the reply opens the
// incident page with the victim the simulated engine stalled, and the alert's text as its note.
import { test, expect } from "@playwright/test";

test("a firing alert's incident link opens with the engine's victim", async ({ page, request }) => {
  // When the scenario on sim-pid began: the alert fires two seconds later.
  const first = await (await request.get("/api/v1/requests?instance=sim-pid&order=start&limit=1")).json();
  const start = BigInt(first.requests[0].arrival_ns);
  const startsAt = new Date(Number(start / 1_000_000n) + 2_000).toISOString();
  const body = {
    version: "4",
    groupKey: '{}/{severity="page"}:{alertname="TPOTHigh"}',
    truncatedAlerts: 0,
    status: "firing",
    receiver: "tokenscope",
    groupLabels: { alertname: "TPOTHigh" },
    commonLabels: { alertname: "TPOTHigh", severity: "page" },
    commonAnnotations: {},
    externalURL: "http://alertmanager.example:9093",
    alerts: [{
      status: "firing",
      labels: { alertname: "TPOTHigh", severity: "page", instance: "10.0.0.7:8000", exported_instance: "sim-pid" },
      annotations: { summary: "TPOT p90 above 50 ms for 2 minutes" },
      startsAt,
      endsAt: "0001-01-01T00:00:00Z",
      generatorURL: "http://prometheus.example:9090/graph?g0.expr=tpot",
      fingerprint: `e2e${Date.now()}`,
    }],
  };
  const resp = await request.post("/api/v1/alerts/alertmanager", { data: body });
  expect(resp.status()).toBe(200);
  const reply = await resp.json();
  expect(reply.incidents).toHaveLength(1);
  expect(reply.skipped).toEqual([]);

  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(new URL(reply.incidents[0].url).pathname);
  await expect(page.getByTestId("incident-title")).toHaveText("TPOTHigh on sim-pid");
  await expect(page.getByTestId("incident-note")).toContainText("TPOT p90 above 50 ms for 2 minutes");
  await expect(page.locator("h2.victim-head", { hasText: "pid-victim" })).toBeVisible();
  await page.screenshot({ path: "test-results/alert-incident.png" });
});
