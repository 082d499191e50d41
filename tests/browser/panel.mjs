// Notebook 1's kernel panel (tilebench/views/panel.py) in the page: the header, every tab (each says what it
// is loading until the kernel has built it, then shows it), the code views, the layout heatmaps (colorbars
// as tall as their heatmaps, readable axis titles), the threads tilelang added, SASS or how to get it, and
// the lines linked: a click on T.gemm's Source line highlights its CUDA and PTX lines (issue 34).
// A 1280x800 screenshot of each tab goes to screenshots/.

import { MINUTE, attempt, check, screen, shot, sleep } from "./report.mjs";
import { PANEL_TABS, WIDGET } from "./selectors.mjs";

// What notebook 1's GEMM (threads=128, compiled for sm_90a) launches, in the Resources tab and the header.
const PRODUCER_NOTE = "256 (128 asked with threads=128 + 128 producer threads tilelang added for warp specialization)";
// What each tab says until the kernel has built it (tilebench/views/panel.py's LOADING).
const LOADING = {
  TIR: "loading the TIR…",
  "Lowered TIR": "loading the lowered TIR…",
  CUDA: "loading the CUDA source…",
  PTX: "loading PTX…",
  SASS: "disassembling…",
  Resources: "loading resources…",
  Layouts: "loading layouts…",
  Run: "loading the run's results…",
  Profile: "loading the profile…",
};
const BUSY_S = 8; // a cell that keeps the kernel busy while the Layouts tab is first opened

/** The visible CodeView of the panel: title, meta, line count, highlighted tokens, a token's colour. */
export async function visibleCode(panel) {
  return panel.evaluate((el, sel) => {
    const view = [...el.querySelectorAll(sel.codeView)].find((v) => v.offsetParent !== null);
    if (!view) return null;
    const lines = [...view.querySelectorAll(".tb-src .tbl")];
    const tokens = [...view.querySelectorAll(".tb-src .tbl span[class]")];
    const keyword = view.querySelector(".tb-src .tbl .k, .tb-src .tbl .kt, .tb-src .tbl .cp");
    const plain = view.querySelector(".tb-src");
    return {
      title: view.querySelector(".tb-title")?.textContent,
      meta: view.querySelector(".tb-meta")?.textContent,
      lines: lines.length,
      tokens: tokens.length,
      text: lines.slice(0, 400).map((line) => line.textContent).join("\n"),
      keywordColor: keyword ? getComputedStyle(keyword).color : null,
      plainColor: getComputedStyle(plain).color,
      gutter: lines.length ? getComputedStyle(lines[0], "::before").content : null,
    };
  }, WIDGET);
}

export async function openTab(panel, title) {
  await panel.locator(WIDGET.tab, { hasText: new RegExp(`^${title}$`) }).first().click();
  await panel
    .locator(`${WIDGET.tab}.lm-mod-current`, { hasText: new RegExp(`^${title}$`) })
    .first()
    .waitFor({ timeout: 10_000 });
}

/** What plotly drew in the first visible plot under root: trace types, heatmap images, axes, title. */
export async function plotState(root) {
  return root.evaluate((el, sel) => {
    const plot = [...el.querySelectorAll(sel.plot)].find((p) => p.offsetParent !== null);
    if (!plot) return null;
    const images = [...plot.querySelectorAll(".heatmaplayer g.hm image")].map((img) => {
      const box = img.getBoundingClientRect();
      return {
        width: Math.round(box.width),
        height: Math.round(box.height),
        png: (img.getAttribute("href") || img.getAttribute("xlink:href") || "").startsWith("data:image/png"),
      };
    });
    const box = plot.getBoundingClientRect();
    return {
      types: (plot.data || []).map((trace) => trace.type),
      heatmapLayers: plot.querySelectorAll(".heatmaplayer").length,
      layerText: [...plot.querySelectorAll(".heatmaplayer")].map((layer) => layer.textContent).join(" "),
      images,
      title: plot.querySelector(".gtitle")?.textContent ?? "",
      xticks: [...plot.querySelectorAll(".xaxislayer-above .xtick text")].map((t) => t.textContent),
      yticks: [...plot.querySelectorAll(".yaxislayer-above .ytick text")].map((t) => t.textContent),
      size: [Math.round(box.width), Math.round(box.height)],
      x: Array.from(plot.data?.[0]?.x ?? []),
      y: Array.from(plot.data?.[0]?.y ?? []),
      z: Array.from(plot.data?.[0]?.z ?? [], (row) => Array.from(row ?? [])),
      text: Array.from(plot.data?.[0]?.text ?? [], (row) => (Array.isArray(row) ? row : [row])),
    };
  }, WIDGET);
}

