import { parseBuffer } from 'music-metadata';
import { TRANSCRIPTION_INPUT_FORMATS } from '#core/audio.ts';
import { InvalidRequestError } from '#core/errors.ts';
import type { AudioInfo, AudioProbe } from '#core/ports.ts';
import {
  countedDurationMs,
  countsDecodedAudio,
  isWave,
  liveWebmDurationMs,
  mpegDurationMs,
  pcmWavDurationMs,
} from './audio-duration.ts';
import { mp4HoldsAac } from './mp4-duration.ts';

/**
 * Transcription is billed per minute of audio, so the duration is read from the uploaded bytes by a real
 * metadata parser (music-metadata: RIFF, MPEG frames, FLAC STREAMINFO, Ogg granules, Matroska, MP4 boxes),
 * never taken from the client — and, for MP3, FLAC, WebM and AAC in MP4, whose headers' counts a client can simply
 * edit (or a recording made to a pipe lacks), also counted from the audio itself (audio-duration.ts). WAV is
 * measured by its data chunks alone (`waveInfo`). A file the parser cannot read, or of a format the endpoint does
 * not accept, is refused before anything is held or sent upstream.
 */

/** music-metadata's container names → the format names of OpenAI's accepted list. */
export const formatOf = (container: string | undefined): string | null => {
  if (!container) return null;
  if (container === 'WAVE') return 'wav';
  if (container === 'MPEG') return 'mp3';
  if (container === 'FLAC') return 'flac';
  if (container === 'Ogg') return 'ogg';
  if (container.startsWith('EBML/webm')) return 'webm';
  if (container === 'M4A' || container.startsWith('M4A/')) return 'm4a';
  if (/^(isom|iso\d|mp4\d|avc1|mp42)/.test(container)) return 'mp4';
  return null;
};

/**
 * An ISO media file (an `ftyp` box first) whose major brand `formatOf` does not know — DASH audio (`dash`), a
 * camera's or phone's own brand — is still MP4 to decoders. It is taken when it holds an AAC track (counted when
 * every audio track in it is AAC; a track of another codec leaves it to the header and the provider's decode).
 */
const isoMediaFormat = (bytes: Uint8Array, container: string | undefined): string | null => {
  // Null for anything that is not ISO media with an AAC track.
  if (!mp4HoldsAac(bytes)) return null;
  return container?.startsWith('M4A') ? 'm4a' : 'mp4';
};

/**
 * Longer than any 4 MiB upload can play (8 kHz 8-bit mono PCM, the leanest common format, holds ~9 minutes; MP3 at
 * 8 kbps ~70 minutes): a duration past a day comes from a forged header, not from audio.
 */
const MAX_DURATION_MS = 24 * 60 * 60 * 1000;

/** How far a count of whole frames may run past a header's length from encoder priming and padding alone. */
const FRAMING_SLACK_MS = 100;

/** Some audio, and finite: a crafted header can overflow a count, and a duration must price to a number. */
const measurable = (ms: number): boolean => ms > 0 && Number.isFinite(ms) && ms <= MAX_DURATION_MS;

const ACCEPTED = `Supported formats: ${TRANSCRIPTION_INPUT_FORMATS.join(', ')}.`;

const unreadable = (detail: string) =>
  new InvalidRequestError(`The audio file could not be read: ${detail}. ${ACCEPTED}`, 'invalid_audio', {
    param: 'file',
  });

const unrecognized = () =>
  new InvalidRequestError(`Unrecognized audio file format. ${ACCEPTED}`, 'invalid_file_format', {
    param: 'file',
  });

/** The parser's errors that say the bytes are not a format it reads at all (rather than a broken file of one). */
const NOT_AUDIO = new Set(['CouldNotDetermineFileTypeError', 'UnsupportedFileTypeError']);

/**
 * An MP3 whose ID3v2 tag the parser refuses (a wrong version byte, say) is still an MP3 to decoders, which skip the
 * tag: it is measured by its frames. Only a file that starts with a tag: anything else is left to the parser.
 */
const mp3BehindBrokenTag = (bytes: Uint8Array): number | null =>
  bytes[0] === 0x49 && bytes[1] === 0x44 && bytes[2] === 0x33 ? mpegDurationMs(bytes) : null;

