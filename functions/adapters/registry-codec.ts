import { z } from 'zod';
import { type Deployment, type Model, OMITTABLE_PARAMS } from '#core/registry.ts';
import { MAX_TIMER_MS } from '#functions/config.ts';

/**
 * The registry's document shapes, shared by the DynamoDB adapter (items) and the registry file
 * (`REGISTRY_FILE`, `registry/catalog.json`). Anything read from storage or a file passes through here,
 * so a bad entry is refused with the name of the field at fault instead of breaking routing later.
 */

const usdRate = z.number().finite().nonnegative();

export const ratesSchema = z.strictObject({
  input: usdRate,
  output: usdRate.optional(),
  cachedInput: usdRate.optional(),
});

export const modelSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, 'model ids are 1–128 of A-Z a-z 0-9 . _ : -'),
  family: z.string().min(1),
  kind: z.enum(['chat', 'embedding', 'transcription', 'speech']),
  contextWindow: z.number().int().positive().optional(),
  dimensions: z.number().int().positive().optional(),
  defaultMaxTokens: z.number().int().positive().optional(),
  rates: ratesSchema,
  flags: z
    .strictObject({
      free: z.boolean().optional(),
      reasoning: z.boolean().optional(),
      multimodal: z.boolean().optional(),
      promptCaching: z.boolean().optional(),
      autoLanguage: z.boolean().optional(),
    })
    .default({}),
  status: z.enum(['active', 'retired']).default('active'),
  created: z.number().int().nonnegative().default(1_767_225_600),
}) satisfies z.ZodType<Model, unknown>;

/**
 * Whether a base URL carries credentials, a query or a fragment: none may be in one. A key there would show in the
 * registry table, its exports and error messages; a query or fragment (even a bare trailing `?` or `#`, which parses
 * to nothing) would cut every path appended to it.
 */
export const carriesMoreThanAPath = (url: string): boolean => {
  const parsed = new URL(url);
  return parsed.username !== '' || parsed.password !== '' || /[?#]/.test(url);
};

export const deploymentSchema = z
  .strictObject({
    id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$/),
    model: z.string().min(1),
    provider: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/),
    adapter: z.enum(['openai-compatible', 'anthropic']),
    // Keys live in keyRefs, never in the URL: the registry table, its exports and error messages (the price sync
    // logs a URL it cannot fetch) all show it.
    baseUrl: z.url({ protocol: /^https?$/ }).refine(
      (url) => !URL.canParse(url) || !carriesMoreThanAPath(url), // z.url says what is wrong with one that does not parse
      'no credentials, query or fragment in a base URL (upstream keys go in keyRefs)',
    ),
    // Sent upstream in a JSON body and shown in a response header (x-svc-served-model): no control characters.
    upstreamModel: z
      .string()
      .min(1)
      .max(256)
      .regex(/^\P{Cc}+$/u, 'no control characters (line breaks, tabs) in an upstream model name'),
    keyRefs: z
      .array(
        z.string().regex(/^(env|secretsmanager):.+$/, 'secret references are env:NAME or secretsmanager:ID'),
      )
      .default([]),
    priority: z.number().int().default(1),
    weight: z.number().nonnegative().default(1),
    cost: ratesSchema.optional(),
    reasoningParams: z.record(z.string(), z.unknown()).optional(),
    completionCapParam: z.enum(['max_tokens', 'max_completion_tokens']).optional(),
    omitParams: z.array(z.enum(OMITTABLE_PARAMS)).min(1).optional(),
    timeouts: z
      .strictObject({
        // At most a timer's longest delay: past it Node fires the timer at once, cutting every call.
        firstByteMs: z.number().int().positive().max(MAX_TIMER_MS).optional(),
        idleMs: z.number().int().positive().max(MAX_TIMER_MS).optional(),
      })
      .optional(),
    status: z.enum(['active', 'retired']).default('active'),
  })
  .refine((d) => d.keyRefs.length === 0 || !clearToAnotherHost(d.baseUrl), {
    message:
      'a deployment with keys is called over https (over http only on this machine): its keys would cross the network in clear',
    path: ['baseUrl'],
  }) satisfies z.ZodType<Deployment, unknown>;

/** Whether requests to `url` travel unencrypted to another machine: http to anything but a loopback host. */
const clearToAnotherHost = (url: string): boolean => {
  if (!URL.canParse(url)) return false; // the field's own check says what is wrong with it
  const { protocol, hostname } = new URL(url);
  if (protocol !== 'http:') return false;
  return !(hostname === 'localhost' || hostname === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(hostname));
};

/** `models[3].rates.input`: the path of an issue as an operator writes it. */
export const formatPath = (path: readonly PropertyKey[], root = ''): string =>
  path.reduce<string>(
    (acc, part) =>
      typeof part === 'number' ? `${acc}[${part}]` : acc ? `${acc}.${String(part)}` : String(part),
    root,
  ) || '(root)';

/**
 * One line per problem, each naming its field, e.g. `models[3].rates.input: expected number`. An unknown
 * field is named by its own path (`deployments[1].baseURL: unknown field`) rather than by its parent's.
 */
export const issueList = (error: z.ZodError, root = ''): string[] =>
  error.issues.flatMap((issue) =>
    issue.code === 'unrecognized_keys'
      ? issue.keys.map((key) => `${formatPath([...issue.path, key], root)}: unknown field`)
      : [`${formatPath(issue.path, root)}: ${issue.message}`],
  );

/** Every problem on one line, e.g. `models[3].rates.input: expected number; models[4].id: …`. */
export const describeIssues = (error: z.ZodError, root = ''): string => issueList(error, root).join('; ');
