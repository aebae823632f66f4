/** VoiceClient: one WebSocket to the server, any number of speech contexts, one player. */
import { OpusStreamDecoder, PcmStreamDecoder, type Encoding, opusSupported } from "./decode.js";
import type { StreamDecoder } from "./decode.js";
import { Emitter } from "./emitter.js";
import { VoiceError } from "./errors.js";
import { parseFrame } from "./framing.js";
import type { FromWorklet } from "./messages.js";
import { Player } from "./player.js";

/** Sample rates the server sends PCM at. */
export const PCM_RATES = [8000, 16000, 22050, 24000, 44100, 48000];
const OPUS_RATE = 48000;
const OPUS_FRAME_MS = 20;
const WS_PATH = "/v1/audio/speech/ws";
const RECONNECT_DELAYS_MS = [250, 500, 1000, 2000, 4000];

export type TokenSource = string | (() => string | Promise<string>);

export interface ConnectOptions {
  /** Server URL: `ws(s)://host/path`, `http(s)://host` or a path; default: this page's server. */
  url?: string;
  /** A connect token from `POST /v1/auth/tokens` (or a function that fetches a fresh one). */
  token?: TokenSource;
  /** `auto` (default): Opus where the browser decodes it with WebCodecs, PCM otherwise. */
  encoding?: "auto" | "opus" | "pcm";
  /** PCM sample rate (default 24000, or the given audioContext's rate). Opus is always 48000. */
  sampleRate?: number;
  /** The session's default voice. */
  voice?: string;
  /** Play into this context instead of one the client makes (its rate then decides). */
  audioContext?: AudioContext;
  /** Audio a context buffers before it starts sounding, and after an underrun (default 100 ms). */
  startThresholdMs?: number;
  /** Further `session.update` fields (model, language, timestamps, idle_timeout_s, ...). */
  session?: Record<string, unknown>;
  /** Reconnect when the socket drops with no context in flight (default true). */
  reconnect?: boolean;
}

/** `context.create` fields: voice, language, speed, instructions, timestamps, sampling... */
export interface ContextOptions {
  voice?: string;
  language?: string;
  speed?: number;
  instructions?: string;
  timestamps?: "none" | "word";
  [field: string]: unknown;
}

export interface Word {
  text: string;
  start_ms: number;
  end_ms: number;
  char_start: number;
  char_end: number;
}

export interface DoneInfo {
  /** Audio the server sent for the context, in ms. */
  audioMs: number;
  usage?: { chars: number; frames?: number };
  /** True when the context ended by `cancel()`. */
  cancelled: boolean;
}

export interface ContextStats {
  /** From the first `append` (or creation, if later) to the first audio received, in ms. */
  ttfaMs: number | null;
  /** From the first `append` to the first audio rendered by the player, in ms. */
  ttfaPlayedMs: number | null;
  /** Audio received, in ms. */
  audioMs: number;
  /** Of it, audio played so far, in ms (follows playback; for word highlighting). */
  playedMs: number;
  bytesReceived: number;
  underruns: number;
}

export interface ContextEvents {
  /** The first audio arrived. */
  audio: { ttfaMs: number };
  timestamps: Word[];
  flushed: { flushId?: string; audioMs: number };
  warning: { code: string; message: string };
  done: DoneInfo;
  error: VoiceError;
  cancelled: { audioSentMs: number; playedMs: number };
  /** All of the context's audio has been played (or it was cancelled). */
  played: { playedMs: number };
}

export interface ClientEvents {
  error: VoiceError;
  warning: { code: string; message: string };
  /** The socket dropped with no context in flight; the client is reconnecting. */
  reconnecting: { attempt: number; code: number; reason: string };
  reconnected: { attempts: number };
  /** The socket is gone for good: contexts in flight failed, or reconnecting did not work. */
  disconnected: { code: number; reason: string; lostContexts: string[] };
}

type Json = Record<string, unknown>;

/** The socket URL for `url` (relative to `base`), with the token as `?token=`. */
export function socketUrl(url: string | undefined, base: string | undefined, token?: string): string {
  const u = new URL(url ?? WS_PATH, base ?? "http://localhost/");
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.pathname === "/" || u.pathname === "") u.pathname = WS_PATH;
  if (token) u.searchParams.set("token", token);
  return u.toString();
}

