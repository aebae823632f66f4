/** The main-thread side of playback: one AudioWorklet node fed with each context's samples. */
import type { FromWorklet, ToWorklet, WorkletStatus } from "./messages.js";

declare const __WORKLET_SOURCE__: string;

export interface PlayerStats {
  /** Context audio rendered so far, in ms. */
  playedMs: number;
  /** Of that, audio above -60 dBFS, in ms. */
  audibleMs: number;
  /** Audio received and not yet played, in ms. */
  bufferedMs: number;
  /** Times a sounding context ran dry before its end (each one recovered after the threshold). */
  underruns: number;
  /** Audio payload bytes received from the server. */
  bytesReceived: number;
  /** Peak level of the latest render quantum, 0..1 (for a meter). */
  level: number;
  sampleRate: number;
}

type Waiter = (played: number) => void;

export class Player {
  readonly audioContext: AudioContext;
  private readonly node: AudioWorkletNode;
  private status: WorkletStatus = {
    t: "status",
    played: 0,
    audible: 0,
    buffered: 0,
    underruns: 0,
    peak: 0,
    current: null,
    currentPlayed: 0,
  };
  private bytes = 0;
  private readonly cancelWaiters = new Map<string, Waiter>();
  private readonly watchers = new Map<string, (event: FromWorklet) => void>();

  private constructor(audioContext: AudioContext, node: AudioWorkletNode) {
    this.audioContext = audioContext;
    this.node = node;
    node.port.onmessage = (event: MessageEvent<FromWorklet>) => this.receive(event.data);
    node.connect(audioContext.destination);
  }

  /** Loads the worklet into `audioContext`; `startThresholdMs` of audio is buffered before a context sounds. */
  static async create(audioContext: AudioContext, startThresholdMs: number): Promise<Player> {
    if (!audioContext.audioWorklet) {
      throw new Error(
        "AudioWorklet is unavailable: the page must be a secure context (https, or http on localhost)",
      );
    }
    const url = URL.createObjectURL(
      new Blob([__WORKLET_SOURCE__], { type: "application/javascript" }),
    );
    try {
      await audioContext.audioWorklet.addModule(url);
    } finally {
      URL.revokeObjectURL(url);
    }
    const threshold = Math.round((startThresholdMs / 1000) * audioContext.sampleRate);
    const node = new AudioWorkletNode(audioContext, "voiceserver-player", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { threshold },
    });
    return new Player(audioContext, node);
  }

  get sampleRate(): number {
    return this.audioContext.sampleRate;
  }

  /** Starts the audio clock; browsers need a user gesture before audio may sound. */
  resume(): Promise<void> {
    return this.audioContext.resume();
  }

  stats(): PlayerStats {
    const ms = (n: number) => (n / this.sampleRate) * 1000;
    const s = this.status;
    return {
      playedMs: ms(s.played),
      audibleMs: ms(s.audible),
      bufferedMs: ms(s.buffered),
      underruns: s.underruns,
      bytesReceived: this.bytes,
      level: s.peak,
      sampleRate: this.sampleRate,
    };
  }

  /** Milliseconds of `id` played so far, as of the latest report (0 unless it is sounding). */
  playedMsOf(id: string): number {
    return this.status.current === id ? (this.status.currentPlayed / this.sampleRate) * 1000 : 0;
  }

  /** @internal */
  countBytes(n: number): void {
    this.bytes += n;
  }

  /** @internal Reserves `id`'s place in the play order; `watch` sees its worklet events. */
  open(id: string, watch: (event: FromWorklet) => void): void {
    this.watchers.set(id, watch);
    this.post({ t: "open", id });
  }

  /** @internal */
  push(id: string, samples: Float32Array): void {
    this.node.port.postMessage({ t: "data", id, samples } satisfies ToWorklet, [samples.buffer]);
  }

  /** @internal No more audio for `id`. */
  end(id: string): void {
    this.post({ t: "end", id });
  }

  /**
   * @internal Silences `id` at the next render quantum and drops its buffered audio;
   * resolves with the samples of it that were played.
   */
  cancel(id: string): Promise<number> {
    return new Promise((resolve) => {
      const last = this.status.current === id ? this.status.currentPlayed : 0;
      // The worklet answers at once; the timer only covers a context that is closed.
      const timer = setTimeout(() => settle(last), 250);
      const settle = (played: number) => {
        clearTimeout(timer);
        this.cancelWaiters.delete(id);
        this.watchers.delete(id);
        resolve(played);
      };
      this.cancelWaiters.set(id, settle);
      this.post({ t: "cancel", id });
    });
  }

  /** Stops everything and releases the audio context if the player made it. */
  async close(ownContext: boolean): Promise<void> {
    this.node.disconnect();
    this.node.port.close();
    if (ownContext && this.audioContext.state !== "closed") await this.audioContext.close();
  }

  private post(msg: ToWorklet): void {
    this.node.port.postMessage(msg);
  }

  private receive(msg: FromWorklet): void {
    if (msg.t === "status") {
      this.status = msg;
      return;
    }
    if (msg.t === "cancelled") {
      this.cancelWaiters.get(msg.id)?.(msg.played);
      return;
    }
    this.watchers.get(msg.id)?.(msg);
    if (msg.t === "finished") this.watchers.delete(msg.id);
  }
}
