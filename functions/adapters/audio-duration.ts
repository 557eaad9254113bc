/**
 * Audio durations counted from the audio itself, for formats whose headers carry a duration the client wrote.
 *
 * A metadata parser reads an MP3's length from its Xing/Info (or VBRI) frame count and a WAV's from its `fact`
 * chunk when there is one. Both are plain numbers in the upload: patched, a 60 s file reads as 0.36 s and is billed
 * so, while the upstream decodes — and transcribes — every frame. Decoders ignore those fields, so the
 * transcription is billed on what they decode: the MPEG frames walked one by one, the PCM bytes of the data chunk.
 * The probe bills the longer of these and the parser's duration.
 */

import { mp4AacDurationMs } from './mp4-duration.ts';

/**
 * Samples counted per sample rate, summed to ms once at the end: adding `samples / rate` frame by frame drifts
 * (0.256 s added 15,625 times is not 4000 ms), and a duration rounded up to the ms would bill the drift.
 */
class SampleCount {
  readonly #byRate = new Map<number, number>();
  add(samples: number, rate: number): void {
    this.#byRate.set(rate, (this.#byRate.get(rate) ?? 0) + samples);
  }
  get ms(): number {
    let ms = 0;
    for (const [rate, samples] of this.#byRate) ms += (samples * 1000) / rate;
    return ms;
  }
}

// MPEG audio frame header tables (ISO/IEC 11172-3, 13818-3), indexed by the header's fields.
const SAMPLE_RATES: Readonly<Record<number, readonly number[]>> = {
  3: [44_100, 48_000, 32_000], // MPEG-1
  2: [22_050, 24_000, 16_000], // MPEG-2
  0: [11_025, 12_000, 8_000], // MPEG-2.5
};
/** kbps by [MPEG-1?][layer][index]; index 0 (free format) and 15 (invalid) are not walked. */
const BITRATES = {
  v1: {
    1: [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
    2: [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
    3: [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  },
  v2: {
    1: [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
    2: [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
    3: [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
  },
} as const;

interface MpegFrame {
  readonly length: number;
  readonly samples: number;
  readonly sampleRate: number;
}

/** The MPEG audio frame whose header starts at `at`, or null when none does. */
const mpegFrameAt = (bytes: Uint8Array, at: number): MpegFrame | null => {
  if (at + 4 > bytes.length) return null;
  const b1 = bytes[at + 1] as number;
  const b2 = bytes[at + 2] as number;
  if (bytes[at] !== 0xff || (b1 & 0xe0) !== 0xe0) return null;
  const version = (b1 >> 3) & 3; // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5, 1: reserved
  const layer = 4 - ((b1 >> 1) & 3); // 1, 2 or 3; 4 is reserved
  const bitrateIndex = b2 >> 4;
  const rateIndex = (b2 >> 2) & 3;
  if (version === 1 || layer === 4 || bitrateIndex === 0 || bitrateIndex === 15 || rateIndex === 3)
    return null;
  const sampleRate = (SAMPLE_RATES[version] as readonly number[])[rateIndex] as number;
  const mpeg1 = version === 3;
  const kbps = (mpeg1 ? BITRATES.v1 : BITRATES.v2)[layer as 1 | 2 | 3][bitrateIndex] as number;
  const padding = (b2 >> 1) & 1;
  if (layer === 1) {
    return { length: (Math.floor((12_000 * kbps) / sampleRate) + padding) * 4, samples: 384, sampleRate };
  }
  const samples = layer === 3 && !mpeg1 ? 576 : 1152;
  return { length: Math.floor(((samples / 8) * 1000 * kbps) / sampleRate) + padding, samples, sampleRate };
};

/** Whether the frame at `at` is the encoder's Xing/Info/VBRI tag frame (silent; decoders skip it). */
const isTagFrame = (bytes: Uint8Array, at: number, frame: MpegFrame): boolean => {
  const text = (offset: number) =>
    String.fromCharCode(...bytes.subarray(at + offset, Math.min(at + offset + 4, at + frame.length)));
  const mono = (bytes[at + 3] as number) >> 6 === 3;
  const mpeg1 = (((bytes[at + 1] as number) >> 3) & 3) === 3;
  const xingAt = 4 + (mpeg1 ? (mono ? 17 : 32) : mono ? 9 : 17);
  const tag = text(xingAt);
  return tag === 'Xing' || tag === 'Info' || text(36) === 'VBRI';
};

/**
 * Where the audio starts: after an ID3v2 tag, if the file has one. A header decoders would not take for a tag (a
 * version or revision byte of 0xFF, a size byte with its top bit set: ffmpeg's test) is not skipped: they decode
 * from the start, and so does the count.
 */
const afterId3v2 = (bytes: Uint8Array): number => {
  if (bytes.length < 10 || bytes[0] !== 0x49 || bytes[1] !== 0x44 || bytes[2] !== 0x33) return 0;
  if (bytes[3] === 0xff || bytes[4] === 0xff || bytes.subarray(6, 10).some((b) => b & 0x80)) return 0;
  const size = bytes.subarray(6, 10).reduce((n, b) => (n << 7) | (b & 0x7f), 0);
  const footer = ((bytes[5] as number) & 0x10) !== 0 ? 10 : 0;
  return 10 + size + footer;
};

/** The header bits a stream keeps from frame to frame: sync, version, layer and sample rate (ffmpeg's mask). */
const signatureOf = (bytes: Uint8Array, at: number): number =>
  (((bytes[at + 1] as number) & 0xfe) << 8) | ((bytes[at + 2] as number) & 0x0c);

/** Frames of one signature in a row that show a new stream begins (two files joined end to end, say). */
const NEW_STREAM_RUN = 3;

/** Whether `count` frames of the signature of the one at `at` follow each other from there (or end the data). */
const runAt = (bytes: Uint8Array, at: number, count: number): boolean => {
  const own = signatureOf(bytes, at);
  for (let k = 0; k < count; k++) {
    if (at === bytes.length) return k > 0;
    const frame = mpegFrameAt(bytes, at);
    if (frame === null || signatureOf(bytes, at) !== own) return false;
    at += frame.length;
  }
  return true;
};

/**
 * The duration of an MPEG audio stream in ms, counted frame by frame (tag frames excluded), or null when no run of
 * frames is found. Until a stream is established, a frame counts only when the next one follows it exactly (or it
 * ends the data), or when it begins at or after the end of an earlier frame of its signature — decoders resync past
 * junk a client puts after every frame, the first included. After that, any frame of an established stream's
 * signature counts, wherever the walk resyncs to it. A run of frames of another signature (another sample rate or
 * version: files joined end to end) is one more stream, which decoders play too; the earlier ones stay established,
 * so a few frames at another rate cannot make the rest of a file stop counting.
 */
export const mpegDurationMs = (bytes: Uint8Array): number | null => {
  let at = afterId3v2(bytes);
  const counted = new SampleCount();
  let frames = 0;
  /** The signatures of the streams established so far. */
  const established = new Set<number>();
  /** Before any is: per signature, the earliest end of a frame of it seen (and not counted). */
  const seenEnd = new Map<number, number>();
  let first = true;
  while (at + 4 <= bytes.length) {
    const frame = mpegFrameAt(bytes, at);
    if (frame === null) {
      at++;
      continue;
    }
    const next = at + frame.length;
    const own = signatureOf(bytes, at);
    let counts: boolean;
    if (established.size > 0) counts = established.has(own) || runAt(bytes, at, NEW_STREAM_RUN);
    else {
      const earlier = seenEnd.get(own);
      counts =
        next === bytes.length ||
        mpegFrameAt(bytes, next) !== null ||
        (earlier !== undefined && earlier <= at) ||
        // The ID3v1 tag ("TAG") or APE tag that may close the file.
        (bytes[next] === 0x54 && bytes[next + 1] === 0x41 && bytes[next + 2] === 0x47) ||
        (next + 8 <= bytes.length && String.fromCharCode(...bytes.subarray(next, next + 8)) === 'APETAGEX');
      // The earliest end: a sync-like pattern inside a frame's data must not push it past the next real frame.
      if (!counts) seenEnd.set(own, Math.min(earlier ?? next, next));
    }
    if (!counts) {
      at++;
      continue;
    }
    if (!(first && isTagFrame(bytes, at, frame))) {
      counted.add(frame.samples, frame.sampleRate);
      frames++;
    }
    if (!first) established.add(own);
    first = false;
    at = next;
  }
  return frames > 0 ? counted.ms : null;
};

/** WAVE format tags whose data chunk is plain samples: PCM, IEEE float, A-law and µ-law. */
const PLAIN_SAMPLE_FORMATS = new Set([0x0001, 0x0003, 0x0006, 0x0007]);
const EXTENSIBLE = 0xfffe;

const fourCC = (bytes: Uint8Array, at: number): string => String.fromCharCode(...bytes.subarray(at, at + 4));

/**
 * Whether the bytes are a WAVE file: RIFF, or its 64-bit forms RF64 (EBU Tech 3306) and BW64 (ITU-R BS.2088),
 * which keep their real sizes in a `ds64` chunk. A metadata parser that does not know the 64-bit forms guesses
 * another format for them (MPEG, from sync-like sample bytes), so the signature decides.
 */
export const isWave = (bytes: Uint8Array): boolean =>
  bytes.length >= 12 && ['RIFF', 'RF64', 'BW64'].includes(fourCC(bytes, 0)) && fourCC(bytes, 8) === 'WAVE';

/** A size that says "see `ds64`" (RF64, BW64) or "unknown" (a WAV streamed out before its length was known). */
const UNSIZED = 0xffffffff;

/**
 * The duration of a plain-sample WAV in ms from the bytes of its data chunks (what a decoder plays, every `data`
 * chunk of them) — not from a `fact` chunk, which such files need not have and decoders ignore — or null when the
 * file is not WAVE, or its samples are not plain (ADPCM, MP3 inside WAV: their duration would have to come from that
 * very `fact` chunk). 0: no sample bytes at all.
 */
export const pcmWavDurationMs = (bytes: Uint8Array): number | null => {
  if (!isWave(bytes)) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let bytesPerSecond: number | null = null;
  let dataBytes = 0;
  const sixtyFour = fourCC(bytes, 0) !== 'RIFF';
  /**
   * An RF64/BW64 file's data size, from the `ds64` chunk that must come first: decoders (ffmpeg) take the data
   * chunk's length from it whatever the chunk's own 32-bit field says — and only in those files: a `ds64` in a
   * RIFF file is any other chunk.
   */
  let ds64Data: number | null = null;
  if (sixtyFour && bytes.length >= 36 && fourCC(bytes, 12) === 'ds64' && view.getUint32(16, true) >= 16)
    ds64Data = view.getUint32(28, true) + view.getUint32(32, true) * 2 ** 32;
  for (let at = 12; at + 8 <= bytes.length; ) {
    const id = fourCC(bytes, at);
    let size = view.getUint32(at + 4, true);
    const body = at + 8;
    // The first `fmt ` chunk describes the data, as decoders (ffmpeg) read it; a later one is ignored.
    if (id === 'fmt ' && bytesPerSecond === null && size >= 16 && body + 16 <= bytes.length) {
      let tag = view.getUint16(body, true);
      // WAVE_FORMAT_EXTENSIBLE: the real format is the first two bytes of the subformat GUID.
      if (tag === EXTENSIBLE)
        tag = size >= 40 && body + 26 <= bytes.length ? view.getUint16(body + 24, true) : 0;
      const channels = view.getUint16(body + 2, true);
      const sampleRate = view.getUint32(body + 4, true);
      const bits = view.getUint16(body + 14, true);
      if (!PLAIN_SAMPLE_FORMATS.has(tag) || channels === 0 || sampleRate === 0 || bits === 0) return null;
      bytesPerSecond = sampleRate * channels * Math.ceil(bits / 8);
    } else if (id === 'data') {
      if (bytesPerSecond === null) return null;
      // The first data chunk's; any later one has its own size.
      if (ds64Data !== null) {
        size = ds64Data;
        ds64Data = null;
      }
      // A streamed WAV may declare 0 or 0xFFFFFFFF: the data then runs to the end of the file.
      const toTheEnd = size === 0 || size === UNSIZED;
      dataBytes += toTheEnd ? bytes.length - body : Math.min(size, bytes.length - body);
      if (toTheEnd) break;
    }
    at = body + size + (size & 1); // chunks are word-aligned
  }
  // Plain samples and no data bytes: no audio (0), whatever a `fact` chunk says.
  return bytesPerSecond === null ? null : (dataBytes / bytesPerSecond) * 1000;
};

// ---------------------------------------------------------------------------------------------------------
// FLAC

/** CRC-8 (polynomial 0x07) of a FLAC frame header. */
const crc8 = (bytes: Uint8Array, from: number, to: number): number => {
  let crc = 0;
  for (let i = from; i < to; i++) {
    crc ^= bytes[i] as number;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x80 ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
  }
  return crc;
};

interface FlacFrame {
  /** Frame number (fixed block size) or first sample number (variable). */
  readonly number: number;
  readonly variable: boolean;
  readonly blockSize: number;
  /** Hz, from the frame's own header; null: STREAMINFO's (rate code 0). */
  readonly sampleRate: number | null;
}

/** Sample rates by a FLAC frame header's rate code (0: STREAMINFO's; 12–14: in the bytes after the header). */
const FLAC_RATES = [
  0, 88_200, 176_400, 192_000, 8_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000,
];

/** The FLAC frame header at `at`, when one is there and its CRC-8 holds. */
const flacFrameAt = (bytes: Uint8Array, at: number): FlacFrame | null => {
  if (bytes[at] !== 0xff || ((bytes[at + 1] as number) & 0xfe) !== 0xf8 || at + 6 > bytes.length) return null;
  const variable = ((bytes[at + 1] as number) & 1) === 1;
  const sizeCode = (bytes[at + 2] as number) >> 4;
  const rateCode = (bytes[at + 2] as number) & 0x0f;
  const channels = (bytes[at + 3] as number) >> 4;
  const depthCode = ((bytes[at + 3] as number) >> 1) & 7;
  if (sizeCode === 0 || rateCode === 15 || channels > 10 || depthCode === 3 || (bytes[at + 3] as number) & 1)
    return null;
  // The frame or sample number, UTF-8 style: a leading byte saying how many continuation bytes follow.
  let i = at + 4;
  const lead = bytes[i++] as number;
  let extra = 0;
  while (extra < 7 && lead & (0x80 >> extra)) extra++;
  if (extra === 1 || extra > 7) return null;
  const continuation = extra === 0 ? 0 : extra - 1;
  let number = extra === 0 ? lead : lead & (0xff >> (extra + 1));
  for (let k = 0; k < continuation; k++) {
    const b = bytes[i++];
    if (b === undefined || (b & 0xc0) !== 0x80) return null;
    number = number * 64 + (b & 0x3f);
  }
  let blockSize: number;
  if (sizeCode === 1) blockSize = 192;
  else if (sizeCode <= 5) blockSize = 576 << (sizeCode - 2);
  else if (sizeCode === 6) blockSize = (bytes[i++] as number) + 1;
  else if (sizeCode === 7) {
    blockSize = (((bytes[i] as number) << 8) | (bytes[i + 1] as number)) + 1;
    i += 2;
  } else blockSize = 256 << (sizeCode - 8);
  let sampleRate: number | null = rateCode === 0 ? null : (FLAC_RATES[rateCode] ?? 0);
  if (rateCode === 12) sampleRate = (bytes[i++] as number) * 1000;
  else if (rateCode === 13 || rateCode === 14) {
    sampleRate = (((bytes[i] as number) << 8) | (bytes[i + 1] as number)) * (rateCode === 14 ? 10 : 1);
    i += 2;
  }
  if (i >= bytes.length || crc8(bytes, at, i) !== bytes[i] || sampleRate === 0) return null;
  return { number, variable, blockSize, sampleRate };
};

/** How far past a FLAC frame's header its successor is looked for: more than any frame of real audio spans. */
const FLAC_FRAME_REACH = 1 << 20;

/** A frame's place in its stream as one number: its frame or sample number, and which of the two it is. */
const sequenceKey = (number: number, variable: boolean): number => number * 2 + (variable ? 1 : 0);

/**
 * Where the frame headers of each sequence key start, in file order: built in one pass, so that finding whether a
 * header's successor follows it is a lookup. (Scanning ahead from every candidate instead grew with the square of
 * the file: an upload of one valid header repeated, none of them followed by its successor, took a minute to
 * refuse — before any limit or hold applies.)
 */
const flacHeaderIndex = (bytes: Uint8Array, from: number): Map<number, number[]> => {
  const index = new Map<number, number[]>();
  for (let at = from; at < bytes.length - 1; at++) {
    if (bytes[at] !== 0xff) continue;
    const frame = flacFrameAt(bytes, at);
    if (frame === null) continue;
    const key = sequenceKey(frame.number, frame.variable);
    const starts = index.get(key);
    if (starts) starts.push(at);
    else index.set(key, [at]);
  }
  return index;
};

/** Whether a header of the next frame in `frame`'s sequence starts within reach after `at`. */
const continuesAt = (
  index: Map<number, number[]>,
  bytes: Uint8Array,
  at: number,
  frame: FlacFrame,
): boolean => {
  const expected = frame.variable ? frame.number + frame.blockSize : frame.number + 1;
  const starts = index.get(sequenceKey(expected, frame.variable));
  if (!starts) return false;
  // The first start after `at` (binary search: the list is in file order).
  let low = 0;
  let high = starts.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if ((starts[middle] as number) <= at) low = middle + 1;
    else high = middle;
  }
  const next = starts[low];
  return next !== undefined && next < Math.min(bytes.length - 1, at + FLAC_FRAME_REACH);
};

/**
 * The duration of a FLAC stream in ms, counted from its frames — for a stream whose STREAMINFO gives no sample
 * count (written to a pipe, it cannot) or a wrong one — or null when it is not FLAC. Each frame adds its own block
 * size at its own sample rate (a decoder plays what the frame headers say, whatever STREAMINFO claims). Headers are
 * found by their sync code and CRC-8 and taken in sequence (frame numbers one by one, or sample numbers where the
 * last frame ended), so a sync-like pattern inside compressed audio is not counted. 0: FLAC without a frame.
 */
export const flacDurationMs = (bytes: Uint8Array): number | null => {
  if (bytes.length < 42 || String.fromCharCode(...bytes.subarray(0, 4)) !== 'fLaC') return null;
  // STREAMINFO is the first metadata block; its sample rate (20 bits at byte 10 of its body) serves frames whose
  // header defers to it.
  const info = 8;
  const streamRate =
    ((bytes[info + 10] as number) << 12) |
    ((bytes[info + 11] as number) << 4) |
    ((bytes[info + 12] as number) >> 4);
  let at = 4;
  for (;;) {
    // Cut inside its metadata: no frame follows.
    if (at + 4 > bytes.length) return 0;
    const header = bytes[at] as number;
    at +=
      4 + (((bytes[at + 1] as number) << 16) | ((bytes[at + 2] as number) << 8) | (bytes[at + 3] as number));
    if (header & 0x80) break; // the last metadata block
  }
  const counted = new SampleCount();
  let nextNumber = 0;
  let nextSample = 0;
  const audioStart = at;
  let index: Map<number, number[]> | null = null;
  for (; at < bytes.length - 1; at++) {
    if (bytes[at] !== 0xff) continue;
    const frame = flacFrameAt(bytes, at);
    if (frame === null) continue;
    // A stream cut from a longer one (`ffmpeg -ss … -c copy`, a capture joined mid-stream) starts past frame 0:
    // its first frame is taken where the frame after it follows in sequence.
    if (nextNumber === 0 && frame.number !== 0) {
      index ??= flacHeaderIndex(bytes, audioStart);
      if (continuesAt(index, bytes, at, frame)) {
        nextNumber = frame.number;
        nextSample = frame.number;
      }
    }
    if (frame.number !== (frame.variable ? nextSample : nextNumber)) continue;
    const rate = frame.sampleRate ?? streamRate;
    if (rate === 0) continue;
    counted.add(frame.blockSize, rate);
    nextNumber++;
    nextSample += frame.blockSize;
  }
  return nextNumber > 0 ? counted.ms : 0;
};

// ---------------------------------------------------------------------------------------------------------
// WebM (Matroska)

const EBML = {
  segment: 0x18538067,
  cluster: 0x1f43b675,
  info: 0x1549a966,
  timecodeScale: 0x2ad7b1,
  timecode: 0xe7,
  simpleBlock: 0xa3,
  blockGroup: 0xa0,
  block: 0xa1,
  blockDuration: 0x9b,
} as const;

/** Elements whose children are walked; their size is ignored, since a live recording leaves it unknown. */
const CONTAINERS = new Set<number>([EBML.segment, EBML.cluster, EBML.info, EBML.blockGroup]);

/** Whether the bytes are an EBML document of type `webm` (its header, with the DocType, comes first). */
const isWebm = (bytes: Uint8Array): boolean =>
  bytes[0] === 0x1a &&
  bytes[1] === 0x45 &&
  bytes[2] === 0xdf &&
  bytes[3] === 0xa3 &&
  Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, 64)).includes('webm');

/** An EBML variable-length integer at `at`: its value (marker bit removed unless `keepMarker`) and length. */
const vint = (
  bytes: Uint8Array,
  at: number,
  keepMarker: boolean,
): { value: number; length: number } | null => {
  const first = bytes[at];
  if (first === undefined || first === 0) return null;
  let length = 1;
  while (!(first & (0x80 >> (length - 1)))) length++;
  if (at + length > bytes.length) return null;
  let value = keepMarker ? first : first & (0xff >> length);
  let allOnes = value === 0xff >> length;
  for (let k = 1; k < length; k++) {
    const b = bytes[at + k] as number;
    value = value * 256 + b;
    allOnes &&= b === 0xff;
  }
  // All value bits set is "unknown size" (a live stream's Segment and Clusters).
  return { value: !keepMarker && allOnes ? -1 : value, length };
};

/** An EBML unsigned integer; longer than 8 bytes is not one (and would overflow to Infinity). */
const uint = (bytes: Uint8Array, at: number, size: number): number => {
  if (size > 8) return 0;
  let value = 0;
  for (let k = 0; k < size; k++) value = value * 256 + (bytes[at + k] as number);
  return value;
};

/**
 * The duration of a WebM/Matroska file in ms from its blocks' timestamps: the last block's time plus one typical
 * block step (or its own BlockDuration) — for a recording whose Duration element is missing (MediaRecorder and
 * ffmpeg writing to a pipe leave it out) or wrong. Null when no block is found.
 */
export const webmDurationMs = (bytes: Uint8Array): number | null => {
  let scaleNs = 1_000_000;
  let cluster = 0;
  let end = -1;
  let step = 0;
  let last = -1;
  let at = 0;
  while (at < bytes.length) {
    const id = vint(bytes, at, true);
    if (id === null) break;
    const size = vint(bytes, at + id.length, false);
    if (size === null) break;
    const body = at + id.length + size.length;
    if (CONTAINERS.has(id.value)) {
      at = body;
      continue;
    }
    // An unknown-size element we do not walk: nothing after it can be found.
    if (size.value < 0) break;
    const whole = body + size.value <= bytes.length;
    if (id.value === EBML.timecodeScale && whole) scaleNs = uint(bytes, body, size.value) || scaleNs;
    else if (id.value === EBML.timecode && whole) cluster = uint(bytes, body, size.value);
    else if (id.value === EBML.blockDuration && whole && last >= 0)
      end = Math.max(end, last + uint(bytes, body, size.value));
    else if (id.value === EBML.simpleBlock || id.value === EBML.block) {
      // A block's header (track, 16-bit signed time relative to its cluster) counts even if the upload cut its data.
      const track = vint(bytes, body, false);
      if (track !== null && body + track.length + 2 <= bytes.length) {
        const raw =
          ((bytes[body + track.length] as number) << 8) | (bytes[body + track.length + 1] as number);
        const time = cluster + (raw >= 0x8000 ? raw - 0x10000 : raw);
        if (last >= 0 && time > last) step = time - last;
        last = Math.max(last, time);
      }
    }
    at = body + size.value;
  }
  return last < 0 ? null : (Math.max(end, last + step) * scaleNs) / 1_000_000;
};

const COUNTERS: Readonly<Record<string, (bytes: Uint8Array) => number | null>> = {
  mp3: mpegDurationMs,
  wav: pcmWavDurationMs,
  flac: flacDurationMs,
  webm: webmDurationMs,
  m4a: mp4AacDurationMs,
  mp4: mp4AacDurationMs,
};

/** The duration counted from the audio of a file of `format` (as the probe names formats), when we count that format. */
export const countedDurationMs = (format: string, bytes: Uint8Array): number | null =>
  COUNTERS[format]?.(bytes) ?? null;

/**
 * Formats whose count is what decoders play: every MPEG or FLAC frame decodes to the samples its own header
 * states, every WAV sample byte plays, every AAC frame an MP4 indexes decodes to 1024 samples. For these the count is the audio present, whatever a header claims. A
 * WebM's count reads block timestamps, which are as much the client's to write as its Duration element.
 */
export const countsDecodedAudio = (format: string): boolean =>
  format === 'mp3' || format === 'flac' || format === 'wav' || format === 'm4a' || format === 'mp4';

/**
 * The duration of a WebM that a metadata parser refuses — a live recorder's (MediaRecorder), whose clusters have
 * unknown sizes — from its blocks alone; null when the bytes are not WebM.
 */
export const liveWebmDurationMs = (bytes: Uint8Array): number | null =>
  isWebm(bytes) ? webmDurationMs(bytes) : null;
