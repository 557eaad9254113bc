/**
 * The duration of AAC audio in an MP4/M4A file, counted from its samples rather than read from its headers.
 *
 * A metadata parser reads an MP4's duration from `mvhd`/`mdhd`: plain numbers a client can edit (a 10 s file
 * patched to read 0.1 s). Decoders ignore them: they decode every sample the sample table (`stsz`, or the `trun`s
 * of a fragmented file) indexes, and every AAC frame decodes to 1024 samples (960 with the short frame length) at
 * the rate of its AudioSpecificConfig. So the count here is frames × frame length ÷ rate, with only the frames
 * whose bytes the file actually holds counted. Other codecs in MP4 are not counted (null).
 */

interface Box {
  readonly type: string;
  /** Where the box's content starts (after its size and type), and where the box ends (clamped to the file). */
  readonly body: number;
  readonly end: number;
}

/** The boxes directly inside `[from, to)`. A box running past `to` is clamped to it: a cut file ends early. */
function* boxesIn(bytes: Uint8Array, view: DataView, from: number, to: number): Generator<Box> {
  for (let at = from; at + 8 <= to; ) {
    let size = view.getUint32(at);
    let header = 8;
    if (size === 1) {
      if (at + 16 > to) return;
      size = view.getUint32(at + 8) * 2 ** 32 + view.getUint32(at + 12);
      header = 16;
    } else if (size === 0) size = to - at;
    if (size < header) return;
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    yield { type, body: at + header, end: Math.min(at + size, to) };
    at += size;
  }
}

const child = (bytes: Uint8Array, view: DataView, box: Box, type: string, skip = 0): Box | undefined => {
  for (const inner of boxesIn(bytes, view, box.body + skip, box.end)) if (inner.type === type) return inner;
  return undefined;
};

/** Reads MPEG-4 descriptors' variable-length sizes (1–4 bytes of 7 bits). */
const descriptorAt = (bytes: Uint8Array, at: number, end: number) => {
  if (at >= end) return null;
  const tag = bytes[at] as number;
  let length = 0;
  let i = at + 1;
  for (let n = 0; n < 4 && i < end; n++) {
    const byte = bytes[i++] as number;
    length = (length << 7) | (byte & 0x7f);
    if (!(byte & 0x80)) break;
  }
  return { tag, body: i, end: Math.min(i + length, end) };
};

const AAC_RATES = [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350];
/** AAC Main, LC, SSR, LTP: the object types whose frames hold 1024 (or 960) samples. */
const AAC_CORE_TYPES = new Set([1, 2, 3, 4]);

/** Samples per frame and the core sampling rate from an AudioSpecificConfig; null for what is not plain AAC. */
const aacFraming = (bytes: Uint8Array, from: number, end: number) => {
  let bit = from * 8;
  const read = (n: number): number | null => {
    if (bit + n > end * 8) return null;
    let value = 0;
    for (let i = 0; i < n; i++, bit++)
      value = value * 2 + (((bytes[bit >> 3] as number) >> (7 - (bit & 7))) & 1);
    return value;
  };
  const objectType = () => {
    const type = read(5);
    if (type !== 31) return type;
    const extended = read(6);
    return extended === null ? null : 32 + extended;
  };
  const rate = () => {
    const index = read(4);
    return index === 15 ? read(24) : index === null ? null : (AAC_RATES[index] ?? null);
  };
  let type = objectType();
  const coreRate = rate();
  if (read(4) === null) return null; // channel configuration
  // HE-AAC (SBR, PS) signalled explicitly: an extension rate, then the core's object type.
  if (type === 5 || type === 29) {
    if (rate() === null) return null;
    type = objectType();
  }
  if (type === null || !AAC_CORE_TYPES.has(type) || !coreRate) return null;
  const shortFrames = read(1); // GASpecificConfig's frameLengthFlag
  if (shortFrames === null) return null;
  return { frameSamples: shortFrames ? 960 : 1024, rate: coreRate };
};

