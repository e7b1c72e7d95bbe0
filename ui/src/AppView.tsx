// The view itself: the app's totals, the replica that failed first, the last reason to
// wait, and a swimlane per replica on one time axis.
import { Alert, Badge, Box, Button, Code, Flex, HStack, Link, Text } from "@chakra-ui/react";
import { useEffect, useMemo, useRef, useState } from "react";

import { ViewError, fetchView } from "./api";
import {
  type Lane,
  type Timeline,
  type ViewData,
  ENDS,
  byRole,
  duration,
  end,
  lanes,
  lay,
  start,
  ticks,
  totals,
} from "./lanes";

/** Seconds between refreshes while the task runs. */
const REFRESH = 3;
/** A row's height (px), and how many rows the lanes show at once. */
const ROW = 22;
const SHOWN = 24;
/** Roles of more replicas than this start folded (in an app of more than FOLD_APP). */
const FOLD_ROLE = 24;
const FOLD_APP = 48;
const LABEL = "11rem";

const TASK_ENDED = new Set(["success", "failed", "upstream_failed", "skipped", "removed"]);

export const PHASE_COLORS: Record<string, string> = {
  admitted: "purple.muted",
  cancelled: "orange.solid",
  failed: "red.solid",
  queued: "gray.emphasized",
  running: "cyan.solid",
  succeeded: "green.solid",
};

const STATE_PALETTES: Record<string, string> = {
  CANCELLED: "orange",
  FAILED: "red",
  PENDING: "gray",
  RUNNING: "cyan",
  SUBMITTED: "gray",
  SUCCEEDED: "green",
};

interface Props {
  dagId: string;
  runId: string;
  taskId: string;
  mapIndex: number;
}

export const AppView = ({ dagId, mapIndex, runId, taskId }: Props) => {
  const [data, setData] = useState<ViewData | undefined>(undefined);
  const [error, setError] = useState<ViewError | Error | undefined>(undefined);
  // the try shown: undefined is the task instance's own (its latest) try
  const [tryNumber, setTryNumber] = useState<number | undefined>(undefined);

  useEffect(() => {
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const next = await fetchView(dagId, runId, taskId, mapIndex, tryNumber, abort.signal);
        setData(next);
        setError(undefined);
        const ended = next.final || TASK_ENDED.has(next.task?.state ?? "");
        if (!ended) timer = setTimeout(load, REFRESH * 1000);
      } catch (e) {
        if (abort.signal.aborted) return;
        setError(e as Error);
        const refused = e instanceof ViewError && [401, 403, 404].includes(e.status);
        if (!refused) timer = setTimeout(load, REFRESH * 1000);
      }
    };
    setData(undefined);
    void load();
    return () => {
      abort.abort();
      if (timer) clearTimeout(timer);
    };
  }, [dagId, runId, taskId, mapIndex, tryNumber]);

  if (error && !data) {
    return (
      <Alert.Root data-testid="torchx-app-error" status="error">
        <Alert.Indicator />
        <Alert.Title>The TorchX app cannot be shown: {error.message}</Alert.Title>
      </Alert.Root>
    );
  }
  if (!data) {
    return <Text color="fg.muted">Loading the TorchX app…</Text>;
  }
  return (
    <Box data-testid="torchx-app-view" p={2}>
      <Header data={data} onTry={setTryNumber} />
      {data.timeline ? (
        <Shown data={data} timeline={data.timeline} />
      ) : (
        <Text color="fg.muted" data-testid="torchx-no-timeline" mt={4}>
          {data.app_id
            ? "The follow of this app has not recorded a timeline yet."
            : "This task instance has not submitted a TorchX app (yet)."}
        </Text>
      )}
    </Box>
  );
};

