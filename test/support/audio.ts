/**
 * Audio fixtures for tests: WAV tones made in memory, compressed copies made by ffmpeg, and a real ffmpeg
 * decode to check what the simulator (or a gateway relaying it) streamed.
 *
 * ffmpeg is the static binary of the `@ffmpeg-installer/linux-x64` dev dependency, or `FFMPEG_PATH`.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SPEECH_SAMPLE_RATE, synthesizeTone, wavFile } from '#sim/audio.ts';
import { findFfmpeg } from '#sim/ffmpeg.ts';

/** Options of {@link makeWav}. */
export interface WavOptions {
  durationMs: number;
  /** Defaults to 16000, a typical speech recording rate. */
  sampleRate?: number;
  /** Defaults to 1. */
  channels?: number;
  /** Defaults to 440 Hz. */
  frequencyHz?: number;
}

/** A valid s16le PCM WAV file holding a tone of exactly `durationMs` (rounded to whole samples). */
export function makeWav(options: WavOptions): Buffer {
  const sampleRate = options.sampleRate ?? 16_000;
  const channels = options.channels ?? 1;
  const pcm = synthesizeTone({
    durationMs: options.durationMs,
    sampleRate,
    channels,
    frequencyHz: options.frequencyHz ?? 440,
  });
  return wavFile(pcm, { sampleRate, channels });
}

/** Path of the ffmpeg binary the simulator uses; throws when there is none. */
export function ffmpegPath(): string {
  const path = findFfmpeg();
  if (path === null) {
    throw new Error('No ffmpeg: install the @ffmpeg-installer/linux-x64 dev dependency or set FFMPEG_PATH.');
  }
  return path;
}

/** Containers {@link encodeAudio} can produce, named as a transcription upload's file extension. */
export type InputAudioFormat = 'mp3' | 'flac' | 'ogg' | 'opus' | 'aac' | 'webm' | 'm4a';

// Opus only takes a few sample rates; 48 kHz is its native one and any input can be resampled to it.
const OPUS_48K = ['-c:a', 'libopus', '-ar', '48000'];

const ENCODE_ARGS: Readonly<Record<InputAudioFormat, readonly string[]>> = {
  mp3: ['-c:a', 'libmp3lame', '-f', 'mp3'],
  flac: ['-c:a', 'flac', '-f', 'flac'],
  ogg: [...OPUS_48K, '-f', 'ogg'],
  opus: [...OPUS_48K, '-f', 'opus'],
  aac: ['-c:a', 'aac', '-f', 'adts'],
  webm: [...OPUS_48K, '-f', 'webm'],
  m4a: ['-c:a', 'aac', '-f', 'ipod'],
};

/**
 * Encodings a client may upload that the probe must not take at face value: compressed samples inside WAV (their
 * length comes from a `fact` chunk), 64-bit RF64 WAV (which metadata parsers misread), MP4 under a major brand other
 * than the usual ones (DASH audio, as streaming sites serve it).
 */
export type AudioVariant = 'wav-adpcm' | 'wav-mp3' | 'wav-rf64' | 'm4a-dash';

const VARIANT_ARGS: Readonly<Record<AudioVariant, readonly string[]>> = {
  'wav-adpcm': ['-c:a', 'adpcm_ms', '-f', 'wav'],
  'wav-mp3': ['-c:a', 'libmp3lame', '-f', 'wav'],
  'wav-rf64': ['-c:a', 'pcm_s16le', '-rf64', 'always', '-f', 'wav'],
  'm4a-dash': [
    ...['-c:a', 'aac', '-movflags', '+frag_keyframe+empty_moov+default_base_moof+dash'],
    ...['-brand', 'dash', '-f', 'mp4'],
  ],
};

/**
 * Encodes a WAV file into `format` with ffmpeg. The output goes to a temporary file rather than a pipe:
 * on a seekable output the muxers write what they can only know at the end (FLAC's sample count, the
 * MP4 `moov`, the MP3 Xing frame count, WebM's duration), so the file looks like a real recording.
 */
