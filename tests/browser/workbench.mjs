// Real-browser test of the tilebench workbench: JupyterLab in Debian's chromium, driven by playwright-core.
//
// It expects a JupyterLab server that is already up (tests/browser/test_browser.py starts one, with no
// token, on a copy of notebooks/ and a notebook of live tunes), opens each notebook, runs all its cells and
// checks what the page shows: the kernel panel's tabs and code views, the layout and tuning heatmaps (each
// dashboard's plot compared with the records its run stored, dashboard.mjs), the "Tuning runs" sidebar,
// the tilelang cell language, and that no widget failed. Every check is reported (ok / not ok); the exit
// status is 1 when any failed. Screenshots and a results.json go to the output folder.
//
//   node workbench.mjs --url http://127.0.0.1:8888 --out ../../test-output/browser [--notebooks 01_quickstart.ipynb,...]
//
// Environment: CHROMIUM (default /usr/bin/chromium), TILEBENCH_BROWSER_HEADED=1 to watch it.

import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

import { chromium } from "playwright-core";

import { DASHBOARD, checkDashboardLabels, hoverCell, matchRecords, slowWidgetModules } from "./dashboard.mjs";
import { checkKernelPanel, plotState } from "./panel.mjs";
import { MINUTE, VIEWPORT, attempt, check, log, results, screen, seconds, setOutput, shot, sleep } from "./report.mjs";
import { EXTENSION, WIDGET } from "./selectors.mjs";
import { checkRunsSidebar } from "./sidebar.mjs";

// Text that JupyterLab / ipywidgets / anywidget put in the page when a widget cannot be shown.
const WIDGET_ERROR_TEXT = [
  "Error displaying widget",
  "model not found",
  "Could not create a view",
  "Failed to load model class",
  "Error rendering",
  "Error creating widget",
  "Failed to create view",
];
// ipywidgets' view of a widget whose JavaScript threw ("Click to show javascript error."); clicked to read it.
const WIDGET_ERROR_VIEW = ".jupyter-widgets-error-widget";
// Console messages that mean a widget (or its JavaScript) failed.
const WIDGET_CONSOLE_ERROR = /widget|model|anywidget|plotly|view|comm|esm|Could not|Failed to/i;

// The live-tunes notebook loads every widget module this much later: past anywidget's 2 s (dashboard.mjs).
const SLOW_MODULE_MS = 2_500;
const ANYWIDGET_GAVE_UP = /\[anywidget\] Failed to initialize model/;
const LIVE_TUNES = 6; // the dashboards of 03_live_tunes.ipynb (test_browser.py's LIVE_TUNES_CELLS)

// ---------------------------------------------------------------------------------------------------

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    out: { type: "string", default: "test-output/browser" },
    notebooks: { type: "string", default: "01_quickstart.ipynb,02_autotune.ipynb" },
  },
});
if (!args.url) {
  console.error("usage: node workbench.mjs --url http://127.0.0.1:PORT [--out DIR] [--notebooks a.ipynb,b.ipynb]");
  process.exit(2);
}
const BASE = args.url.replace(/\/$/, "");
const OUT = resolve(args.out);
setOutput(OUT);

async function api(path, options = {}) {
  const response = await fetch(`${BASE}${path}`, options);
  if (!response.ok) throw new Error(`${options.method ?? "GET"} ${path}: HTTP ${response.status}`);
  return response.json();
}

// --- JupyterLab ------------------------------------------------------------------------------------

/** The notebook's main-area widget (scoped by the id its dock tab names). */
async function notebookPanel(page, name) {
  const tab = page.locator(".jp-MainAreaWidget-ContainerTabBar .lm-TabBar-tab, .lm-DockPanel-tabBar .lm-TabBar-tab", {
    has: page.locator(".lm-TabBar-tabLabel", { hasText: new RegExp(`^${name.replace(/\./g, "\\.")}$`) }),
  });
  await tab.first().waitFor({ timeout: 2 * MINUTE });
  const id = await tab.first().getAttribute("data-id");
  const panel = page.locator(`[id="${id}"]`);
  await panel.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 2 * MINUTE });
  return panel;
}

