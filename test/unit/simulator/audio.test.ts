import { describe, expect, test } from 'vitest';
import { sampleCount, synthesizeTone, WAV_HEADER_BYTES, wavFile, wavHeader } from '#sim/audio.ts';

describe('wavHeader', () => {
  test('is the canonical 44-byte PCM header with exact sizes', () => {
    const header = wavHeader(48_000, { sampleRate: 24_000, channels: 1 });
    expect(header).toHaveLength(WAV_HEADER_BYTES);
    expect(header.toString('ascii', 0, 4)).toBe('RIFF');
    expect(header.readUInt32LE(4)).toBe(36 + 48_000);
    expect(header.toString('ascii', 8, 16)).toBe('WAVEfmt ');
    expect(header.readUInt32LE(16)).toBe(16);
    expect(header.readUInt16LE(20)).toBe(1);
    expect(header.readUInt16LE(22)).toBe(1);
    expect(header.readUInt32LE(24)).toBe(24_000);
    expect(header.readUInt32LE(28)).toBe(48_000);
    expect(header.readUInt16LE(32)).toBe(2);
    expect(header.readUInt16LE(34)).toBe(16);
    expect(header.toString('ascii', 36, 40)).toBe('data');
    expect(header.readUInt32LE(40)).toBe(48_000);
  });

  test('derives byte rate and block alignment from the channels', () => {
    const header = wavHeader(0, { sampleRate: 44_100, channels: 2 });
    expect(header.readUInt16LE(22)).toBe(2);
    expect(header.readUInt32LE(28)).toBe(44_100 * 4);
    expect(header.readUInt16LE(32)).toBe(4);
  });

  test('wavFile puts the header before the samples', () => {
    const pcm = Buffer.from([1, 2, 3, 4]);
    const file = wavFile(pcm, { sampleRate: 8000, channels: 1 });
    expect(file).toHaveLength(48);
    expect(file.subarray(44)).toEqual(pcm);
    expect(file.readUInt32LE(40)).toBe(4);
  });
});

describe('synthesizeTone', () => {
  test('has exactly the requested number of frames per channel', () => {
    expect(sampleCount(1000, 24_000)).toBe(24_000);
    expect(sampleCount(0.5, 24_000)).toBe(12);
    expect(synthesizeTone({ durationMs: 250, sampleRate: 16_000, frequencyHz: 440 })).toHaveLength(8000);
    expect(
      synthesizeTone({ durationMs: 250, sampleRate: 16_000, channels: 2, frequencyHz: 440 }),
    ).toHaveLength(16_000);
  });

  test('is a quiet tone that fades in and out', () => {
    const pcm = synthesizeTone({ durationMs: 500, sampleRate: 24_000, frequencyHz: 300 });
    const samples = Array.from({ length: pcm.length / 2 }, (_, i) => pcm.readInt16LE(i * 2));
    const peak = Math.max(...samples.map(Math.abs));
    expect(peak).toBeGreaterThan(0.19 * 32767);
    expect(peak).toBeLessThanOrEqual(Math.round(0.2 * 32767));
    expect(samples[0]).toBe(0);
    expect(samples.at(-1)).toBe(0);
    // Within the 10 ms fade the envelope stays below full amplitude.
    expect(Math.max(...samples.slice(0, 120).map(Math.abs))).toBeLessThan(0.5 * peak);
  });

  test('is deterministic and depends on the frequency', () => {
    const a = synthesizeTone({ durationMs: 100, sampleRate: 24_000, frequencyHz: 300 });
    const b = synthesizeTone({ durationMs: 100, sampleRate: 24_000, frequencyHz: 300 });
    const c = synthesizeTone({ durationMs: 100, sampleRate: 24_000, frequencyHz: 301 });
    expect(a.equals(b)).toBe(true);
    expect(a.equals(c)).toBe(false);
  });

  test('copies the tone to every channel', () => {
    const pcm = synthesizeTone({ durationMs: 10, sampleRate: 8000, channels: 2, frequencyHz: 500 });
    for (let offset = 0; offset < pcm.length; offset += 4) {
      expect(pcm.readInt16LE(offset)).toBe(pcm.readInt16LE(offset + 2));
    }
  });
});
