/** Messages between the player and its worklet. */
import type { PlaybackEvent } from "./playback.js";

export type ToWorklet =
  | { t: "open"; id: string }
  | { t: "data"; id: string; samples: Float32Array }
  | { t: "end"; id: string }
  | { t: "cancel"; id: string };

export interface WorkletStatus {
  t: "status";
  /** Context samples rendered so far. */
  played: number;
  /** Of those, samples above -60 dBFS. */
  audible: number;
  buffered: number;
  underruns: number;
  /** Peak of the last quantum, 0..1. */
  peak: number;
  current: string | null;
  currentPlayed: number;
}

export type FromWorklet =
  | PlaybackEvent
  | WorkletStatus
  | { t: "cancelled"; id: string; played: number };