/** The kernel of the notebook's session, as the server sees it. */
async function kernelState(name) {
  const sessions = await api("/api/sessions");
  const session = sessions.find((s) => s.path === name || s.path.endsWith(`/${name}`));
  return session?.kernel?.execution_state ?? "no session";
}

async function waitKernelIdle(name, panel, timeout) {
  const deadline = Date.now() + timeout;
  let last = "";
  while (Date.now() < deadline) {
    const state = await kernelState(name);
    const indicator = await panel
      .locator(".jp-Notebook-ExecutionIndicator")
      .first()
      .getAttribute("data-status")
      .catch(() => null);
    last = `server: ${state}, page: ${indicator}`;
    if (state === "idle" && (indicator === null || indicator === "idle")) return last;
    await sleep(500);
  }
  throw new Error(`kernel not idle after ${timeout / 1000} s (${last})`);
}

/** The input prompts of the notebook's code cells: "[3]:", "[*]:", "[ ]:". */
async function prompts(panel) {
  return panel
    .locator(".jp-CodeCell .jp-InputArea-prompt")
    .evaluateAll((els) => els.map((el) => el.textContent.replace(/\s+/g, "")));
}

async function runAllCells(page, panel, name, timeout) {
  // Focus the notebook (command mode, first cell), then Run → Run All Cells from the menu bar.
  await panel.locator(".jp-Cell .jp-InputPrompt").first().click();
  await page.keyboard.press("Escape");
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Run$/ }).click();
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Cells$/ }).click();
  // Started: some prompt shows [*] or a count.
  await page.waitForFunction(
    (id) => {
      const texts = [...document.querySelectorAll(`[id="${id}"] .jp-CodeCell .jp-InputArea-prompt`)].map((el) =>
        el.textContent.replace(/\s+/g, ""),
      );
      return texts.some((t) => t === "[*]:" || /^\[\d+\]:$/.test(t));
    },
    await panel.getAttribute("id"),
    { timeout: MINUTE, polling: 250 },
  );
  // Finished: no [*] left and the kernel idle, twice in a row a second apart.
  const deadline = Date.now() + timeout;
  let quiet = 0;
  let lastLog = 0;
  while (Date.now() < deadline) {
    const texts = await prompts(panel);
    const busy = texts.filter((t) => t === "[*]:").length;
    const state = await kernelState(name);
    quiet = busy === 0 && state === "idle" ? quiet + 1 : 0;
    if (quiet >= 2) return texts;
    if (Date.now() - lastLog > 30_000) {
      lastLog = Date.now();
      log(`  ${name}: ${texts.length - busy}/${texts.length} cells done, kernel ${state}`);
    }
    await sleep(1000);
  }
  throw new Error(`${name}: cells still running after ${timeout / 1000} s: ${(await prompts(panel)).join(" ")}`);
}

async function saveNotebook(page, panel) {
  await panel.locator(".jp-Cell .jp-InputPrompt").first().click();
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+s");
  await page.waitForFunction(
    (id) => !document.querySelector(`[id="${id}"]`)?.classList.contains("jp-mod-dirty") &&
      ![...document.querySelectorAll(".lm-DockPanel-tabBar .lm-TabBar-tab")].some(
        (tab) => tab.dataset.id === id && tab.classList.contains("jp-mod-dirty"),
      ),
    await panel.getAttribute("id"),
    { timeout: 30_000 },
  );
}

/** Shut the notebook's kernel down (its session with it), so the next notebook has the CPUs. */
async function shutdownKernel(page, name) {
  const sessions = await api("/api/sessions").catch(() => []);
  const session = sessions.find((s) => s.path === name || s.path.endsWith(`/${name}`));
  if (!session) return;
  // From the page: the server wants the _xsrf cookie echoed on a DELETE.
  const status = await page.evaluate(async (id) => {
    const xsrf = document.cookie.match(/\b_xsrf=([^;]*)/);
    const headers = xsrf ? { "X-XSRFToken": decodeURIComponent(xsrf[1]) } : {};
    const response = await fetch(`/api/sessions/${id}`, { method: "DELETE", headers, credentials: "same-origin" });
    return response.status;
  }, session.id);
  log(`${name}: kernel shut down (HTTP ${status})`);
}

