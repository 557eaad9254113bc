import { describe, expect, it } from 'vitest';
import {
  billedAudioMs,
  countCharacters,
  speechCharacters,
  speechUsage,
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
    const verbose = Buffer.from(
      JSON.stringify({ text: 'hi', duration: 30, segments: [{ start: 0, end: 30, text: 'hi' }] }),
    );
    expect(transcriptionBody('srt', verbose, counted)).toMatchObject({ audioMs: 2_000, reportedMs: 30_000 });
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

  it('writes subtitles from the verbose JSON asked for upstream, billed on its duration, not on its last cue', () => {
    for (const format of ['srt', 'vtt'] as const) {
      const fields = upstreamTranscriptionFields(
        { model: 'svc-stt', response_format: format, timestamp_granularities: [] },
        'whisper-up',
      );
      expect(fields).toContainEqual(['response_format', 'verbose_json']);
    }
    // Whisper's last cue can run past the audio (here 2.4 s of it, the cue to 30 s): the decode's duration is billed.
    const verbose = (duration: number) =>
      Buffer.from(
        JSON.stringify({
          task: 'transcribe',
          language: 'english',
          duration,
          text: ' Hi there. Bye.',
          segments: [
            { id: 0, start: 0, end: 1.5, text: ' Hi there.' },
            { id: 1, start: 1.5, end: 30, text: ' Bye.' },
          ],
        }),
      );
    const srt = transcriptionBody('srt', verbose(2.4), claimed(2_000));
    expect(srt).toEqual({
      body: '1\n00:00:00,000 --> 00:00:01,500\nHi there.\n\n2\n00:00:01,500 --> 00:00:30,000\nBye.\n\n',
      audioMs: 2_000, // within the rounding slack of ours
      reportedMs: 2_400,
    });
    const vtt = transcriptionBody('vtt', verbose(60), claimed(2_000));
    expect(vtt.body).toBe(
      'WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHi there.\n\n00:00:01.500 --> 00:00:30.000\nBye.\n\n',
    );
    // A file made to read short (2 s, decoded to 60): the provider's decode is billed.
    expect(vtt.audioMs).toBe(60_000);
    // Audio without speech has no cue: an empty SRT, a WebVTT of its header alone.
    const silent = Buffer.from(JSON.stringify({ text: '', duration: 1, segments: [] }));
    expect(transcriptionBody('srt', silent, claimed(1_000)).body).toBe('');
    expect(transcriptionBody('vtt', silent, claimed(1_000)).body).toBe('WEBVTT\n\n');
  });

  it('fails over on subtitles asked for whose reply has no timed segments', () => {
    for (const format of ['srt', 'vtt'] as const) {
      for (const body of [
        '1\n00:00:00,000 --> 00:00:04,800\nhi\n\n', // subtitles themselves: not what was asked for
        '<html>Bad gateway</html>',
        '{"text":"hi"}',
        '{"text":"hi","segments":{}}',
        '{"text":"hi","segments":[{"start":0,"end":"1","text":"hi"}]}',
        '{"text":"hi","segments":[{"start":-1,"end":1,"text":"hi"}]}',
        '{"text":"hi","segments":[null]}',
      ])
        expect(() => transcriptionBody(format, Buffer.from(body), claimed(1_000))).toThrow(UpstreamFailure);
    }
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
