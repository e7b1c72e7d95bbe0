// What the view draws from a timeline (src/lanes.ts, compiled by `npm test` into
// .test-build/): node's own test runner, no other dependency.
import assert from "node:assert/strict";
import { test } from "node:test";

import { byRole, duration, end, lanes, lay, start, ticks, totals } from "../.test-build/lanes.js";

/** A timeline as the follow's snapshot has it (torchx_provider.triggers.timeline). */
const timeline = (replicas, app = [[0, "queued"], [5, "running"]], now = 60) => ({
  app: { events: app, phase: app.at(-1)[1] },
  now,
  origin: 1_700_000_000,
  replicas,
  version: 1,
  waits: [],
});

test("phases follow each other; an end closes the last one and is a mark with its exit code", () => {
  const { marks, segments } = lay([[0, "queued"], [5, "running"], [30, "failed", 3, "Error"]], 60);
  assert.deepEqual(segments, [
    { end: 5, phase: "queued", start: 0 },
    { end: 30, phase: "running", start: 5 },
  ]);
  assert.deepEqual(marks, [{ at: 30, exitCode: 3, kind: "failed", reason: "Error", text: "" }]);
});

test("a restart is a mark inside its phase; a preemption ends nothing until the next phase", () => {
  const { marks, segments } = lay(
    [[0, "queued"], [5, "running"], [10, "restart", 1, "Error"], [20, "preempted", "evicted"], [20, "queued"]],
    50,
  );
  assert.deepEqual(segments, [
    { end: 5, phase: "queued", start: 0 },
    { end: 20, phase: "running", start: 5 },
    { end: 50, phase: "queued", start: 20 },
  ]);
  assert.deepEqual(
    marks.map((m) => [m.kind, m.at, m.exitCode, m.reason, m.text]),
    [
      ["restart", 10, 1, "Error", ""],
      ["preempted", 20, null, "", "evicted"],
    ],
  );
});

test("an open phase lasts until the given time, never less than nothing", () => {
  assert.deepEqual(lay([[40, "running"]], 30).segments, [{ end: 40, phase: "running", start: 40 }]);
  assert.deepEqual(lay([], 30), { marks: [], segments: [] });
});

test("a lane per replica: its key, last phase, last end's exit code and reason", () => {
  const all = lanes(
    timeline([
      { events: [[0, "queued"], [5, "running"], [9, "restart", 137, "OOMKilled"], [30, "succeeded", 0, ""]], id: 0, restarts: 1, role: "trainer" },
      { dropped: 4, events: [[0, "queued"], [6, "running"], [12, "failed", 2, "Error"]], id: 1, role: "trainer" },
      { events: [[0, "queued"]], id: 0, role: "ps" },
    ]),
  );
  assert.deepEqual(
    all.map((l) => [l.key, l.phase, l.exitCode, l.reason, l.restarts, l.dropped]),
    [
      ["trainer/0", "succeeded", 0, "", 1, 0],
      ["trainer/1", "failed", 2, "Error", 0, 4],
      ["ps/0", "queued", null, "", 0, 0],
    ],
  );
  // the queued replica's phase lasts until the end of the axis
  assert.deepEqual(all[2].segments, [{ end: 60, phase: "queued", start: 0 }]);
});

test("totals: waiting counts admitted time, preemptions are the app's, restarts the replicas'", () => {
  const t = timeline(
    [
      { events: [[0, "queued"], [8, "running"]], id: 0, restarts: 2, role: "w" },
      { events: [[0, "queued"], [8, "running"], [40, "failed", 1, "Error"]], id: 1, restarts: 1, role: "w" },
    ],
    [[0, "queued"], [4, "admitted"], [8, "running"], [20, "preempted"], [20, "queued"], [25, "running"]],
    60,
  );
  const got = totals(t);
  assert.equal(got.queued, 4 + 4 + 5);
  assert.equal(got.running, 12 + 35);
  assert.equal(got.preemptions, 1);
  assert.equal(got.restarts, 3);
  assert.deepEqual(got.byPhase, { failed: 1, running: 1 });
});

test("the axis spans every event and the snapshot's now; live, it reaches this clock", () => {
  const t = timeline([{ events: [[-3, "queued"], [70, "running"]], id: 0, role: "w" }]);
  assert.equal(start(t), -3);
  assert.equal(end(t), 70);
  assert.ok(end(t, true) > 1_000_000, "a live app's axis ends now, on the browser's clock");
  assert.equal(end({ ...t, origin: null }, true), 70);
});

test("durations read at a glance", () => {
  assert.deepEqual(
    [0.44, 9.96, 42.4, 185, 3720, -5].map(duration),
    ["0.4s", "10s", "42s", "3m 05s", "1h 02m", "0s"],
  );
});

test("about six round ticks whatever the span", () => {
  assert.deepEqual(ticks(0, 100), [0, 30, 60, 90]);
  assert.deepEqual(ticks(5, 20), [5, 10, 15, 20]);
  assert.deepEqual(ticks(-50, 50), [-30, 0, 30]);
  assert.deepEqual(ticks(0, 0), [0]);
  for (const [from, to] of [[0, 7], [13, 4000], [0, 5 * 86_400]]) {
    const got = ticks(from, to);
    assert.ok(got.length >= 2 && got.length <= 6, `${from}..${to}: ${got}`);
    assert.ok(got.every((t) => t >= from && t <= to), `${from}..${to}: ${got}`);
  }
  // past the largest step (a day), ticks stay a day apart
  assert.ok(ticks(0, 1e6).every((t) => t % 86_400 === 0));
});

test("replicas grouped by role, in the order they came", () => {
  const all = lanes(
    timeline([
      { events: [[0, "queued"]], id: 0, role: "b" },
      { events: [[0, "queued"]], id: 0, role: "a" },
      { events: [[0, "queued"]], id: 1, role: "b" },
    ]),
  );
  const grouped = byRole(all);
  assert.deepEqual([...grouped.keys()], ["b", "a"]);
  assert.deepEqual(grouped.get("b").map((l) => l.key), ["b/0", "b/1"]);
});