// --- checks every notebook gets --------------------------------------------------------------------

async function checkCells(page, panel, name) {
  const texts = await prompts(panel);
  const unrun = texts.map((t, i) => [t, i + 1]).filter(([t]) => !/^\[\d+\]:$/.test(t));
  check(
    `${name}: every code cell ran`,
    texts.length > 0 && unrun.length === 0,
    unrun.length ? `not run: ${unrun.map(([t, i]) => `cell ${i} ${t}`).join(", ")}` : `${texts.length} code cells`,
  );

  // Error outputs, from the saved notebook (output_type "error") and from the page (a traceback).
  await attempt(`${name}: saved after running`, async () => saveNotebook(page, panel));
  try {
    const model = await api(`/api/contents/${encodeURIComponent(name)}?content=1`);
    const errors = [];
    model.content.cells.forEach((cell, index) => {
      for (const output of cell.outputs ?? []) {
        if (output.output_type === "error") errors.push(`cell ${index + 1}: ${output.ename}: ${output.evalue}`);
      }
    });
    check(`${name}: no cell has an error output`, errors.length === 0, errors.join(" | "));
  } catch (error) {
    check(`${name}: no cell has an error output`, false, `could not read the saved notebook: ${error.message}`);
  }
  const tracebacks = await panel
    .locator(".jp-OutputArea-output")
    .evaluateAll((els) =>
      els
        .map((el) => el.textContent)
        .filter((text) => /Traceback \(most recent call last\)|^\s*\w*(Error|Exception): /m.test(text))
        .map((text) => text.replace(/\s+/g, " ").slice(0, 300)),
    );
  check(`${name}: no traceback in the outputs`, tracebacks.length === 0, tracebacks.join(" | "));

  const widgetErrors = await panel.locator(".jp-OutputArea").evaluateAll(
    (els, needles) =>
      els.flatMap((el) => needles.filter((needle) => el.textContent.includes(needle)).map((needle) => {
        const text = el.textContent;
        const at = text.indexOf(needle);
        return text.slice(Math.max(0, at - 40), at + 160).replace(/\s+/g, " ");
      })),
    WIDGET_ERROR_TEXT,
  );
  // ipywidgets' error view ("Click to show javascript error."): click it to read the error itself.
  const errorViews = panel.locator(WIDGET_ERROR_VIEW);
  for (let i = 0; i < Math.min(await errorViews.count(), 5); i++) {
    const view = errorViews.nth(i);
    await view.scrollIntoViewIfNeeded().catch(() => {});
    await view.click({ timeout: 5_000 }).catch(() => {});
    const text = ((await view.innerText().catch(() => "")) ?? "").split("\n").filter(Boolean);
    const failed = text.filter((line) => /Failed to|Error/.test(line) && !/Open Browser Console/.test(line));
    widgetErrors.push(`error view ${i + 1}: ${failed.slice(0, 3).join(" / ") || text.slice(0, 3).join(" / ")}`);
  }
  check(`${name}: no widget error shown in the outputs`, widgetErrors.length === 0, widgetErrors.join(" | "));
}

/** The DSL marks of the code cell at `index`: CodeMirror renders only the lines in view, so a cell longer
 *  than the window is scrolled through (its start, middle and end) and the marks of each view gathered. */
async function dslMarksOf(panel, index) {
  const cell = panel.locator(".jp-CodeCell").nth(index);
  const marks = [];
  for (const block of ["start", "center", "end"]) {
    await cell.evaluate((el, where) => el.scrollIntoView({ block: where }), block);
    await sleep(300);
    marks.push(...(await cell.evaluate((el, mark) => [...el.querySelectorAll(mark)].map((m) => m.textContent), EXTENSION.dslMark)));
  }
  return marks;
}

