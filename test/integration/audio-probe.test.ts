import { parseBuffer } from 'music-metadata';
import { describe, expect, it } from 'vitest';
import {
  flacDurationMs,
  mpegDurationMs,
  pcmWavDurationMs,
  webmDurationMs,
} from '#adapters/audio-duration.ts';
import { musicMetadataProbe } from '#adapters/audio-probe.ts';
import { mp4AacDurationMs } from '#adapters/mp4-duration.ts';
import {
  cutAudio,
  decodeAudio,
  decodedMp4Ms,
  encodeAudio,
  encodeAudioToPipe,
  hybridM4a,
  makeWav,
  twoTrackM4a,
  withHandler,
} from '#test/audio.ts';

/**
 * Transcription is billed on the duration the probe measures, so a duration a client can write into a header
 * must not lower the bill: these files are real encodes (ffmpeg), then edited the way a client could.
 */

/** The duration music-metadata alone reads (the header's), in ms. */
const headerMs = async (bytes: Uint8Array) =>
  ((await parseBuffer(bytes, { size: bytes.length }, { duration: true })).format.duration ?? 0) * 1000;

/** The probe's refusal of `bytes`: its status, code and message (a measure instead fails the test). */
const refusal = (bytes: Uint8Array) =>
  musicMetadataProbe.probe(bytes).then(
    (info) => {
      throw new Error(`measured ${info.durationMs} ms`);
    },
    (error: { status: number; code: string; message: string }) => error,
  );

/** An MP3 whose Xing/Info frame count says `frames`, whatever the file holds. */
const withXingFrames = (mp3: Buffer, frames: number): Buffer => {
  const copy = Buffer.from(mp3);
  const at = Math.max(copy.indexOf('Xing'), copy.indexOf('Info'));
  expect(at).toBeGreaterThan(0);
  expect(copy.readUInt32BE(at + 4) & 1).toBe(1); // the frame count is present
  copy.writeUInt32BE(frames, at + 8);
  return copy;
};

/** A WAV with a `fact` chunk claiming `samples`, inserted before its data chunk. */
const withFactChunk = (wav: Buffer, samples: number): Buffer => {
  const data = wav.indexOf('data');
  const fact = Buffer.alloc(12);
  fact.write('fact', 0, 'ascii');
  fact.writeUInt32LE(4, 4);
  fact.writeUInt32LE(samples, 8);
  const out = Buffer.concat([wav.subarray(0, data), fact, wav.subarray(data)]);
  out.writeUInt32LE(out.length - 8, 4);
  return out;
};

