import { z } from 'zod';
import type { ChatRequest } from '#core/chat.ts';
import { InvalidRequestError } from '#core/errors.ts';
import { parseBody } from '../validation.ts';
import { checkChatConsistency } from './chat-consistency.ts';

/**
 * `POST /v1/chat/completions` body: the whitelist of spec §4, strictly. Any other top-level parameter —
 * `thinking`, `reasoning_effort`, `logprobs`, … — is refused with a 400 naming it. One name is taken beside the
 * spec's: `max_completion_tokens`, OpenAI's current name for `max_tokens`, which LangChain sends in its place (ADR
 * 0012); it is the same cap, and becomes `max_tokens` here. Message objects are strict too, so nothing unvetted
 * reaches an upstream.
 */

/**
 * What an upstream can fetch or decode: an absolute http(s) URL, or `data:image/…;base64,…`. Only the data URL's
 * prefix is read (the image itself may be megabytes); a bad payload is the upstream's to refuse.
 */
const isImageUrl = (url: string): boolean => {
  if (/^data:image\/[a-z0-9.+-]+;base64,/i.test(url.slice(0, 100))) return true;
  if (!/^https?:\/\//i.test(url)) return false;
  return URL.canParse(url);
};

const textPart = z.strictObject({ type: z.literal('text'), text: z.string() });
const imagePart = z.strictObject({
  type: z.literal('image_url'),
  image_url: z.strictObject({
    url: z.string().refine(isImageUrl, 'expected an http(s) URL or a base64 data URL of an image'),
    detail: z.enum(['auto', 'low', 'high']).optional(),
  }),
});
const textContent = z.union([z.string(), z.array(textPart).min(1)], {
  error: 'must be a string or an array of text parts',
});

const toolCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z
    .strictObject({
      name: z.string().min(1),
      arguments: z.string(),
      // The openai SDK's helpers add the arguments they parsed for strict (and zod) tools to each call they hand
      // back; `arguments` says the same to a model, so it goes no further.
      parsed_arguments: z.unknown().optional(),
    })
    .transform(({ parsed_arguments: _, ...f }) => f),
});

/** A refusal an assistant gave, as OpenAI returns it in content parts: what it said, so a text part on. */
const refusalPart = z
  .strictObject({ type: z.literal('refusal'), refusal: z.string() })
  .transform(({ refusal }) => ({ type: 'text' as const, text: refusal }));

const name = z.string().min(1).max(64).optional();

const message = z.discriminatedUnion(
  'role',
  [
    z.strictObject({ role: z.literal('system'), content: textContent, name }),
    z.strictObject({
      role: z.literal('user'),
      content: z.union([z.string(), z.array(z.discriminatedUnion('type', [textPart, imagePart])).min(1)], {
        error: 'must be a string or an array of content parts',
      }),
      name,
    }),
    z
      .strictObject({
        role: z.literal('assistant'),
        content: z
          .union([z.string(), z.array(z.discriminatedUnion('type', [textPart, refusalPart])).min(1)], {
            error: 'must be a string or an array of text (or refusal) parts',
          })
          .nullish(),
        name,
        tool_calls: z.array(toolCall).min(1).optional(),
        refusal: z.string().nullish(),
        // Part of every assistant message a chat completion returns, so clients echo it back in history.
        annotations: z.array(z.unknown()).optional(),
        // OpenAI's schema has them, nullable; as null they say nothing, and go no further (see below).
        function_call: z.null().optional(),
        audio: z.null().optional(),
        // What SDKs add to the messages they hand back, and send back as history: the openai SDK's helpers put
        // `parsed` on every message (`.parse()`, `.stream().finalChatCompletion()`); an upstream's streamed
        // `reasoning_content`, which we relay, is echoed by the Vercel AI SDK's tool loops — and the same reasoning
        // under the names other upstreams give it (`reasoning`, with `reasoning_details` beside it), which a reply
        // carries as it came and the usual `messages.push(reply.choices[0].message)` sends back. None means anything
        // to a model as input (some upstreams refuse reasoning sent back), so they go no further.
        parsed: z.unknown().optional(),
        reasoning_content: z.string().nullish(),
        reasoning: z.string().nullish(),
        reasoning_details: z.array(z.unknown()).nullish(),
      })
      .refine(
        (m) =>
          (m.content !== null && m.content !== undefined) ||
          m.tool_calls !== undefined ||
          typeof m.refusal === 'string',
        { message: 'an assistant message needs content, tool_calls or a refusal', path: ['content'] },
      )
      .transform(
        ({
          function_call: _,
          audio: __,
          parsed: ___,
          reasoning_content: ____,
          reasoning: _____,
          reasoning_details: ______,
          ...m
        }) =>
          // A refused turn comes back as `content: null` with the refusal beside it, and is sent back so: what the
          // assistant said is the refusal, which is content to any model.
          (m.content === null || m.content === undefined) && typeof m.refusal === 'string'
            ? (({ refusal, ...rest }) => ({ ...rest, content: refusal }))(m)
            : m,
      ),
    z.strictObject({ role: z.literal('tool'), content: textContent, tool_call_id: z.string().min(1) }),
  ],
  { error: 'role must be one of system, user, assistant, tool' },
);

