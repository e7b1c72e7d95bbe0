// The view's data, from the plugin's endpoint (Airflow's own authentication: the UI's
// session cookie rides along).
import type { ViewData } from "./lanes";

/** The path the Airflow UI is served under (its <base href>), without a trailing slash. */
export const basePath = (): string => {
  const href = document.querySelector("head > base")?.getAttribute("href") ?? "/";
  return new URL(href, globalThis.location.origin).pathname.replace(/\/$/, "");
};

export class ViewError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export const fetchView = async (
  dagId: string,
  runId: string,
  taskId: string,
  mapIndex: number,
  tryNumber?: number,
  signal?: AbortSignal,
): Promise<ViewData> => {
  const path = [dagId, runId, taskId].map(encodeURIComponent).join("/");
  const tried = tryNumber === undefined ? "" : `&try_number=${tryNumber}`;
  const url = `${basePath()}/torchx/app/${path}?map_index=${mapIndex}${tried}`;
  const response = await fetch(url, { credentials: "same-origin", signal });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = (await response.json()) as { detail?: unknown };
      detail = typeof body.detail === "string" ? body.detail : detail;
    } catch {
      // not JSON: the status text says it
    }
    throw new ViewError(detail, response.status);
  }
  return (await response.json()) as ViewData;
};
