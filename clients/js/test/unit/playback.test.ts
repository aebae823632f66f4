import assert from "node:assert/strict";
import { test } from "node:test";
import { PlaybackCore } from "../../src/playback.js";

const QUANTUM = 128;
const tone = (n: number, v = 0.5) => new Float32Array(n).fill(v);

function render(core: PlaybackCore) {
  const out = new Float32Array(QUANTUM);
  const events = core.render(out);
  return { out, events };
}

test("a context waits for the start threshold, then plays its samples", () => {
  const core = new PlaybackCore(300);
  core.open("a");
  core.push("a", tone(200));
  const quiet = render(core);
  assert.deepEqual(quiet.events, []);
  assert.ok(quiet.out.every((v) => v === 0));
  core.push("a", tone(200));
  const first = render(core);
  assert.deepEqual(first.events, [{ t: "started", id: "a" }]);
  assert.ok(first.out.every((v) => v === 0.5));
  assert.equal(core.played, QUANTUM);
  assert.equal(core.buffered, 400 - QUANTUM);
});

test("an ended context plays out below the threshold and reports finished", () => {
  const core = new PlaybackCore(1000);
  core.push("a", tone(100));
  core.end("a");
  const { out, events } = render(core);
  assert.deepEqual(events, [
    { t: "started", id: "a" },
    { t: "finished", id: "a", played: 100 },
  ]);
  assert.ok(out.subarray(0, 100).every((v) => v === 0.5));
  assert.ok(out.subarray(100).every((v) => v === 0));
  assert.equal(core.current, null);
});

test("running dry before the end is one underrun, recovered at a doubled threshold", () => {
  const core = new PlaybackCore(QUANTUM);
  core.push("a", tone(QUANTUM + 10));
  render(core);
  const dry = render(core); // 10 samples, then nothing: an underrun
  assert.deepEqual(dry.events, [{ t: "underrun", id: "a" }]);
  assert.equal(core.underruns, 1);
  assert.equal(core.threshold, 2 * QUANTUM); // the jitter buffer grows
  assert.deepEqual(render(core).events, []); // still waiting: not counted again
  assert.equal(core.underruns, 1);
  core.push("a", tone(QUANTUM));
  assert.ok(render(core).out.every((v) => v === 0)); // below the grown threshold
  core.push("a", tone(QUANTUM));
  const back = render(core);
  assert.deepEqual(back.events, []); // restarted, not "started" again
  assert.ok(back.out.every((v) => v === 0.5));
});

test("the grown threshold is capped and comes back down after clean contexts", () => {
  const core = new PlaybackCore(100);
  for (let i = 0; i < 6; i++) {
    core.push("a", tone(core.threshold));
    while (!render(core).events.some((e) => e.t === "underrun")); // play it dry
  }
  assert.equal(core.underruns, 6);
  assert.equal(core.threshold, 800);
  core.cancel("a");
  for (const id of ["b", "c", "d", "e", "f", "g", "h", "i", "j"]) {
    core.push(id, tone(50));
    core.end(id);
    render(core);
  }
  assert.equal(core.threshold, 100);
});

test("contexts play one after another without a gap", () => {
  const core = new PlaybackCore(0);
  core.open("a");
  core.open("b");
  core.push("b", tone(100, 0.25));
  core.push("a", tone(100, 0.5));
  core.end("a");
  const { out, events } = render(core);
  assert.deepEqual(
    events.map((e) => `${e.t}:${e.id}`),
    ["started:a", "finished:a", "started:b"],
  );
  assert.ok(out.subarray(0, 100).every((v) => v === 0.5));
  assert.ok(out.subarray(100).every((v) => v === 0.25));
});

test("cancel silences at once, drops the context's audio, and keeps the next", () => {
  const core = new PlaybackCore(0);
  core.push("a", tone(10_000));
  core.push("b", tone(50, 0.25));
  core.end("b");
  render(core);
  assert.equal(core.cancel("a"), QUANTUM);
  core.push("a", tone(500)); // late audio of a cancelled context is ignored
  const { out } = render(core);
  assert.ok(out.subarray(0, 50).every((v) => v === 0.25));
  assert.ok(out.subarray(50).every((v) => v === 0));
  assert.equal(core.buffered, 0);
  assert.equal(core.cancel("nope"), 0);
});

test("level and audible time follow what was rendered", () => {
  const core = new PlaybackCore(0);
  const samples = new Float32Array(QUANTUM);
  samples.fill(0.0001, 0, 64); // below -60 dBFS: silence
  samples.fill(-0.8, 64);
  core.push("a", samples);
  render(core);
  assert.equal(core.audible, 64);
  assert.ok(Math.abs(core.peak - 0.8) < 1e-6);
});
