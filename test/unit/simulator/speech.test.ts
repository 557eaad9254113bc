import { describe, expect, test } from 'vitest';
import { speechDurationMs, voiceFrequencyHz } from '#sim/speech.ts';

describe('speechDurationMs', () => {
  test('is 60 ms per character, at least 300 ms, divided by the speed', () => {
    expect(speechDurationMs('a'.repeat(50), 1)).toBe(3000);
    expect(speechDurationMs('Hi', 1)).toBe(300);
    expect(speechDurationMs('a'.repeat(50), 2)).toBe(1500);
    expect(speechDurationMs('a'.repeat(50), 0.25)).toBe(12_000);
    expect(speechDurationMs('Hi', 4)).toBe(75);
    expect(speechDurationMs('a'.repeat(7), 3)).toBe(140);
  });

  test('counts code points, not UTF-16 units', () => {
    expect(speechDurationMs('🎵'.repeat(10), 1)).toBe(600);
  });
});

describe('voiceFrequencyHz', () => {
  test('is a stable pitch from 200 to 599 Hz that differs between voices', () => {
    const voices = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer'];
    const pitches = voices.map(voiceFrequencyHz);
    expect(pitches.every((hz) => hz >= 200 && hz < 600 && Number.isInteger(hz))).toBe(true);
    expect(new Set(pitches).size).toBeGreaterThan(5);
    expect(voiceFrequencyHz('alloy')).toBe(pitches[0]);
  });
});
