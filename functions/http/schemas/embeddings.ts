import { z } from 'zod';
import { type EmbeddingsRequest, MAX_EMBEDDING_INPUTS } from '#core/embeddings.ts';
import { parseBody } from '../validation.ts';

/**
 * `POST /v1/embeddings` body: OpenAI's parameters and nothing else. Input is a non-empty string, up to 2048
 * of them, or token ids (one array or up to 2048 arrays); an empty string or array is refused, as upstream.
 */
const text = z.string().min(1, 'must not be an empty string');
const tokenId = z
  .int({ error: 'token ids must be non-negative integers' })
  .min(0)
  .max(2 ** 31 - 1);
const tokens = z.array(tokenId).min(1, 'a token array must not be empty');

export const embeddingsRequestSchema = z.strictObject({
  model: z.string({ error: 'must be a model id string' }).min(1),
  input: z.union(
    [
      text,
      z.array(text).min(1).max(MAX_EMBEDDING_INPUTS),
      tokens,
      z.array(tokens).min(1).max(MAX_EMBEDDING_INPUTS),
    ],
    {
      error: `must be a non-empty string, an array of up to ${MAX_EMBEDDING_INPUTS} non-empty strings, an array of token ids, or an array of token id arrays`,
    },
  ),
  encoding_format: z.enum(['float', 'base64'], { error: "must be 'float' or 'base64'" }).optional(),
  dimensions: z.int({ error: 'must be a positive integer' }).min(1, 'must be a positive integer').optional(),
  // Never forwarded nor stored; bounded only so it cannot be the bulk of a body (OpenAI sets no maximum).
  user: z.string().max(4096).optional(),
});

export const parseEmbeddingsRequest = (body: unknown): EmbeddingsRequest =>
  parseBody(embeddingsRequestSchema, body) as EmbeddingsRequest;
