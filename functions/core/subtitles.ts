/**
 * SubRip (`srt`) and WebVTT (`vtt`) documents, the subtitle formats of the transcription endpoint, made from a
 * transcription's segments: the gateway asks its upstream for `verbose_json` and writes these itself, so a call is
 * billed on the provider's decoded `duration`, not on a last cue that can run past the audio (audio.ts); the upstream
 * simulator writes them for its own `srt` and `vtt`.
 *
 * Laid out as OpenAI sends them: numbered SRT cues with comma decimals, a `WEBVTT` header and dot
 * decimals for VTT, cue text without the leading space of a transcription segment, and a blank line
 * after every cue.
 */

/** One subtitle cue; times in seconds. */
export interface Cue {
  start: number;
  end: number;
  text: string;
}

/** `HH:MM:SS<separator>mmm`, rounded to the millisecond (`,` for SRT, `.` for WebVTT). */
export function formatTimestamp(seconds: number, separator: ',' | '.'): string {
  const totalMs = Math.max(0, Math.round(seconds * 1000));
  const ms = totalMs % 1000;
  const totalSeconds = (totalMs - ms) / 1000;
  const s = totalSeconds % 60;
  const m = Math.floor(totalSeconds / 60) % 60;
  const h = Math.floor(totalSeconds / 3600);
  return `${pad(h, 2)}:${pad(m, 2)}:${pad(s, 2)}${separator}${pad(ms, 3)}`;
}

/** A SubRip document: `1\n00:00:00,000 --> 00:00:04,800\nText\n\n2\n...`. */
export function toSrt(cues: readonly Cue[]): string {
  let srt = '';
  cues.forEach((cue, i) => {
    srt += `${i + 1}\n${formatTimestamp(cue.start, ',')} --> ${formatTimestamp(cue.end, ',')}\n${cue.text.trim()}\n\n`;
  });
  return srt;
}

/** A WebVTT document: `WEBVTT\n\n00:00:00.000 --> 00:00:04.800\nText\n\n...`. */
export function toVtt(cues: readonly Cue[]): string {
  let vtt = 'WEBVTT\n\n';
  for (const cue of cues) {
    vtt += `${formatTimestamp(cue.start, '.')} --> ${formatTimestamp(cue.end, '.')}\n${cue.text.trim()}\n\n`;
  }
  return vtt;
}

function pad(value: number, width: number): string {
  return String(value).padStart(width, '0');
}
