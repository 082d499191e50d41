// The tuning dashboard (tilebench/views/dashboard.py) as the page draws it, checked against the records its
// run stored: what plotly holds (gd.data of the heatmap) must be what the records say, cell by cell.
//
// The dashboard's plots are plotly figures drawn by JupyterLab's plotly renderer inside ipywidgets Output
// widgets; its counters carry the run's id (data-run-id), which names the records to compare with
// (GET /tilebench/runs/<id>/records, GET /tilebench/runs?kernel=...).

import { attempt, check } from "./report.mjs";

export const DASHBOARD = {
  root: ".tilebench-dashboard",
  runLabel: ".tilebench-run-label",
  counters: ".tilebench-counters",
  plot: ".js-plotly-plot",
  heatmapImage: ".heatmaplayer g.hm image",
  curveNote: ".tilebench-curve-note",
  stop: "button.tilebench-stop",
  excluded: "excluded<br>by constraint", // drawn on a cell whose every config the constraint excluded
};

/** An init script (page.addInitScript): every JavaScript module loaded from a blob: URL (how anywidget
 *  loads a widget's ESM) waits `ms` first. Past 2 s anywidget gives up on the model ("[anywidget] Failed
 *  to initialize model.") and drops every later message to it, its view drawing the state the model was
 *  created with: what a slow plotly bundle (5 MB) did to the old dashboard under load. */
export function slowWidgetModules(ms) {
  const create = URL.createObjectURL.bind(URL);
  window.__tilebenchSlowModules = 0;
  URL.createObjectURL = (blob) => {
    const url = create(blob);
    if (!(blob instanceof Blob) || blob.type !== "text/javascript") return url;
    window.__tilebenchSlowModules += 1;
    const from = JSON.stringify(url);
    const wrapper =
      `await new Promise((done) => setTimeout(done, ${ms}));\n` +
      `export * from ${from};\nimport * as slow from ${from};\nexport default slow.default;\n`;
    return create(new Blob([wrapper], { type: "text/javascript" }));
  };
}

/** What the page shows of one dashboard: counters, the heatmap's traces as plotly holds them, the plots,
 *  the best-so-far note and the Stop button. */
export async function dashboardState(dash) {
  return dash.evaluate((el, sel) => {
    const counters = el.querySelector(sel.counters);
    const plots = [...el.querySelectorAll(sel.plot)];
    const heat = plots.find((p) => (p.data ?? []).some((t) => t.type === "heatmap"));
    const grid = (rows) => Array.from(rows ?? [], (row) => (Array.isArray(row) ? Array.from(row) : [row]));
    const trace = (t) =>
      t && { x: Array.from(t.x ?? []), y: Array.from(t.y ?? []), z: grid(t.z), text: grid(t.text), custom: grid(t.customdata) };
    const box = heat?.getBoundingClientRect();
    const stop = el.querySelector(sel.stop);
    return {
      runId: counters?.dataset.runId ?? null,
      status: counters?.dataset.status ?? null,
      counters: (counters?.textContent ?? "").replace(/\s+/g, " "),
      plots: plots.length,
      drawn: plots.map((p) => (p.data ?? []).map((t) => `${t.type}${t.z ? ` z=${JSON.stringify(t.z)}` : ""}`).join(" + ")),
      types: (heat?.data ?? []).map((t) => t.type),
      configs: trace(heat?.data?.[0]),
      marks: trace(heat?.data?.[1]),
      title: heat?.layout?.title?.text ?? "",
      xTitle: heat?.layout?.xaxis?.title?.text ?? "",
      yTitle: heat?.layout?.yaxis?.title?.text ?? "",
      images: heat ? heat.querySelectorAll(sel.heatmapImage).length : 0,
      size: box ? [Math.round(box.width), Math.round(box.height)] : null,
      note: el.querySelector(sel.curveNote)?.textContent ?? "",
      stop: stop && { disabled: stop.disabled, runId: stop.dataset.runId ?? null, text: stop.textContent },
    };
  }, DASHBOARD);
}

/** A value as the dashboard labels it (Python's str): True, None, 128, float16. */
export function pyLabel(value) {
  if (value === true || value === false) return value ? "True" : "False";
  if (value === null || value === undefined) return "None";
  return String(value);
}

const RANK = { ok: 2, skipped: 1 }; // which record speaks for a cell without a value; then the latest failure

