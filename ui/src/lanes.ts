// What the view draws, from the timeline the follow keeps (torchx_provider.triggers.timeline).
// Pure: no React here.

export type TimelineEvent = [number, string, ...unknown[]];

export interface TimelineReplica {
  role: string;
  id: number;
  events: TimelineEvent[];
  dropped?: number;
  restarts?: number;
}

export interface Timeline {
  version: number;
  origin: number | null;
  now: number;
  app: { phase: string; events: TimelineEvent[]; dropped?: number };
  replicas: TimelineReplica[];
  waits: [number, string, string?][];
  ui_url?: string;
  root_cause?: { replica: string; error: string; message: string };
}

export interface ReplicaResult {
  role: string;
  replica_id: number;
  state: string;
  exit_code: number | null;
  reason: string;
  failure: string;
  message: string;
  restarts: number | null;
  root_cause: boolean;
  last_line: string;
  step: number | null;
}

export interface ViewData {
  dag_id: string;
  run_id: string;
  task_id: string;
  map_index: number;
  task: { state: string | null; try_number: number | null } | null;
  app_id: string | null;
  state: string | null;
  final: boolean;
  live: boolean;
  timeline: Timeline | null;
  replicas: ReplicaResult[] | null;
  /** The tries the view can show: earlier ones kept their app where Airflow keeps state. */
  tries?: number[];
}

export const PHASES = ["queued", "admitted", "running", "succeeded", "failed", "cancelled"] as const;
export const ENDS = new Set(["succeeded", "failed", "cancelled"]);
export const MARKS = new Set(["restart", "preempted"]);

/** A stretch of one phase, from start to end (seconds from the timeline's origin). */
export interface Segment {
  phase: string;
  start: number;
  end: number;
}

/** A moment: a restart, a preemption, an end (with its exit code and reason). */
export interface Mark {
  kind: string;
  at: number;
  exitCode: number | null;
  reason: string;
  text: string;
}

export interface Lane {
  key: string;
  role: string;
  id: number;
  segments: Segment[];
  marks: Mark[];
  phase: string;
  restarts: number;
  dropped: number;
  exitCode: number | null;
  reason: string;
}

/** The phases and marks of one list of events; open phases last until ``until``. */
export const lay = (events: TimelineEvent[], until: number): { segments: Segment[]; marks: Mark[] } => {
  const segments: Segment[] = [];
  const marks: Mark[] = [];
  let open: Segment | undefined;
  for (const [at, kind, ...rest] of events) {
    if (MARKS.has(kind) || ENDS.has(kind)) {
      const exitCode = typeof rest[0] === "number" ? rest[0] : null;
      const reason = typeof rest[1] === "string" ? rest[1] : "";
      marks.push({ at, exitCode, kind, reason, text: typeof rest[0] === "string" ? rest[0] : "" });
    }
    if (MARKS.has(kind)) {
      continue;
    }
    if (open) {
      open.end = at;
      segments.push(open);
      open = undefined;
    }
    if (!ENDS.has(kind)) {
      open = { end: until, phase: kind, start: at };
    }
  }
  if (open) {
    open.end = Math.max(open.start, until);
    segments.push(open);
  }
  return { marks, segments };
};

export const lanes = (timeline: Timeline, until = end(timeline)): Lane[] => {
  return timeline.replicas.map((rep) => {
    const { marks, segments } = lay(rep.events, until);
    const last = rep.events.filter((e) => !MARKS.has(e[1])).at(-1);
    const ended = marks.filter((m) => ENDS.has(m.kind)).at(-1);
    return {
      dropped: rep.dropped ?? 0,
      exitCode: ended?.exitCode ?? null,
      id: rep.id,
      key: `${rep.role}/${rep.id}`,
      marks,
      phase: last?.[1] ?? "",
      reason: ended?.reason ?? "",
      restarts: rep.restarts ?? 0,
      role: rep.role,
      segments,
    };
  });
};

/** Where the time axis starts and ends (seconds from the origin). */
export const start = (timeline: Timeline): number =>
  Math.min(0, ...timeline.app.events.map((e) => e[0]), ...timeline.replicas.flatMap((r) => r.events.map((e) => e[0])));

/** Where the time axis ends: the last thing the timeline holds, or for an app still
 * followed (``live``) now, on this browser's clock. */
export const end = (timeline: Timeline, live = false): number =>
  Math.max(
    timeline.now,
    live && timeline.origin ? Date.now() / 1000 - timeline.origin : 0,
    ...timeline.app.events.map((e) => e[0]),
    ...timeline.replicas.map((r) => r.events.at(-1)?.[0] ?? 0),
  );

export interface Totals {
  queued: number;
  running: number;
  preemptions: number;
  restarts: number;
  byPhase: Record<string, number>;
}

/** The app's time queued (admitted included) and running, its preemptions, its replicas'
 * restarts and how many replicas are in each phase. */
export const totals = (timeline: Timeline, until = end(timeline)): Totals => {
  const { marks, segments } = lay(timeline.app.events, until);
  const spent = (phases: string[]) =>
    segments.filter((s) => phases.includes(s.phase)).reduce((sum, s) => sum + (s.end - s.start), 0);
  const byPhase: Record<string, number> = {};
  for (const lane of lanes(timeline, until)) {
    byPhase[lane.phase] = (byPhase[lane.phase] ?? 0) + 1;
  }
  return {
    byPhase,
    preemptions: marks.filter((m) => m.kind === "preempted").length,
    queued: spent(["queued", "admitted"]),
    restarts: timeline.replicas.reduce((sum, r) => sum + (r.restarts ?? 0), 0),
    running: spent(["running"]),
  };
};

/** ``1h 02m``, ``3m 05s``, ``42s``, ``0.4s``. */
export const duration = (seconds: number): string => {
  const s = Math.max(0, seconds);
  if (s < 10) return `${Number(s.toFixed(1))}s`;
  if (s < 60) return `${Math.round(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.round(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
};

/** Ticks of a time axis from ``from`` to ``to``: about ``count`` round steps. */
export const ticks = (from: number, to: number, count = 6): number[] => {
  const span = Math.max(1, to - from);
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21_600, 43_200, 86_400];
  const step = steps.find((s) => span / s <= count) ?? 86_400;
  const out: number[] = [];
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) out.push(t);
  return out;
};

/** The replicas grouped by role, in the order they came. */
export const byRole = (all: Lane[]): Map<string, Lane[]> => {
  const out = new Map<string, Lane[]>();
  for (const lane of all) {
    const list = out.get(lane.role) ?? [];
    list.push(lane);
    out.set(lane.role, list);
  }
  return out;
};