/** The box of one tab of the kernel panel `kp` (shown or not). */
function tabBox(kp, title) {
  return kp.locator(WIDGET.tabBox).nth(PANEL_TABS.indexOf(title));
}

/** The loading lines that show in a box now (display:none ones do not). */
async function loadingShown(box) {
  return box.evaluate(
    (el, sel) => [...el.querySelectorAll(sel)].filter((l) => l.offsetParent !== null).map((l) => l.textContent.trim()),
    WIDGET.loading,
  );
}

/** Wait until the tab's content has come: no loading line shows in it (and, in Layouts, a heatmap is drawn). */
async function waitBuilt(kp, title, timeout = MINUTE) {
  const box = tabBox(kp, title);
  if (title === "Layouts") await box.locator(`${WIDGET.plot} .heatmaplayer g.hm image`).first().waitFor({ timeout });
  const deadline = Date.now() + timeout;
  while ((await loadingShown(box)).length) {
    if (Date.now() > deadline) throw new Error(`${title} still says "${(await loadingShown(box)).join(" | ")}"`);
    await sleep(250);
  }
  return box;
}

/** The panel's top at the top of the window, for a screenshot of what a user sees of it. */
async function scrollToPanel(kp) {
  await kp.evaluate((el) => el.scrollIntoView({ block: "start" }));
  await sleep(300);
}

/** Every tab but the first, unopened, says what it is loading (the kernel builds it when first opened). */
async function checkPlaceholders(kp, name) {
  const texts = await kp.locator(WIDGET.tabBox).evaluateAll((els) => els.map((el) => el.textContent.replace(/\s+/g, " ").trim()));
  const wrong = Object.entries(LOADING).filter(([title, text]) => !texts[PANEL_TABS.indexOf(title)]?.startsWith(text));
  check(
    `${name}: each unopened tab says what it is loading ("loading layouts…", ...)`,
    texts.length === PANEL_TABS.length && wrong.length === 0,
    wrong.length ? wrong.map(([title]) => `${title}: "${texts[PANEL_TABS.indexOf(title)]?.slice(0, 80)}"`).join(" | ") : texts[7].slice(0, 120),
  );
}

/** Keep the kernel busy with a new last cell (`time.sleep`), as a user's next cell would. */
async function busyKernel(page, panel, name, lab) {
  await panel.locator(".jp-Cell .jp-InputPrompt").last().click();
  await page.keyboard.press("Escape");
  await page.keyboard.press("b");
  await page.keyboard.press("Enter");
  await page.keyboard.type(`import time; time.sleep(${BUSY_S})`);
  await page.keyboard.press("Shift+Enter");
  const deadline = Date.now() + 20_000;
  while ((await lab.kernelState(name)) !== "busy") {
    if (Date.now() > deadline) throw new Error("the kernel did not start the sleeping cell");
    await sleep(100);
  }
}