/** Cell "x|y" -> {value, record}: the lowest latency of the cell's records, or (no value) the record
 *  that says best why (as tilebench.views.dashboard.best_by_cell). */
export function expectedCells(records, x, y) {
  const cells = new Map();
  for (const record of records) {
    const key = `${pyLabel(record.config[x])}|${y ? pyLabel(record.config[y]) : ""}`;
    const value = record.status === "ok" && Number.isFinite(record.median_ms) ? record.median_ms : null;
    const current = cells.get(key);
    let better;
    if (!current) better = true;
    else if (value !== null) better = current.value === null || value <= current.value;
    else better = current.value === null && (RANK[record.status] ?? 0) >= (RANK[current.record.status] ?? 0);
    if (better) cells.set(key, { value, record });
  }
  return cells;
}

/** What is wrong with the drawn dashboard `state`, given its run (from GET tilebench/runs) and records. */
export function compareWithRecords(state, run, records) {
  const problems = [];
  if (!state.configs || !state.marks) return [`no heatmap with two traces drawn (plots: ${JSON.stringify(state.drawn)})`];
  const names = Object.keys(run.space ?? {}); // the store keeps them sorted; the dashboard, in call order
  const x = state.xTitle;
  const y = state.yTitle || null;
  if (!names.includes(x) || (y !== null && !names.includes(y)) || (y === null && names.length > 1)) {
    problems.push(`axes ${x}/${y}, the run's parameters ${names}`);
  }
  const xs = (run.space[x] ?? []).map(pyLabel);
  const ys = y ? (run.space[y] ?? []).map(pyLabel) : [""];
  if (JSON.stringify(state.configs.x) !== JSON.stringify(xs)) problems.push(`x ${JSON.stringify(state.configs.x)}, not ${JSON.stringify(xs)}`);
  if (JSON.stringify(state.configs.y) !== JSON.stringify(ys)) problems.push(`y ${JSON.stringify(state.configs.y)}, not ${JSON.stringify(ys)}`);
  const cells = expectedCells(records, x, y);
  const distinct = new Set(records.map((r) => JSON.stringify(Object.entries(r.config).sort()))).size;
  const grid = Object.values(run.space).reduce((size, values) => size * values.length, 1);
  const complete = run.status === "done" && run.total !== null && distinct >= run.total; // every planned config recorded
  ys.forEach((yv, i) =>
    xs.forEach((xv, j) => {
      const where = `cell ${xv}/${yv || "-"}`;
      const want = cells.get(`${xv}|${yv}`);
      const z = state.configs.z[i]?.[j] ?? null;
      const mark = state.marks.text[i]?.[j] ?? "";
      const hover = String(state.configs.text[i]?.[j] ?? "");
      if (want) {
        const wantMark = want.value === null ? want.record.status : "";
        if (z !== want.value) problems.push(`${where}: z ${z}, the records' best ${want.value}`);
        if (mark !== wantMark) problems.push(`${where}: label "${mark}", not "${wantMark}"`);
        const says = want.value === null ? `${want.record.status}:` : "latency (ms)";
        if (!hover.startsWith(says)) problems.push(`${where}: hover "${hover.slice(0, 80)}" does not start "${says}"`);
      } else if (z !== null) {
        problems.push(`${where}: z ${z} without a record`);
      } else if (complete && grid > run.total) {
        if (mark !== DASHBOARD.excluded || !hover.startsWith("excluded by constraint")) {
          problems.push(`${where}: no record in a complete run, but label "${mark}", hover "${hover.slice(0, 60)}"`);
        }
      } else if (mark !== "" || !hover.startsWith("not measured")) {
        problems.push(`${where}: not measured, but label "${mark}", hover "${hover.slice(0, 60)}"`);
      }
    }),
  );
  const excluded = run.total === null ? 0 : grid - run.total;
  const counted = state.counters.match(/excluded by constraint (\d+)/);
  if (complete && excluded > 0 ? Number(counted?.[1]) !== excluded : counted) {
    problems.push(`counters say "${counted?.[0] ?? "nothing excluded"}", the run excluded ${excluded} of ${grid}`);
  }
  const timed = records.some((r) => r.status === "ok" && Number.isFinite(r.median_ms));
  if (timed ? state.plots !== 2 : state.plots !== 1) problems.push(`${state.plots} plots (timed: ${timed})`);
  if (!timed && records.some((r) => r.status === "skipped") && !/compile-only/.test(state.note)) {
    problems.push(`no best-so-far note for a compile-only run: "${state.note}"`);
  }
  if (state.images < 1) problems.push("no heatmap image drawn");
  if (state.status !== run.status) problems.push(`counters say status ${state.status}, the run ${run.status}`);
  if (!state.stop || !state.stop.disabled || state.stop.runId !== run.run_id) {
    problems.push(`Stop button ${JSON.stringify(state.stop)} after the run (not disabled, or not run ${run.run_id})`);
  }
  return problems;
}

