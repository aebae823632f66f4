/**
 * The AudioWorklet processor: a PlaybackCore fed by the main thread. Built on its
 * own and embedded in the SDK as a string, so the SDK stays one file.
 */
import { PlaybackCore } from "./playback.js";
import type { ToWorklet } from "./messages.js";

declare class AudioWorkletProcessor {
  readonly port: MessagePort;
  constructor(options?: unknown);
}
declare function registerProcessor(name: string, ctor: unknown): void;

/** Status goes to the main thread every this many quanta (about 11 ms at 48 kHz). */
const REPORT_EVERY = 4;

class VoicePlayerProcessor extends AudioWorkletProcessor {
  private readonly core: PlaybackCore;
  private quanta = 0;

  constructor(options: { processorOptions?: { threshold?: number } }) {
    super(options);
    this.core = new PlaybackCore(options.processorOptions?.threshold ?? 0);
    this.port.onmessage = (event: MessageEvent<ToWorklet>) => this.receive(event.data);
  }

  private receive(msg: ToWorklet): void {
    const core = this.core;
    switch (msg.t) {
      case "open":
        core.open(msg.id);
        break;
      case "data":
        core.push(msg.id, msg.samples);
        break;
      case "end":
        core.end(msg.id);
        break;
      case "cancel":
        this.port.postMessage({ t: "cancelled", id: msg.id, played: core.cancel(msg.id) });
        this.report();
        break;
    }
  }

  process(_inputs: Float32Array[][], outputs: Float32Array[][]): boolean {
    const channels = outputs[0];
    if (!channels || channels.length === 0) return true;
    const events = this.core.render(channels[0]);
    for (let c = 1; c < channels.length; c++) channels[c].set(channels[0]);
    for (const event of events) this.port.postMessage(event);
    this.quanta += 1;
    if (events.length > 0 || this.quanta % REPORT_EVERY === 0) this.report();
    return true;
  }

  private report(): void {
    const core = this.core;
    const current = core.current;
    this.port.postMessage({
      t: "status",
      played: core.played,
      audible: core.audible,
      buffered: core.buffered,
      underruns: core.underruns,
      peak: core.peak,
      current,
      currentPlayed: current === null ? 0 : core.playedOf(current),
    });
  }
}

registerProcessor("voiceserver-player", VoicePlayerProcessor);
