/**
 * The tilebench server extension's REST API (tilebench/lab/handlers.py) and the shared icon.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon } from '@jupyterlab/ui-components';

/** One tuning run, as GET /tilebench/runs lists it (tilebench.store's RunInfo). */
export interface IRun {
  run_id: string;
  kernel: string;
  /** died: its process is gone (killed, crashed) without finishing the run. */
  status: 'running' | 'stopping' | 'done' | 'stopped' | 'failed' | 'died';
  started: number;
  finished: number | null;
  total: number | null;
  count: number;
  counts: Record<string, number>;
  progress: number | null;
  best_latency_ms: number | null;
  best_config: Record<string, unknown> | null;
  strategy: string | null;
  target: string | null;
  notebook: string | null;
  heartbeat: number | null;
  /** What tells it from other runs of its kernel: "gemm(A 4096×4096, B 4096×4096) · block_M×block_N
   *  (11 of 16 configs) · 02_autotune.ipynb · 10:42" (tilebench/views/labels.py). */
  label: string;
  /** The call it tuned for, short ("A 4096×4096, B 4096×4096", "N=4096"); '' when unknown. */
  problem: string;
  /** The tuned parameters and the configs planned ("block_M×block_N (11 of 16 configs)"); '' when unknown. */
  space_text: string;
}

/** One record of a run, as GET /tilebench/runs/<run_id>/records lists it (tilebench.store's Record). */
export interface IRecord {
  id: number;
  config: Record<string, unknown>;
  status: string;
  message: string;
  compile_s: number | null;
  median_ms: number | null;
  min_ms: number | null;
  max_ms: number | null;
  n: number | null;
  tflops: number | null;
  gbps: number | null;
  created: number | null;
}

/** A kernel template, as GET /tilebench/templates lists it (tilebench/lab/templates.py). */
export interface ITemplate {
  name: string;
  title: string;
  description: string;
  source: string;
}

/** GET /tilebench/<path> as JSON; throws with the server's message on an error status. */
export async function requestAPI<T>(path: string): Promise<T> {
  return (await request<T>(path)).data;
}

/** A list the server read from the record store, and how many malformed rows it left out of it. */
export interface IListed<T> {
  items: T[];
  skipped: number;
}

/** GET /tilebench/<path>, a JSON list, with its X-Tilebench-Skipped count (tilebench/lab/handlers.py). */
export async function requestList<T>(path: string): Promise<IListed<T>> {
  const { data, response } = await request<T[]>(path);
  return { items: data, skipped: Number(response.headers.get('X-Tilebench-Skipped') ?? 0) || 0 };
}

async function request<T>(path: string): Promise<{ data: T; response: Response }> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'tilebench', path);
  const response = await ServerConnection.makeRequest(url, {}, settings);
  const text = await response.text();
  let data: any = text;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text for the error message
  }
  if (!response.ok) {
    const message = (data && data.message) || text || response.statusText;
    throw new ServerConnection.ResponseError(response, `tilebench: GET ${path}: ${message}`);
  }
  return { data: data as T, response };
}

/** A 2x2 grid of tiles, one lit: the icon of the sidebar and the launcher items. */
export const tilebenchIcon = new LabIcon({
  name: 'tilebench:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<rect x="1" y="1" width="6" height="6" rx="1"/><rect x="9" y="9" width="6" height="6" rx="1"/>' +
    '<rect x="1" y="9" width="6" height="6" rx="1"/></g>' +
    '<rect class="jp-icon-brand0" fill="#F57C00" x="9" y="1" width="6" height="6" rx="1"/></svg>'
});
