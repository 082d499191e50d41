// The selectors the browser test finds tilebench by, in one place, so that they follow the source.

// tilebench's JupyterLab extension (extension/src): the %%tilelang cell language and the "Tuning runs" sidebar.
export const EXTENSION = {
  // extension/src/language.ts: the cell editor of a %%tilelang cell carries this attribute ...
  languageEditor: '.cm-editor[data-tilebench-language="tilelang"]',
  // ... T.* DSL names are marked with this class, the magic line's options (--ref, -o) with that one.
  dslMark: ".tb-tl-dsl",
  magicOptionMark: ".tb-tl-magic",
  // extension/src/sidebar.ts: the sidebar panel (id RUNS_PANEL_ID), its tab in the left area (lumino
  // tab bars carry the widget id as data-id), a run row and the row's parts.
  runsPanel: "#tilebench-runs",
  runsTab: '.jp-SideBar .lm-TabBar-tab[data-id="tilebench-runs"]',
  runRow: ".tb-run",
  runKernel: ".tb-run-kernel",
  runProblem: ".tb-run-problem",
  runSpace: ".tb-run-space",
  runCount: ".tb-run-count",
  runMeta: ".tb-run-meta",
  runsMessage: ".tb-runs-message",
  // the clicked run's records
  records: ".tb-run-records",
  recordsTable: ".tb-records-table",
};

// tilebench's own widgets (tilebench/views): panel.py, loading.py, code.py, layouts.py, dashboard.py.
export const PANEL_TABS = ["Source", "TIR", "Lowered TIR", "CUDA", "PTX", "SASS", "Resources", "Layouts", "Run", "Profile"];
export const WIDGET = {
  panel: ".tilebench-panel",
  panelHeader: ".tilebench-header",
  threadsNote: ".tilebench-threads-note",
  tab: ".lm-TabBar-tab",
  // a tab's box (ipywidgets' Tab: one child of its contents per tab, hidden but the selected one)
  tabBox: ".widget-tab-contents > .widget-box",
  loading: ".tilebench-loading",
  layouts: ".tilebench-layouts",
  codeView: ".tb-code",
  dashboard: ".tilebench-dashboard",
  runLabel: ".tilebench-run-label",
  counters: ".tilebench-counters",
  plot: ".js-plotly-plot",
};