/**
 * A WAVE file is measured by its data chunks alone: every sample byte plays, whatever its headers claim, and a
 * parser's reading adds nothing (it does not even know RF64). Compressed samples are refused: their duration would
 * come from the file's `fact` chunk, a number the client writes.
 */
const waveInfo = (bytes: Uint8Array): AudioInfo => {
  const ms = pcmWavDurationMs(bytes);
  if (ms === null) {
    throw new InvalidRequestError(
      'Unsupported WAV audio: only PCM, IEEE float, A-law and µ-law samples are accepted in a WAV file. Convert ' +
        `compressed WAV (ADPCM, MP3 in WAV) to PCM, or send it as another format. ${ACCEPTED}`,
      'invalid_file_format',
      { param: 'file' },
    );
  }
  if (ms === 0) throw unreadable('it holds no audio frames');
  if (!measurable(ms)) throw unreadable('it holds no audio whose duration can be measured');
  return { format: 'wav', durationMs: Math.ceil(ms), counted: true };
};

export const musicMetadataProbe: AudioProbe = {
  async probe(bytes): Promise<AudioInfo> {
    if (isWave(bytes)) return waveInfo(bytes);
    let metadata: Awaited<ReturnType<typeof parseBuffer>>;
    try {
      metadata = await parseBuffer(
        bytes,
        // The format is detected from the content alone: a client's file name or content type may be wrong.
        { size: bytes.length },
        // Scan MPEG frames when there is no Xing/VBRI header rather than extrapolate from the first ones.
        { duration: true, skipCovers: true },
      );
    } catch (error) {
      // music-metadata refuses Matroska clusters of unknown size, which is how a live recorder (a browser's
      // MediaRecorder) writes WebM: those are measured by their blocks alone.
      const live = liveWebmDurationMs(bytes) ?? 0;
      if (measurable(live)) return { format: 'webm', durationMs: Math.ceil(live), counted: false };
      const mp3 = mp3BehindBrokenTag(bytes) ?? 0;
      if (measurable(mp3)) return { format: 'mp3', durationMs: Math.ceil(mp3), counted: true };
      if (error instanceof Error && NOT_AUDIO.has(error.name)) throw unrecognized();
      // The parser's own words name its internals ("Offset is outside the bounds of the DataView"), not the file's
      // fault: the client is told what it can act on.
      throw unreadable('it is corrupt or cut short');
    }
    const format = formatOf(metadata.format.container) ?? isoMediaFormat(bytes, metadata.format.container);
    if (format === null) {
      throw new InvalidRequestError(
        `Unsupported audio format${metadata.format.container ? ` (${metadata.format.container})` : ''}. ${ACCEPTED}`,
        'invalid_file_format',
        { param: 'file' },
      );
    }
    const seconds = metadata.format.duration;
    const headerMs = seconds !== undefined && Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 0;
    // A header's duration is the client's to write, and a recording made to a pipe has none: where we can, what
    // decoders play is counted from the audio itself. Where that count is of decoded samples it is billed, header
    // or not: a longer header is a truncated file (a recording cut short, a long file cut to the upload limit),
    // and billing it would charge for audio that is not there; a shorter one was edited. Elsewhere the longer of
    // the two is billed; and the provider's own decode backs both up (transcriptionBody).
    const count = countedDurationMs(format, bytes);
    // Where the count is of decoded audio, none counted is no audio: a header alone (a Xing frame, STREAMINFO, a
    // `fact` chunk, an MP4 index over an empty `mdat`) plays nothing, whatever length it claims. (An MP3 counter
    // that finds no frame cannot tell "no audio" from "not MPEG"; the parser said MPEG.)
    if (countsDecodedAudio(format) && (count === 0 || (count === null && format === 'mp3')))
      throw unreadable('it holds no audio frames');
    const counted = count ?? 0;
    let durationMs = Math.max(headerMs, counted);
    const decoded = countsDecodedAudio(format) && measurable(counted);
    if (decoded)
      // Whole frames include the encoder's priming and padding, which a header's exact length (an MP4 edit
      // list, a LAME tag) leaves out: where the two agree that closely, the header's is the length.
      durationMs = Math.abs(counted - headerMs) <= FRAMING_SLACK_MS ? headerMs : counted;
    if (!measurable(durationMs)) throw unreadable('it holds no audio whose duration can be measured');
    // Milliseconds, rounded up: a fraction of a millisecond of audio is still audio.
    return { format, durationMs: Math.ceil(durationMs), counted: decoded };
  },
};
