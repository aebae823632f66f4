// voiceserver browser SDK, built from clients/js (node build.mjs). Do not edit.
// src/framing.ts
var HEADER_BYTES = 8;
var FLAG_FLUSH_END = 1;
var FLAG_CONTEXT_END = 2;
function parseFrame(data) {
  if (data.byteLength < HEADER_BYTES) {
    throw new Error(`audio frame of ${data.byteLength} bytes is shorter than its 8-byte header`);
  }
  const view = new DataView(data);
  const version = view.getUint8(0);
  if (version !== 1) throw new Error(`audio frame version ${version} is not supported (expected 1)`);
  return {
    version,
    flags: view.getUint8(1),
    stream: view.getUint16(2, true),
    seq: view.getUint32(4, true),
    payload: new Uint8Array(data, HEADER_BYTES)
  };
}
var Pcm16Decoder = class {
  carry = null;
  decode(bytes) {
    const lead = this.carry === null ? 0 : 1;
    const total = bytes.length + lead;
    const out = new Float32Array(total >> 1);
    let i = 0;
    let k = 0;
    if (this.carry !== null && bytes.length > 0) {
      out[k++] = toSigned(this.carry | bytes[0] << 8) / 32768;
      i = 1;
      this.carry = null;
    }
    for (; i + 1 < bytes.length; i += 2) out[k++] = toSigned(bytes[i] | bytes[i + 1] << 8) / 32768;
    if (i < bytes.length) this.carry = bytes[i];
    return out;
  }
};
function toSigned(u16) {
  return u16 >= 32768 ? u16 - 65536 : u16;
}

// src/decode.ts
var PcmStreamDecoder = class {
  constructor(sink) {
    this.sink = sink;
  }
  sink;
  pcm = new Pcm16Decoder();
  decode(payload) {
    const samples = this.pcm.decode(payload);
    if (samples.length > 0) this.sink(samples);
  }
  flush() {
    return Promise.resolve();
  }
  close() {
  }
};
var OpusStreamDecoder = class {
  constructor(sink, sampleRate, frameUs, onError) {
    this.sink = sink;
    this.frameUs = frameUs;
    this.decoder = new AudioDecoder({
      output: (data) => this.output(data),
      error: (err) => {
        if (!this.closed) onError(err instanceof Error ? err : new Error(String(err)));
      }
    });
    this.decoder.configure({ codec: "opus", sampleRate, numberOfChannels: 1 });
  }
  sink;
  frameUs;
  decoder;
  closed = false;
  decode(payload, seq) {
    if (this.closed) return;
    this.decoder.decode(
      new EncodedAudioChunk({ type: "key", timestamp: seq * this.frameUs, data: payload })
    );
  }
  async flush() {
    if (!this.closed) await this.decoder.flush();
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    if (this.decoder.state !== "closed") this.decoder.close();
  }
  output(data) {
    try {
      if (this.closed) return;
      const samples = new Float32Array(data.numberOfFrames);
      data.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
      this.sink(samples);
    } finally {
      data.close();
    }
  }
};
async function opusSupported() {
  if (typeof AudioDecoder === "undefined") return false;
  try {
    const support = await AudioDecoder.isConfigSupported({
      codec: "opus",
      sampleRate: 48e3,
      numberOfChannels: 1
    });
    return support.supported === true;
  } catch {
    return false;
  }
}

// src/emitter.ts
var Emitter = class {
  handlers = /* @__PURE__ */ new Map();
  on(name, handler) {
    let set = this.handlers.get(name);
    if (!set) this.handlers.set(name, set = /* @__PURE__ */ new Set());
    set.add(handler);
    return () => this.off(name, handler);
  }
  off(name, handler) {
    this.handlers.get(name)?.delete(handler);
  }
  /** Whether anyone listens to `name`. */
  listens(name) {
    return (this.handlers.get(name)?.size ?? 0) > 0;
  }
  /** Calls every listener; one that throws is reported (reportError) and does not stop the rest. */
  emit(name, value) {
    for (const handler of [...this.handlers.get(name) ?? []]) {
      try {
        handler(value);
      } catch (err) {
        this.listenerFailed(err);
      }
    }
  }
  /** Where a listener's exception goes: the page's error reporting, as an uncaught error would. */
  listenerFailed(err) {
    const report = globalThis.reportError;
    if (report) report(err);
    else console.error(err);
  }
};

