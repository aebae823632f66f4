/** voiceserver's browser SDK: stream text in, hear speech out. */
export { VoiceClient, SpeechContext, socketUrl, PCM_RATES } from "./client.js";
export type {
  ConnectOptions,
  ContextOptions,
  ContextEvents,
  ContextStats,
  ClientEvents,
  DoneInfo,
  TokenSource,
  Word,
} from "./client.js";
export { VoiceError } from "./errors.js";
export type { PlayerStats } from "./player.js";
export { Player } from "./player.js";
export { parseFrame, Pcm16Decoder, FLAG_CONTEXT_END, FLAG_FLUSH_END } from "./framing.js";
export type { AudioFrame } from "./framing.js";
export { RingBuffer } from "./ring.js";
export { PlaybackCore } from "./playback.js";
