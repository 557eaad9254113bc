import { z } from 'zod';
import {
  countCharacters,
  MAX_SPEECH_INPUT_CHARACTERS,
  SPEECH_FORMATS,
  type SpeechRequest,
  VOICES,
} from '#core/audio.ts';
import { parseBody } from '../validation.ts';

const FORMATS = Object.keys(SPEECH_FORMATS) as [
  keyof typeof SPEECH_FORMATS,
  ...(keyof typeof SPEECH_FORMATS)[],
];

/** `POST /v1/audio/speech` body: OpenAI's parameters (built-in voices only), strictly. */
export const speechRequestSchema = z.strictObject({
  model: z.string({ error: 'must be a model id string' }).min(1),
  input: z
    .string({ error: 'must be a string' })
    .min(1, 'must not be empty')
    .refine((s) => countCharacters(s) <= MAX_SPEECH_INPUT_CHARACTERS, {
      message: `must be at most ${MAX_SPEECH_INPUT_CHARACTERS} characters`,
    }),
  voice: z.enum(VOICES, {
    error: (issue) =>
      issue.input !== null && typeof issue.input === 'object'
        ? `custom voices are not supported; use one of ${VOICES.join(', ')}`
        : `must be one of ${VOICES.join(', ')}`,
  }),
  response_format: z.enum(FORMATS, { error: `must be one of ${FORMATS.join(', ')}` }).optional(),
  speed: z.number({ error: 'must be a number between 0.25 and 4' }).min(0.25).max(4).optional(),
  instructions: z
    .string()
    .refine((s) => countCharacters(s) <= MAX_SPEECH_INPUT_CHARACTERS, {
      message: `must be at most ${MAX_SPEECH_INPUT_CHARACTERS} characters`,
    })
    .optional(),
  // The audio arrives as a byte stream (the default, `audio`); OpenAI's `sse` framing of it is not offered.
  stream_format: z
    .literal('audio', { error: "only 'audio' is supported: the speech is streamed as raw audio bytes" })
    .optional(),
});

export const parseSpeechRequest = (body: unknown): SpeechRequest => {
  // stream_format says how we answer, not what the upstream is asked: it goes no further.
  const { stream_format: _, ...request } = parseBody(speechRequestSchema, body);
  return request as SpeechRequest;
};