async function checkTileLangLanguage(panel, name) {
  // The %%tilelang cells (by their source's first line) and one plain code cell.
  const cells = await panel.locator(".jp-CodeCell").evaluateAll((els, sel) =>
    els.map((cell) => {
      const editor = cell.querySelector(".cm-editor");
      const first = cell.querySelector(".cm-line")?.textContent ?? "";
      return {
        tilelang: first.startsWith("%%tilelang"),
        first: first.slice(0, 60),
        marked: Boolean(cell.querySelector(sel.languageEditor)) || editor?.matches(sel.languageEditor) === true,
        dsl: [...cell.querySelectorAll(sel.dslMark)].map((el) => el.textContent),
        options: [...cell.querySelectorAll(sel.magicOptionMark)].map((el) => el.textContent),
      };
    }),
    EXTENSION,
  );
  const tl = cells.filter((cell) => cell.tilelang);
  const plain = cells.filter((cell) => !cell.tilelang);
  if (!check(`${name}: has a %%tilelang cell`, tl.length > 0, `${tl.length} of ${cells.length} code cells`)) return;
  const cell = tl[0];
  cell.dsl = await dslMarksOf(panel, cells.indexOf(cell));
  check(
    `${name}: tilelang language on the %%tilelang cell (${EXTENSION.languageEditor})`,
    cell.marked,
    `first line: ${cell.first}`,
  );
  check(
    `${name}: T.* calls marked (${EXTENSION.dslMark})`,
    // a long cell's lines are rendered only in view: any of the core calls seen there will do
    cell.dsl.length >= 5 && cell.dsl.every((text) => /^T\.\w+$/.test(text)) &&
      ["T.Kernel", "T.copy", "T.gemm", "T.alloc_shared"].some((call) => cell.dsl.includes(call)),
    `${cell.dsl.length} marks: ${[...new Set(cell.dsl)].slice(0, 8).join(" ")}`,
  );
  check(
    `${name}: magic-line options marked (${EXTENSION.magicOptionMark})`,
    cell.options.length >= 2 && cell.options.every((text) => /^--?[A-Za-z]/.test(text)),
    cell.options.join(" "),
  );
  check(
    `${name}: plain code cells keep the Python language`,
    plain.length > 0 && plain.every((c) => !c.marked && c.dsl.length === 0),
    `${plain.filter((c) => c.marked).length} of ${plain.length} plain cells marked`,
  );
}

// --- notebook 2: the tuning dashboard and the runs sidebar ------------------------------------------

async function checkDashboard(page, panel, name) {
  const dash = panel.locator(WIDGET.dashboard).first();
  const found = await attempt(`${name}: tuning dashboard shown (${WIDGET.dashboard})`, () =>
    dash.waitFor({ timeout: 30_000 }),
  );
  if (!found) return;
  await dash.scrollIntoViewIfNeeded();
  const counters = ((await dash.locator(WIDGET.counters).textContent().catch(() => "")) ?? "").replace(/\s+/g, " ");
  check(
    `${name}: dashboard counters say all 11 configs are done (16, less 5 the constraint drops)`,
    /compiled 11\b/.test(counters) && /remaining 0\b/.test(counters),
    counters.slice(0, 200),
  );
  await attempt(`${name}: tuning heatmap rendered (2x2 grid; cells drawn when measured)`, async () => {
    await dash.locator(`${WIDGET.plot} .main-svg`).first().waitFor({ timeout: 60_000 });
    await sleep(500);
    const plot = await plotState(dash);
    if (!plot || plot.types[0] !== "heatmap") throw new Error(`plot: ${JSON.stringify(plot)}`);
    // The figure the browser holds: x block_M, y block_N (the dashboard's default axes), a 2x2 grid.
    const problems = [];
    if (!plot.title.includes("gemm")) problems.push(`title "${plot.title}"`);
    if (JSON.stringify(plot.x) !== '["128","256"]') problems.push(`x ${JSON.stringify(plot.x)}, not ["128","256"]`);
    if (JSON.stringify(plot.y) !== '["128","256"]') problems.push(`y ${JSON.stringify(plot.y)}, not ["128","256"]`);
    if (plot.z.length !== 2 || plot.z.some((row) => row.length !== 2)) problems.push(`z ${JSON.stringify(plot.z)}, not 2x2`);
    if (plot.size[0] < 100 || plot.size[1] < 100) problems.push(`size ${plot.size.join("x")}`);
    // Measured cells (a GPU) are coloured; cells with no timing (every record "skipped" without a GPU,
    // or failed) are drawn grey by a second heatmap labelled with their status. Either way an image is drawn.
    const measured = plot.z.flat().filter((v) => v !== null && v !== undefined).length;
    if (!plot.images.some((img) => img.png && img.width > 20 && img.height > 20)) {
      problems.push(`${measured} measured cells but no heatmap image drawn`);
    }
    if (measured === 0 && !plot.text.flat().some((t) => /^skipped/.test(t ?? ""))) {
      problems.push(`no measured cell and no "skipped" hover text: ${JSON.stringify(plot.text)}`);
    }
    if (measured === 0 && !/skipped/.test(plot.layerText)) {
      problems.push(`no measured cell and no "skipped" label drawn on the grid: "${plot.layerText.slice(0, 200)}"`);
    }
    if (problems.length) throw new Error(problems.join("; "));
    return `title "${plot.title}", x ${plot.x.join("/")}, y ${plot.y.join("/")}, ${measured} measured cells, ${plot.images.length} heatmap images, ${plot.size.join("x")}`;
  });
  await attempt(`${name}: the heatmap holds the run's records (the 256x256 cell excluded by constraint)`, () =>
    matchRecords(dash, api),
  );
  await shot(dash, "02_dashboard.png");
  await checkDashboardLabels(dash, name, api);
  await dash.evaluate((el) => el.scrollIntoView({ block: "start" }));
  await sleep(300);
  await screen(page, "dashboard.png");
  await attempt(`${name}: hovering the 256x256 cell says "excluded by constraint"`, async () => {
    const text = await hoverCell(page, dash, 1, 1);
    if (!/^excluded by constraint: 4 configs/.test(text)) throw new Error(`tooltip "${text}"`);
    return `tooltip "${text}"`;
  });
  await shot(dash, "02_dashboard_hover_excluded.png");
  await page.mouse.move(0, 0);
}

