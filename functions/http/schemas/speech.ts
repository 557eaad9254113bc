import { z } from 'zod';
import {
  countCharacters,
  MAX_SPEECH_INPUT_CHARACTERS,
  SPEECH_FORMATS,
  type SpeechRequest,
  VOICES,
} from '#core/audio.ts';
import { parseWith } from '../validation.ts';
import { withoutNulls } from './nulls.ts';

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
  voice: z.enum(VOICES, { error: `must be one of ${VOICES.join(', ')}` }),
  response_format: z.enum(FORMATS, { error: `must be one of ${FORMATS.join(', ')}` }).optional(),
  speed: z.number({ error: 'must be a number between 0.25 and 4' }).min(0.25).max(4).optional(),
  instructions: z
    .string()
    .refine((s) => countCharacters(s) <= MAX_SPEECH_INPUT_CHARACTERS, {
      message: `must be at most ${MAX_SPEECH_INPUT_CHARACTERS} characters`,
    })
    .optional(),
});

export const parseSpeechRequest = (body: unknown): SpeechRequest =>
  parseWith(speechRequestSchema, withoutNulls(body)) as SpeechRequest;