/** Layouts opened while the kernel runs another cell: it says "loading layouts…" until the heatmaps come. */
async function checkLayoutsWhileBusy(page, panel, kp, name, lab) {
  const busy = await attempt(`${name}: a cell keeps the kernel busy (time.sleep(${BUSY_S}))`, () => busyKernel(page, panel, name, lab));
  await scrollToPanel(kp);
  await attempt(`${name}: Layouts opens`, () => openTab(kp, "Layouts"));
  if (busy) {
    await attempt(`${name}: opened while the kernel is busy, Layouts says "loading layouts…"`, async () => {
      const shown = await loadingShown(tabBox(kp, "Layouts"));
      if (!shown.some((text) => text.startsWith(LOADING.Layouts))) throw new Error(`shown: ${JSON.stringify(shown)}`);
      await screen(page, "panel_08_layouts_loading.png");
      return shown[0].slice(0, 120);
    });
  }
  await attempt(`${name}: layout heatmap drawn, and the "drawing" line hidden then`, async () => {
    await waitBuilt(kp, "Layouts", 2 * MINUTE);
    await sleep(500);
    const plot = await plotState(kp);
    const drawn = plot?.images.filter((img) => img.png && img.width > 50 && img.height > 50) ?? [];
    if (!plot || !plot.types.includes("heatmap") || drawn.length < 1) {
      throw new Error(`plot: ${JSON.stringify(plot && { ...plot, z: undefined, text: undefined })}`);
    }
    const note = await kp.locator(`${WIDGET.layouts} ${WIDGET.loading}`).count();
    if (note !== 1) throw new Error(`${note} "drawing the heatmaps" lines in the layout view, not 1 (hidden)`);
    return `${plot.types.join("+")}, ${drawn.length} heatmap images ${drawn.map((i) => `${i.width}x${i.height}`).join(" ")}, title "${plot.title}"`;
  });
  await attempt(`${name}: each colorbar is as tall as its heatmap; the axes read "row i", "column j"`, async () => {
    const shape = await kp.evaluate((el, sel) => {
      const plot = [...el.querySelectorAll(sel.plot)].find((p) => p.offsetParent !== null);
      const box = (node) => {
        const b = node.getBoundingClientRect();
        return [Math.round(b.top), Math.round(b.height)];
      };
      return {
        heatmaps: [...plot.querySelectorAll(".heatmaplayer g.hm image")].map(box),
        colorbars: [...plot.querySelectorAll(".colorbar rect.cbbg")].map(box),
        titles: [...plot.querySelectorAll(".xtitle, .x2title, .ytitle, .y2title")].map((t) => t.textContent),
      };
    }, WIDGET);
    const off = shape.heatmaps.filter((h, i) => !shape.colorbars[i] || Math.abs(h[0] - shape.colorbars[i][0]) > 2 || Math.abs(h[1] - shape.colorbars[i][1]) > 2);
    const titles = [...shape.titles].sort().join(",");
    if (shape.heatmaps.length !== 2 || off.length || titles !== "column j,column j,row i,row i") {
      throw new Error(JSON.stringify(shape));
    }
    return `heatmaps (top, height) ${JSON.stringify(shape.heatmaps)}, colorbars ${JSON.stringify(shape.colorbars)}, titles ${titles}`;
  });
  await shot(kp, "01_panel_layouts.png");
}

/** Notebook 1's GEMM (threads=128 on sm_90a): 256 threads, the extra 128 explained. */
async function checkThreads(kp, name) {
  const note = ((await kp.locator(WIDGET.threadsNote).first().textContent().catch(() => "")) ?? "").trim();
  check(`${name}: the header explains the 256 threads of threads=128`, note === `threads / block: ${PRODUCER_NOTE}`, note);
  await attempt(`${name}: Resources explains the producer warpgroup`, async () => {
    await openTab(kp, "Resources");
    const box = await waitBuilt(kp, "Resources", 20_000);
    const text = (await box.innerText()).replace(/\s+/g, " ");
    if (!text.includes(`threads / block ${PRODUCER_NOTE}`) || !/regist/i.test(text)) throw new Error(text.slice(0, 300));
    return text.slice(text.indexOf("threads / block"), text.indexOf("threads / block") + 130);
  });
}