// --- the live-tunes notebook: six dashboards, each compared with its run's records --------------------

async function checkLiveTunes(page, panel, name) {
  const boards = panel.locator(DASHBOARD.root);
  const count = await boards.count();
  check(`${name}: ${LIVE_TUNES} live dashboards shown`, count === LIVE_TUNES, `${count} dashboards`);
  for (let i = 0; i < count; i++) {
    const dash = boards.nth(i);
    await dash.scrollIntoViewIfNeeded().catch(() => {});
    await attempt(`${name}: tune ${i + 1}: its heatmap holds its run's records`, () => matchRecords(dash, api));
    if (i === 1) {
      // tune 2: block_N 512 x threads 256 excluded (x index 1, y index 1), block_N 0 failed to elaborate
      await attempt(`${name}: tune 2: hovering its excluded cell says "excluded by constraint"`, async () => {
        const text = await hoverCell(page, dash, 1, 1);
        if (!/^excluded by constraint: 1 config, never compiled/.test(text)) throw new Error(`tooltip "${text}"`);
        return `tooltip "${text}"`;
      });
      await shot(dash, "03_dashboard_failed_and_excluded.png");
      await page.mouse.move(0, 0);
    }
    if (i === LIVE_TUNES - 1) await shot(dash, "03_dashboard_rerun.png");
  }
  const slowed = await page.evaluate(() => window.__tilebenchSlowModules ?? 0);
  check(`${name}: widget modules loaded ${SLOW_MODULE_MS} ms late (the fault injected)`, slowed > 0, `${slowed} modules`);
}

// --- main --------------------------------------------------------------------------------------------

// What the panel and sidebar checks ask of the server: its REST API, a notebook's kernel state.
const LAB = { api, kernelState };

const NOTEBOOKS = {
  "01_quickstart.ipynb": {
    timeout: 5 * MINUTE,
    tilelang: true,
    checks: [async (page, panel, name) => checkKernelPanel(page, panel, name, LAB)],
  },
  "02_autotune.ipynb": {
    timeout: 10 * MINUTE,
    tilelang: true,
    checks: [checkDashboard, async (page, _panel, name) => checkRunsSidebar(page, name, LAB)],
  },
  // slowModules: every anywidget model misses anywidget's 2 s and gets no message after its creation.
  "03_live_tunes.ipynb": { timeout: 6 * MINUTE, slowModules: true, checks: [checkLiveTunes] },
};

