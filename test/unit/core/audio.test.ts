import { describe, expect, it } from 'vitest';
import {
  billedAudioMs,
  countCharacters,
  speechCharacters,
  speechUsage,
  subtitlesEndMs,
  transcriptionBody,
  transcriptionUsage,
  upstreamTranscriptionFields,
} from '#core/audio.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { costOf } from '#core/pricing.ts';
import type { Model } from '#core/registry.ts';

const model = (kind: Model['kind'], input: number): Model => ({
  id: `svc-${kind}`,
  family: 'svc',
  kind,
  rates: { input },
  flags: {},
  status: 'active',
  created: 0,
});

describe('speech billing', () => {
  it('counts characters as code points', () => {
    expect(countCharacters('abc')).toBe(3);
    expect(countCharacters('🎧é世')).toBe(3);
    expect('🎧'.length).toBe(2);
  });

  it('counts the instructions with the input: both are sent to the provider', () => {
    expect(speechCharacters({ input: 'abc' })).toBe(3);
    expect(speechCharacters({ input: 'abc', instructions: 'calm 🎧' })).toBe(9);
  });

  it('costs 25 USD per 1M characters', () => {
    const tts = model('speech', 25);
    expect(costOf(tts, speechUsage(1_000_000))).toBe(25_000_000_000);
    expect(costOf(tts, speechUsage(1))).toBe(25_000);
  });
});

describe('transcription billing', () => {
  it('costs 0.001 USD per minute, per millisecond of measured audio', () => {
    const stt = model('transcription', 0.001);
    expect(costOf(stt, transcriptionUsage(60_000))).toBe(1_000_000);
    expect(costOf(stt, transcriptionUsage(1_500))).toBe(25_000);
    expect(costOf(stt, transcriptionUsage(1))).toBe(17); // 16.67 rounded half up
  });
});

/** A duration read from what a file claims (Ogg, WebM): a provider's clearly longer decode is billed. */
const claimed = (durationMs: number) => ({ durationMs, counted: false });

