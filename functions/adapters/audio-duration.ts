/**
 * Audio durations counted from the audio itself, for formats whose headers carry a duration the client wrote.
 *
 * A metadata parser reads an MP3's length from its Xing/Info (or VBRI) frame count and a WAV's from its `fact`
 * chunk when there is one. Both are plain numbers in the upload: patched, a 60 s file reads as 0.36 s and is billed
 * so, while the upstream decodes — and transcribes — every frame. Decoders ignore those fields, so the
 * transcription is billed on what they decode: the MPEG frames walked one by one, the PCM bytes of the data chunk.
 * The probe bills the longer of these and the parser's duration.
 */

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

/** Where the audio starts: after an ID3v2 tag, if the file has one. */
const afterId3v2 = (bytes: Uint8Array): number => {
  if (bytes.length < 10 || bytes[0] !== 0x49 || bytes[1] !== 0x44 || bytes[2] !== 0x33) return 0;
  const size = bytes.subarray(6, 10).reduce((n, b) => (n << 7) | (b & 0x7f), 0);
  const footer = ((bytes[5] as number) & 0x10) !== 0 ? 10 : 0;
  return 10 + size + footer;
};

/**
 * The duration of an MPEG audio stream in ms, counted frame by frame (tag frames excluded), or null when no run of
 * frames is found. A frame counts when the next one follows it exactly (or it ends the data), so sync-like bytes
 * inside other data are not taken for audio; between runs the walk resyncs byte by byte, as decoders do.
 */
export const mpegDurationMs = (bytes: Uint8Array): number | null => {
  let at = afterId3v2(bytes);
  let seconds = 0;
  let frames = 0;
  let first = true;
  while (at + 4 <= bytes.length) {
    const frame = mpegFrameAt(bytes, at);
    const next = frame ? at + frame.length : -1;
    const chained =
      frame !== null &&
      (next === bytes.length ||
        mpegFrameAt(bytes, next) !== null ||
        // The ID3v1 tag ("TAG") or APE tag that may close the file.
        (bytes[next] === 0x54 && bytes[next + 1] === 0x41 && bytes[next + 2] === 0x47) ||
        (next + 8 <= bytes.length && String.fromCharCode(...bytes.subarray(next, next + 8)) === 'APETAGEX'));
    if (!chained || frame === null) {
      at++;
      continue;
    }
    if (!(first && isTagFrame(bytes, at, frame))) {
      seconds += frame.samples / frame.sampleRate;
      frames++;
    }
    first = false;
    at = next;
  }
  return frames > 0 ? seconds * 1000 : null;
};

/** WAVE format tags whose data chunk is plain samples: PCM, IEEE float, and extensible (PCM or float inside). */
const PLAIN_SAMPLE_FORMATS = new Set([0x0001, 0x0003, 0xfffe]);

/**
 * The duration of a PCM WAV in ms from its data chunk's bytes (what a decoder plays) — not from a `fact` chunk,
 * which PCM files need not have and decoders ignore — or null when the file is not plain-sample WAV.
 */
export const pcmWavDurationMs = (bytes: Uint8Array): number | null => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const ascii = (at: number) => String.fromCharCode(...bytes.subarray(at, at + 4));
  if (bytes.length < 12 || ascii(0) !== 'RIFF' || ascii(8) !== 'WAVE') return null;
  let bytesPerSecond: number | null = null;
  for (let at = 12; at + 8 <= bytes.length; ) {
    const id = ascii(at);
    const size = view.getUint32(at + 4, true);
    const body = at + 8;
    if (id === 'fmt ' && size >= 16 && body + 16 <= bytes.length) {
      const tag = view.getUint16(body, true);
      const channels = view.getUint16(body + 2, true);
      const sampleRate = view.getUint32(body + 4, true);
      const bits = view.getUint16(body + 14, true);
      if (!PLAIN_SAMPLE_FORMATS.has(tag) || channels === 0 || sampleRate === 0 || bits === 0) return null;
      bytesPerSecond = sampleRate * channels * Math.ceil(bits / 8);
    } else if (id === 'data') {
      if (bytesPerSecond === null) return null;
      // A streamed WAV may declare 0 or 0xFFFFFFFF: the data then runs to the end of the file.
      const declared = size === 0 || size === 0xffffffff ? Number.POSITIVE_INFINITY : size;
      return (Math.min(declared, bytes.length - body) / bytesPerSecond) * 1000;
    }
    at = body + size + (size & 1); // chunks are word-aligned
  }
  return null;
};