/** SASS: the disassembly, or (no nvdisasm / cuobjdump here) where to get one. */
async function checkSass(kp, name) {
  await attempt(`${name}: SASS shows the disassembly or how to get a disassembler`, async () => {
    await openTab(kp, "SASS");
    const box = await waitBuilt(kp, "SASS");
    const code = await visibleCode(kp);
    if (code?.title === "SASS") return `SASS: ${code.meta}`;
    const text = (await box.innerText()).replace(/\s+/g, " ");
    for (const needed of ["not available", "$CUDA_HOME/bin", "PATH", "pip install nvidia-cuda-nvdisasm"]) {
      if (!text.includes(needed)) throw new Error(`no "${needed}" in "${text.slice(0, 300)}"`);
    }
    return text.slice(0, 200);
  });
}

/** Each tab, opened and built, as a 1280x800 window shows it: screenshots/panel_NN_<tab>.png. */
async function screenEveryTab(page, kp, name) {
  const shown = [];
  for (const [index, title] of PANEL_TABS.entries()) {
    try {
      await openTab(kp, title);
      await waitBuilt(kp, title);
      await scrollToPanel(kp);
      await screen(page, `panel_${String(index + 1).padStart(2, "0")}_${title.toLowerCase().replace(/\s+/g, "_")}.png`);
      shown.push(title);
    } catch (error) {
      shown.push(`${title} (${String(error.message).split("\n")[0]})`);
    }
  }
  check(`${name}: every tab opened and built for its screenshot`, shown.every((t) => PANEL_TABS.includes(t)), shown.join(", "));
}

export async function checkKernelPanel(page, panel, name, lab) {
  const panels = panel.locator(WIDGET.panel);
  const found = await attempt(`${name}: kernel panel shown (${WIDGET.panel})`, async () => {
    await panels.first().waitFor({ timeout: 30_000 });
    return `${await panels.count()} panels`;
  });
  if (!found) return;
  const kp = panels.first();
  await kp.scrollIntoViewIfNeeded();

  const header = ((await kp.locator(WIDGET.panelHeader).first().innerText().catch(() => "")) ?? "").replace(/\n+/g, " | ");
  check(`${name}: panel header names the kernel and target`, /^gemm → cuda/.test(header.trim()), header.trim().slice(0, 160));

  const titles = await kp
    .locator(`.jupyter-widget-tab ${WIDGET.tab} .lm-TabBar-tabLabel`)
    .evaluateAll((els) => els.map((el) => el.textContent));
  check(`${name}: panel tabs rendered`, JSON.stringify(titles) === JSON.stringify(PANEL_TABS), titles.join(", "));
  await checkPlaceholders(kp, name);

  // Source: the first tab, filled at once.
  const source = await visibleCode(kp);
  check(
    `${name}: Source tab shows a code view`,
    source && source.title === "Source" && source.lines >= 10 && source.tokens > 10 && source.text.includes("T.Kernel"),
    source ? `${source.meta}, ${source.tokens} highlighted tokens` : "no visible .tb-code",
  );
  await shot(kp, "01_panel_source.png");

  await checkLayoutsWhileBusy(page, panel, kp, name, lab);
  await checkCuda(kp, name);
  await checkThreads(kp, name);
  await checkSass(kp, name);
  await screenEveryTab(page, kp, name);
  await checkLineLinks(page, kp, name);
}

/** The highlighted lines of the visible code view: its title, their texts, how many the scroller shows. */
async function litLines(kp) {
  return kp.evaluate((el, sel) => {
    const view = [...el.querySelectorAll(sel.codeView)].find((v) => v.offsetParent !== null);
    if (!view) return null;
    const box = view.querySelector(".tb-scroll").getBoundingClientRect();
    const lit = [...view.querySelectorAll(".tb-src .tbl.tb-lit")];
    const shown = lit.filter((line) => {
      const b = line.getBoundingClientRect();
      return b.bottom > box.top && b.top < box.bottom;
    });
    return { title: view.querySelector(".tb-title")?.textContent, texts: lit.map((l) => l.textContent), inView: shown.length };
  }, WIDGET);
}

