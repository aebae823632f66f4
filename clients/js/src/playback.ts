/**
 * What the audio worklet does each render quantum, kept free of audio APIs so it
 * can be tested anywhere. Contexts play one after another in the order they were
 * opened; each has its own ring so a cancel drops exactly its audio.
 */
import { RingBuffer } from "./ring.js";

interface Entry {
  id: string;
  underran: boolean;
  ring: RingBuffer;
  ended: boolean;
  /** Sounding; false before the start threshold is reached and after an underrun. */
  playing: boolean;
  everPlayed: boolean;
  played: number;
}

export type PlaybackEvent =
  | { t: "started"; id: string }
  | { t: "underrun"; id: string }
  | { t: "finished"; id: string; played: number };

/** Samples quieter than this (about -60 dBFS) count as silence. */
export const SILENCE = 1e-3;

export class PlaybackCore {
  /** Samples a context must hold before it starts (or restarts after an underrun). */
  threshold: number;
  /** The threshold asked for; an underrun doubles the working one (up to 8x), a
   * context that plays through without one brings it back down by a quarter. */
  readonly baseThreshold: number;
  underruns = 0;
  /** Context samples rendered (silence between them not counted). */
  played = 0;
  /** Of those, samples louder than SILENCE. */
  audible = 0;
  /** Peak level of the last quantum, 0..1. */
  peak = 0;
  private readonly queue: Entry[] = [];
  private readonly entries = new Map<string, Entry>();
  private readonly gone = new Set<string>();

  constructor(threshold: number) {
    this.threshold = threshold;
    this.baseThreshold = threshold;
  }

  /** Samples buffered across every context not yet played. */
  get buffered(): number {
    let n = 0;
    for (const e of this.queue) n += e.ring.size;
    return n;
  }

  /** The context sounding now (or next), if any. */
  get current(): string | null {
    return this.queue.length ? this.queue[0].id : null;
  }

  open(id: string): void {
    if (this.entries.has(id) || this.gone.has(id)) return;
    const entry: Entry = {
      id,
      ring: new RingBuffer(),
      underran: false,
      ended: false,
      playing: false,
      everPlayed: false,
      played: 0,
    };
    this.entries.set(id, entry);
    this.queue.push(entry);
  }

  push(id: string, samples: Float32Array): void {
    this.open(id);
    this.entries.get(id)?.ring.write(samples);
  }

  /** No more audio for `id`: it plays out without waiting for the threshold. */
  end(id: string): void {
    this.open(id);
    const entry = this.entries.get(id);
    if (entry) entry.ended = true;
  }

  /** Drops `id` and everything buffered for it; returns how many of its samples were played. */
  cancel(id: string): number {
    const entry = this.entries.get(id);
    this.gone.add(id);
    if (!entry) return 0;
    this.entries.delete(id);
    this.queue.splice(this.queue.indexOf(entry), 1);
    return entry.played;
  }

  /** Samples of `id` played so far (0 once it is gone). */
  playedOf(id: string): number {
    return this.entries.get(id)?.played ?? 0;
  }

  /** Fills `out` (zeros where there is nothing to play) and says what happened. */
  render(out: Float32Array): PlaybackEvent[] {
    const events: PlaybackEvent[] = [];
    let offset = 0;
    while (offset < out.length && this.queue.length > 0) {
      const head = this.queue[0];
      if (!head.playing) {
        if (head.ring.size === 0 && head.ended) {
          this.finish(head, events);
          continue;
        }
        if (head.ring.size < this.threshold && !head.ended) break;
        head.playing = true;
        if (!head.everPlayed) events.push({ t: "started", id: head.id });
        head.everPlayed = true;
      }
      if (head.ring.size === 0) {
        if (head.ended) {
          this.finish(head, events);
          continue;
        }
        head.playing = false;
        head.underran = true;
        this.underruns += 1;
        this.threshold = Math.min(8 * this.baseThreshold, Math.max(this.threshold * 2, 1));
        events.push({ t: "underrun", id: head.id });
        break;
      }
      const n = head.ring.read(out, offset, out.length - offset);
      head.played += n;
      this.played += n;
      offset += n;
    }
    out.fill(0, offset);
    let peak = 0;
    for (let i = 0; i < offset; i++) {
      const v = Math.abs(out[i]);
      if (v > peak) peak = v;
      if (v > SILENCE) this.audible += 1;
    }
    this.peak = peak;
    return events;
  }

  private finish(entry: Entry, events: PlaybackEvent[]): void {
    if (!entry.underran && this.threshold > this.baseThreshold) {
      this.threshold = Math.max(this.baseThreshold, Math.floor(this.threshold * 0.75));
    }
    this.queue.shift();
    this.entries.delete(entry.id);
    this.gone.add(entry.id);
    events.push({ t: "finished", id: entry.id, played: entry.played });
  }
}