/** The AudioSpecificConfig of an `mp4a` sample entry's `esds`, as framing; null when absent or not AAC. */
const mp4aFraming = (bytes: Uint8Array, view: DataView, stsd: Box) => {
  // stsd: version/flags and entry count, then the first sample entry.
  const entry = boxesIn(bytes, view, stsd.body + 8, stsd.end).next().value;
  if (entry?.type !== 'mp4a' || entry.body + 28 > entry.end) return null;
  // AudioSampleEntry: 8 bytes of SampleEntry, then 20 (QuickTime sound description versions 1 and 2 add more).
  const version = view.getUint16(entry.body + 8);
  const skip = 28 + (version === 1 ? 16 : version === 2 ? 36 : 0);
  const esds =
    child(bytes, view, entry, 'esds', skip) ??
    (() => {
      const wave = child(bytes, view, entry, 'wave', skip);
      return wave ? child(bytes, view, wave, 'esds') : undefined;
    })();
  if (!esds) return null;
  // ES_Descriptor (tag 3) → DecoderConfigDescriptor (tag 4) → DecoderSpecificInfo (tag 5).
  const es = descriptorAt(bytes, esds.body + 4, esds.end);
  if (es?.tag !== 3 || es.body + 3 > es.end) return null;
  const flags = bytes[es.body + 2] as number;
  let at = es.body + 3;
  if (flags & 0x80) at += 2;
  if (flags & 0x40) at += 1 + ((bytes[at] as number | undefined) ?? 0);
  if (flags & 0x20) at += 2;
  const config = descriptorAt(bytes, at, es.end);
  if (config?.tag !== 4) return null;
  const specific = descriptorAt(bytes, config.body + 13, config.end);
  if (specific?.tag !== 5) return null;
  return aacFraming(bytes, specific.body, specific.end);
};

/** Bytes of every `mdat` payload the file holds (a cut file holds less than its sample table indexes). */
const mediaBytes = (bytes: Uint8Array, view: DataView): number => {
  let total = 0;
  for (const box of boxesIn(bytes, view, 0, bytes.length))
    if (box.type === 'mdat') total += box.end - box.body;
  return total;
};

/** Samples of a plain (not fragmented) track whose bytes the file holds, from its `stsz`. */
const tableSamples = (view: DataView, stsz: Box, available: number): number => {
  if (stsz.body + 12 > stsz.end) return 0;
  const size = view.getUint32(stsz.body + 4);
  const count = view.getUint32(stsz.body + 8);
  if (size !== 0) return Math.min(count, Math.floor(available / size));
  let used = 0;
  let samples = 0;
  for (let at = stsz.body + 12; samples < count && at + 4 <= stsz.end; at += 4) {
    used += view.getUint32(at);
    if (used > available) break;
    samples++;
  }
  return samples;
};

/** Samples the `trun`s of a fragmented file give the track with `trackId`. */
const fragmentSamples = (bytes: Uint8Array, view: DataView, trackId: number): number => {
  let samples = 0;
  for (const moof of boxesIn(bytes, view, 0, bytes.length)) {
    if (moof.type !== 'moof') continue;
    for (const traf of boxesIn(bytes, view, moof.body, moof.end)) {
      if (traf.type !== 'traf') continue;
      const tfhd = child(bytes, view, traf, 'tfhd');
      if (!tfhd || tfhd.body + 8 > tfhd.end || view.getUint32(tfhd.body + 4) !== trackId) continue;
      for (const trun of boxesIn(bytes, view, traf.body, traf.end))
        if (trun.type === 'trun' && trun.body + 8 <= trun.end) samples += view.getUint32(trun.body + 4);
    }
  }
  return samples;
};

/** The track id in a `tkhd` (version 1 widens its times to 64 bits); null when the box is missing or short. */
const trackIdOf = (bytes: Uint8Array, view: DataView, trak: Box): number | null => {
  const tkhd = child(bytes, view, trak, 'tkhd');
  if (!tkhd || tkhd.body + 24 > tkhd.end) return null;
  return view.getUint32(tkhd.body + ((bytes[tkhd.body] as number) === 1 ? 20 : 12));
};

/** The track ids the `moov`'s `mvex` has a `trex` for: a decoder plays fragments (`moof`) of those tracks only. */
const fragmentedTracks = (bytes: Uint8Array, view: DataView, moov: Box): Set<number> => {
  const ids = new Set<number>();
  const mvex = child(bytes, view, moov, 'mvex');
  if (!mvex) return ids;
  for (const trex of boxesIn(bytes, view, mvex.body, mvex.end))
    if (trex.type === 'trex' && trex.body + 8 <= trex.end) ids.add(view.getUint32(trex.body + 4));
  return ids;
};