/** Poll the dashboard until what it draws matches its run's records (or `timeout` ms pass): a summary, or
 *  an Error listing what differs. `api(path)` GETs the server's JSON. */
export async function matchRecords(dash, api, timeout = 30_000) {
  const deadline = Date.now() + timeout;
  let problems = ["never read"];
  let state = null;
  let records = [];
  while (Date.now() < deadline) {
    state = await dashboardState(dash);
    if (state.runId) {
      const runs = await api(`/tilebench/runs?limit=100`);
      const run = runs.find((r) => String(r.run_id) === state.runId);
      records = await api(`/tilebench/runs/${encodeURIComponent(state.runId)}/records`);
      problems = run ? compareWithRecords(state, run, records) : [`run ${state.runId} not found`];
      if (!problems.length) {
        const statuses = [...new Set(records.map((r) => r.status))].join("/");
        const labels = [...new Set(state.marks.text.flat().filter(Boolean))].join("/");
        return `run ${run.run_id}: ${records.length} records (${statuses}) = ${state.configs.x.length}x${state.configs.y.length} grid, labels ${labels || "none"}, ${state.counters.slice(0, 90)}`;
      }
    } else {
      problems = ["the counters carry no run id"];
    }
    await new Promise((done) => setTimeout(done, 500));
  }
  const z = state?.configs ? JSON.stringify(state.configs.z) : "none";
  throw new Error(`${problems.slice(0, 6).join("; ")} (plot z=${z}, ${records.length} records)`);
}

/** Move the mouse over cell (x index, y index) of the dashboard's heatmap: the tooltip plotly shows. */
export async function hoverCell(page, dash, xi, yi) {
  await dash.scrollIntoViewIfNeeded();
  const point = await dash.evaluate(
    (el, [sel, i, j]) => {
      const gd = [...el.querySelectorAll(sel.plot)].find((p) => (p.data ?? []).some((t) => t.type === "heatmap"));
      const layout = gd?._fullLayout;
      if (!layout) return null;
      const box = gd.getBoundingClientRect();
      return { x: box.left + layout._size.l + layout.xaxis.l2p(i), y: box.top + layout._size.t + layout.yaxis.l2p(j) };
    },
    [DASHBOARD, xi, yi],
  );
  if (!point) throw new Error("no heatmap to hover");
  await page.mouse.move(point.x - 5, point.y - 5);
  await page.mouse.move(point.x, point.y, { steps: 3 });
  const tip = dash.locator(".hoverlayer .hovertext").first();
  await tip.waitFor({ timeout: 10_000 });
  return ((await tip.textContent()) ?? "").replace(/\s+/g, " ");
}

/** The run named by its space; the metric offers the speeds measured only (none when nothing was timed). */
export async function checkDashboardLabels(dash, name, api) {
  const label = ((await dash.locator(DASHBOARD.runLabel).textContent().catch(() => "")) ?? "").trim();
  check(
    `${name}: the dashboard names its run by its space`,
    label === "gemm · block_M×block_N×num_stages×warp_specialized (11 of 16 configs)",
    label,
  );
  await attempt(`${name}: the metric offers no speed unit that was not measured`, async () => {
    const runId = await dash.locator(DASHBOARD.counters).getAttribute("data-run-id");
    const records = await api(`/tilebench/runs/${encodeURIComponent(runId)}/records`);
    const expected = ["latency (ms)"];
    if (records.some((r) => r.tflops !== null)) expected.push("TFLOP/s");
    if (records.some((r) => r.gbps !== null)) expected.push("GB/s");
    // the third picker (x, y, metric)
    const offered = await dash.evaluate((el) => [...(el.querySelectorAll("select")[2]?.options ?? [])].map((o) => o.textContent.replace(/\u00a0/g, " ")));
    if (JSON.stringify(offered) !== JSON.stringify(expected)) throw new Error(`offers ${offered.join(", ")}, not ${expected.join(", ")}`);
    return `offers ${offered.join(", ")} (${records.length} records)`;
  });
}