let nextId = 0;

export class SpeechContext extends Emitter<ContextEvents> {
  readonly id: string;
  /** Resolves on `context.done` (or after `cancel()`, with `cancelled: true`); rejects with the server's error. */
  readonly done: Promise<DoneInfo>;
  /** Resolves when the context's audio has all been played (or it was cancelled). */
  readonly played: Promise<{ playedMs: number }>;
  private resolveDone!: (info: DoneInfo) => void;
  private rejectDone!: (err: VoiceError) => void;
  private resolvePlayed!: (info: { playedMs: number }) => void;
  private readonly createdAt = performance.now();
  private firstTextAt: number | null = null;
  private firstAudioAt: number | null = null;
  private firstPlayedAt: number | null = null;
  private samples = 0;
  private bytes = 0;
  private underruns = 0;
  private serverDone = false;
  private ended = false;
  private settled = false;
  private playbackOver = false;
  private finalPlayedMs = 0;
  private cancelling: Promise<ContextEvents["cancelled"]> | null = null;
  private acknowledgeCancel: ((audioSentMs: number) => void) | null = null;
  /** @internal */
  stream: number | null = null;
  /** @internal */
  decoder: StreamDecoder | null = null;

  /** @internal Use `client.context()`. */
  constructor(
    private readonly client: VoiceClient,
    options: ContextOptions,
  ) {
    super();
    this.id = `ctx-${(nextId += 1)}-${Math.random().toString(36).slice(2, 8)}`;
    this.done = new Promise((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {}); // awaiting it is optional
    this.played = new Promise((resolve) => {
      this.resolvePlayed = resolve;
    });
    client.player.open(this.id, (event) => this.onPlayback(event));
    client.send({ type: "context.create", context_id: this.id, ...options });
  }

  get stats(): ContextStats {
    const start = this.firstTextAt ?? this.createdAt;
    return {
      ttfaMs: this.firstAudioAt === null ? null : this.firstAudioAt - start,
      ttfaPlayedMs: this.firstPlayedAt === null ? null : this.firstPlayedAt - start,
      audioMs: (this.samples / this.client.player.sampleRate) * 1000,
      playedMs: this.playbackOver ? this.finalPlayedMs : this.client.player.playedMsOf(this.id),
      bytesReceived: this.bytes,
      underruns: this.underruns,
    };
  }

  /** Streams text in, at any granularity; pieces are joined exactly as given. */
  append(text: string): void {
    this.checkOpen("append");
    if (text === "") return;
    if (this.firstTextAt === null) this.firstTextAt = performance.now();
    this.client.send({ type: "text.append", context_id: this.id, text });
  }

  /** Speaks everything buffered now, without waiting for a sentence end. */
  flush(): void {
    this.checkOpen("flush");
    this.client.send({ type: "context.flush", context_id: this.id });
  }

  /** No more text: the rest is spoken, then `done` resolves. */
  end(): void {
    this.checkOpen("end");
    this.ended = true;
    this.client.send({ type: "context.end", context_id: this.id });
  }

  /**
   * Barge-in: the sound stops within one render quantum, buffered audio is dropped,
   * and the server is told how much was played. Resolves once the server confirms.
   */
  cancel(): Promise<ContextEvents["cancelled"]> {
    if (this.cancelling) return this.cancelling;
    this.cancelling = this.runCancel();
    return this.cancelling;
  }

  private async runCancel(): Promise<ContextEvents["cancelled"]> {
    const playedSamples = await this.client.player.cancel(this.id);
    const playedMs = Math.round((playedSamples / this.client.player.sampleRate) * 1000);
    this.decoder?.close();
    let audioSentMs = Math.round(this.stats.audioMs);
    if (!this.serverDone && !this.settled && this.client.connected) {
      const acknowledged = new Promise<number>((resolve) => {
        this.acknowledgeCancel = resolve;
      });
      this.client.send({ type: "context.cancel", context_id: this.id, played_ms: playedMs });
      audioSentMs = await acknowledged;
    }
    const info = { audioSentMs, playedMs };
    this.emit("cancelled", info);
    this.settle({ audioMs: audioSentMs, cancelled: true });
    this.finishPlayback(playedMs);
    return info;
  }

  private checkOpen(what: string): void {
    if (this.ended || this.cancelling || this.settled) {
      throw new VoiceError("context_closed", `cannot ${what}: context ${this.id} was ended or cancelled`);
    }
  }

  /** @internal */
  receiveAudio(samples: Float32Array): void {
    if (this.cancelling) return;
    if (this.firstAudioAt === null) {
      this.firstAudioAt = performance.now();
      this.emit("audio", { ttfaMs: this.firstAudioAt - (this.firstTextAt ?? this.createdAt) });
    }
    this.samples += samples.length;
    this.client.player.push(this.id, samples);
  }

  /** @internal */
  countBytes(n: number): void {
    this.bytes += n;
  }

  /** @internal */
  async receive(msg: Json): Promise<void> {
    switch (msg.type) {
      case "timestamps":
        this.emit("timestamps", msg.words as Word[]);
        break;
      case "context.flushed":
        this.emit("flushed", { flushId: msg.flush_id as string | undefined, audioMs: msg.audio_ms as number });
        break;
      case "warning":
        this.emit("warning", { code: msg.code as string, message: msg.message as string });
        break;
      case "context.done": {
        this.serverDone = true;
        await this.decoder?.flush().catch(() => {});
        this.decoder?.close();
        if (!this.cancelling) this.client.player.end(this.id);
        const info = { audioMs: msg.audio_ms as number, usage: msg.usage as DoneInfo["usage"], cancelled: false };
        if (this.settle(info)) this.emit("done", info);
        break;
      }
      case "context.cancelled":
        this.serverDone = true;
        this.acknowledgeCancel?.(msg.audio_sent_ms as number);
        break;
      case "error":
        this.fail(new VoiceError(msg.code as string, msg.message as string, msg.param as string | undefined, Boolean(msg.fatal)));
        break;
    }
  }

  /** @internal The context cannot go on (server error, lost connection). */
  fail(err: VoiceError): void {
    this.decoder?.close();
    this.serverDone = true;
    this.acknowledgeCancel?.(Math.round(this.stats.audioMs));
    if (this.settled) return;
    this.settled = true;
    void this.client.player.cancel(this.id).then((played) =>
      this.finishPlayback(Math.round((played / this.client.player.sampleRate) * 1000)),
    );
    this.client.forget(this);
    this.rejectDone(err);
    this.emit("error", err);
  }

  /** @internal */
  get inFlight(): boolean {
    return !this.serverDone && !this.settled;
  }

  private settle(info: DoneInfo): boolean {
    if (this.settled) return false;
    this.settled = true;
    this.client.forget(this);
    this.resolveDone(info);
    return true;
  }

  private onPlayback(event: FromWorklet): void {
    if (event.t === "started" && this.firstPlayedAt === null) this.firstPlayedAt = performance.now();
    else if (event.t === "underrun") this.underruns += 1;
    else if (event.t === "finished") {
      this.finishPlayback(Math.round((event.played / this.client.player.sampleRate) * 1000));
    }
  }

  private finishPlayback(playedMs: number): void {
    if (this.playbackOver) return;
    this.playbackOver = true;
    this.finalPlayedMs = playedMs;
    this.resolvePlayed({ playedMs });
    this.emit("played", { playedMs });
  }
}

export class VoiceClient extends Emitter<ClientEvents> {
  readonly player: Player;
  readonly encoding: Encoding;
  /** The server's `session.created` (its settings and limits), refreshed on reconnect. */
  session: Json | null = null;
  private ws: WebSocket | null = null;
  private closing = false;
  private readonly contexts = new Map<string, SpeechContext>();
  private readonly streams = new Map<number, SpeechContext>();