/** What one track of a `moov` is to a decoder: not audio, AAC audio of this many ms, or audio this cannot count. */
type TrackAudio =
  | { readonly kind: 'none' }
  | { readonly kind: 'aac'; readonly ms: number }
  | { readonly kind: 'other' };

/** The audio of each track of an MP4/M4A; null when the file is not ISO media with a `moov`. */
const audioTracks = (bytes: Uint8Array): TrackAudio[] | null => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const top = [...boxesIn(bytes, view, 0, bytes.length)];
  if (top[0]?.type !== 'ftyp') return null;
  const moov = top.find((box) => box.type === 'moov');
  if (!moov) return null;
  const available = mediaBytes(bytes, view);
  const fragmented = fragmentedTracks(bytes, view, moov);
  const tracks: TrackAudio[] = [];
  for (const trak of boxesIn(bytes, view, moov.body, moov.end)) {
    if (trak.type !== 'trak') continue;
    const mdia = child(bytes, view, trak, 'mdia');
    const hdlr = mdia && child(bytes, view, mdia, 'hdlr');
    const handler =
      hdlr && hdlr.body + 12 <= hdlr.end
        ? String.fromCharCode(...bytes.subarray(hdlr.body + 8, hdlr.body + 12))
        : null;
    const minf = mdia && child(bytes, view, mdia, 'minf');
    const stbl = minf && child(bytes, view, minf, 'stbl');
    const stsd = stbl && child(bytes, view, stbl, 'stsd');
    const entry = stsd ? boxesIn(bytes, view, stsd.body + 8, stsd.end).next().value?.type : undefined;
    // Decoders go by the sample entry: an `mp4a` entry is audio whatever the handler says (ffmpeg makes it an audio
    // stream under a `meta` or `text` handler too, or none); a sound handler's entry of another codec is audio too.
    if (handler === 'vide' || (entry !== 'mp4a' && handler !== 'soun')) {
      tracks.push({ kind: 'none' });
      continue;
    }
    const framing = stbl && stsd && entry === 'mp4a' ? mp4aFraming(bytes, view, stsd) : null;
    if (!stbl || !framing) {
      tracks.push({ kind: 'other' });
      continue;
    }
    const stsz = child(bytes, view, stbl, 'stsz');
    const trackId = trackIdOf(bytes, view, trak);
    let frames = stsz ? tableSamples(view, stsz, available) : 0;
    if (trackId !== null && fragmented.has(trackId)) frames += fragmentSamples(bytes, view, trackId);
    // An AAC track indexing frames that are not in the file (an empty `mdat`) holds no audio: 0.
    tracks.push({ kind: 'aac', ms: (frames * framing.frameSamples * 1000) / framing.rate });
  }
  return tracks;
};

/** Whether an ISO media file holds an AAC audio track (counted or not), so that it is taken as MP4 audio. */
export const mp4HoldsAac = (bytes: Uint8Array): boolean =>
  audioTracks(bytes)?.some((track) => track.kind === 'aac') ?? false;

/**
 * The duration in ms of the longest AAC audio track of an MP4/M4A, counted from its frames; null when the file is
 * not MP4, has no such track, or has an audio track of another codec (a decoder may play that one); 0 when no
 * track's frames are in the file.
 *
 * Every audio track is counted, not the first: a decoder picks the track it plays by its own rules (ffmpeg, which
 * Whisper decodes with, prefers more channels), so a file whose first track holds a frame and whose second holds
 * half an hour is billed on the half hour. A track's frames are those its sample table indexes plus those its
 * fragments (`moof`) add when the `moov` declares the track fragmented (a `trex`): a file may carry both, and
 * decoders play both — and no fragment of a track the `moov` does not declare.
 */
export const mp4AacDurationMs = (bytes: Uint8Array): number | null => {
  const tracks = audioTracks(bytes);
  if (tracks === null || tracks.some((track) => track.kind === 'other')) return null;
  let longest: number | null = null;
  for (const track of tracks) if (track.kind === 'aac') longest = Math.max(longest ?? 0, track.ms);
  return longest;
};
