// What the browser test reports and keeps: one ok / NOT OK line per check (the results), a clock, and the
// screenshots. Shared by workbench.mjs (the notebooks), panel.mjs (the kernel panel) and sidebar.mjs.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

export const MINUTE = 60_000;
// The size of a screen the workbench is shown on in screenshots/ (issue 36: every panel tab, the dashboard
// and the sidebar as a user of a 1280x800 screen sees them).
export const VIEWPORT = { width: 1280, height: 800 };

export const results = [];
const started = Date.now();
const output = { dir: "test-output/browser" };

/** Where screenshots go: `dir`, and full-page views of 1280x800 in `dir`/screenshots. */
export function setOutput(dir) {
  output.dir = dir;
  mkdirSync(join(dir, "screenshots"), { recursive: true });
}

export function seconds() {
  return (Date.now() - started) / 1000;
}

export function log(message) {
  console.log(`[${seconds().toFixed(1).padStart(6)} s] ${message}`);
}

export function check(name, ok, detail = "") {
  results.push({ name, ok: Boolean(ok), detail });
  log(`${ok ? "ok    " : "NOT OK"} ${name}${detail ? ` -- ${detail}` : ""}`);
  return Boolean(ok);
}

/** A check whose body may throw (a timeout waiting for the page): the throw is the failure. */
export async function attempt(name, body) {
  try {
    const detail = await body();
    return check(name, true, typeof detail === "string" ? detail : "");
  } catch (error) {
    return check(name, false, String(error?.message ?? error).split("\n").slice(0, 6).join(" | "));
  }
}

export async function sleep(ms) {
  await new Promise((done) => setTimeout(done, ms));
}

/** A screenshot of `target` (a page or an element) into the output folder. */
export async function shot(target, name) {
  const path = join(output.dir, name);
  try {
    await target.screenshot({ path, animations: "disabled", timeout: 30_000 });
    log(`screenshot ${path}`);
  } catch (error) {
    log(`screenshot ${name} failed: ${String(error.message).split("\n")[0]}`);
  }
}

/** What the page shows now (the whole 1280x800 window), into screenshots/. */
export async function screen(page, name) {
  await shot(page, join("screenshots", name));
}