const Header = ({ data, onTry }: { data: ViewData; onTry: (tryNumber: number) => void }) => {
  const state = data.state ?? "";
  const tries = data.tries ?? [];
  return (
    <Flex align="center" gap={3} wrap="wrap">
      <Text data-testid="torchx-app-id" fontSize="lg" fontWeight="semibold">
        {data.app_id ?? "No app"}
      </Text>
      {state ? (
        <Badge colorPalette={STATE_PALETTES[state] ?? "gray"} data-testid="torchx-app-state" variant="solid">
          {state}
        </Badge>
      ) : null}
      {data.live ? (
        <Badge colorPalette="blue" variant="outline">
          live
        </Badge>
      ) : null}
      {tries.length > 1 ? (
        <HStack data-testid="torchx-tries" gap={1}>
          {tries.map((n) => (
            <Button
              data-testid={`torchx-try-${n}`}
              key={n}
              onClick={() => onTry(n)}
              size="xs"
              variant={n === data.task?.try_number ? "solid" : "outline"}
            >
              try {n}
            </Button>
          ))}
        </HStack>
      ) : data.task?.try_number ? (
        <Text color="fg.muted">try {data.task.try_number}</Text>
      ) : null}
      {data.timeline?.ui_url ? (
        <Link color="fg.info" href={data.timeline.ui_url} rel="noreferrer" target="_blank">
          the job in its backend ↗
        </Link>
      ) : null}
    </Flex>
  );
};

const Shown = ({ data, timeline }: { data: ViewData; timeline: Timeline }) => {
  const until = end(timeline, data.live);
  const all = useMemo(() => lanes(timeline, until), [timeline, until]);
  const sums = useMemo(() => totals(timeline, until), [timeline, until]);
  const lastWait = timeline.waits.at(-1);
  const root = timeline.root_cause;
  const rootRow = data.replicas?.find((r) => r.root_cause);
  return (
    <>
      <Flex data-testid="torchx-totals" gap={6} mt={3} wrap="wrap">
        <Figure label="queued" value={duration(sums.queued)} />
        <Figure label="running" value={duration(sums.running)} />
        <Figure label="preemptions" value={String(sums.preemptions)} />
        <Figure label="restarts" value={String(sums.restarts)} />
        <Figure
          label="replicas"
          value={`${all.length}${Object.entries(sums.byPhase)
            .filter(([phase]) => phase)
            .map(([phase, n]) => ` · ${n} ${phase}`)
            .join("")}`}
        />
      </Flex>
      {root ? (
        <Alert.Root data-testid="torchx-root-cause" mt={3} status="error">
          <Alert.Indicator />
          <Alert.Content>
            <Alert.Title>
              {root.replica} failed first
              {rootRow ? `: exit code ${rootRow.exit_code ?? "unknown"}` : ""}
              {rootRow?.reason ? ` (${rootRow.reason})` : ""}
            </Alert.Title>
            {root.error || root.message ? (
              <Alert.Description>
                <Code data-testid="torchx-root-error" whiteSpace="pre-wrap">
                  {root.error || root.message}
                </Code>
              </Alert.Description>
            ) : null}
          </Alert.Content>
        </Alert.Root>
      ) : null}
      {lastWait ? (
        <Alert.Root data-testid="torchx-last-wait" mt={3} status="warning" variant="subtle">
          <Alert.Indicator />
          <Alert.Content>
            <Alert.Title>Last reason to wait (at +{duration(lastWait[0])})</Alert.Title>
            <Alert.Description>{lastWait[1]}</Alert.Description>
          </Alert.Content>
        </Alert.Root>
      ) : null}
      <Lanes all={all} rootCause={root?.replica ?? ""} timeline={timeline} until={until} />
      <Legend />
    </>
  );
};

const Figure = ({ label, value }: { label: string; value: string }) => (
  <Box>
    <Text color="fg.muted" fontSize="xs" textTransform="uppercase">
      {label}
    </Text>
    <Text fontSize="md" fontWeight="semibold">
      {value}
    </Text>
  </Box>
);

type Row =
  | { kind: "app" }
  | { kind: "role"; role: string; lanes: Lane[]; folded: boolean }
  | { kind: "lane"; lane: Lane };

interface LanesProps {
  all: Lane[];
  rootCause: string;
  timeline: Timeline;
  until: number;
}

