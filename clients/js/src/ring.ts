/** A growable ring of float samples: writes never drop audio, reads never allocate. */
export class RingBuffer {
  private data: Float32Array;
  private head = 0; // next read index
  private count = 0;

  constructor(capacity = 16384) {
    this.data = new Float32Array(Math.max(1, capacity));
  }

  get size(): number {
    return this.count;
  }

  get capacity(): number {
    return this.data.length;
  }

  write(samples: Float32Array): void {
    if (this.count + samples.length > this.data.length) this.grow(this.count + samples.length);
    const cap = this.data.length;
    const tail = (this.head + this.count) % cap;
    const first = Math.min(samples.length, cap - tail);
    this.data.set(samples.subarray(0, first), tail);
    if (first < samples.length) this.data.set(samples.subarray(first), 0);
    this.count += samples.length;
  }

  /** Moves up to `n` samples into `out` at `offset`; returns how many it moved. */
  read(out: Float32Array, offset: number, n: number): number {
    const take = Math.min(n, this.count, out.length - offset);
    const cap = this.data.length;
    const first = Math.min(take, cap - this.head);
    out.set(this.data.subarray(this.head, this.head + first), offset);
    if (first < take) out.set(this.data.subarray(0, take - first), offset + first);
    this.head = (this.head + take) % cap;
    this.count -= take;
    return take;
  }

  clear(): void {
    this.head = 0;
    this.count = 0;
  }

  private grow(needed: number): void {
    let cap = this.data.length * 2;
    while (cap < needed) cap *= 2;
    const next = new Float32Array(cap);
    const held = this.count;
    this.read(next, 0, held);
    this.data = next;
    this.head = 0;
    this.count = held;
  }
}