/**
 * A JSON Schema (a tool's parameters, a response format's schema): any JSON object, passed on as the client wrote
 * it. Checked, not copied: a copy (`z.record`) walked every key, and turned a `"__proto__"` key into the copy's
 * prototype, so the schema reached the upstream without it.
 */
const jsonSchemaObject = z.custom<Record<string, unknown>>(
  (value) => typeof value === 'object' && value !== null && !Array.isArray(value),
  'must be a JSON object',
);

const tool = z.strictObject({
  type: z.literal('function'),
  function: z.strictObject({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'function names are 1–64 of A-Z a-z 0-9 _ -'),
    description: z.string().optional(),
    parameters: jsonSchemaObject.optional(),
    strict: z.boolean().nullish(),
  }),
});

const toolChoice = z.union(
  [
    z.enum(['none', 'auto', 'required']),
    z.strictObject({ type: z.literal('function'), function: z.strictObject({ name: z.string().min(1) }) }),
  ],
  { error: "must be 'none', 'auto', 'required' or a function choice" },
);

const responseFormat = z.discriminatedUnion(
  'type',
  [
    z.strictObject({ type: z.literal('text') }),
    z.strictObject({ type: z.literal('json_object') }),
    z.strictObject({
      type: z.literal('json_schema'),
      json_schema: z.strictObject({
        name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'schema names are 1–64 of A-Z a-z 0-9 _ -'),
        description: z.string().optional(),
        schema: jsonSchemaObject.optional(),
        strict: z.boolean().nullish(),
      }),
    }),
  ],
  { error: "type must be 'text', 'json_object' or 'json_schema'" },
);

const between = (min: number, max: number) =>
  z
    .number({ error: `must be a number between ${min} and ${max}` })
    .min(min)
    .max(max);

/** Most choices one request may ask for (OpenAI's bound); each multiplies the completion's worst-case cost. */
export const MAX_CHOICES = 128;

const completionCap = z.int({ error: 'must be a positive integer' }).min(1, 'must be a positive integer');

export const chatRequestSchema = z.strictObject({
  model: z.string({ error: 'must be a model id string' }).min(1),
  messages: z
    .array(message, { error: 'must be an array of messages' })
    .min(1, 'must contain at least one message'),
  stream: z.boolean().optional(),
  max_tokens: completionCap.optional(),
  max_completion_tokens: completionCap.optional(),
  temperature: between(0, 2).optional(),
  top_p: between(0, 1).optional(),
  stop: z
    .union([z.string(), z.array(z.string()).min(1).max(4)], { error: 'must be a string or up to 4 strings' })
    .optional(),
  presence_penalty: between(-2, 2).optional(),
  frequency_penalty: between(-2, 2).optional(),
  response_format: responseFormat.optional(),
  tools: z
    .array(tool)
    .min(1, 'empty array. Expected an array with minimum length 1, but got an empty array instead.')
    .max(128)
    .optional(),
  tool_choice: toolChoice.optional(),
  // OpenAI's seed is an int64: beyond 2^53 JSON numbers lose digits, but they are still integers.
  seed: z
    .number({ error: 'must be a 64-bit integer' })
    .refine(Number.isInteger, 'must be a 64-bit integer')
    .refine((n) => n >= -(2 ** 63) && n <= 2 ** 63, 'must be a 64-bit integer')
    .optional(),
  n: z
    .int({ error: `must be an integer between 1 and ${MAX_CHOICES}` })
    .min(1)
    .max(MAX_CHOICES)
    .optional(),
  stream_options: z
    .strictObject({
      include_usage: z.boolean().optional(),
      // Accepted, as OpenAI does, but not passed on (not every upstream knows it): we add no obfuscation field to
      // chunks ourselves, and relay what the serving upstream sends.
      include_obfuscation: z.boolean().optional(),
    })
    .optional(),
});

/** Validates a parsed JSON body (top-level nulls mean "not given"). */
export const parseChatRequest = (body: unknown): ChatRequest => {
  const parsed = parseBody(chatRequestSchema, body);
  const { max_completion_tokens: cap, ...rest } = parsed;
  // OpenAI refuses the two together, in these words, whatever their values.
  if (cap !== undefined && parsed.max_tokens !== undefined)
    throw new InvalidRequestError(
      "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.",
      'invalid_parameter_combination',
      { param: 'max_tokens' },
    );
  // One cap, under the name the rest of the gateway (and every upstream body we build) uses.
  const request = (cap === undefined ? rest : { ...rest, max_tokens: cap }) as ChatRequest;
  // OpenAI refuses this combination, in these words; passed on, it would be refused or ignored depending on
  // which upstream serves the call.
  if (request.stream_options !== undefined && request.stream !== true) {
    throw new InvalidRequestError(
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      'invalid_value',
      { param: 'stream_options' },
    );
  }
  checkChatConsistency(request);
  // Annotations describe a past reply; they mean nothing to a model and some upstreams refuse them.
  for (const message of request.messages) if ('annotations' in message) delete message.annotations;
  return request;
};