  private constructor(
    private readonly options: ConnectOptions,
    encoding: Encoding,
    player: Player,
    private readonly ownsAudioContext: boolean,
  ) {
    super();
    this.encoding = encoding;
    this.player = player;
  }

  /** Connects, sets the session's voice and audio format, and resolves once the server greets. */
  static async connect(options: ConnectOptions = {}): Promise<VoiceClient> {
    const encoding = await chooseEncoding(options);
    const rate = encoding === "opus" ? OPUS_RATE : (options.audioContext?.sampleRate ?? options.sampleRate ?? 24000);
    if (encoding === "pcm" && !PCM_RATES.includes(rate)) {
      throw new VoiceError(
        "unsupported_value",
        `PCM sample rate ${rate} is not one the server sends (${PCM_RATES.join(", ")})`,
        "sampleRate",
      );
    }
    const audioContext =
      options.audioContext ?? new AudioContext({ sampleRate: rate, latencyHint: "interactive" });
    const player = await Player.create(audioContext, options.startThresholdMs ?? 100);
    const client = new VoiceClient(options, encoding, player, !options.audioContext);
    try {
      await client.open();
    } catch (err) {
      await player.close(!options.audioContext);
      throw err;
    }
    if (audioContext.state === "suspended") void audioContext.resume().catch(() => {});
    return client;
  }