const Lanes = ({ all, rootCause, timeline, until }: LanesProps) => {
  const roles = useMemo(() => byRole(all), [all]);
  const [folded, setFolded] = useState<Record<string, boolean>>({});
  const [scroll, setScroll] = useState(0);
  const from = start(timeline);
  const to = Math.max(until, from + 1);
  const isFolded = (role: string, n: number) =>
    folded[role] ?? (all.length > FOLD_APP && n > FOLD_ROLE && !rootCause.startsWith(`${role}/`));
  const rows: Row[] = [{ kind: "app" }];
  for (const [role, list] of roles) {
    const shut = isFolded(role, list.length);
    rows.push({ folded: shut, kind: "role", lanes: list, role });
    if (!shut) rows.push(...list.map((lane): Row => ({ kind: "lane", lane })));
  }
  // the replica that failed first is in view when the lanes open
  const box = useRef<HTMLDivElement>(null);
  const rootRow = rows.findIndex((r) => r.kind === "lane" && r.lane.key === rootCause);
  const scrolledTo = useRef("");
  useEffect(() => {
    if (rootRow < 0 || scrolledTo.current === rootCause || !box.current) return;
    scrolledTo.current = rootCause;
    const top = Math.max(0, (rootRow - Math.floor(SHOWN / 2)) * ROW);
    box.current.scrollTop = top;
    setScroll(top);
  }, [rootRow, rootCause]);
  // when the lanes of a timeline are on screen (User Timing: the browser tier reads it)
  useEffect(() => {
    performance.mark("torchx-app-view-rendered");
  }, [timeline]);
  const first = Math.max(0, Math.floor(scroll / ROW) - 4);
  const last = Math.min(rows.length, first + SHOWN + 8);
  const x = (t: number) => `${(((t - from) / (to - from)) * 100).toFixed(3)}%`;
  const w = (a: number, b: number) => `max(2px, ${(((b - a) / (to - from)) * 100).toFixed(3)}%)`;
  return (
    <Box borderColor="border" borderRadius="md" borderWidth="1px" data-testid="torchx-lanes" mt={4}>
      <Flex borderBottomWidth="1px" borderColor="border" h={`${ROW}px`}>
        <Box flexShrink={0} px={2} w={LABEL}>
          <Text color="fg.muted" fontSize="xs">
            {timeline.origin ? new Date(timeline.origin * 1000).toLocaleString() : ""}
          </Text>
        </Box>
        <Box flex="1" mr={3} position="relative">
          {ticks(from, to).map((t) => (
            <Text
              color="fg.muted"
              fontSize="xs"
              key={t}
              left={x(t)}
              position="absolute"
              transform="translateX(-50%)"
              whiteSpace="nowrap"
            >
              +{duration(t)}
            </Text>
          ))}
        </Box>
      </Flex>
      <Box
        maxH={`${ROW * SHOWN}px`}
        data-testid="torchx-lanes-scroll"
        onScroll={(e) => setScroll(e.currentTarget.scrollTop)}
        ref={box}
        overflowY="auto"
        position="relative"
      >
        <Box h={`${rows.length * ROW}px`} position="relative">
          {rows.slice(first, last).map((row, i) => {
            const top = `${(first + i) * ROW}px`;
            if (row.kind === "app") {
              const { marks, segments } = lay(timeline.app.events, to);
              return (
                <LaneRow key="app" label="app" strong top={top}>
                  {segments.map((s) => (
                    <Bar color={PHASE_COLORS[s.phase]} key={`${s.phase}${s.start}`} left={x(s.start)} title={`${s.phase} ${duration(s.end - s.start)}`} width={w(s.start, s.end)} />
                  ))}
                  {marks.filter((m) => m.kind === "preempted").map((m) => (
                    <Tick color="purple.fg" key={`p${m.at}`} left={x(m.at)} title={`preempted at +${duration(m.at)}`} />
                  ))}
                </LaneRow>
              );
            }
            if (row.kind === "role") {
              const counts = new Map<string, number>();
              for (const l of row.lanes) counts.set(l.phase, (counts.get(l.phase) ?? 0) + 1);
              return (
                <Flex
                  align="center"
                  bg="bg.subtle"
                  cursor="pointer"
                  data-testid={`torchx-role-${row.role}`}
                  gap={2}
                  h={`${ROW}px`}
                  key={`role:${row.role}`}
                  left={0}
                  onClick={() => setFolded({ ...folded, [row.role]: !row.folded })}
                  position="absolute"
                  px={2}
                  right={0}
                  top={top}
                >
                  <Text fontSize="sm" fontWeight="semibold">
                    {row.folded ? "▸" : "▾"} {row.role}
                  </Text>
                  <Text color="fg.muted" fontSize="xs">
                    {row.lanes.length} replicas ·{" "}
                    {[...counts].map(([phase, n]) => `${n} ${phase || "unseen"}`).join(", ")}
                  </Text>
                </Flex>
              );
            }
            const { lane } = row;
            const failedFirst = lane.key === rootCause;
            return (
              <LaneRow
                bg={failedFirst ? "red.subtle" : undefined}
                key={lane.key}
                label={lane.key}
                strong={failedFirst}
                testId={`torchx-lane-${lane.key}`}
                title={laneTitle(lane)}
                top={top}
              >
                {lane.segments.map((s) => (
                  <Bar color={PHASE_COLORS[s.phase]} key={`${s.phase}${s.start}`} left={x(s.start)} title={`${lane.key} ${s.phase} ${duration(s.end - s.start)}`} width={w(s.start, s.end)} />
                ))}
                {lane.marks.map((m) =>
                  m.kind === "restart" || m.kind === "preempted" || ENDS.has(m.kind) ? (
                    <Tick
                      color={ENDS.has(m.kind) ? (PHASE_COLORS[m.kind] ?? "fg") : m.kind === "restart" ? "orange.fg" : "purple.fg"}
                      key={`${m.kind}${m.at}`}
                      left={x(m.at)}
                      testId={`torchx-${m.kind}`}
                      title={`${m.kind} at +${duration(m.at)}${m.exitCode !== null ? `, exit code ${m.exitCode}` : ""}${m.reason ? ` (${m.reason})` : ""}`}
                    />
                  ) : null,
                )}
                {failedFirst ? (
                  <Badge colorPalette="red" ml={1} position="absolute" right={0} size="xs" top="-2px">
                    failed first
                  </Badge>
                ) : null}
              </LaneRow>
            );
          })}
        </Box>
      </Box>
    </Box>
  );
};

