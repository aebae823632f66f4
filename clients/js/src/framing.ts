/** The binary audio frame of protocol v1: an 8-byte little-endian header, then the payload. */

export const HEADER_BYTES = 8;
export const FLAG_FLUSH_END = 1;
export const FLAG_CONTEXT_END = 2;

export interface AudioFrame {
  version: number;
  flags: number;
  /** The context's stream number, from `context.created`. */
  stream: number;
  /** Counts from 0 in each context. */
  seq: number;
  payload: Uint8Array;
}

/** Splits one binary message into header fields and payload; throws on a short or unknown frame. */
export function parseFrame(data: ArrayBuffer): AudioFrame {
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
    payload: new Uint8Array(data, HEADER_BYTES),
  };
}

/**
 * Little-endian 16-bit PCM to floats in [-1, 1). A frame may end in half a sample;
 * the carried byte joins the next frame's first.
 */
export class Pcm16Decoder {
  private carry: number | null = null;

  decode(bytes: Uint8Array): Float32Array {
    const lead = this.carry === null ? 0 : 1;
    const total = bytes.length + lead;
    const out = new Float32Array(total >> 1);
    let i = 0;
    let k = 0;
    if (this.carry !== null && bytes.length > 0) {
      out[k++] = toSigned(this.carry | (bytes[0] << 8)) / 32768;
      i = 1;
      this.carry = null;
    }
    for (; i + 1 < bytes.length; i += 2) out[k++] = toSigned(bytes[i] | (bytes[i + 1] << 8)) / 32768;
    if (i < bytes.length) this.carry = bytes[i];
    return out;
  }
}

function toSigned(u16: number): number {
  return u16 >= 0x8000 ? u16 - 0x10000 : u16;
}
