/**
 * Raw audio for the speech endpoint (and for tests that need an input file): a deterministic tone as
 * signed 16-bit little-endian PCM, and the canonical 44-byte WAV header around it.
 *
 * A tone rather than silence, so that encoders produce realistic frame sizes and a test decoding the
 * result sees real signal; quiet (about 0.2 of full scale) with short fades, so nobody's ears suffer when
 * a developer plays a simulated answer.
 */

/** Sample rate of everything the speech endpoint produces, as OpenAI's `pcm` output (24 kHz mono). */
export const SPEECH_SAMPLE_RATE = 24_000;
/** Size of a canonical RIFF/WAVE header (RIFF, `fmt ` and `data` chunk headers, no extra chunks). */
export const WAV_HEADER_BYTES = 44;
/** Bytes per sample of s16le PCM. */
export const BYTES_PER_SAMPLE = 2;

/** Options of {@link synthesizeTone}. */
export interface ToneOptions {
  durationMs: number;
  sampleRate: number;
  /** Interleaved channels, each carrying the same tone; defaults to 1. */
  channels?: number;
  frequencyHz: number;
  /** Peak amplitude as a fraction of full scale; defaults to 0.2. */
  amplitude?: number;
  /** Length of the linear fade-in and fade-out, so the tone starts and ends without a click; 10 ms. */
  fadeMs?: number;
}

/** Number of sample frames in `durationMs` at `sampleRate`, rounded to the nearest frame. */
export function sampleCount(durationMs: number, sampleRate: number): number {
  return Math.max(0, Math.round((durationMs * sampleRate) / 1000));
}

/** A sine tone as interleaved s16le PCM, exactly {@link sampleCount} frames long. */
export function synthesizeTone(options: ToneOptions): Buffer {
  const { sampleRate, frequencyHz } = options;
  const channels = options.channels ?? 1;
  const peak = (options.amplitude ?? 0.2) * 32767;
  const frames = sampleCount(options.durationMs, sampleRate);
  const fade = Math.min(Math.floor(frames / 2), sampleCount(options.fadeMs ?? 10, sampleRate));
  const pcm = Buffer.alloc(frames * channels * BYTES_PER_SAMPLE);
  const step = (2 * Math.PI * frequencyHz) / sampleRate;
  let offset = 0;
  for (let i = 0; i < frames; i++) {
    const envelope = fade === 0 ? 1 : Math.min(1, i / fade, (frames - 1 - i) / fade);
    const value = Math.round(peak * envelope * Math.sin(step * i));
    for (let c = 0; c < channels; c++) {
      pcm.writeInt16LE(value, offset);
      offset += BYTES_PER_SAMPLE;
    }
  }
  return pcm;
}

/** Format of a PCM WAV file. */
export interface WavFormat {
  sampleRate: number;
  channels: number;
  /** Only 16 is produced by the simulator; stored as given. */
  bitsPerSample?: number;
}

/**
 * The canonical 44-byte RIFF/WAVE header for `dataBytes` bytes of integer PCM. The sizes are exact, so a
 * strict parser (or music-metadata computing a duration) accepts the file as complete.
 */
export function wavHeader(dataBytes: number, format: WavFormat): Buffer {
  const bits = format.bitsPerSample ?? 16;
  const blockAlign = (format.channels * bits) / 8;
  const header = Buffer.alloc(WAV_HEADER_BYTES);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + dataBytes, 4);
  header.write('WAVE', 8, 'ascii');
  header.write('fmt ', 12, 'ascii');
  header.writeUInt32LE(16, 16); // fmt chunk size
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(format.channels, 22);
  header.writeUInt32LE(format.sampleRate, 24);
  header.writeUInt32LE(format.sampleRate * blockAlign, 28); // byte rate
  header.writeUInt16LE(blockAlign, 32);
  header.writeUInt16LE(bits, 34);
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(dataBytes, 40);
  return header;
}

/** A complete WAV file around s16le PCM. */
export function wavFile(pcm: Buffer, format: WavFormat): Buffer {
  return Buffer.concat([wavHeader(pcm.length, format), pcm]);
}