async function testNotebook(browser, name) {
  const spec = NOTEBOOKS[name] ?? { timeout: 10 * MINUTE, tilelang: true, checks: [] };
  const stem = name.replace(/\.ipynb$/, "");
  const context = await browser.newContext({ viewport: VIEWPORT });
  const page = await context.newPage();
  if (spec.slowModules) await page.addInitScript(slowWidgetModules, SLOW_MODULE_MS);
  const consoleErrors = [];
  page.on("console", (message) => {
    if (message.type() === "error") {
      const where = message.location();
      consoleErrors.push(`${message.text()}${where?.url ? ` (${where.url.split("/").pop()}:${where.lineNumber})` : ""}`);
    }
  });
  page.on("pageerror", (error) => consoleErrors.push(`uncaught: ${error.message}`));
  page.on("crash", () => consoleErrors.push("the page crashed"));

  try {
    log(`${name}: opening`);
    // ?reset: a workspace with only this notebook open.
    await page.goto(`${BASE}/lab/tree/${encodeURIComponent(name)}?reset`, { timeout: 2 * MINUTE });
    const panel = await notebookPanel(page, name);
    await waitKernelIdle(name, panel, 2 * MINUTE);
    log(`${name}: kernel idle, running all cells`);
    const t0 = Date.now();
    const ran = await attempt(`${name}: Run All Cells finishes`, async () => {
      const texts = await runAllCells(page, panel, name, spec.timeout);
      return `${((Date.now() - t0) / 1000).toFixed(0)} s, prompts ${texts.join(" ")}`;
    });
    await shot(page, `${stem}_after_run.png`);
    if (ran) {
      await checkCells(page, panel, name);
      if (spec.tilelang) await checkTileLangLanguage(panel, name);
      for (const body of spec.checks) {
        try {
          await body(page, panel, name);
        } catch (error) {
          check(`${name}: ${body.name || "checks"} ran to the end`, false, String(error.message).split("\n")[0]);
        }
      }
    }
    await shot(page, `${stem}_page.png`);
    await shutdownKernel(page, name);
  } catch (error) {
    check(`${name}: opened and ran`, false, String(error.message).split("\n").slice(0, 4).join(" | "));
    await shot(page, `${stem}_failure.png`);
  } finally {
    // With slowed modules, anywidget giving up on its models is the fault injected, not a failure.
    const injected = spec.slowModules ? consoleErrors.filter((text) => ANYWIDGET_GAVE_UP.test(text)) : [];
    if (injected.length) log(`${name}: anywidget gave up on ${injected.length} slowed models (the fault injected)`);
    const widgetErrors = consoleErrors.filter((text) => WIDGET_CONSOLE_ERROR.test(text) && !injected.includes(text));
    const other = consoleErrors.filter((text) => !WIDGET_CONSOLE_ERROR.test(text));
    for (const text of other) log(`${name}: console error (not widget-related, not failed on): ${text.slice(0, 300)}`);
    check(`${name}: no widget error in the browser console`, widgetErrors.length === 0, widgetErrors.map((t) => t.slice(0, 300)).join(" | "));
    writeFileSync(join(OUT, `${stem}_console.txt`), consoleErrors.join("\n") + "\n");
    await context.close();
  }
}

const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  headless: process.env.TILEBENCH_BROWSER_HEADED !== "1",
  // --no-sandbox: CI runs this as root, where chromium's sandbox refuses to start.
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});
log(`chromium ${browser.version()} (${executablePath}), JupyterLab at ${BASE}, output in ${OUT}`);
try {
  for (const name of args.notebooks.split(",").filter(Boolean)) {
    await testNotebook(browser, name);
  }
} finally {
  await browser.close();
}

const failed = results.filter((r) => !r.ok);
writeFileSync(join(OUT, "results.json"), JSON.stringify({ seconds: seconds(), results }, null, 2) + "\n");
log(`${results.length - failed.length} of ${results.length} checks passed`);
if (failed.length) {
  console.log("\nFAILED:");
  for (const r of failed) console.log(`  - ${r.name}${r.detail ? `: ${r.detail}` : ""}`);
  process.exit(1);
}