  /** Whether the socket is open. */
  get connected(): boolean {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** Opens a context (`context.create`); stream text into it with `append`. */
  context(options: ContextOptions = {}): SpeechContext {
    if (!this.connected) {
      throw new VoiceError("not_connected", "the client is not connected: call VoiceClient.connect (or reconnect()) first");
    }
    if ("output_format" in options || "context_id" in options) {
      const field = "output_format" in options ? "output_format" : "context_id";
      throw new VoiceError(
        "invalid_field",
        field === "output_format"
          ? "output_format is chosen per client (encoding and sampleRate in VoiceClient.connect): the player decodes one format"
          : "context_id is chosen by the SDK (see ctx.id)",
        field,
      );
    }
    const ctx = new SpeechContext(this, options);
    this.contexts.set(ctx.id, ctx);
    ctx.decoder = this.makeDecoder(ctx);
    return ctx;
  }

  /** A context with `text` appended and ended: `await client.speak("Hi").done`. */
  speak(text: string, options: ContextOptions = {}): SpeechContext {
    const ctx = this.context(options);
    ctx.append(text);
    ctx.end();
    return ctx;
  }

  /** Opens the socket again (after `disconnected`); contexts then start fresh. */
  async reconnect(): Promise<void> {
    if (this.connected) return;
    this.closing = false;
    await this.open();
  }

  /** Cancels what plays, closes the socket and releases the audio context the client made. */
  async close(): Promise<void> {
    this.closing = true;
    for (const ctx of [...this.contexts.values()]) {
      ctx.fail(new VoiceError("client_closed", "the client was closed"));
    }
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "client closed");
    this.ws = null;
    await this.player.close(this.ownsAudioContext);
  }

  /** @internal */
  send(msg: Json): void {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      throw new VoiceError("not_connected", "the socket is not open");
    }
    this.ws.send(JSON.stringify(msg));
  }

  /** @internal */
  forget(ctx: SpeechContext): void {
    this.contexts.delete(ctx.id);
    if (ctx.stream !== null && this.streams.get(ctx.stream) === ctx) this.streams.delete(ctx.stream);
  }

  private makeDecoder(ctx: SpeechContext): StreamDecoder {
    const sink = (samples: Float32Array) => ctx.receiveAudio(samples);
    if (this.encoding === "pcm") return new PcmStreamDecoder(sink);
    return new OpusStreamDecoder(sink, OPUS_RATE, OPUS_FRAME_MS * 1000, (err) =>
      ctx.fail(new VoiceError("decode_error", `Opus decoding failed: ${err.message}`)),
    );
  }

  private audioFormat(): Json {
    if (this.encoding === "opus") {
      return { encoding: "opus", sample_rate: OPUS_RATE, container: "raw", frame_ms: OPUS_FRAME_MS };
    }
    return { encoding: "pcm_s16le", sample_rate: this.player.sampleRate };
  }

