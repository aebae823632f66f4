/** Per-context decoders: binary frame payloads in, float samples out, in order. */
import { Pcm16Decoder } from "./framing.js";

export type Encoding = "opus" | "pcm";
export type SampleSink = (samples: Float32Array) => void;

export interface StreamDecoder {
  decode(payload: Uint8Array, seq: number): void;
  /** Resolves once every payload given so far has reached the sink. */
  flush(): Promise<void>;
  close(): void;
}

export class PcmStreamDecoder implements StreamDecoder {
  private readonly pcm = new Pcm16Decoder();

  constructor(private readonly sink: SampleSink) {}

  decode(payload: Uint8Array): void {
    const samples = this.pcm.decode(payload);
    if (samples.length > 0) this.sink(samples);
  }

  flush(): Promise<void> {
    return Promise.resolve();
  }

  close(): void {}
}

/** One Opus packet per frame, decoded by the browser's WebCodecs AudioDecoder. */
export class OpusStreamDecoder implements StreamDecoder {
  private readonly decoder: AudioDecoder;
  private closed = false;

  constructor(
    private readonly sink: SampleSink,
    sampleRate: number,
    private readonly frameUs: number,
    onError: (err: Error) => void,
  ) {
    this.decoder = new AudioDecoder({
      output: (data) => this.output(data),
      error: (err) => {
        if (!this.closed) onError(err instanceof Error ? err : new Error(String(err)));
      },
    });
    this.decoder.configure({ codec: "opus", sampleRate, numberOfChannels: 1 });
  }

  decode(payload: Uint8Array, seq: number): void {
    if (this.closed) return;
    this.decoder.decode(
      new EncodedAudioChunk({ type: "key", timestamp: seq * this.frameUs, data: payload }),
    );
  }

  async flush(): Promise<void> {
    if (!this.closed) await this.decoder.flush();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.decoder.state !== "closed") this.decoder.close();
  }

  private output(data: AudioData): void {
    try {
      if (this.closed) return;
      const samples = new Float32Array(data.numberOfFrames);
      data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
      this.sink(samples);
    } finally {
      data.close();
    }
  }
}

/** Whether this browser decodes Opus with WebCodecs. */
export async function opusSupported(): Promise<boolean> {
  if (typeof AudioDecoder === "undefined") return false;
  try {
    const support = await AudioDecoder.isConfigSupported({
      codec: "opus",
      sampleRate: 48000,
      numberOfChannels: 1,
    });
    return support.supported === true;
  } catch {
    return false;
  }
}