// src/errors.ts
var VoiceError = class extends Error {
  code;
  param;
  fatal;
  constructor(code, message, param, fatal = false) {
    super(message);
    this.name = "VoiceError";
    this.code = code;
    this.param = param;
    this.fatal = fatal;
  }
};

// src/player.ts
var Player = class _Player {
  audioContext;
  node;
  status = {
    t: "status",
    played: 0,
    audible: 0,
    buffered: 0,
    underruns: 0,
    peak: 0,
    current: null,
    currentPlayed: 0
  };
  bytes = 0;
  cancelWaiters = /* @__PURE__ */ new Map();
  watchers = /* @__PURE__ */ new Map();
  constructor(audioContext, node) {
    this.audioContext = audioContext;
    this.node = node;
    node.port.onmessage = (event) => this.receive(event.data);
    node.connect(audioContext.destination);
  }
  /** Loads the worklet into `audioContext`; `startThresholdMs` of audio is buffered before a context sounds. */
  static async create(audioContext, startThresholdMs) {
    if (!audioContext.audioWorklet) {
      throw new Error(
        "AudioWorklet is unavailable: the page must be a secure context (https, or http on localhost)"
      );
    }
    const url = URL.createObjectURL(
      new Blob(['"use strict";\n(() => {\n  // src/ring.ts\n  var RingBuffer = class {\n    data;\n    head = 0;\n    // next read index\n    count = 0;\n    constructor(capacity = 16384) {\n      this.data = new Float32Array(Math.max(1, capacity));\n    }\n    get size() {\n      return this.count;\n    }\n    get capacity() {\n      return this.data.length;\n    }\n    write(samples) {\n      if (this.count + samples.length > this.data.length) this.grow(this.count + samples.length);\n      const cap = this.data.length;\n      const tail = (this.head + this.count) % cap;\n      const first = Math.min(samples.length, cap - tail);\n      this.data.set(samples.subarray(0, first), tail);\n      if (first < samples.length) this.data.set(samples.subarray(first), 0);\n      this.count += samples.length;\n    }\n    /** Moves up to `n` samples into `out` at `offset`; returns how many it moved. */\n    read(out, offset, n) {\n      const take = Math.min(n, this.count, out.length - offset);\n      const cap = this.data.length;\n      const first = Math.min(take, cap - this.head);\n      out.set(this.data.subarray(this.head, this.head + first), offset);\n      if (first < take) out.set(this.data.subarray(0, take - first), offset + first);\n      this.head = (this.head + take) % cap;\n      this.count -= take;\n      return take;\n    }\n    clear() {\n      this.head = 0;\n      this.count = 0;\n    }\n    grow(needed) {\n      let cap = this.data.length * 2;\n      while (cap < needed) cap *= 2;\n      const next = new Float32Array(cap);\n      const held = this.count;\n      this.read(next, 0, held);\n      this.data = next;\n      this.head = 0;\n      this.count = held;\n    }\n  };\n\n  // src/playback.ts\n  var SILENCE = 1e-3;\n  var PlaybackCore = class {\n    /** Samples a context must hold before it starts (or restarts after an underrun). */\n    threshold;\n    /** The threshold asked for; an underrun doubles the working one (up to 8x), a\n     * context that plays through without one brings it back down by a quarter. */\n    baseThreshold;\n    underruns = 0;\n    /** Context samples rendered (silence between them not counted). */\n    played = 0;\n    /** Of those, samples louder than SILENCE. */\n    audible = 0;\n    /** Peak level of the last quantum, 0..1. */\n    peak = 0;\n    queue = [];\n    entries = /* @__PURE__ */ new Map();\n    gone = /* @__PURE__ */ new Set();\n    constructor(threshold) {\n      this.threshold = threshold;\n      this.baseThreshold = threshold;\n    }\n    /** Samples buffered across every context not yet played. */\n    get buffered() {\n      let n = 0;\n      for (const e of this.queue) n += e.ring.size;\n      return n;\n    }\n    /** The context sounding now (or next), if any. */\n    get current() {\n      return this.queue.length ? this.queue[0].id : null;\n    }\n    open(id) {\n      if (this.entries.has(id) || this.gone.has(id)) return;\n      const entry = {\n        id,\n        ring: new RingBuffer(),\n        underran: false,\n        ended: false,\n        playing: false,\n        everPlayed: false,\n        played: 0\n      };\n      this.entries.set(id, entry);\n      this.queue.push(entry);\n    }\n    push(id, samples) {\n      this.open(id);\n      this.entries.get(id)?.ring.write(samples);\n    }\n    /** No more audio for `id`: it plays out without waiting for the threshold. */\n    end(id) {\n      this.open(id);\n      const entry = this.entries.get(id);\n      if (entry) entry.ended = true;\n    }\n    /** Drops `id` and everything buffered for it; returns how many of its samples were played. */\n    cancel(id) {\n      const entry = this.entries.get(id);\n      this.gone.add(id);\n      if (!entry) return 0;\n      this.entries.delete(id);\n      this.queue.splice(this.queue.indexOf(entry), 1);\n      return entry.played;\n    }\n    /** Samples of `id` played so far (0 once it is gone). */\n    playedOf(id) {\n      return this.entries.get(id)?.played ?? 0;\n    }\n    /** Fills `out` (zeros where there is nothing to play) and says what happened. */\n    render(out) {\n      const events = [];\n      let offset = 0;\n      while (offset < out.length && this.queue.length > 0) {\n        const head = this.queue[0];\n        if (!head.playing) {\n          if (head.ring.size === 0 && head.ended) {\n            this.finish(head, events);\n            continue;\n          }\n          if (head.ring.size < this.threshold && !head.ended) break;\n          head.playing = true;\n          if (!head.everPlayed) events.push({ t: "started", id: head.id });\n          head.everPlayed = true;\n        }\n        if (head.ring.size === 0) {\n          if (head.ended) {\n            this.finish(head, events);\n            continue;\n          }\n          head.playing = false;\n          head.underran = true;\n          this.underruns += 1;\n          this.threshold = Math.min(8 * this.baseThreshold, Math.max(this.threshold * 2, 1));\n          events.push({ t: "underrun", id: head.id });\n          break;\n        }\n        const n = head.ring.read(out, offset, out.length - offset);\n        head.played += n;\n        this.played += n;\n        offset += n;\n      }\n      out.fill(0, offset);\n      let peak = 0;\n      for (let i = 0; i < offset; i++) {\n        const v = Math.abs(out[i]);\n        if (v > peak) peak = v;\n        if (v > SILENCE) this.audible += 1;\n      }\n      this.peak = peak;\n      return events;\n    }\n    finish(entry, events) {\n      if (!entry.underran && this.threshold > this.baseThreshold) {\n        this.threshold = Math.max(this.baseThreshold, Math.floor(this.threshold * 0.75));\n      }\n      this.queue.shift();\n      this.entries.delete(entry.id);\n      this.gone.add(entry.id);\n      events.push({ t: "finished", id: entry.id, played: entry.played });\n    }\n  };\n\n  // src/worklet.ts\n  var REPORT_EVERY = 4;\n  var VoicePlayerProcessor = class extends AudioWorkletProcessor {\n    core;\n    quanta = 0;\n    constructor(options) {\n      super(options);\n      this.core = new PlaybackCore(options.processorOptions?.threshold ?? 0);\n      this.port.onmessage = (event) => this.receive(event.data);\n    }\n    receive(msg) {\n      const core = this.core;\n      switch (msg.t) {\n        case "open":\n          core.open(msg.id);\n          break;\n        case "data":\n          core.push(msg.id, msg.samples);\n          break;\n        case "end":\n          core.end(msg.id);\n          break;\n        case "cancel":\n          this.port.postMessage({ t: "cancelled", id: msg.id, played: core.cancel(msg.id) });\n          this.report();\n          break;\n      }\n    }\n    process(_inputs, outputs) {\n      const channels = outputs[0];\n      if (!channels || channels.length === 0) return true;\n      const events = this.core.render(channels[0]);\n      for (let c = 1; c < channels.length; c++) channels[c].set(channels[0]);\n      for (const event of events) this.port.postMessage(event);\n      this.quanta += 1;\n      if (events.length > 0 || this.quanta % REPORT_EVERY === 0) this.report();\n      return true;\n    }\n    report() {\n      const core = this.core;\n      const current = core.current;\n      this.port.postMessage({\n        t: "status",\n        played: core.played,\n        audible: core.audible,\n        buffered: core.buffered,\n        underruns: core.underruns,\n        peak: core.peak,\n        current,\n        currentPlayed: current === null ? 0 : core.playedOf(current)\n      });\n    }\n  };\n  registerProcessor("voiceserver-player", VoicePlayerProcessor);\n})();\n'], { type: "application/javascript" })
    );
    try {
      await audioContext.audioWorklet.addModule(url);
    } finally {
      URL.revokeObjectURL(url);
    }
    const threshold = Math.round(startThresholdMs / 1e3 * audioContext.sampleRate);
    const node = new AudioWorkletNode(audioContext, "voiceserver-player", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { threshold }
    });
    return new _Player(audioContext, node);
  }
  get sampleRate() {
    return this.audioContext.sampleRate;
  }
  /** Starts the audio clock; browsers need a user gesture before audio may sound. */
  resume() {
    return this.audioContext.resume();
  }
  stats() {
    const ms = (n) => n / this.sampleRate * 1e3;
    const s = this.status;
    return {
      playedMs: ms(s.played),
      audibleMs: ms(s.audible),
      bufferedMs: ms(s.buffered),
      underruns: s.underruns,
      bytesReceived: this.bytes,
      level: s.peak,
      sampleRate: this.sampleRate
    };
  }
  /** Milliseconds of `id` played so far, as of the latest report (0 unless it is sounding). */
  playedMsOf(id) {
    return this.status.current === id ? this.status.currentPlayed / this.sampleRate * 1e3 : 0;
  }
  /** @internal */
  countBytes(n) {
    this.bytes += n;
  }
  /** @internal Reserves `id`'s place in the play order; `watch` sees its worklet events. */
  open(id, watch) {
    this.watchers.set(id, watch);
    this.post({ t: "open", id });
  }
  /** @internal */
  push(id, samples) {
    this.node.port.postMessage({ t: "data", id, samples }, [samples.buffer]);
  }
  /** @internal No more audio for `id`. */
  end(id) {
    this.post({ t: "end", id });
  }
  /**
   * @internal Silences `id` at the next render quantum and drops its buffered audio;
   * resolves with the samples of it that were played.
   */
  cancel(id) {
    return new Promise((resolve) => {
      const last = this.status.current === id ? this.status.currentPlayed : 0;
      const timer = setTimeout(() => settle(last), 250);
      const settle = (played) => {
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
  async close(ownContext) {
    this.node.disconnect();
    this.node.port.close();
    if (ownContext && this.audioContext.state !== "closed") await this.audioContext.close();
  }
  post(msg) {
    this.node.port.postMessage(msg);
  }
  receive(msg) {
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
};

// src/client.ts
var PCM_RATES = [8e3, 16e3, 22050, 24e3, 44100, 48e3];
var OPUS_RATE = 48e3;
var OPUS_FRAME_MS = 20;
var WS_PATH = "/v1/audio/speech/ws";
var RECONNECT_DELAYS_MS = [250, 500, 1e3, 2e3, 4e3];
function socketUrl(url, base, token) {
  const u = new URL(url ?? WS_PATH, base ?? "http://localhost/");
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.pathname === "/" || u.pathname === "") u.pathname = WS_PATH;
  if (token) u.searchParams.set("token", token);
  return u.toString();
}
var nextId = 0;
var SpeechContext = class extends Emitter {
  /** @internal Use `client.context()`. */
  constructor(client, options) {
    super();
    this.client = client;
    this.id = `ctx-${nextId += 1}-${Math.random().toString(36).slice(2, 8)}`;
    this.done = new Promise((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {
    });
    this.played = new Promise((resolve) => {
      this.resolvePlayed = resolve;
    });
    client.player.open(this.id, (event) => this.onPlayback(event));
    client.send({ type: "context.create", context_id: this.id, ...options });
  }
  client;
  id;
  /** Resolves on `context.done` (or after `cancel()`, with `cancelled: true`); rejects with the server's error. */
  done;
  /** Resolves when the context's audio has all been played (or it was cancelled). */
  played;
  resolveDone;
  rejectDone;
  resolvePlayed;
  createdAt = performance.now();
  firstTextAt = null;
  firstAudioAt = null;
  firstPlayedAt = null;
  samples = 0;
  bytes = 0;
  underruns = 0;
  serverDone = false;
  ended = false;
  settled = false;
  playbackOver = false;
  finalPlayedMs = 0;
  cancelling = null;
  acknowledgeCancel = null;
  /** @internal */
  stream = null;
  /** @internal */
  decoder = null;
  get stats() {
    const start = this.firstTextAt ?? this.createdAt;
    return {
      ttfaMs: this.firstAudioAt === null ? null : this.firstAudioAt - start,
      ttfaPlayedMs: this.firstPlayedAt === null ? null : this.firstPlayedAt - start,
      audioMs: this.samples / this.client.player.sampleRate * 1e3,
      playedMs: this.playbackOver ? this.finalPlayedMs : this.client.player.playedMsOf(this.id),
      bytesReceived: this.bytes,
      underruns: this.underruns
    };
  }
  /** Streams text in, at any granularity; pieces are joined exactly as given. */
  append(text) {
    this.checkOpen("append");
    if (text === "") return;
    if (this.firstTextAt === null) this.firstTextAt = performance.now();
    this.client.send({ type: "text.append", context_id: this.id, text });
  }
  /** Speaks everything buffered now, without waiting for a sentence end. */
  flush() {
    this.checkOpen("flush");
    this.client.send({ type: "context.flush", context_id: this.id });
  }
  /** No more text: the rest is spoken, then `done` resolves. */
  end() {
    this.checkOpen("end");
    this.ended = true;
    this.client.send({ type: "context.end", context_id: this.id });
  }
  /**
   * Barge-in: the sound stops within one render quantum, buffered audio is dropped,
   * and the server is told how much was played. Resolves once the server confirms.
   */
  cancel() {
    if (this.cancelling) return this.cancelling;
    this.cancelling = this.runCancel();
    return this.cancelling;
  }
  async runCancel() {
    const playedSamples = await this.client.player.cancel(this.id);
    const playedMs = Math.round(playedSamples / this.client.player.sampleRate * 1e3);
    this.decoder?.close();
    let audioSentMs = Math.round(this.stats.audioMs);
    if (!this.serverDone && !this.settled && this.client.connected) {
      const acknowledged = new Promise((resolve) => {
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
  checkOpen(what) {
    if (this.ended || this.cancelling || this.settled) {
      throw new VoiceError("context_closed", `cannot ${what}: context ${this.id} was ended or cancelled`);
    }
  }
  /** @internal */
  receiveAudio(samples) {
    if (this.cancelling) return;
    if (this.firstAudioAt === null) {
      this.firstAudioAt = performance.now();
      this.emit("audio", { ttfaMs: this.firstAudioAt - (this.firstTextAt ?? this.createdAt) });
    }
    this.samples += samples.length;
    this.client.player.push(this.id, samples);
  }
  /** @internal */
  countBytes(n) {
    this.bytes += n;
  }
  /** @internal */
  async receive(msg) {
    switch (msg.type) {
      case "timestamps":
        this.emit("timestamps", msg.words);
        break;
      case "context.flushed":
        this.emit("flushed", { flushId: msg.flush_id, audioMs: msg.audio_ms });
        break;
      case "warning":
        this.emit("warning", { code: msg.code, message: msg.message });
        break;
      case "context.done": {
        this.serverDone = true;
        await this.decoder?.flush().catch(() => {
        });
        this.decoder?.close();
        if (!this.cancelling) this.client.player.end(this.id);
        const info = { audioMs: msg.audio_ms, usage: msg.usage, cancelled: false };
        if (this.settle(info)) this.emit("done", info);
        break;
      }
      case "context.cancelled":
        this.serverDone = true;
        this.acknowledgeCancel?.(msg.audio_sent_ms);
        break;
      case "error":
        this.fail(new VoiceError(msg.code, msg.message, msg.param, Boolean(msg.fatal)));
        break;
    }
  }
  /** @internal The context cannot go on (server error, lost connection). */
  fail(err) {
    this.decoder?.close();
    this.serverDone = true;
    this.acknowledgeCancel?.(Math.round(this.stats.audioMs));
    if (this.settled) return;
    this.settled = true;
    void this.client.player.cancel(this.id).then(
      (played) => this.finishPlayback(Math.round(played / this.client.player.sampleRate * 1e3))
    );
    this.client.forget(this);
    this.rejectDone(err);
    this.emit("error", err);
  }
  /** @internal */
  get inFlight() {
    return !this.serverDone && !this.settled;
  }
  settle(info) {
    if (this.settled) return false;
    this.settled = true;
    this.client.forget(this);
    this.resolveDone(info);
    return true;
  }
  onPlayback(event) {
    if (event.t === "started" && this.firstPlayedAt === null) this.firstPlayedAt = performance.now();
    else if (event.t === "underrun") this.underruns += 1;
    else if (event.t === "finished") {
      this.finishPlayback(Math.round(event.played / this.client.player.sampleRate * 1e3));
    }
  }
  finishPlayback(playedMs) {
    if (this.playbackOver) return;
    this.playbackOver = true;
    this.finalPlayedMs = playedMs;
    this.resolvePlayed({ playedMs });
    this.emit("played", { playedMs });
  }
};
var VoiceClient = class _VoiceClient extends Emitter {
  constructor(options, encoding, player, ownsAudioContext) {
    super();
    this.options = options;
    this.ownsAudioContext = ownsAudioContext;
    this.encoding = encoding;
    this.player = player;
  }
  options;
  ownsAudioContext;
  player;
  encoding;
  /** The server's `session.created` (its settings and limits), refreshed on reconnect. */
  session = null;
  ws = null;
  closing = false;
  contexts = /* @__PURE__ */ new Map();
  streams = /* @__PURE__ */ new Map();
  /** Connects, sets the session's voice and audio format, and resolves once the server greets. */
  static async connect(options = {}) {
    const encoding = await chooseEncoding(options);
    const rate = encoding === "opus" ? OPUS_RATE : options.audioContext?.sampleRate ?? options.sampleRate ?? 24e3;
    if (encoding === "pcm" && !PCM_RATES.includes(rate)) {
      throw new VoiceError(
        "unsupported_value",
        `PCM sample rate ${rate} is not one the server sends (${PCM_RATES.join(", ")})`,
        "sampleRate"
      );
    }
    const audioContext = options.audioContext ?? new AudioContext({ sampleRate: rate, latencyHint: "interactive" });
    const player = await Player.create(audioContext, options.startThresholdMs ?? 100);
    const client = new _VoiceClient(options, encoding, player, !options.audioContext);
    try {
      await client.open();
    } catch (err) {
      await player.close(!options.audioContext);
      throw err;
    }
    if (audioContext.state === "suspended") void audioContext.resume().catch(() => {
    });
    return client;
  }
  /** Whether the socket is open. */
  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }
  /** Opens a context (`context.create`); stream text into it with `append`. */
  context(options = {}) {
    if (!this.connected) {
      throw new VoiceError("not_connected", "the client is not connected: call VoiceClient.connect (or reconnect()) first");
    }
    if ("output_format" in options || "context_id" in options) {
      const field = "output_format" in options ? "output_format" : "context_id";
      throw new VoiceError(
        "invalid_field",
        field === "output_format" ? "output_format is chosen per client (encoding and sampleRate in VoiceClient.connect): the player decodes one format" : "context_id is chosen by the SDK (see ctx.id)",
        field
      );
    }
    const ctx = new SpeechContext(this, options);
    this.contexts.set(ctx.id, ctx);
    ctx.decoder = this.makeDecoder(ctx);
    return ctx;
  }
  /** A context with `text` appended and ended: `await client.speak("Hi").done`. */
  speak(text, options = {}) {
    const ctx = this.context(options);
    ctx.append(text);
    ctx.end();
    return ctx;
  }
  /** Opens the socket again (after `disconnected`); contexts then start fresh. */
  async reconnect() {
    if (this.connected) return;
    this.closing = false;
    await this.open();
  }
  /** Cancels what plays, closes the socket and releases the audio context the client made. */
  async close() {
    this.closing = true;
    for (const ctx of [...this.contexts.values()]) {
      ctx.fail(new VoiceError("client_closed", "the client was closed"));
    }
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1e3, "client closed");
    this.ws = null;
    await this.player.close(this.ownsAudioContext);
  }
  /** @internal */
  send(msg) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      throw new VoiceError("not_connected", "the socket is not open");
    }
    this.ws.send(JSON.stringify(msg));
  }
  /** @internal */
  forget(ctx) {
    this.contexts.delete(ctx.id);
    if (ctx.stream !== null && this.streams.get(ctx.stream) === ctx) this.streams.delete(ctx.stream);
  }
  makeDecoder(ctx) {
    const sink = (samples) => ctx.receiveAudio(samples);
    if (this.encoding === "pcm") return new PcmStreamDecoder(sink);
    return new OpusStreamDecoder(
      sink,
      OPUS_RATE,
      OPUS_FRAME_MS * 1e3,
      (err) => ctx.fail(new VoiceError("decode_error", `Opus decoding failed: ${err.message}`))
    );
  }
  audioFormat() {
    if (this.encoding === "opus") {
      return { encoding: "opus", sample_rate: OPUS_RATE, container: "raw", frame_ms: OPUS_FRAME_MS };
    }
    return { encoding: "pcm_s16le", sample_rate: this.player.sampleRate };
  }
  async open() {
    const source = this.options.token;
    const token = typeof source === "function" ? await source() : source;
    const base = typeof location === "undefined" ? void 0 : location.href;
    const ws = new WebSocket(socketUrl(this.options.url, base, token));
    ws.binaryType = "arraybuffer";
    this.session = await new Promise((resolve, reject) => {
      ws.onmessage = (event) => {
        if (typeof event.data !== "string") return;
        const msg = JSON.parse(event.data);
        if (msg.type === "session.created") resolve(msg);
        else if (msg.type === "error") reject(new VoiceError(msg.code, msg.message, msg.param, true));
      };
      ws.onclose = (event) => reject(
        new VoiceError(
          "connect_failed",
          `the server refused or dropped the connection (close ${event.code}${event.reason ? `: ${event.reason}` : ""}); check the URL, the token (it may have expired: mint a fresh one) and the server's --cors-origin`
        )
      );
    });
    this.ws = ws;
    ws.onmessage = (event) => this.receive(event.data);
    ws.onclose = (event) => this.dropped(ws, event.code, event.reason);
    const update = { type: "session.update", output_format: this.audioFormat(), ...this.options.session };
    if (this.options.voice !== void 0) update.voice = this.options.voice;
    this.send(update);
  }
  receive(data) {
    if (typeof data !== "string") {
      let frame;
      try {
        frame = parseFrame(data);
      } catch (err) {
        this.emit("error", new VoiceError("invalid_frame", err.message));
        return;
      }
      this.player.countBytes(frame.payload.length);
      const ctx2 = this.streams.get(frame.stream);
      if (!ctx2) return;
      ctx2.countBytes(frame.payload.length);
      ctx2.decoder?.decode(frame.payload, frame.seq);
      return;
    }
    const msg = JSON.parse(data);
    const ctx = typeof msg.context_id === "string" ? this.contexts.get(msg.context_id) : void 0;
    if (msg.type === "context.created" && ctx) {
      ctx.stream = msg.stream;
      this.streams.set(ctx.stream, ctx);
    } else if (msg.type === "session.updated") {
      if (this.session) this.session = { ...this.session, session: msg.session };
    } else if (ctx) {
      void ctx.receive(msg);
    } else if (msg.type === "error") {
      this.emit("error", new VoiceError(msg.code, msg.message, msg.param, Boolean(msg.fatal)));
    } else if (msg.type === "warning") {
      this.emit("warning", { code: msg.code, message: msg.message });
    }
  }
  dropped(ws, code, reason) {
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
  async reconnectLoop(code, reason) {
    for (let attempt = 1; attempt <= RECONNECT_DELAYS_MS.length; attempt++) {
      this.emit("reconnecting", { attempt, code, reason });
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_DELAYS_MS[attempt - 1]));
      if (this.closing) return;
      try {
        await this.open();
        this.emit("reconnected", { attempts: attempt });
        return;
      } catch {
      }
    }
    this.emit("disconnected", { code, reason, lostContexts: [] });
  }
};
async function chooseEncoding(options) {
  const wanted = options.encoding ?? "auto";
  if (wanted !== "auto" && wanted !== "opus" && wanted !== "pcm") {
    throw new VoiceError("unsupported_value", `encoding ${String(wanted)} is not one of auto, opus, pcm`, "encoding");
  }
  if (wanted === "pcm") return "pcm";
  const contextRate = options.audioContext?.sampleRate;
  const opusFits = contextRate === void 0 || contextRate === OPUS_RATE;
  const ok = opusFits && await opusSupported();
  if (wanted === "opus" && !ok) {
    throw new VoiceError(
      "unsupported_value",
      opusFits ? "this browser cannot decode Opus (no WebCodecs AudioDecoder); use encoding: 'pcm' or 'auto'" : `Opus plays at 48000 Hz but the given audioContext runs at ${contextRate}; use encoding: 'pcm' or a 48 kHz context`,
      "encoding"
    );
  }
  return ok ? "opus" : "pcm";
}

// src/ring.ts
var RingBuffer = class {
  data;
  head = 0;
  // next read index
  count = 0;
  constructor(capacity = 16384) {
    this.data = new Float32Array(Math.max(1, capacity));
  }
  get size() {
    return this.count;
  }
  get capacity() {
    return this.data.length;
  }
  write(samples) {
    if (this.count + samples.length > this.data.length) this.grow(this.count + samples.length);
    const cap = this.data.length;
    const tail = (this.head + this.count) % cap;
    const first = Math.min(samples.length, cap - tail);
    this.data.set(samples.subarray(0, first), tail);
    if (first < samples.length) this.data.set(samples.subarray(first), 0);
    this.count += samples.length;
  }
  /** Moves up to `n` samples into `out` at `offset`; returns how many it moved. */
  read(out, offset, n) {
    const take = Math.min(n, this.count, out.length - offset);
    const cap = this.data.length;
    const first = Math.min(take, cap - this.head);
    out.set(this.data.subarray(this.head, this.head + first), offset);
    if (first < take) out.set(this.data.subarray(0, take - first), offset + first);
    this.head = (this.head + take) % cap;
    this.count -= take;
    return take;
  }
  clear() {
    this.head = 0;
    this.count = 0;
  }
  grow(needed) {
    let cap = this.data.length * 2;
    while (cap < needed) cap *= 2;
    const next = new Float32Array(cap);
    const held = this.count;
    this.read(next, 0, held);
    this.data = next;
    this.head = 0;
    this.count = held;
  }
};

// src/playback.ts
var SILENCE = 1e-3;
var PlaybackCore = class {
  /** Samples a context must hold before it starts (or restarts after an underrun). */
  threshold;
  /** The threshold asked for; an underrun doubles the working one (up to 8x), a
   * context that plays through without one brings it back down by a quarter. */
  baseThreshold;
  underruns = 0;
  /** Context samples rendered (silence between them not counted). */
  played = 0;
  /** Of those, samples louder than SILENCE. */
  audible = 0;
  /** Peak level of the last quantum, 0..1. */
  peak = 0;
  queue = [];
  entries = /* @__PURE__ */ new Map();
  gone = /* @__PURE__ */ new Set();
  constructor(threshold) {
    this.threshold = threshold;
    this.baseThreshold = threshold;
  }
  /** Samples buffered across every context not yet played. */
  get buffered() {
    let n = 0;
    for (const e of this.queue) n += e.ring.size;
    return n;
  }
  /** The context sounding now (or next), if any. */
  get current() {
    return this.queue.length ? this.queue[0].id : null;
  }
  open(id) {
    if (this.entries.has(id) || this.gone.has(id)) return;
    const entry = {
      id,
      ring: new RingBuffer(),
      underran: false,
      ended: false,
      playing: false,
      everPlayed: false,
      played: 0
    };
    this.entries.set(id, entry);
    this.queue.push(entry);
  }
  push(id, samples) {
    this.open(id);
    this.entries.get(id)?.ring.write(samples);
  }
  /** No more audio for `id`: it plays out without waiting for the threshold. */
  end(id) {
    this.open(id);
    const entry = this.entries.get(id);
    if (entry) entry.ended = true;
  }
  /** Drops `id` and everything buffered for it; returns how many of its samples were played. */
  cancel(id) {
    const entry = this.entries.get(id);
    this.gone.add(id);
    if (!entry) return 0;
    this.entries.delete(id);
    this.queue.splice(this.queue.indexOf(entry), 1);
    return entry.played;
  }
  /** Samples of `id` played so far (0 once it is gone). */
  playedOf(id) {
    return this.entries.get(id)?.played ?? 0;
  }
  /** Fills `out` (zeros where there is nothing to play) and says what happened. */
  render(out) {
    const events = [];
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
  finish(entry, events) {
    if (!entry.underran && this.threshold > this.baseThreshold) {
      this.threshold = Math.max(this.baseThreshold, Math.floor(this.threshold * 0.75));
    }
    this.queue.shift();
    this.entries.delete(entry.id);
    this.gone.add(entry.id);
    events.push({ t: "finished", id: entry.id, played: entry.played });
  }
};
export {
  FLAG_CONTEXT_END,
  FLAG_FLUSH_END,
  PCM_RATES,
  Pcm16Decoder,
  PlaybackCore,
  Player,
  RingBuffer,
  SpeechContext,
  VoiceClient,
  VoiceError,
  parseFrame,
  socketUrl
};