export async function encodeAudio(wav: Buffer, format: InputAudioFormat | AudioVariant): Promise<Buffer> {
  const encoding =
    format in VARIANT_ARGS ? VARIANT_ARGS[format as AudioVariant] : ENCODE_ARGS[format as InputAudioFormat];
  return inTempDir(async (dir) => {
    // Every encode names its muxer (-f): the extension is only a name.
    const output = join(dir, `audio.${format}`);
    const args = ['-hide_banner', '-v', 'error', '-f', 'wav', '-i', 'pipe:0', ...encoding, output];
    const run = await runFfmpeg(args, wav);
    if (run.code !== 0 || run.stderr.trim() !== '') {
      throw new Error(`ffmpeg could not encode ${format} (exit ${run.code}): ${run.stderr.trim()}`);
    }
    return readFile(output);
  });
}

/** Runs `work` with a temporary directory of its own, removed afterwards whatever happened. */
async function inTempDir<T>(work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'sim-audio-'));
  try {
    return await work(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Encodes a WAV file into `format` with ffmpeg writing to a pipe, as a live recorder does (a browser's
 * MediaRecorder, `ffmpeg … -`): nothing is written back at the end, so FLAC has no sample count and WebM no
 * duration.
 */
export async function encodeAudioToPipe(wav: Buffer, format: 'flac' | 'webm' | 'm4a'): Promise<Buffer> {
  // MP4 to a pipe is fragmented: an empty `moov` first, then `moof`/`mdat` pairs (as MediaRecorder writes it).
  const fragmented = format === 'm4a' ? ['-movflags', 'frag_keyframe+empty_moov'] : [];
  const args = [
    ...['-hide_banner', '-v', 'error', '-f', 'wav', '-i', 'pipe:0'],
    ...ENCODE_ARGS[format],
    ...fragmented,
    'pipe:1',
  ];
  const run = await runFfmpeg(args, wav);
  if (run.code !== 0 || run.stderr.trim() !== '') {
    throw new Error(`ffmpeg could not encode ${format} to a pipe (exit ${run.code}): ${run.stderr.trim()}`);
  }
  return run.stdout;
}

/**
 * An M4A with two AAC sound tracks, `first` then `second` (each a WAV), as a video with two language tracks carries
 * them. Which one a decoder plays is its own choice: ffmpeg, left to choose, plays the one with more channels.
 */
export async function twoTrackM4a(
  first: Buffer,
  second: Buffer,
  /** The second track's codec: AAC, or MP3 (an `mp4a` entry that is not AAC) in an MP4. */
  secondCodec: 'aac' | 'mp3' = 'aac',
): Promise<Buffer> {
  return inTempDir(async (dir) => {
    await writeFile(join(dir, 'first.wav'), first);
    await writeFile(join(dir, 'second.wav'), second);
    const output = join(dir, 'audio.m4a');
    const args = [
      ...['-hide_banner', '-v', 'error', '-i', join(dir, 'first.wav'), '-i', join(dir, 'second.wav')],
      ...['-map', '0:a', '-map', '1:a', '-c:a:0', 'aac'],
      ...(secondCodec === 'aac' ? ['-c:a:1', 'aac', '-f', 'ipod'] : ['-c:a:1', 'libmp3lame', '-f', 'mp4']),
      output,
    ];
    const run = await runFfmpeg(args, Buffer.alloc(0));
    if (run.code !== 0 || run.stderr.trim() !== '')
      throw new Error(`ffmpeg could not write two tracks (exit ${run.code}): ${run.stderr.trim()}`);
    return readFile(output);
  });
}

/** The first top-level box of `type`: where it starts, and its size. */
const topBox = (bytes: Buffer, type: string): { at: number; size: number } => {
  for (let at = 0; at + 8 <= bytes.length; ) {
    const size = bytes.readUInt32BE(at);
    if (bytes.toString('latin1', at + 4, at + 8) === type) return { at, size };
    if (size < 8) break;
    at += size;
  }
  throw new Error(`no ${type} box`);
};

/**
 * An M4A whose one AAC track has `indexedMs` in its sample table and `fragmentedMs` more in fragments after it,
 * continuing its timeline, as a recorder that indexes what it has and then fragments the rest writes one; and the
 * same without the `moov`'s `trex` for the track, whose fragments a decoder refuses to read.
 */
export async function hybridM4a(
  indexedMs: number,
  fragmentedMs: number,
): Promise<{ hybrid: Buffer; withoutTrex: Buffer }> {
  const plain = await encodeAudio(makeWav({ durationMs: indexedMs }), 'm4a');
  // DASH fragments address their data from their own moof: they can be moved.
  const dash = await encodeAudio(makeWav({ durationMs: fragmentedMs }), 'm4a-dash');
  const moov = topBox(plain, 'moov');
  if (moov.at + moov.size !== plain.length) throw new Error('expected the moov last');
  const mvexAt = dash.indexOf('mvex', topBox(dash, 'moov').at) - 4;
  const mvex = dash.subarray(mvexAt, mvexAt + dash.readUInt32BE(mvexAt));
  const header = Buffer.alloc(8);
  header.writeUInt32BE(moov.size + mvex.length);
  header.write('moov', 4, 'latin1');
  const fragments = Buffer.from(dash.subarray(topBox(dash, 'moof').at));
  // Each fragment's decode time moves on by the indexed samples (16 kHz, 1024 to a frame).
  const stsz = plain.indexOf('stsz', moov.at);
  const indexedSamples = plain.readUInt32BE(stsz + 12) * 1024;
  for (let at = fragments.indexOf('tfdt'); at !== -1; at = fragments.indexOf('tfdt', at + 4)) {
    if (fragments[at + 4] === 1)
      fragments.writeBigUInt64BE(fragments.readBigUInt64BE(at + 8) + BigInt(indexedSamples), at + 8);
    else fragments.writeUInt32BE(fragments.readUInt32BE(at + 8) + indexedSamples, at + 8);
  }
  const withMvex = Buffer.concat([header, plain.subarray(moov.at + 8), mvex]);
  return {
    hybrid: Buffer.concat([plain.subarray(0, moov.at), withMvex, fragments]),
    withoutTrex: Buffer.concat([plain, fragments]),
  };
}

/** A copy of an MP4 whose `n`th (from 0) sound handler says `handler` instead (`meta`, `text`). */
export function withHandler(bytes: Buffer, n: number, handler: string): Buffer {
  const copy = Buffer.from(bytes);
  let seen = 0;
  for (let at = copy.indexOf('hdlr'); at !== -1; at = copy.indexOf('hdlr', at + 4)) {
    // hdlr: version and flags, pre_defined, then the handler type.
    if (copy.toString('latin1', at + 12, at + 16) !== 'soun') continue;
    if (seen++ === n) {
      copy.write(handler, at + 12, 'latin1');
      return copy;
    }
  }
  throw new Error(`no sound handler ${n}`);
}

/** What ffmpeg decodes of an MP4/M4A when it picks the track itself, in ms (a player's, or a provider's, view). */
export async function decodedMp4Ms(bytes: Buffer): Promise<number> {
  // From a file: an MP4's index may follow its media, which a pipe cannot seek back to.
  return inTempDir(async (dir) => {
    await writeFile(join(dir, 'audio.m4a'), bytes);
    const args = ['-hide_banner', '-v', 'error', '-i', join(dir, 'audio.m4a')];
    const run = await runFfmpeg(
      [...args, '-f', 's16le', '-ac', '1', '-ar', '16000', 'pipe:1'],
      Buffer.alloc(0),
    );
    if (run.code !== 0)
      throw new Error(`ffmpeg could not decode mp4 (exit ${run.code}): ${run.stderr.trim()}`);
    return (run.stdout.length / 2 / 16_000) * 1000;
  });
}

/** Formats of the speech endpoint's output, which {@link decodeAudio} accepts. */
export type SpeechAudioFormat = 'mp3' | 'opus' | 'aac' | 'flac' | 'wav' | 'pcm';

/** What a real decode found. */
export interface DecodedAudio {
  /** Decoded samples divided by the sample rate, in milliseconds. */
  durationMs: number;
  /** ffmpeg's codec name, e.g. `mp3`, `opus`, `aac`, `flac`, `pcm_s16le`. */
  codec: string;
  sampleRate: number;
}

// Demuxer options per format; `pcm` carries no header, so its layout (OpenAI's 24 kHz mono s16le) is given.
const DEMUXER_ARGS: Readonly<Record<SpeechAudioFormat, readonly string[]>> = {
  mp3: ['-f', 'mp3'],
  opus: ['-f', 'ogg'],
  aac: ['-f', 'aac'],
  flac: ['-f', 'flac'],
  wav: ['-f', 'wav'],
  pcm: ['-f', 's16le', '-ar', String(SPEECH_SAMPLE_RATE), '-ac', '1'],
};

/**
 * Decodes `bytes` with ffmpeg and reports the decoded duration, codec and sample rate. Rejects when
 * ffmpeg cannot identify the stream, exits non-zero or reports any decode error, so a truncated or
 * corrupt stream fails the test instead of yielding a plausible duration — unless `truncated` says the file was
 * cut short on purpose, when what decodes is the answer.
 */
export async function decodeAudio(
  bytes: Buffer,
  format: SpeechAudioFormat,
  options: { truncated?: boolean } = {},
): Promise<DecodedAudio> {
  const input = [...DEMUXER_ARGS[format], '-i', 'pipe:0'];
  // Pass 1 only probes: without an output ffmpeg prints the stream info and exits with an error.
  const probe = await runFfmpeg(['-hide_banner', '-v', 'info', ...input], bytes);
  const stream = /Stream #0:0.*?: Audio: ([^\s,(]+).*?, (\d+) Hz/.exec(probe.stderr);
  if (stream === null) throw new Error(`ffmpeg found no audio stream in ${format}: ${probe.stderr.trim()}`);
  const codec = stream[1] as string;
  const sampleRate = Number(stream[2]);

  const decode = await runFfmpeg(
    ['-hide_banner', '-v', 'error', ...input, '-f', 's16le', '-ac', '1', '-ar', String(sampleRate), 'pipe:1'],
    bytes,
  );
  // A file cut short ends in a partial frame, which ffmpeg reports; with `truncated`, that is expected.
  if (decode.code !== 0 || (decode.stderr.trim() !== '' && !options.truncated)) {
    throw new Error(`ffmpeg could not decode ${format} (exit ${decode.code}): ${decode.stderr.trim()}`);
  }
  return { durationMs: (decode.stdout.length / 2 / sampleRate) * 1000, codec, sampleRate };
}

interface FfmpegRun {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

function runFfmpeg(args: readonly string[], input: Buffer): Promise<FfmpegRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpegPath(), ['-nostdin', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const stdout: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      stderr += chunk;
    });
    // A probe run stops reading early; the resulting EPIPE is expected and reported by the exit code.
    child.stdin.on('error', () => {});
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(stdout), stderr }));
    child.stdin.end(input);
  });
}

/** A stream copy of `bytes` from `seconds` in (`ffmpeg -ss … -c copy`): its frames keep their numbers from the source. */
export async function cutAudio(bytes: Buffer, format: 'flac' | 'mp3', seconds: number): Promise<Buffer> {
  const args = [
    '-hide_banner',
    '-v',
    'error',
    '-f',
    format,
    '-i',
    'pipe:0',
    '-ss',
    String(seconds),
    '-c',
    'copy',
    '-f',
    format,
    'pipe:1',
  ];
  const run = await runFfmpeg(args, bytes);
  if (run.code !== 0)
    throw new Error(`ffmpeg could not cut ${format} (exit ${run.code}): ${run.stderr.trim()}`);
  return run.stdout;
}
