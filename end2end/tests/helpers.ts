// What the specs share: waiting for the page to be live.
import { Page } from "@playwright/test";

/** The page is hydrated when the wasm app has switched times to the browser's zone label. */
export async function hydrated(page: Page) {
  await page.waitForFunction(() => (window as any).__tsHydrated === true, null, { timeout: 15_000 });
}
