const MAX_HITS = 2000;

function render({ model, el }) {
  el.classList.add("tb-code");
  el.innerHTML = `
    <div class="tb-bar" data-lm-suppress-shortcuts="true">
      <span class="tb-title"></span><span class="tb-meta"></span><span class="tb-spacer"></span>
      <input class="tb-find" type="search" placeholder="search" spellcheck="false">
      <span class="tb-count"></span>
      <button class="tb-prev" title="previous match (Shift+Enter)">&#8593;</button>
      <button class="tb-next" title="next match (Enter)">&#8595;</button>
      <button class="tb-copy" title="copy the code">copy</button>
    </div>
    <div class="tb-scroll"><pre class="tb-src"></pre></div>`;
  const $ = (selector) => el.querySelector(selector);
  const title = $(".tb-title"), meta = $(".tb-meta"), find = $(".tb-find"), count = $(".tb-count");
  const scroller = $(".tb-scroll"), src = $(".tb-src"), copyButton = $(".tb-copy");
  let hits = [];        // one entry per match: the <mark> elements it was split into
  let current = -1;
  let marked = new Map(); // line element -> its HTML before marking
  let timer = null;
  let texts = [];         // each line's text, lower case (read from the DOM once per render)
  let lit = [];           // the line elements marked as highlighted
  let revealPending = false; // highlighted lines to scroll to once the view is shown

  function clearMarks() {
    for (const [line, html] of marked) line.innerHTML = html;
    marked = new Map();
    hits = [];
    current = -1;
  }

  function markLine(line, text, needle, room) {
    const starts = [];
    for (let at = text.indexOf(needle); at !== -1 && starts.length < room; at = text.indexOf(needle, at + needle.length)) {
      starts.push(at);
    }
    if (!starts.length) return [];
    marked.set(line, line.innerHTML);
    const nodes = [];
    const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(), offset = 0; node; node = walker.nextNode()) {
      nodes.push([node, offset]);
      offset += node.data.length;
    }
    const groups = [];
    // Right to left, so splitting a text node never moves the text still to be marked.
    for (let h = starts.length - 1; h >= 0; h--) {
      const s = starts[h], e = s + needle.length, parts = [];
      for (let k = nodes.length - 1; k >= 0; k--) {
        const [node, start] = nodes[k];
        const end = start + node.data.length;
        if (end <= s || start >= e) continue;
        const a = Math.max(s, start) - start, b = Math.min(e, end) - start;
        if (b < node.data.length) node.splitText(b);
        const target = a > 0 ? node.splitText(a) : node;
        const mark = document.createElement("mark");
        mark.className = "tb-hit";
        target.parentNode.insertBefore(mark, target);
        mark.appendChild(target);
        parts.unshift(mark);
      }
      groups.unshift(parts);
    }
    return groups;
  }

  function showCount() {
    if (!find.value) count.textContent = "";
    else if (!hits.length) count.textContent = "no matches";
    else count.textContent = `${current + 1} / ${hits.length}${hits.length >= MAX_HITS ? "+" : ""}`;
  }

  function reveal(mark) {
    const box = mark.getBoundingClientRect(), view = scroller.getBoundingClientRect();
    if (box.top < view.top || box.bottom > view.bottom) {
      scroller.scrollTop += box.top - view.top - scroller.clientHeight / 2;
    }
    if (box.left < view.left || box.right > view.right) {
      scroller.scrollLeft += box.left - view.left - scroller.clientWidth / 3;
    }
  }

  function select(index) {
    if (!hits.length) return showCount();
    if (current >= 0) for (const mark of hits[current]) mark.classList.remove("tb-cur");
    current = (index + hits.length) % hits.length;
    for (const mark of hits[current]) mark.classList.add("tb-cur");
    reveal(hits[current][0]);
    showCount();
  }

  function search() {
    clearMarks();
    const needle = find.value.toLowerCase();
    if (needle) {
      const lines = src.children;
      for (let n = 0; n < texts.length && hits.length < MAX_HITS; n++) {
        if (texts[n].includes(needle)) hits.push(...markLine(lines[n], texts[n], needle, MAX_HITS - hits.length));
      }
    }
    if (hits.length) select(0); else showCount();
  }

  function shown() {
    return scroller.clientHeight > 0 && el.getClientRects().length > 0;
  }

  function inView(line) {
    const box = line.getBoundingClientRect(), view = scroller.getBoundingClientRect();
    return box.bottom > view.top && box.top < view.bottom;
  }

  // Scroll the first highlighted line into the view, unless one is in it already (the line just
  // clicked); a hidden view (a tab not shown) does it when it is next shown.
  function revealLit() {
    revealPending = false;
    if (!lit.length) return;
    if (!shown()) { revealPending = true; return; }
    if (lit.some(inView)) return;
    const box = lit[0].getBoundingClientRect(), view = scroller.getBoundingClientRect();
    scroller.scrollTop += box.top - view.top - scroller.clientHeight / 3;
  }

  function light() {
    for (const line of lit) line.classList.remove("tb-lit");
    const lines = src.children;
    lit = (model.get("highlighted") || []).map((n) => lines[n - 1]).filter(Boolean);
    for (const line of lit) line.classList.add("tb-lit");
    revealLit();
  }

  function linked() {
    const on = Boolean(model.get("clickable"));
    el.classList.toggle("tb-linked", on);
    title.title = on ? "click a line: the lines it came from or became are highlighted in the other tabs" : "";
  }

  function clicked(event) {
    if (!model.get("clickable") || String(window.getSelection ? window.getSelection() : "")) return;
    const line = event.target.closest ? event.target.closest(".tbl") : null;
    if (!line || line.parentNode !== src) return;
    model.set("clicked_line", Array.prototype.indexOf.call(src.children, line) + 1);
    model.save_changes();
  }

  function header() {
    const lines = src.children.length;
    title.textContent = model.get("title");
    meta.textContent = `${model.get("language")} · ${lines} line${lines === 1 ? "" : "s"}`;
  }

  function show() {
    marked = new Map();
    src.innerHTML = model.get("html");
    texts = Array.from(src.children, (line) => line.textContent.toLowerCase());
    src.style.setProperty("--tb-gutter", `${Math.max(2, String(src.children.length).length)}ch`);
    header();
    if (find.value) search(); else { hits = []; current = -1; showCount(); }
    lit = [];
    light();
  }

  function fallbackCopy(text) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (error) { ok = false; }
    area.remove();
    return ok;
  }

  async function copy() {
    const text = model.get("code");
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch (error) {
      ok = fallbackCopy(text);
    }
    copyButton.textContent = ok ? "copied" : "copy failed";
    setTimeout(() => { copyButton.textContent = "copy"; }, 1200);
  }

  find.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { timer = null; search(); }, 120);
  });
  find.addEventListener("keydown", (event) => {
    event.stopPropagation();  // keep notebook shortcuts (Shift+Enter runs a cell) out of the search box
    if (event.key === "Enter") {
      event.preventDefault();
      if (timer !== null) {  // typed but not searched yet: search now and show the first match
        clearTimeout(timer);
        timer = null;
        search();
      } else {
        select(current + (event.shiftKey ? -1 : 1));
      }
    } else if (event.key === "Escape") {
      find.value = "";
      search();
    }
  });
  $(".tb-next").addEventListener("click", () => select(current + 1));
  $(".tb-prev").addEventListener("click", () => select(current - 1));
  copyButton.addEventListener("click", copy);
  src.addEventListener("click", clicked);
  const watcher = new IntersectionObserver((entries) => {
    if (revealPending && entries.some((entry) => entry.isIntersecting)) revealLit();
  });
  watcher.observe(scroller);
  model.on("change:html", show);
  model.on("change:title change:language", header);
  model.on("change:highlighted", light);
  model.on("change:clickable", linked);
  linked();
  show();
  return () => {
    clearTimeout(timer);
    watcher.disconnect();
    model.off("change:html", show);
    model.off("change:title change:language", header);
    model.off("change:highlighted", light);
    model.off("change:clickable", linked);
  };
}

export default { render };