  private async open(): Promise<void> {
    const source = this.options.token;
    const token = typeof source === "function" ? await source() : source;
    const base = typeof location === "undefined" ? undefined : location.href;
    const ws = new WebSocket(socketUrl(this.options.url, base, token));
    ws.binaryType = "arraybuffer";
    this.session = await new Promise<Json>((resolve, reject) => {
      ws.onmessage = (event) => {
        if (typeof event.data !== "string") return;
        const msg = JSON.parse(event.data) as Json;
        if (msg.type === "session.created") resolve(msg);
        else if (msg.type === "error") reject(new VoiceError(msg.code as string, msg.message as string, msg.param as string | undefined, true));
      };
      ws.onclose = (event) =>
        reject(
          new VoiceError(
            "connect_failed",
            `the server refused or dropped the connection (close ${event.code}${event.reason ? `: ${event.reason}` : ""}); ` +
              "check the URL, the token (it may have expired: mint a fresh one) and the server's --cors-origin",
          ),
        );
    });
    this.ws = ws;
    ws.onmessage = (event) => this.receive(event.data as string | ArrayBuffer);
    ws.onclose = (event) => this.dropped(ws, event.code, event.reason);
    const update: Json = { type: "session.update", output_format: this.audioFormat(), ...this.options.session };
    if (this.options.voice !== undefined) update.voice = this.options.voice;
    this.send(update);
  }

  private receive(data: string | ArrayBuffer): void {
    if (typeof data !== "string") {
      let frame;
      try {
        frame = parseFrame(data);
      } catch (err) {
        this.emit("error", new VoiceError("invalid_frame", (err as Error).message));
        return;
      }
      this.player.countBytes(frame.payload.length);
      const ctx = this.streams.get(frame.stream);
      if (!ctx) return;
      ctx.countBytes(frame.payload.length);
      ctx.decoder?.decode(frame.payload, frame.seq);
      return;
    }
    const msg = JSON.parse(data) as Json;
    const ctx = typeof msg.context_id === "string" ? this.contexts.get(msg.context_id) : undefined;
    if (msg.type === "context.created" && ctx) {
      ctx.stream = msg.stream as number;
      this.streams.set(ctx.stream, ctx);
    } else if (msg.type === "session.updated") {
      if (this.session) this.session = { ...this.session, session: msg.session };
    } else if (ctx) {
      void ctx.receive(msg);
    } else if (msg.type === "error") {
      this.emit("error", new VoiceError(msg.code as string, msg.message as string, msg.param as string | undefined, Boolean(msg.fatal)));
    } else if (msg.type === "warning") {
      this.emit("warning", { code: msg.code as string, message: msg.message as string });
    }
  }

  private dropped(ws: WebSocket, code: number, reason: string): void {
    if (ws !== this.ws) return;
    this.ws = null;
    this.streams.clear();
    if (this.closing) return;
    const lost = [...this.contexts.values()].filter((ctx) => ctx.inFlight);
    for (const ctx of lost) {
      ctx.fail(new VoiceError("connection_lost", `the connection closed (${code}${reason ? `: ${reason}` : ""}) before the context finished`));
    }
    if (lost.length > 0 || this.options.reconnect === false) {
      this.emit("disconnected", { code, reason, lostContexts: lost.map((ctx) => ctx.id) });
      return;
    }
    void this.reconnectLoop(code, reason);
  }

  private async reconnectLoop(code: number, reason: string): Promise<void> {
    for (let attempt = 1; attempt <= RECONNECT_DELAYS_MS.length; attempt++) {
      this.emit("reconnecting", { attempt, code, reason });
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_DELAYS_MS[attempt - 1]));
      if (this.closing) return;
      try {
        await this.open();
        this.emit("reconnected", { attempts: attempt });
        return;
      } catch {
        // next attempt
      }
    }
    this.emit("disconnected", { code, reason, lostContexts: [] });
  }
}

async function chooseEncoding(options: ConnectOptions): Promise<Encoding> {
  const wanted = options.encoding ?? "auto";
  if (wanted !== "auto" && wanted !== "opus" && wanted !== "pcm") {
    throw new VoiceError("unsupported_value", `encoding ${String(wanted)} is not one of auto, opus, pcm`, "encoding");
  }
  if (wanted === "pcm") return "pcm";
  const contextRate = options.audioContext?.sampleRate;
  const opusFits = contextRate === undefined || contextRate === OPUS_RATE;
  const ok = opusFits && (await opusSupported());
  if (wanted === "opus" && !ok) {
    throw new VoiceError(
      "unsupported_value",
      opusFits
        ? "this browser cannot decode Opus (no WebCodecs AudioDecoder); use encoding: 'pcm' or 'auto'"
        : `Opus plays at 48000 Hz but the given audioContext runs at ${contextRate}; use encoding: 'pcm' or a 48 kHz context`,
      "encoding",
    );
  }
  return ok ? "opus" : "pcm";
}