const laneTitle = (lane: Lane): string => {
  const parts = [`${lane.key}: ${lane.phase || "not seen yet"}`];
  if (lane.exitCode !== null) parts.push(`exit code ${lane.exitCode}`);
  if (lane.reason) parts.push(lane.reason);
  if (lane.restarts) parts.push(`${lane.restarts} restart(s)`);
  if (lane.dropped) parts.push(`${lane.dropped} earlier event(s) not kept`);
  return parts.join(", ");
};

interface LaneRowProps {
  label: string;
  top: string;
  children: React.ReactNode;
  strong?: boolean;
  bg?: string;
  title?: string;
  testId?: string;
}

const LaneRow = ({ bg, children, label, strong, testId, title, top }: LaneRowProps) => (
  <Flex
    align="center"
    bg={bg}
    data-testid={testId}
    h={`${ROW}px`}
    left={0}
    position="absolute"
    right={0}
    title={title}
    top={top}
  >
    <Text
      color={strong && bg ? "red.fg" : undefined}
      flexShrink={0}
      fontFamily="mono"
      fontSize="xs"
      fontWeight={strong ? "bold" : undefined}
      px={2}
      truncate
      w={LABEL}
    >
      {label}
    </Text>
    <Box bg="bg.muted" borderRadius="sm" flex="1" h="14px" mr={3} position="relative">
      {children}
    </Box>
  </Flex>
);

const Bar = ({ color, left, title, width }: { color?: string; left: string; title: string; width: string }) => (
  <Box
    bg={color ?? "gray.muted"}
    borderRadius="2px"
    bottom={0}
    left={left}
    position="absolute"
    title={title}
    top={0}
    w={width}
  />
);

const Tick = ({ color, left, testId, title }: { color: string; left: string; title: string; testId?: string }) => (
  <Box
    bg={color}
    bottom="-3px"
    data-testid={testId}
    left={left}
    position="absolute"
    title={title}
    top="-3px"
    transform="translateX(-1px)"
    w="3px"
    zIndex={1}
  />
);

const Legend = () => (
  <HStack gap={4} mt={2} wrap="wrap">
    {Object.entries(PHASE_COLORS).map(([phase, color]) => (
      <HStack gap={1} key={phase}>
        <Box bg={color} borderRadius="2px" h="10px" w="16px" />
        <Text fontSize="xs">{phase}</Text>
      </HStack>
    ))}
    <HStack gap={1}>
      <Box bg="orange.fg" h="12px" w="3px" />
      <Text fontSize="xs">restart</Text>
    </HStack>
    <HStack gap={1}>
      <Box bg="purple.fg" h="12px" w="3px" />
      <Text fontSize="xs">preempted</Text>
    </HStack>
  </HStack>
);