describe('transcriptionBody', () => {
  it('bills a counted file on our count whatever longer duration the upstream reports, and says what it reported', () => {
    // MP3, FLAC, AAC frames and WAV samples decode to what we counted: nothing plays longer.
    const counted = { durationMs: 2_000, counted: true };
    const json = Buffer.from(JSON.stringify({ text: 'hi', usage: { type: 'duration', seconds: 60 } }));
    expect(transcriptionBody('json', json, counted)).toEqual({
      body: JSON.stringify({ text: 'hi', usage: { type: 'duration', seconds: 2 } }),
      audioMs: 2_000,
      reportedMs: 60_000,
    });
    const srt = Buffer.from('1\n00:00:00,000 --> 00:00:30,000\nhi\n');
    expect(transcriptionBody('srt', srt, counted)).toMatchObject({ audioMs: 2_000, reportedMs: 30_000 });
    expect(billedAudioMs(counted, 3_600_000)).toBe(2_000);
  });

  it('bills and shows the duration we measured when the upstream reports its rounded-up whole seconds', () => {
    const upstream = Buffer.from(JSON.stringify({ text: 'hi', usage: { type: 'duration', seconds: 3 } }));
    const reply = transcriptionBody('json', upstream, claimed(2_345));
    expect(reply.audioMs).toBe(2_345);
    expect(JSON.parse(reply.body)).toEqual({ text: 'hi', usage: { type: 'duration', seconds: 2.345 } });
  });

  it('bills the upstream’s duration when it decoded clearly more than we measured (a file made to read short)', () => {
    const json = Buffer.from(JSON.stringify({ text: 'hi', usage: { type: 'duration', seconds: 60 } }));
    expect(transcriptionBody('json', json, claimed(360))).toEqual({
      body: JSON.stringify({ text: 'hi', usage: { type: 'duration', seconds: 60 } }),
      audioMs: 60_000,
      reportedMs: 60_000,
    });
    // verbose_json says it as `duration`.
    const verbose = Buffer.from(JSON.stringify({ text: 'hi', duration: 59.5, segments: [] }));
    expect(transcriptionBody('verbose_json', verbose, claimed(360)).audioMs).toBe(59_500);
    // With both, the exact duration: the whole seconds' rounding is not audio (11 s reported for 10.08 s).
    const both = Buffer.from(
      JSON.stringify({ text: 'hi', duration: 10.08, usage: { type: 'duration', seconds: 11 } }),
    );
    expect(transcriptionBody('verbose_json', both, claimed(2_000)).audioMs).toBe(10_080);
    // Nonsense is ignored, not billed.
    for (const seconds of [-1, 'sixty', 1e12, null]) {
      const odd = Buffer.from(JSON.stringify({ text: 'hi', usage: { type: 'duration', seconds } }));
      expect(transcriptionBody('json', odd, claimed(360)).audioMs).toBe(360);
    }
    expect(billedAudioMs(claimed(2_000), 3_000)).toBe(2_000);
    expect(billedAudioMs(claimed(2_000), 3_001)).toBe(3_001);
  });

  it('passes text formats through', () => {
    expect(
      transcriptionBody('srt', Buffer.from('1\n00:00:00,000 --> 00:00:01,000\nhi\n'), claimed(1_000)).body,
    ).toContain('-->');
  });

  it('serves text from the JSON asked for upstream, billed on the reported duration like JSON', () => {
    const json = (seconds: number) =>
      Buffer.from(JSON.stringify({ text: 'hi there', usage: { type: 'duration', seconds } }));
    expect(transcriptionBody('text', json(2), claimed(1_500))).toEqual({
      body: 'hi there\n',
      audioMs: 1_500,
      reportedMs: 2_000,
    });
    expect(transcriptionBody('text', json(60), claimed(1_500))).toEqual({
      body: 'hi there\n',
      audioMs: 60_000,
      reportedMs: 60_000,
    });
    expect(() => transcriptionBody('text', Buffer.from('hi there'), claimed(1_500))).toThrow(UpstreamFailure);
    const fields = upstreamTranscriptionFields(
      { model: 'svc-stt', response_format: 'text', timestamp_granularities: [] },
      'whisper-up',
    );
    expect(fields).toContainEqual(['response_format', 'json']);
  });

  it('reads subtitles’ last cue end as the provider’s duration, billed when clearly past ours', () => {
    const srt = '1\n00:00:00,000 --> 00:00:04,800\nhi\n\n2\n00:00:04,800 --> 00:01:00,250\nthere\n\n';
    expect(subtitlesEndMs(srt)).toBe(60_250);
    expect(transcriptionBody('srt', Buffer.from(srt), claimed(360)).audioMs).toBe(60_250);
    // WebVTT may leave out the hours; the latest end counts, wherever its cue is.
    const vtt = 'WEBVTT\n\n01:05.000 --> 01:10.500\nlate\n\n00:00.000 --> 00:02.000\nearly\n\n';
    expect(subtitlesEndMs(vtt)).toBe(70_500);
    expect(transcriptionBody('vtt', Buffer.from(vtt), claimed(2_000)).audioMs).toBe(70_500);
    expect(subtitlesEndMs('WEBVTT\n\n01:02:03.004 --> 01:02:05.006\nx\n')).toBe(3_725_006);
    // Within the rounding slack, and without any timing line, ours stands.
    expect(
      transcriptionBody('srt', Buffer.from('1\n00:00:00,000 --> 00:00:03,000\nhi\n'), claimed(2_500)).audioMs,
    ).toBe(2_500);
    expect(subtitlesEndMs('WEBVTT\n\n')).toBeNull();
    expect(transcriptionBody('vtt', Buffer.from('WEBVTT\n\n'), claimed(2_500)).audioMs).toBe(2_500);
  });

  it('fails over on subtitles that are not subtitles (a JSON error or an HTML page sent with a 200)', () => {
    for (const format of ['srt', 'vtt'] as const) {
      for (const body of ['{"error":{"message":"quota"}}', '<html>Bad gateway</html>', 'hello'])
        expect(() => transcriptionBody(format, Buffer.from(body), claimed(1_000))).toThrow(UpstreamFailure);
    }
    // Audio without speech has no cue: an empty SRT, a WebVTT of its header alone.
    expect(transcriptionBody('srt', Buffer.from(''), claimed(1_000)).audioMs).toBe(1_000);
    expect(transcriptionBody('srt', Buffer.from('\n'), claimed(1_000)).audioMs).toBe(1_000);
    expect(transcriptionBody('vtt', Buffer.from('\uFEFFWEBVTT\n\n'), claimed(1_000)).audioMs).toBe(1_000);
  });

  it('fails over on a JSON reply that is not a transcription', () => {
    expect(() => transcriptionBody('json', Buffer.from('<html>'), claimed(1))).toThrow(UpstreamFailure);
    expect(() => transcriptionBody('verbose_json', Buffer.from('{"words":[]}'), claimed(1))).toThrow(
      UpstreamFailure,
    );
  });
});

describe('upstreamTranscriptionFields', () => {
  it('forwards the validated fields with the upstream model name', () => {
    expect(
      upstreamTranscriptionFields(
        {
          model: 'svc-stt',
          language: 'de',
          temperature: 0.2,
          response_format: 'verbose_json',
          timestamp_granularities: ['word'],
        },
        'whisper-up',
      ),
    ).toEqual([
      ['model', 'whisper-up'],
      ['language', 'de'],
      ['temperature', '0.2'],
      ['response_format', 'verbose_json'],
      ['timestamp_granularities[]', 'word'],
    ]);
  });
});
