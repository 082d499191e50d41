/**
 * The "Tuning runs" sidebar: the record store's runs (GET /tilebench/runs), newest first, with
 * status, progress and best result; clicking a run shows its records (GET /tilebench/runs/<id>/records).
 * It polls every 2 s while it is visible and a run is going, every 15 s otherwise, and not when hidden.
 */
import { Widget } from '@lumino/widgets';

import { IRecord, IRun, requestList, tilebenchIcon } from './api';

export const RUNS_PANEL_ID = 'tilebench-runs';
const FAST_MS = 2000;
const SLOW_MS = 15000;
/** Statuses of a run that is still going (stopping: asked to stop, finishing its current config). */
const GOING = new Set(['running', 'stopping']);

type Child = Node | string | null | undefined | false;

/** A DOM element with attributes (`class`, `data-*`, `title` ...) and children. */
function h(tag: string, attrs: Record<string, string | undefined> = {}, ...children: Child[]): HTMLElement {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined) {
      element.setAttribute(name, value);
    }
  }
  for (const child of children) {
    if (child) {
      element.append(child);
    }
  }
  return element;
}

function ms(value: number | null): string {
  if (value === null || value === undefined) {
    return '—';
  }
  return value >= 100 ? value.toFixed(0) : value >= 1 ? value.toFixed(2) : String(Number(value.toPrecision(3)));
}

function number(value: number | null, digits = 1): string {
  return value === null || value === undefined ? '—' : value.toFixed(digits);
}

function config(values: Record<string, unknown> | null): string {
  if (!values) {
    return '';
  }
  return Object.entries(values)
    .map(([name, value]) => `${name}=${JSON.stringify(value)}`)
    .join(', ');
}

function when(seconds: number | null): string {
  if (!seconds) {
    return '';
  }
  const date = new Date(seconds * 1000);
  const today = new Date().toDateString() === date.toDateString();
  return today ? date.toLocaleTimeString() : date.toLocaleString();
}

/** "3 malformed rows skipped", or '' for none: rows of the record store that did not parse. */
function skippedText(skipped: number): string {
  return skipped > 0 ? `${skipped} malformed row${skipped === 1 ? '' : 's'} skipped` : '';
}

/** `text` with line-break opportunities after each "×", "_" and ", " (long parameter names wrap there, not
 *  at any letter). */
function breakable(text: string): Node[] {
  return text
    .split(/(?<=×|_|, )/)
    .flatMap((part, index) => (index ? [document.createElement('wbr'), part] : [part]))
    .map(part => (typeof part === 'string' ? document.createTextNode(part) : part));
}

function progressText(run: IRun): string {
  return run.total ? `${run.count}/${run.total}` : `${run.count}`;
}

/** A speed column: a record field and its unit. */
interface ISpeed {
  field: 'tflops' | 'gbps';
  unit: string;
}

/** The speeds some record has: TFLOP/s where flops were given and a config was timed, GB/s where bytes
 *  were; none when nothing was timed (compile-only), whatever was given. */
function speeds(records: IRecord[]): ISpeed[] {
  const all: ISpeed[] = [
    { field: 'tflops', unit: 'TFLOP/s' },
    { field: 'gbps', unit: 'GB/s' }
  ];
  return all.filter(speed => records.some(record => record[speed.field] !== null));
}

/** One run of the list: kernel and problem, status, space, progress, best, when and where. */
function runRow(run: IRun, selected: boolean): HTMLElement {
  const best =
    run.best_latency_ms === null
      ? h('span', { class: 'tb-run-best' }, GOING.has(run.status) ? 'no result yet' : 'no timed result')
      : h(
          'span',
          { class: 'tb-run-best', title: config(run.best_config) },
          `best ${ms(run.best_latency_ms)} ms`,
          h('span', { class: 'tb-run-best-config' }, config(run.best_config))
        );
  const failed = run.count - (run.counts.ok ?? 0) - (run.counts.skipped ?? 0);
  const bar = h('progress', {
    class: 'tb-run-progress-bar',
    max: '1',
    value: run.progress === null ? undefined : String(run.progress)
  });
  return h(
    'li',
    {
      class: `tb-run${selected ? ' tb-run-selected' : ''}`,
      'data-run-id': run.run_id,
      'data-status': run.status,
      title: `${run.label || run.kernel}\nrun ${run.run_id}${run.notebook ? `\n${run.notebook}` : ''}`
    },
    h(
      'div',
      { class: 'tb-run-head' },
      h(
        'span',
        { class: 'tb-run-name' },
        h('span', { class: 'tb-run-kernel' }, run.kernel),
        run.problem && h('span', { class: 'tb-run-problem' }, ...breakable(run.problem))
      ),
      h('span', { class: `tb-run-status tb-status-${run.status}` }, run.status)
    ),
    run.space_text && h('div', { class: 'tb-run-space' }, ...breakable(run.space_text)),
    h(
      'div',
      { class: 'tb-run-progress' },
      bar,
      h('span', { class: 'tb-run-count' }, progressText(run)),
      failed > 0 && h('span', { class: 'tb-run-failed' }, `${failed} failed`)
    ),
    best,
    h(
      'div',
      { class: 'tb-run-meta' },
      [when(run.started), run.strategy, run.notebook?.split('/').pop()].filter(Boolean).join(' · ')
    )
  );
}

