import { describe, expect, test } from 'vitest';
import { formatTimestamp, toSrt, toVtt } from '#core/subtitles.ts';

describe('formatTimestamp', () => {
  test('formats hours, minutes, seconds and milliseconds with the given separator', () => {
    expect(formatTimestamp(0, ',')).toBe('00:00:00,000');
    expect(formatTimestamp(4.87, ',')).toBe('00:00:04,870');
    expect(formatTimestamp(61.5, '.')).toBe('00:01:01.500');
    expect(formatTimestamp(3723.456, '.')).toBe('01:02:03.456');
  });

  test('rounds to the millisecond, carrying into seconds', () => {
    expect(formatTimestamp(1.9996, ',')).toBe('00:00:02,000');
    expect(formatTimestamp(0.0004, ',')).toBe('00:00:00,000');
  });
});

const cues = [
  { start: 0, end: 4.87, text: ' Every father your example' },
  { start: 4.87, end: 7.3, text: ' let high earth.' },
];

describe('toSrt', () => {
  test('numbers cues from 1, uses comma decimals and ends every cue with a blank line', () => {
    expect(toSrt(cues)).toBe(
      '1\n00:00:00,000 --> 00:00:04,870\nEvery father your example\n\n' +
        '2\n00:00:04,870 --> 00:00:07,300\nlet high earth.\n\n',
    );
  });

  test('is empty without cues', () => {
    expect(toSrt([])).toBe('');
  });
});

describe('toVtt', () => {
  test('starts with the WEBVTT header and uses dot decimals', () => {
    expect(toVtt(cues)).toBe(
      'WEBVTT\n\n' +
        '00:00:00.000 --> 00:00:04.870\nEvery father your example\n\n' +
        '00:00:04.870 --> 00:00:07.300\nlet high earth.\n\n',
    );
  });
});
