/**
 * Locating and running ffmpeg, which encodes the compressed speech formats (mp3, opus, aac, flac).
 *
 * Real encoders rather than hand-made frames, so a gateway relaying speech is tested against byte
 * streams a real decoder accepts. The binary comes from the `@ffmpeg-installer/linux-x64` dev dependency
 * or `FFMPEG_PATH`; without one the simulator still serves `wav` and `pcm`.
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/** Environment variable naming an ffmpeg binary, which wins over the bundled one. */
export const FFMPEG_PATH_ENV = 'FFMPEG_PATH';

const BUNDLED_PACKAGE = '@ffmpeg-installer/linux-x64/package.json';

/**
 * Path of the ffmpeg binary: `FFMPEG_PATH` when set (and existing), else the one shipped beside the
 * `@ffmpeg-installer/linux-x64` package. Null when neither is available (e.g. on another platform).
 */
export function findFfmpeg(): string | null {
  const configured = process.env[FFMPEG_PATH_ENV];
  if (configured !== undefined && configured !== '') return existsSync(configured) ? configured : null;
  try {
    const binary = fileURLToPath(new URL('ffmpeg', import.meta.resolve(BUNDLED_PACKAGE)));
    return existsSync(binary) ? binary : null;
  } catch {
    return null;
  }
}

/** Compressed formats encoded by ffmpeg, with the output options that produce each. */
export const ENCODER_ARGS = Object.freeze({
  mp3: ['-c:a', 'libmp3lame', '-f', 'mp3'],
  // Ogg Opus; libopus accepts 24 kHz input as is.
  opus: ['-c:a', 'libopus', '-f', 'opus'],
  // Raw AAC in ADTS framing, which (unlike MP4) can be written to a pipe and played while streaming.
  aac: ['-c:a', 'aac', '-f', 'adts'],
  flac: ['-c:a', 'flac', '-f', 'flac'],
} as const satisfies Record<string, readonly string[]>);

/** A format {@link spawnEncoder} can produce. */
export type EncodedFormat = keyof typeof ENCODER_ARGS;

/** A running ffmpeg: raw PCM goes into `stdin`, the encoded stream comes out of `stdout`. */
export type EncoderProcess = ChildProcessByStdio<Writable, Readable, Readable>;

/**
 * Spawns ffmpeg reading mono s16le PCM at `sampleRate` on stdin and writing `format` on stdout. Errors
 * only (`-loglevel error`) reach stderr, and `-nostdin` stops ffmpeg from treating stdin as a console.
 */
export function spawnEncoder(ffmpeg: string, format: EncodedFormat, sampleRate: number): EncoderProcess {
  const args = [
    '-hide_banner',
    '-loglevel',
    'error',
    '-nostdin',
    '-f',
    's16le',
    '-ar',
    String(sampleRate),
    '-ac',
    '1',
    '-i',
    'pipe:0',
    ...ENCODER_ARGS[format],
    'pipe:1',
  ];
  return spawn(ffmpeg, args, { stdio: ['pipe', 'pipe', 'pipe'] });
}
