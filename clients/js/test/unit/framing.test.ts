import assert from "node:assert/strict";
import { test } from "node:test";
import { FLAG_CONTEXT_END, FLAG_FLUSH_END, Pcm16Decoder, parseFrame } from "../../src/framing.js";

function frame(flags: number, stream: number, seq: number, payload: number[]): ArrayBuffer {
  const bytes = new Uint8Array(8 + payload.length);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, 1);
  view.setUint8(1, flags);
  view.setUint16(2, stream, true);
  view.setUint32(4, seq, true);
  bytes.set(payload, 8);
  return bytes.buffer;
}

test("the header is little-endian version, flags, stream, seq", () => {
  const f = parseFrame(frame(FLAG_FLUSH_END | FLAG_CONTEXT_END, 513, 70000, [9, 8, 7]));
  assert.deepEqual(
    { version: f.version, flags: f.flags, stream: f.stream, seq: f.seq, payload: [...f.payload] },
    { version: 1, flags: 3, stream: 513, seq: 70000, payload: [9, 8, 7] },
  );
});

test("an empty payload is a valid frame", () => {
  assert.equal(parseFrame(frame(0, 1, 0, [])).payload.length, 0);
});

test("short frames and unknown versions are refused with a reason", () => {
  assert.throws(() => parseFrame(new ArrayBuffer(7)), /shorter than its 8-byte header/);
  const bad = new Uint8Array(frame(0, 1, 0, [1, 2]));
  bad[0] = 2;
  assert.throws(() => parseFrame(bad.buffer), /version 2 is not supported/);
});

test("PCM s16le becomes floats in [-1, 1)", () => {
  const pcm = new Pcm16Decoder();
  const out = pcm.decode(new Uint8Array([0x00, 0x80, 0xff, 0x7f, 0x00, 0x00, 0x00, 0x40]));
  assert.deepEqual([...out], [-1, 32767 / 32768, 0, 0.5]);
});

test("a sample split across frames is joined, not lost", () => {
  const whole = new Pcm16Decoder().decode(new Uint8Array([1, 2, 3, 4, 5, 6]));
  const pcm = new Pcm16Decoder();
  const parts = [new Uint8Array([1]), new Uint8Array([2, 3, 4, 5]), new Uint8Array([6])];
  const joined = parts.flatMap((p) => [...pcm.decode(p)]);
  assert.deepEqual(joined, [...whole]);
  assert.equal(joined.length, 3);
});
