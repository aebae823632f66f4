import assert from "node:assert/strict";
import { test } from "node:test";
import { RingBuffer } from "../../src/ring.js";

const seq = (from: number, n: number) => Float32Array.from({ length: n }, (_, i) => from + i);

test("reads return what was written, in order, across the wrap", () => {
  const ring = new RingBuffer(8);
  const out = new Float32Array(16);
  ring.write(seq(0, 6));
  assert.equal(ring.read(out, 0, 4), 4);
  ring.write(seq(6, 5)); // wraps around the end of the storage
  assert.equal(ring.size, 7);
  assert.equal(ring.read(out, 4, 16), 7);
  assert.deepEqual([...out.subarray(0, 11)], [...seq(0, 11)]);
  assert.equal(ring.size, 0);
  assert.equal(ring.capacity, 8);
});

test("a write larger than the free space grows the ring and keeps every sample", () => {
  const ring = new RingBuffer(4);
  const out = new Float32Array(100);
  ring.write(seq(0, 3));
  ring.read(out, 0, 2); // head moved: the grow must unwrap
  ring.write(seq(3, 50));
  assert.ok(ring.capacity >= 51);
  assert.equal(ring.read(out, 2, 100), 51);
  assert.deepEqual([...out.subarray(0, 53)], [...seq(0, 53)]);
});

test("a read asks for no more than is there or fits", () => {
  const ring = new RingBuffer(8);
  ring.write(seq(1, 5));
  const out = new Float32Array(3);
  assert.equal(ring.read(out, 1, 10), 2);
  assert.deepEqual([...out], [0, 1, 2]);
  ring.clear();
  assert.equal(ring.size, 0);
  assert.equal(ring.read(out, 0, 3), 0);
});
