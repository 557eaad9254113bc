import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { musicMetadataProbe } from '#adapters/audio-probe.ts';
import { encodeAudio, makeWav } from '#test/audio.ts';
import { debitOf, fundedAccount, settledWallet } from '#test/billing.ts';
import { startTestStack, type TestStack } from '#test/stack.ts';

/**
 * Our measure reads the file; a provider decodes it. Where we can only read what the file claims (Ogg granules,
 * WebM timestamps) and it was made to read shorter than it plays, the provider's reported duration is the truth,
 * and what it bills us: the call is billed on it. A provider's rounding up to whole seconds is not, and neither is
 * any report above what we counted of the audio present (WAV samples, MP3/FLAC/AAC frames): nothing plays longer.
 * Subtitles are written from the `verbose_json` asked for upstream, and billed on its duration.
 */

let t: TestStack;
let upstream: Server;
/** What the stand-in provider reports as the duration it transcribed, in seconds. */
let reportedSeconds = 0;
/** Where its last segment ends, when not at that duration (Whisper's can run past the audio). */
let lastCueSeconds: number | undefined;

beforeAll(async () => {
  upstream = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const format = /name="response_format"\r\n\r\n(\w+)\r\n/.exec(
        Buffer.concat(chunks).toString('latin1'),
      )?.[1];
      res.setHeader('content-type', 'application/json');
      if (format === 'verbose_json') {
        // The decode's exact duration, and segments whose last may run past it, as Whisper's can.
        const segments = [{ id: 0, start: 0, end: lastCueSeconds ?? reportedSeconds, text: ' hello' }];
        res.end(JSON.stringify({ task: 'transcribe', duration: reportedSeconds, text: 'hello', segments }));
      } else if (format === 'json') {
        res.end(JSON.stringify({ text: 'hello', usage: { type: 'duration', seconds: reportedSeconds } }));
      } else {
        // As some providers do (Groq serves no subtitles): the gateway must never ask for them.
        res.statusCode = 400;
        res.end(JSON.stringify({ error: { message: `response_format ${format} is not supported` } }));
      }
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const { port } = upstream.address() as AddressInfo;
  t = await startTestStack({ consumers: true, upstreamBaseUrl: `http://127.0.0.1:${port}/v1` });
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await new Promise((resolve) => upstream?.close(resolve));
});

/** svc-stt: 0.001 USD per minute = 1,000,000 nano-USD per 60,000 ms. */
const sttCost = (ms: number) => Math.round((ms * 1_000_000) / 60_000);

/** An Ogg Opus file of about `ms` of audio: its length is what its granules claim. */
const ogg = (ms: number) => encodeAudio(makeWav({ durationMs: ms }), 'ogg');
/** What the gateway measures of `bytes`: the duration it holds and, unless the provider heard more, bills. */
const measuredMs = async (bytes: Uint8Array) => (await musicMetadataProbe.probe(bytes)).durationMs;

const transcribe = async (key: string, bytes: Uint8Array, format = 'json') => {
  const form = new FormData();
  form.set('file', new Blob([bytes]), 'a.ogg');
  form.set('model', 'svc-stt');
  form.set('response_format', format);
  const res = await fetch(`${t.baseURL}/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
  expect(res.status).toBe(200);
  return { id: res.headers.get('x-request-id') as string, text: await res.text() };
};

describe('transcription billing against what the provider decoded', () => {
  it('bills the provider’s duration when it transcribed clearly more than the file read as', async () => {
    const { id, key } = await fundedAccount(t);
    reportedSeconds = 60;
    const call = await transcribe(key, await ogg(2_000));
    expect(JSON.parse(call.text).usage.seconds).toBe(60);
    expect(debitOf(await settledWallet(t, id), call.id)).toBe(sttCost(60_000));
  });

  it('bills our measure when the provider only rounded up to a whole second', async () => {
    const { id, key } = await fundedAccount(t);
    const bytes = await ogg(2_500);
    const ours = await measuredMs(bytes);
    reportedSeconds = Math.ceil(ours / 1000);
    const call = await transcribe(key, bytes);
    expect(JSON.parse(call.text).usage.seconds).toBe(ours / 1000);
    expect(debitOf(await settledWallet(t, id), call.id)).toBe(sttCost(ours));
  });

  it('bills an SRT transcription on the provider’s decoded duration when clearly past the file, and on ours when not', async () => {
    const { id, key } = await fundedAccount(t);
    reportedSeconds = 45;
    const long = await transcribe(key, await ogg(2_000), 'srt');
    expect(long.text).toBe('1\n00:00:00,000 --> 00:00:45,000\nhello\n\n');
    const bytes = await ogg(2_500);
    const ours = await measuredMs(bytes);
    reportedSeconds = Math.ceil(ours / 1000);
    const rounded = await transcribe(key, bytes, 'srt');
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, long.id)).toBe(sttCost(45_000));
    expect(debitOf(wallet, rounded.id)).toBe(sttCost(ours));
  });

  it('bills subtitles on the decoded duration, not on a last cue that runs past the audio', async () => {
    // A browser's WebM or an Ogg is measured by what it claims; the subtitles' last cue, billed before, charged
    // these 2 seconds as 30.
    const { id, key } = await fundedAccount(t);
    const bytes = await ogg(2_000);
    const ours = await measuredMs(bytes);
    reportedSeconds = ours / 1000;
    lastCueSeconds = 30;
    try {
      const srt = await transcribe(key, bytes, 'srt');
      const vtt = await transcribe(key, bytes, 'vtt');
      expect(srt.text).toContain('--> 00:00:30,000');
      expect(vtt.text).toBe('WEBVTT\n\n00:00:00.000 --> 00:00:30.000\nhello\n\n');
      const wallet = await settledWallet(t, id);
      expect(debitOf(wallet, srt.id)).toBe(sttCost(ours));
      expect(debitOf(wallet, vtt.id)).toBe(sttCost(ours));
    } finally {
      lastCueSeconds = undefined;
    }
  });

  it('bills a plain-text transcription on the provider’s duration too (asked upstream as JSON)', async () => {
    const { id, key } = await fundedAccount(t);
    reportedSeconds = 50;
    const call = await transcribe(key, await ogg(2_000), 'text');
    expect(call.text).toBe('hello\n');
    expect(debitOf(await settledWallet(t, id), call.id)).toBe(sttCost(50_000));
  });

  it('bills a WAV on its samples whatever longer duration the provider reports, in JSON or subtitles', async () => {
    const { id, key } = await fundedAccount(t);
    reportedSeconds = 60;
    const json = await transcribe(key, makeWav({ durationMs: 2_000 }));
    expect(JSON.parse(json.text).usage.seconds).toBe(2);
    reportedSeconds = 30;
    const srt = await transcribe(key, makeWav({ durationMs: 2_000 }), 'srt');
    const wallet = await settledWallet(t, id);
    expect(debitOf(wallet, json.id)).toBe(sttCost(2_000));
    expect(debitOf(wallet, srt.id)).toBe(sttCost(2_000));
  });
});