/** An MP3's frames, split by their headers (each gives its length; layer III, as LAME writes). */
const framesOf = (mp3: Buffer): Buffer[] => {
  const frames: Buffer[] = [];
  let at = mp3.indexOf(Buffer.from([0xff]));
  while (at >= 0 && at + 4 <= mp3.length) {
    const b1 = mp3[at + 1] as number;
    const b2 = mp3[at + 2] as number;
    const mpeg1 = ((b1 >> 3) & 3) === 3;
    const kbps = (
      mpeg1
        ? [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
        : [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]
    )[b2 >> 4] as number;
    const rate = (mpeg1 ? [44_100, 48_000, 32_000] : [22_050, 24_000, 16_000])[(b2 >> 2) & 3] as number;
    const length = Math.floor(((mpeg1 ? 144_000 : 72_000) * kbps) / rate) + ((b2 >> 1) & 1);
    frames.push(mp3.subarray(at, at + length));
    at += length;
  }
  return frames;
};

describe('the transcription probe bills what decoders play, not what a header claims', () => {
  it('says which measures are counts of the audio present, which a provider’s report cannot exceed', async () => {
    const wav = makeWav({ durationMs: 3000, sampleRate: 16_000 });
    const countedOf = async (bytes: Uint8Array) => (await musicMetadataProbe.probe(bytes)).counted;
    expect(await countedOf(wav)).toBe(true);
    for (const format of ['mp3', 'flac', 'm4a'] as const)
      expect(await countedOf(await encodeAudio(wav, format))).toBe(true);
    // Ogg granules and WebM timestamps are the file's claims: there the provider's decode backs ours up.
    for (const format of ['ogg', 'webm'] as const)
      expect(await countedOf(await encodeAudio(wav, format))).toBe(false);
  });

  it('measures an MP3 by its frames', async () => {
    const mp3 = await encodeAudio(makeWav({ durationMs: 6000 }), 'mp3');
    const { durationMs } = await musicMetadataProbe.probe(mp3);
    // LAME pads a few frames at each end: within 100 ms of the tone.
    expect(Math.abs(durationMs - 6000)).toBeLessThan(100);
    expect(Math.abs((mpegDurationMs(mp3) ?? 0) - durationMs)).toBeLessThan(30);
  });

  it('is not fooled by a Xing frame count edited down to 10 frames', async () => {
    const honest = await encodeAudio(makeWav({ durationMs: 6000 }), 'mp3');
    const edited = withXingFrames(honest, 10);
    // The edit fools a header-reading parser: that is the hole this closes.
    expect(await headerMs(edited)).toBeLessThan(500);
    const measured = await musicMetadataProbe.probe(edited);
    expect(measured.format).toBe('mp3');
    expect(Math.abs(measured.durationMs - (await musicMetadataProbe.probe(honest)).durationMs)).toBeLessThan(
      30,
    );
  });

  it('does not count the bytes of an ID3 tag, nor junk between frames, as audio', async () => {
    const mp3 = await encodeAudio(makeWav({ durationMs: 2000 }), 'mp3');
    const base = mpegDurationMs(mp3) ?? 0;
    // An ID3v2 tag whose text holds frame-sync-like bytes, and junk with a lone false sync inside.
    const text = Buffer.concat([
      Buffer.from('TIT2'),
      Buffer.from([0, 0, 0, 8, 0, 0]),
      Buffer.from([0xff, 0xfb, 0x90, 0x64, 1, 2, 3, 4]),
    ]);
    const id3 = Buffer.concat([Buffer.from('ID3'), Buffer.from([3, 0, 0, 0, 0, 0, text.length]), text]);
    const junk = Buffer.from([0xff, 0xfb, 0x90, 0x64, 9, 9, 9, 9, 9, 9, 9]);
    const tagged = Buffer.concat([id3, mp3, junk]);
    expect(mpegDurationMs(tagged)).toBeCloseTo(base, 6);
    expect(mpegDurationMs(Buffer.from('not an mp3 at all'))).toBeNull();
  });

  it('still counts every frame when junk is put between frames (decoders resync past it)', async () => {
    const honest = await encodeAudio(makeWav({ durationMs: 6000 }), 'mp3');
    // Split the stream into frames, then put a zero byte after every frame but the first three (which keep the
    // file recognisable as MP3) and cut the Xing count to 10.
    const frames = framesOf(honest);
    expect(frames.length).toBeGreaterThan(100);
    const junked = withXingFrames(
      Buffer.concat([
        honest.subarray(0, honest.indexOf(frames[0] as Buffer)),
        ...frames.flatMap((f, i) => (i < 3 ? [f] : [f, Buffer.from([0])])),
      ]),
      10,
    );
    expect(await headerMs(junked)).toBeLessThan(500);
    const measured = await musicMetadataProbe.probe(junked);
    expect(Math.abs(measured.durationMs - (await musicMetadataProbe.probe(honest)).durationMs)).toBeLessThan(
      30,
    );
  });

  it('counts every frame when junk follows each one from the very first (nothing chains, decoders still play it)', async () => {
    const honest = await encodeAudio(makeWav({ durationMs: 6000 }), 'mp3');
    const frames = framesOf(honest);
    const junked = Buffer.concat([
      honest.subarray(0, honest.indexOf(frames[0] as Buffer)),
      ...frames.flatMap((f) => [f, Buffer.from([0])]),
    ]);
    // Every frame counted, as in the file without junk. (ffmpeg resyncs past most of it: never more than that.)
    const counted = mpegDurationMs(junked) ?? 0;
    expect(Math.abs(counted - (mpegDurationMs(honest) ?? 0))).toBeLessThan(30);
    const decoded = await decodeAudio(junked, 'mp3', { truncated: true });
    expect(counted).toBeGreaterThanOrEqual(decoded.durationMs - 30);
    expect(decoded.durationMs).toBeGreaterThan(4_000);
  });

  it('is not made to stop counting by a few frames at another rate (a second stream does not replace the first)', async () => {
    const main = framesOf(await encodeAudio(makeWav({ durationMs: 6000, sampleRate: 44_100 }), 'mp3'));
    const other = framesOf(await encodeAudio(makeWav({ durationMs: 500, sampleRate: 22_050 }), 'mp3'));
    // Five frames, three of another rate, then the rest each followed by a junk byte, so no three of them chain.
    const crafted = Buffer.concat([
      ...main.slice(0, 5),
      ...other.slice(2, 5),
      ...main.slice(5).flatMap((f) => [f, Buffer.from([0])]),
    ]);
    const decoded = await decodeAudio(crafted, 'mp3', { truncated: true });
    expect(decoded.durationMs).toBeGreaterThan(5_500);
    expect(Math.abs((await musicMetadataProbe.probe(crafted)).durationMs - decoded.durationMs)).toBeLessThan(
      150,
    );
  });

  it('measures a PCM WAV by its data bytes, not a fact chunk claiming 10 samples', async () => {
    const wav = makeWav({ durationMs: 4000, sampleRate: 16_000 });
    const edited = withFactChunk(wav, 10);
    expect(await headerMs(edited)).toBeLessThan(1);
    expect((await musicMetadataProbe.probe(edited)).durationMs).toBe(4000);
    expect(pcmWavDurationMs(wav)).toBe(4000);
  });

  it.each(['flac', 'webm'] as const)(
    'measures a %s recorded to a pipe (no sample count or duration in its header) by its frames',
    async (format) => {
      const wav = makeWav({ durationMs: 5000, sampleRate: 16_000 });
      const piped = await encodeAudioToPipe(wav, format);
      // What a header-reading parser cannot measure: such uploads were refused as holding no audio.
      expect(await headerMs(piped)).toBe(0);
      const { durationMs } = await musicMetadataProbe.probe(piped);
      expect(Math.abs(durationMs - 5000)).toBeLessThan(40);
      // A file written to a seekable output measures the same.
      const seekable = await encodeAudio(wav, format);
      expect(Math.abs((await musicMetadataProbe.probe(seekable)).durationMs - durationMs)).toBeLessThan(40);
    },
  );

  it('measures a WebM whose clusters have unknown sizes, as a browser’s MediaRecorder writes them', async () => {
    const piped = await encodeAudioToPipe(makeWav({ durationMs: 3000, sampleRate: 16_000 }), 'webm');
    const live = Buffer.from(piped);
    const clusterId = Buffer.from([0x1f, 0x43, 0xb6, 0x75]);
    let clusters = 0;
    for (let at = live.indexOf(clusterId); at >= 0; at = live.indexOf(clusterId, at + 4)) {
      // The size that follows, rewritten in place as "unknown": every value bit set, same length.
      const size = at + 4;
      let length = 1;
      while (!((live[size] as number) & (0x80 >> (length - 1)))) length++;
      live[size] = 0xff >> (length - 1);
      live.fill(0xff, size + 1, size + length);
      clusters++;
    }
    expect(clusters).toBeGreaterThan(1);
    expect(webmDurationMs(live)).toBe(webmDurationMs(piped));
    expect(Math.abs((await musicMetadataProbe.probe(live)).durationMs - 3000)).toBeLessThan(40);
  });

  it('is not fooled by a FLAC whose STREAMINFO sample count is edited down', async () => {
    const flac = await encodeAudio(makeWav({ durationMs: 5000, sampleRate: 16_000 }), 'flac');
    // Exactly: counted in samples, not summed in float seconds (which drifted past 5000 and billed a ms more).
    expect(flacDurationMs(flac)).toBe(5000);
    const edited = Buffer.from(flac);
    // STREAMINFO's 36-bit total sample count: the low nibble of byte 21, then bytes 22–25.
    edited[21] = (edited[21] as number) & 0xf0;
    edited.writeUInt32BE(160, 22);
    expect(await headerMs(edited)).toBeLessThan(20);
    expect(Math.abs((await musicMetadataProbe.probe(edited)).durationMs - 5000)).toBeLessThan(40);
    // Nor by its minimum block size and sample rate edited too: each frame's own header says what it holds.
    edited.writeUInt16BE(16, 8); // min block size
    edited[18] = 0xff; // sample rate, 20 bits from byte 18: 1,048,575 Hz
    edited[19] = 0xff;
    edited[20] = (edited[20] as number) | 0xf0;
    expect(Math.abs((flacDurationMs(edited) ?? 0) - 5000)).toBeLessThan(40);
    // FLAC by its signature, cut inside its metadata: no frame, no audio.
    expect(flacDurationMs(Buffer.from('fLaC but nothing else at all, not even STREAMINFO'))).toBe(0);
  });

  it('measures a FLAC cut from a longer one (its frames numbered from where the cut began), as decoders play it', async () => {
    const whole = await encodeAudio(makeWav({ durationMs: 10_000, sampleRate: 16_000 }), 'flac');
    const cut = await cutAudio(whole, 'flac', 4);
    const decoded = await decodeAudio(cut, 'flac', { truncated: true });
    expect(decoded.durationMs).toBeGreaterThan(5_000);
    expect(decoded.durationMs).toBeLessThan(7_000);
    expect(Math.abs((await musicMetadataProbe.probe(cut)).durationMs - decoded.durationMs)).toBeLessThan(100);
  });

  it.each(['mp3', 'flac', 'wav'] as const)(
    'bills a %s cut short on the audio it still holds, not on the duration its header claims',
    async (format) => {
      const whole =
        format === 'wav'
          ? makeWav({ durationMs: 20_000 })
          : await encodeAudio(makeWav({ durationMs: 20_000 }), format);
      // A recording cut off, or a long file cut to size with `head -c`: the header still says 20 s.
      const cut = whole.subarray(0, Math.floor(whole.length / 4));
      if (format !== 'wav') expect(Math.abs((await headerMs(cut)) - 20_000)).toBeLessThan(100);
      const { durationMs } = await musicMetadataProbe.probe(cut);
      const decoded = await decodeAudio(Buffer.from(cut), format, { truncated: true });
      expect(decoded.durationMs).toBeLessThan(10_000);
      expect(Math.abs(durationMs - decoded.durationMs)).toBeLessThan(100);
    },
  );

  it('is not fooled by an M4A whose durations, or whose timescale, are edited down', async () => {
    const m4a = await encodeAudio(makeWav({ durationMs: 10_000 }), 'm4a');
    const honest = (await musicMetadataProbe.probe(m4a)).durationMs;
    expect(Math.abs(honest - 10_000)).toBeLessThan(100);
    // Counted: every AAC frame the sample table indexes, 1024 samples each (priming and padding included).
    expect(Math.abs((mp4AacDurationMs(m4a) ?? 0) - honest)).toBeLessThan(150);
    /** `box`'s 32-bit field `at` bytes into its content (version 0 boxes), rewritten by `edit`. */
    const edited = (bytes: Buffer, box: string, at: number, edit: (value: number) => number) => {
      const copy = Buffer.from(bytes);
      const offset = copy.indexOf(box) + 4 + at;
      expect(copy[offset - at]).toBe(0); // version 0
      copy.writeUInt32BE(edit(copy.readUInt32BE(offset)), offset);
      return copy;
    };
    // mvhd, mdhd: version/flags, creation, modification, timescale, then duration. tkhd: its duration at 20.
    let short = edited(m4a, 'mvhd', 16, (d) => Math.floor(d / 100));
    short = edited(short, 'mdhd', 16, (d) => Math.floor(d / 100));
    short = edited(short, 'tkhd', 20, (d) => Math.floor(d / 100));
    expect(await headerMs(short)).toBeLessThan(200);
    expect(Math.abs((await musicMetadataProbe.probe(short)).durationMs - honest)).toBeLessThan(150);
    const fastClock = edited(
      edited(m4a, 'mdhd', 12, (t) => t * 100),
      'mvhd',
      12,
      (t) => t * 100,
    );
    expect(await headerMs(fastClock)).toBeLessThan(200);
    expect(Math.abs((await musicMetadataProbe.probe(fastClock)).durationMs - honest)).toBeLessThan(150);
  });

  it('counts a fragmented M4A (written to a pipe) by the frames of its fragments', async () => {
    const piped = await encodeAudioToPipe(makeWav({ durationMs: 4_000 }), 'm4a');
    expect(piped.indexOf('moof')).toBeGreaterThan(0);
    expect(Math.abs((mp4AacDurationMs(piped) ?? 0) - 4_000)).toBeLessThan(150);
    expect(Math.abs((await musicMetadataProbe.probe(piped)).durationMs - 4_000)).toBeLessThan(150);
    expect(mp4AacDurationMs(Buffer.from('not an mp4 file at all, no boxes'))).toBeNull();
  });

  it('bills the longest of several sound tracks: a decoder may play any of them', async () => {
    // A frame's worth of mono first, ten seconds of stereo second: ffmpeg (which Whisper decodes with) plays the
    // stereo one. Counting the first track alone billed this file as 0.1 s.
    const m4a = await twoTrackM4a(makeWav({ durationMs: 100 }), makeWav({ durationMs: 10_000, channels: 2 }));
    expect(Math.abs((await decodedMp4Ms(m4a)) - 10_000)).toBeLessThan(150);
    expect(Math.abs((mp4AacDurationMs(m4a) ?? 0) - 10_000)).toBeLessThan(150);
    const measured = await musicMetadataProbe.probe(m4a);
    expect(measured.counted).toBe(true);
    expect(Math.abs(measured.durationMs - 10_000)).toBeLessThan(150);
    // The same, the long track first.
    const longFirst = await twoTrackM4a(
      makeWav({ durationMs: 10_000, channels: 2 }),
      makeWav({ durationMs: 100 }),
    );
    expect(Math.abs((mp4AacDurationMs(longFirst) ?? 0) - 10_000)).toBeLessThan(150);
  });

  it("counts a track's indexed frames and its fragments' together, as a decoder plays them", async () => {
    // An indexed second, then four seconds of fragments continuing its timeline: ffmpeg plays all five.
    const { hybrid, withoutTrex } = await hybridM4a(1_000, 4_000);
    const played = await decodedMp4Ms(hybrid);
    expect(Math.abs(played - 5_000)).toBeLessThan(250);
    expect(Math.abs((mp4AacDurationMs(hybrid) ?? 0) - played)).toBeLessThan(150);
    // Fragments of a track the moov does not declare fragmented (no trex) are no audio to a decoder: ffmpeg refuses
    // the file, and none of them is counted.
    await expect(decodedMp4Ms(withoutTrex)).rejects.toThrow(/could not find corresponding trex/);
    expect(Math.abs((mp4AacDurationMs(withoutTrex) ?? 0) - 1_000)).toBeLessThan(150);
  });

  it.each(['meta', 'text'])(
    'counts an AAC track under a %s handler, as a decoder plays it',
    async (handler) => {
      // The long track relabelled: ffmpeg goes by its mp4a sample entry and still plays it.
      const relabelled = withHandler(
        await twoTrackM4a(makeWav({ durationMs: 100 }), makeWav({ durationMs: 10_000, channels: 2 })),
        1,
        handler,
      );
      expect(Math.abs((await decodedMp4Ms(relabelled)) - 10_000)).toBeLessThan(150);
      expect(Math.abs((mp4AacDurationMs(relabelled) ?? 0) - 10_000)).toBeLessThan(150);
      expect((await musicMetadataProbe.probe(relabelled)).counted).toBe(true);
    },
  );

  it('takes AAC beside a track of another codec as MP4, uncounted', async () => {
    // An AAC track beside one of another codec (MP3): still MP4 audio, taken — but uncounted, since a decoder may
    // play the other, so the header's length and the provider's decode decide.
    const mixed = await twoTrackM4a(makeWav({ durationMs: 2_000 }), makeWav({ durationMs: 3_000 }), 'mp3');
    expect(mp4AacDurationMs(mixed)).toBeNull();
    const measured = await musicMetadataProbe.probe(mixed);
    expect(measured).toMatchObject({ format: 'mp4', counted: false });
    expect(measured.durationMs).toBeGreaterThan(1_900);
  });

  it('counts every data chunk of a WAV, and µ-law samples, whatever a fact chunk says', () => {
    const wav = makeWav({ durationMs: 3000, sampleRate: 8_000 });
    const data = wav.indexOf('data');
    const samples = wav.subarray(data + 8);
    // A tiny first data chunk, then the real one: decoders play both.
    const tiny = Buffer.alloc(8 + 16);
    tiny.write('data', 0, 'ascii');
    tiny.writeUInt32LE(16, 4);
    const split = Buffer.concat([wav.subarray(0, data), tiny, wav.subarray(data)]);
    split.writeUInt32LE(split.length - 8, 4);
    expect(pcmWavDurationMs(split)).toBe(3001);
    // The same bytes declared µ-law (tag 7, 8 bits): one byte a sample.
    const mulaw = withFactChunk(Buffer.from(wav), 10);
    const fmt = mulaw.indexOf('fmt ') + 8;
    mulaw.writeUInt16LE(7, fmt);
    mulaw.writeUInt32LE(16_000, fmt + 4); // 16 kHz, so the 2 bytes a sample of the tone read as two samples
    mulaw.writeUInt16LE(1, fmt + 12);
    mulaw.writeUInt16LE(8, fmt + 14);
    expect(pcmWavDurationMs(mulaw)).toBe((samples.length / 16_000) * 1000);
  });

  it('answers a forged WebM timestamp field with a measured duration or a 400, never a 500', async () => {
    const webm = await encodeAudioToPipe(makeWav({ durationMs: 2000, sampleRate: 16_000 }), 'webm');
    // Every cluster Timecode (0xE7) made 130 bytes of 0xFF: a number past Infinity if read whole.
    const cluster = webm.indexOf(Buffer.from([0x1f, 0x43, 0xb6, 0x75]));
    const timecode = webm.indexOf(Buffer.from([0xe7]), cluster + 4);
    const size = (webm[timecode + 1] as number) & 0x7f;
    const forged = Buffer.concat([
      webm.subarray(0, timecode),
      Buffer.from([0xe7, 0x40, 130]), // a two-byte size: 130
      Buffer.alloc(130, 0xff),
      webm.subarray(timecode + 2 + size),
    ]);
    expect(Number.isFinite(webmDurationMs(forged))).toBe(true);
    const outcome = await musicMetadataProbe.probe(forged).then(
      (info) => info.durationMs,
      (error: { status?: number }) => error.status,
    );
    expect(
      outcome === 400 || (typeof outcome === 'number' && outcome > 400 && Number.isFinite(outcome)),
    ).toBe(true);
  });

  it('measures a streamed WAV (data size 0xFFFFFFFF) to the end of the file', () => {
    const wav = makeWav({ durationMs: 1500, sampleRate: 8_000, channels: 2 });
    const streamed = Buffer.from(wav);
    streamed.writeUInt32LE(0xffffffff, streamed.indexOf('data') + 4);
    expect(pcmWavDurationMs(streamed)).toBe(1500);
  });

  describe('a header with no audio behind it, and audio the parser would misread', () => {
    const NO_AUDIO = {
      status: 400,
      code: 'invalid_audio',
      message: expect.stringContaining('no audio frames'),
    };

    it('refuses an MP3 that is its Xing frame alone, whatever frame count it claims', async () => {
      const mp3 = await encodeAudio(makeWav({ durationMs: 3000 }), 'mp3');
      const tag = Math.max(mp3.indexOf('Xing'), mp3.indexOf('Info'));
      // The ID3 tag and the first frame (which holds the Xing tag): the next frame's sync ends it.
      const second = mp3.indexOf(Buffer.from([0xff, (mp3[tag - 36] as number) ?? 0xfb]), tag);
      const alone = withXingFrames(mp3.subarray(0, second > tag ? second : tag + 200), 3_000_000);
      expect(await headerMs(alone)).toBeGreaterThan(60 * 60_000);
      expect(await refusal(alone)).toMatchObject(NO_AUDIO);
    });

    it('refuses a FLAC that is its metadata alone, and a WAV whose data chunk is empty', async () => {
      const flac = await encodeAudio(makeWav({ durationMs: 3000 }), 'flac');
      let at = 4;
      for (let last = false; !last; ) {
        last = ((flac[at] as number) & 0x80) !== 0;
        at += 4 + flac.readUIntBE(at + 1, 3);
      }
      const metadataOnly = flac.subarray(0, at);
      expect(await headerMs(metadataOnly)).toBeGreaterThan(2_900);
      expect(await refusal(metadataOnly)).toMatchObject(NO_AUDIO);

      const wav = makeWav({ durationMs: 3000 });
      const data = wav.indexOf('data');
      const empty = withFactChunk(Buffer.concat([wav.subarray(0, data + 4), Buffer.alloc(4)]), 16_000 * 3600);
      empty.writeUInt32LE(empty.length - 8, 4);
      expect(await headerMs(empty)).toBeGreaterThanOrEqual(60 * 60_000);
      expect(await refusal(empty)).toMatchObject(NO_AUDIO);
    });

    it('refuses an M4A whose sample table indexes frames its empty mdat does not hold', async () => {
      const m4a = await encodeAudio(makeWav({ durationMs: 3000 }), 'm4a');
      const mdat = m4a.indexOf('mdat') - 4;
      const size = m4a.readUInt32BE(mdat);
      const header = Buffer.from([0, 0, 0, 8, ...Buffer.from('mdat')]);
      const emptied = Buffer.concat([m4a.subarray(0, mdat), header, m4a.subarray(mdat + size)]);
      expect(await headerMs(emptied)).toBeGreaterThan(2_900);
      expect(await refusal(emptied)).toMatchObject(NO_AUDIO);
    });

    it('counts both parts of two MP3s of different sample rates joined end to end, as decoders play them', async () => {
      const low = await encodeAudio(makeWav({ durationMs: 400, sampleRate: 16_000 }), 'mp3');
      const high = await encodeAudio(makeWav({ durationMs: 6_000, sampleRate: 44_100 }), 'mp3');
      const joined = Buffer.concat([low, high]);
      const decoded = await decodeAudio(joined, 'mp3', { truncated: true });
      expect(decoded.durationMs).toBeGreaterThan(6_000);
      const { durationMs } = await musicMetadataProbe.probe(joined);
      expect(Math.abs(durationMs - decoded.durationMs)).toBeLessThan(100);
    });

    it('measures a WAV by its first fmt chunk, the one decoders read, not a later one', async () => {
      const wav = makeWav({ durationMs: 4000, sampleRate: 16_000 });
      const data = wav.indexOf('data');
      const fmt = wav.subarray(wav.indexOf('fmt '), data);
      const fast = Buffer.from(fmt);
      fast.writeUInt32LE(3_072_000, 12); // a second fmt: 192x the rate
      const twice = Buffer.concat([wav.subarray(0, data), fast, wav.subarray(data)]);
      twice.writeUInt32LE(twice.length - 8, 4);
      const decoded = await decodeAudio(twice, 'wav', { truncated: true });
      expect(Math.abs(decoded.durationMs - 4000)).toBeLessThan(20);
      expect((await musicMetadataProbe.probe(twice)).durationMs).toBe(4000);
    });

    it('measures an MP3 behind an ID3 tag decoders do not take for one (version 0xFF) from the start', async () => {
      const mp3 = await encodeAudio(makeWav({ durationMs: 5000 }), 'mp3');
      const honest = (await musicMetadataProbe.probe(mp3)).durationMs;
      const broken = Buffer.from(mp3);
      expect(broken.subarray(0, 3).toString()).toBe('ID3');
      broken[3] = 0xff;
      const { format, durationMs } = await musicMetadataProbe.probe(broken);
      expect(format).toBe('mp3');
      expect(Math.abs(durationMs - honest)).toBeLessThan(30);
    });

    it("tells the client the file is broken in its own words, not the parser's, and a PDF is not audio", async () => {
      const m4a = await encodeAudio(makeWav({ durationMs: 3000 }), 'm4a');
      const cut = await refusal(m4a.subarray(0, Math.floor(m4a.length / 5)));
      expect(cut).toMatchObject({ status: 400, code: 'invalid_audio' });
      expect(cut.message).toMatch(
        /^The audio file could not be read: it (is corrupt or cut short|holds no audio frames)\./,
      );
      const pdf = Buffer.from(
        '%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n',
      );
      expect(await refusal(pdf)).toMatchObject({ status: 400, code: 'invalid_file_format' });
    });
  });

  describe('uploads that once slipped past the probe: compressed WAV, RF64, other MP4 brands, a FLAC of one header', () => {
    it.each(['wav-adpcm', 'wav-mp3'] as const)(
      'refuses a %s file rather than bill the fact chunk its length comes from',
      async (variant) => {
        const wav = await encodeAudio(makeWav({ durationMs: 6000, sampleRate: 16_000 }), variant);
        // Decoders play all 6 s; the parser's length is the `fact` chunk's, which a client edits to say 1 s.
        expect(Math.abs((await decodeAudio(wav, 'wav')).durationMs - 6000)).toBeLessThan(200);
        const fact = wav.indexOf('fact');
        expect(fact).toBeGreaterThan(0);
        const edited = Buffer.from(wav);
        edited.writeUInt32LE(16_000, fact + 8);
        expect(await headerMs(edited)).toBeLessThan(1100);
        for (const bytes of [wav, edited]) {
          expect(await refusal(bytes)).toMatchObject({
            status: 400,
            code: 'invalid_file_format',
            message: expect.stringContaining('only PCM, IEEE float, A-law and µ-law samples'),
          });
        }
      },
    );

    it('measures an RF64 WAV by its data chunk, whatever sync-like bytes its samples hold', async () => {
      const rf64 = await encodeAudio(makeWav({ durationMs: 20_000, sampleRate: 16_000 }), 'wav-rf64');
      expect(rf64.subarray(0, 4).toString()).toBe('RF64');
      expect(await musicMetadataProbe.probe(rf64)).toEqual({
        format: 'wav',
        durationMs: 20_000,
        counted: true,
      });
      // Real MP3 frames written over the first samples: a parser that guesses the format from them measured the
      // file as the 0.1 s of MPEG it found.
      const mp3 = await encodeAudio(makeWav({ durationMs: 500, sampleRate: 16_000 }), 'mp3');
      const data = rf64.indexOf('data') + 8;
      const crafted = Buffer.from(rf64);
      Buffer.concat(framesOf(mp3).slice(1, 4)).copy(crafted, data);
      expect(await musicMetadataProbe.probe(crafted)).toEqual({
        format: 'wav',
        durationMs: 20_000,
        counted: true,
      });
      // The data chunk's size is the one in `ds64`: a chunk after the samples is not audio.
      const trailer = Buffer.concat([
        crafted,
        Buffer.from('LIST'),
        Buffer.from([4, 0, 0, 0]),
        Buffer.from('INFO'),
      ]);
      expect(await musicMetadataProbe.probe(trailer)).toEqual({
        format: 'wav',
        durationMs: 20_000,
        counted: true,
      });
      // As decoders read it: the data size is ds64's whatever the chunk's own field says (here 2 bytes).
      const dataSizeAt = rf64.indexOf('data') + 4;
      const smallField = Buffer.from(rf64);
      smallField.writeUInt32LE(2, dataSizeAt);
      expect(await musicMetadataProbe.probe(smallField)).toEqual({
        format: 'wav',
        durationMs: 20_000,
        counted: true,
      });
      // And only in RF64: in a RIFF file a ds64 chunk is any other chunk, and an unsized data chunk runs to the end.
      const riff = Buffer.from(smallField);
      riff.write('RIFF', 0, 'latin1');
      riff.writeUInt32LE(0xffffffff, dataSizeAt);
      riff.writeBigUInt64LE(2n, 28); // ds64's data size: 2 bytes
      expect(await musicMetadataProbe.probe(riff)).toEqual({
        format: 'wav',
        durationMs: 20_000,
        counted: true,
      });
    });

    it('takes MP4 audio under a major brand it does not list (DASH, or M4A alone), counted by its frames', async () => {
      const dash = await encodeAudio(makeWav({ durationMs: 4000 }), 'm4a-dash');
      expect(dash.subarray(8, 12).toString()).toBe('dash');
      const measured = await musicMetadataProbe.probe(dash);
      expect(measured.format).toBe('mp4');
      expect(Math.abs(measured.durationMs - 4000)).toBeLessThan(100);

      const m4a = await encodeAudio(makeWav({ durationMs: 4000 }), 'm4a');
      const ftyp = m4a.indexOf('ftyp');
      const onlyM4a = Buffer.from(m4a);
      for (let at = ftyp + 12; at < ftyp - 4 + m4a.readUInt32BE(ftyp - 4); at += 4)
        onlyM4a.write('M4A ', at, 'latin1');
      expect(await musicMetadataProbe.probe(onlyM4a)).toEqual(await musicMetadataProbe.probe(m4a));
      expect((await musicMetadataProbe.probe(onlyM4a)).format).toBe('m4a');
    });

    // Bounded in the work it does, not in time; the timeout is only there to end a run that hangs. Scanning ahead
    // from every header, the code before took over a minute for a quarter of this file, and hours for all of it.
    it('refuses a FLAC of one valid frame header repeated, none followed by its successor, in one pass', async () => {
      const header = Buffer.from([0xff, 0xf8, 0x19, 0x08, 0x05, 0]);
      header[5] = crc8Of(header.subarray(0, 5));
      const streamInfo = Buffer.alloc(34);
      streamInfo.writeUInt16BE(4096, 0);
      streamInfo.writeUInt16BE(4096, 2);
      streamInfo.writeUIntBE(44_100 * 16 + 0b1111, 10, 3); // 44.1 kHz (20 bits), mono, 16-bit
      const flac = Buffer.concat([
        Buffer.from('fLaC'),
        Buffer.from([0x80, 0, 0, 34]),
        streamInfo,
        Buffer.concat(Array.from({ length: 170_000 }, () => header)),
      ]);
      expect(flacDurationMs(flac)).toBe(0);
      expect(await refusal(flac)).toMatchObject({ status: 400, code: 'invalid_audio' });
    }, 60_000);
  });
});

/** CRC-8 (polynomial 0x07) as a FLAC frame header ends with. */
const crc8Of = (bytes: Uint8Array): number => {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x80 ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
  }
  return crc;
};