/** Tab `title`, opened after the click, shows lines highlighted (one holding `needle`) and scrolled to. */
async function checkLit(kp, name, title, needle) {
  return attempt(`${name}: ${title} highlights the lines T.gemm became, in view ("${needle}")`, async () => {
    await openTab(kp, title);
    await waitBuilt(kp, title);
    const deadline = Date.now() + 30_000;
    let lit = await litLines(kp);
    while (!(lit && lit.title === title && lit.texts.length && lit.inView)) {
      if (Date.now() > deadline) throw new Error(JSON.stringify(lit && { ...lit, texts: lit.texts.slice(0, 3) }));
      await sleep(250);
      lit = await litLines(kp);
    }
    if (!lit.texts.some((text) => text.includes(needle))) {
      throw new Error(`no "${needle}" in the ${lit.texts.length} lines: ${lit.texts.slice(0, 3).join(" | ")}`);
    }
    return `${lit.texts.length} lines highlighted, ${lit.inView} in view, e.g. "${lit.texts.find((t) => t.includes(needle)).trim().slice(0, 80)}"`;
  });
}

/** Source, CUDA and PTX linked through the kernel's line map: click the Source line holding T.gemm. */
async function checkLineLinks(page, kp, name) {
  const clicked = await attempt(`${name}: a click on the Source line of T.gemm highlights it`, async () => {
    await openTab(kp, "Source");
    const view = kp.locator(`${WIDGET.codeView}:visible`).first();
    const line = view.locator(".tb-src .tbl", { hasText: "T.gemm(" }).first();
    await line.click();
    await view.locator(".tb-src .tbl.tb-lit", { hasText: "T.gemm(" }).waitFor({ timeout: 30_000 });
    return (await line.textContent()).trim();
  });
  if (!clicked) return;
  await checkLit(kp, name, "CUDA", "wgmma");
  await scrollToPanel(kp);
  await screen(page, "panel_10_cuda_lines.png");
  await shot(kp, "01_panel_cuda_lines.png");
  await checkLit(kp, name, "PTX", "wgmma.mma_async");
  await screen(page, "panel_11_ptx_lines.png");
}

/** CUDA: built when the tab is first opened (a round trip to the kernel), highlighted, searchable. */
async function checkCuda(kp, name) {
  await attempt(`${name}: CUDA tab opens`, () => openTab(kp, "CUDA"));
  let cuda = null;
  for (let i = 0; i < 40 && !(cuda && cuda.title === "CUDA"); i++) {
    await sleep(250);
    cuda = await visibleCode(kp);
  }
  check(
    `${name}: CUDA tab shows highlighted CUDA`,
    cuda &&
      cuda.title === "CUDA" &&
      /^cuda · \d+ lines$/.test(cuda.meta) &&
      cuda.lines >= 20 &&
      cuda.text.includes("__global__") &&
      cuda.tokens > 50,
    cuda ? `${cuda.title}: ${cuda.meta}, ${cuda.tokens} highlighted tokens` : "no visible .tb-code",
  );
  check(
    `${name}: code view CSS applied (keywords coloured, line numbers)`,
    cuda && cuda.keywordColor && cuda.keywordColor !== cuda.plainColor && cuda.gutter && cuda.gutter !== "none",
    cuda ? `keyword ${cuda.keywordColor} vs text ${cuda.plainColor}, gutter ${cuda.gutter}` : "",
  );
  await attempt(`${name}: CUDA search finds __global__`, async () => {
    const view = kp.locator(`${WIDGET.codeView}:visible`).first();
    // Typing searches after a short pause; Enter would move to the next hit if it lands after that.
    await view.locator(".tb-find").fill("__global__");
    await view.locator(".tb-count", { hasText: /^1 \/ \d+\+?$/ }).waitFor({ timeout: 10_000 });
    const count = await view.locator(".tb-count").textContent();
    const marks = await view.locator("mark.tb-hit").count();
    if (marks < 1) throw new Error(`count says ${count} but no mark.tb-hit`);
    return `${count}, ${marks} marks`;
  });
  await shot(kp, "01_panel_cuda.png");
}