/** A run's records: status and latency first (they show at the sidebar's default width), then the speeds
 *  that were measured ("—" under "speed" when none was), the config's parameters and the compile time. */
function recordsTable(run: IRun, records: IRecord[]): HTMLElement {
  const params = Array.from(new Set(records.flatMap(record => Object.keys(record.config))));
  const measured = speeds(records);
  const speedHeads = measured.length
    ? measured.map(speed => h('th', { class: 'tb-col-speed' }, speed.unit))
    : [h('th', { class: 'tb-col-speed', title: 'no config was timed (compile-only or failed)' }, 'speed')];
  const head = h(
    'tr',
    {},
    h('th', { class: 'tb-col-status' }, 'status'),
    h('th', { class: 'tb-col-latency' }, 'median ms'),
    ...speedHeads,
    ...params.map(name => h('th', { class: 'tb-col-param' }, ...breakable(name))),
    h('th', {}, 'compile s')
  );
  const body = records.map(record => {
    const speedCells = measured.length
      ? measured.map(speed => h('td', { class: 'tb-col-speed' }, number(record[speed.field])))
      : [h('td', { class: 'tb-col-speed' }, '—')];
    return h(
      'tr',
      {
        class: `tb-record${record.median_ms !== null && record.median_ms === run.best_latency_ms ? ' tb-record-best' : ''}`,
        'data-status': record.status,
        title: record.message || undefined
      },
      h('td', { class: `tb-col-status tb-status-${record.status}` }, record.status),
      h('td', { class: 'tb-col-latency' }, ms(record.median_ms)),
      ...speedCells,
      ...params.map(name => h('td', { class: 'tb-col-param' }, JSON.stringify(record.config[name] ?? null))),
      h('td', {}, number(record.compile_s, 2))
    );
  });
  return h('table', { class: 'tb-records-table' }, h('thead', {}, head), h('tbody', {}, ...body));
}

export class RunsPanel extends Widget {
  constructor() {
    super();
    this.id = RUNS_PANEL_ID;
    this.addClass('tb-runs-panel');
    this.title.icon = tilebenchIcon;
    this.title.caption = 'Tuning runs';
    const refresh = h('button', { class: 'tb-runs-refresh jp-Button', title: 'Refresh' }, '⟳');
    refresh.addEventListener('click', () => void this.refresh());
    this.node.append(
      h('header', { class: 'tb-runs-header' }, h('h2', {}, 'Tuning runs'), refresh),
      this._message,
      this._list,
      this._records
    );
    this._list.addEventListener('click', event => {
      const row = (event.target as HTMLElement).closest<HTMLElement>('.tb-run');
      if (row?.dataset.runId) {
        this._selected = this._selected === row.dataset.runId ? null : row.dataset.runId;
        void this.refresh();
      }
    });
  }

  /** The runs as last fetched. */
  get runs(): readonly IRun[] {
    return this._runs;
  }

  /** Fetch the runs (and the selected run's records) now, render them, and plan the next poll. */
  async refresh(): Promise<void> {
    window.clearTimeout(this._timer);
    try {
      const { items, skipped } = await requestList<IRun>('runs');
      this._runs = items;
      this._message.textContent =
        skippedText(skipped) ||
        (this._runs.length
          ? ''
          : 'No tuning runs yet: tune a kernel (kernel.tune(...) or %%tilelang --tune) and it shows here.');
      this._message.dataset.state = 'ok';
      this._renderRuns();
      await this._renderRecords();
    } catch (error) {
      this._message.textContent = `Could not read the tuning runs: ${error}`;
      this._message.dataset.state = 'error';
    }
    this._schedule();
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  protected onBeforeHide(): void {
    window.clearTimeout(this._timer);
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  private _schedule(): void {
    window.clearTimeout(this._timer);
    if (this.isDisposed || !this.isVisible) {
      return;
    }
    const going = this._runs.some(run => GOING.has(run.status));
    this._timer = window.setTimeout(() => void this.refresh(), going ? FAST_MS : SLOW_MS);
  }

  private _renderRuns(): void {
    this._list.replaceChildren(...this._runs.map(run => runRow(run, run.run_id === this._selected)));
  }

  private async _renderRecords(): Promise<void> {
    const run = this._runs.find(r => r.run_id === this._selected);
    if (!run) {
      this._selected = null;
      this._records.replaceChildren();
      this._records.hidden = true;
      return;
    }
    const listed = await requestList<IRecord>(`runs/${encodeURIComponent(run.run_id)}/records`);
    const records = listed.items;
    this._records.hidden = false;
    this._records.dataset.runId = run.run_id;
    this._records.replaceChildren(
      h(
        'h3',
        { title: run.label },
        `${run.kernel}: ${records.length} record${records.length === 1 ? '' : 's'}`,
        listed.skipped > 0 && ` (${skippedText(listed.skipped)})`
      ),
      h('div', { class: 'tb-records-scroll' }, recordsTable(run, records))
    );
  }

  private _runs: IRun[] = [];
  private _selected: string | null = null;
  private _timer = 0;
  private _message = h('div', { class: 'tb-runs-message' });
  private _list = h('ul', { class: 'tb-runs-list' });
  private _records = h('section', { class: 'tb-run-records', hidden: '' });
}
