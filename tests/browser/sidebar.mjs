// The "Tuning runs" sidebar (extension/src/sidebar.ts) after notebook 2's tunes: each run labelled with its
// problem and space, and a run's records with status and latency first, in view at the sidebar's width, and
// a speed column whose unit is what was measured ("speed" and "—" when nothing was timed).

import { attempt, screen, shot, sleep } from "./report.mjs";
import { EXTENSION } from "./selectors.mjs";

// notebook 2: the Hopper GEMM template tuned over 4 parameters of 2 values each, 11 configs after the constraint
const GEMM_SPACE = "block_M×block_N×num_stages×warp_specialized (11 of 16 configs)";
const GEMM_PROBLEM = "A 4096×4096, B 4096×4096";
const FIRST_COLUMNS = 3; // status, median ms, and the speed column(s)

/** The speed columns the records call for: the units measured, or "speed" when nothing was timed. */
function speedHeads(records) {
  const units = [
    ["tflops", "TFLOP/s"],
    ["gbps", "GB/s"],
  ].filter(([field]) => records.some((record) => record[field] !== null));
  return units.length ? units.map(([, unit]) => unit) : ["speed"];
}

async function openSidebar(page, name) {
  const tab = page.locator(EXTENSION.runsTab);
  return attempt(`${name}: "Tuning runs" sidebar tab present (${EXTENSION.runsTab})`, async () => {
    await tab.waitFor({ timeout: 20_000 });
    if (!(await tab.evaluate((el) => el.classList.contains("lm-mod-current")))) await tab.click();
    await page.locator(EXTENSION.runsPanel).waitFor({ state: "visible", timeout: 10_000 });
  });
}

async function checkRunRow(page, sidebar, name) {
  return attempt(`${name}: sidebar lists the gemm run, labelled with its problem and space`, async () => {
    const row = sidebar.locator(EXTENSION.runRow, { has: page.locator(EXTENSION.runKernel, { hasText: /^gemm$/ }) });
    await row.first().waitFor({ timeout: 30_000 });
    const first = row.first();
    const text = async (selector) => ((await first.locator(selector).textContent().catch(() => "")) ?? "").replace(/\s+/g, " ").trim();
    const [count, meta, problem, space] = await Promise.all(
      [EXTENSION.runCount, EXTENSION.runMeta, EXTENSION.runProblem, EXTENSION.runSpace].map(text),
    );
    const status = await first.getAttribute("data-status");
    const message = await sidebar.locator(EXTENSION.runsMessage).getAttribute("data-state").catch(() => null);
    if (message === "error") throw new Error(await sidebar.locator(EXTENSION.runsMessage).textContent());
    if (!/^11(\/11)?$/.test(count)) throw new Error(`run row count "${count}" (status ${status}), not 11/11`);
    if (!meta.includes(name) || !/\bgrid\b/.test(meta)) {
      throw new Error(`run row says "${meta}": not its notebook (${name}) and strategy (grid)`);
    }
    if (problem !== GEMM_PROBLEM || space !== GEMM_SPACE) throw new Error(`labelled "${problem}" / "${space}"`);
    return `${await row.count()} gemm run(s); first: ${count} configs, status ${status}, "${problem}", "${space}", "${meta}"`;
  });
}

/** Click the first gemm run: its records, status and latency first and in view, the speed as measured. */
async function checkRecords(page, sidebar, name, lab) {
  return attempt(`${name}: a run's records show status, latency and speed first, in view without scrolling`, async () => {
    const row = sidebar.locator(EXTENSION.runRow, { has: page.locator(EXTENSION.runKernel, { hasText: /^gemm$/ }) }).first();
    const runId = await row.getAttribute("data-run-id");
    await row.click();
    const table = sidebar.locator(`${EXTENSION.records}[data-run-id="${runId}"] ${EXTENSION.recordsTable}`);
    await table.locator("tbody tr").first().waitFor({ timeout: 20_000 });
    const records = await lab.api(`/tilebench/runs/${encodeURIComponent(runId)}/records`);
    const seen = await table.evaluate((el, [panelSel, columns]) => {
      const panel = el.closest(panelSel);
      const edge = panel.getBoundingClientRect();
      const cells = [...el.querySelectorAll("tbody tr:first-child td")].slice(0, columns);
      return {
        heads: [...el.querySelectorAll("thead th")].map((th) => th.textContent),
        first: cells.map((td) => td.textContent),
        outside: cells.filter((td) => {
          const box = td.getBoundingClientRect();
          return box.left < edge.left || box.right > edge.right + 0.5;
        }).length,
        panelScrolls: panel.scrollWidth > panel.clientWidth + 1,
        width: Math.round(edge.width),
      };
    }, [EXTENSION.runsPanel, FIRST_COLUMNS]);
    const speeds = speedHeads(records);
    const expected = ["status", "median ms", ...speeds];
    const problems = [];
    if (JSON.stringify(seen.heads.slice(0, expected.length)) !== JSON.stringify(expected)) problems.push(`headers ${seen.heads.join(", ")}`);
    if (speeds[0] === "speed" && seen.first[2] !== "—") problems.push(`untimed speed cell "${seen.first[2]}", not "—"`);
    if (speeds[0] === "speed" && seen.heads.some((h) => h === "GB/s" || h === "TFLOP/s")) problems.push("a unit with nothing timed");
    if (seen.outside || seen.panelScrolls) problems.push(`${seen.outside} of the first ${FIRST_COLUMNS} cells out of view, sidebar scrolls: ${seen.panelScrolls}`);
    if (problems.length) throw new Error(`${problems.join("; ")} (sidebar ${seen.width} px)`);
    return `sidebar ${seen.width} px: ${seen.heads.join(" | ")}; first row ${seen.first.join(" | ")}`;
  });
}

export async function checkRunsSidebar(page, name, lab) {
  if (!(await openSidebar(page, name))) return;
  const sidebar = page.locator(EXTENSION.runsPanel);
  await checkRunRow(page, sidebar, name);
  await shot(sidebar, "02_runs_sidebar.png");
  await screen(page, "sidebar.png");
  await checkRecords(page, sidebar, name, lab);
  await sleep(300);
  await screen(page, "sidebar_records.png");
}
