import type { z } from 'zod';
import { InvalidRequestError } from '#core/errors.ts';

/** `['messages', 0, 'content']` → `messages[0].content`, the way OpenAI names parameters in errors. */
export const paramName = (path: readonly PropertyKey[]): string =>
  path.reduce<string>(
    (acc, part) =>
      typeof part === 'number' ? `${acc}[${part}]` : acc ? `${acc}.${String(part)}` : String(part),
    '',
  );

/**
 * Turns the first schema issue into an OpenAI-shaped 400 that names the parameter at fault.
 * An unknown top-level parameter is `unsupported_parameter` (the whitelist); a missing one
 * `missing_required_parameter`; one of the wrong type `invalid_type`; everything else `invalid_value`.
 * Needs the issues' inputs (`reportInput`, which parseWith sets): only they tell a parameter that is absent from
 * one that is there with the wrong type — hence not exported.
 */
const invalidRequest = (error: z.ZodError): InvalidRequestError => {
  const issue = error.issues[0];
  if (!issue) return new InvalidRequestError('Invalid request body.', 'invalid_value');
  if (issue.code === 'unrecognized_keys') return unrecognized(issue.path, issue.keys);
  const param = paramName(issue.path) || null;
  // Whatever the check that failed (a type, an enum, a union), a parameter that is not there is missing.
  if (param !== null && issue.input === undefined) {
    return new InvalidRequestError(`Missing required parameter: '${param}'.`, 'missing_required_parameter', {
      param,
    });
  }
  if (issue.code === 'invalid_type') {
    if (param === null) {
      return new InvalidRequestError(
        `The request body must be a JSON object, but got ${kindOf(issue.input)} instead.`,
        'invalid_type',
      );
    }
    // zod's own wording ("Invalid input: expected …") in OpenAI's; a schema's own message as it is written.
    if (issue.message.startsWith('Invalid input')) {
      return new InvalidRequestError(
        `Invalid type for '${param}': expected ${EXPECTED[issue.expected] ?? issue.expected}, but got ${kindOf(issue.input)} instead.`,
        'invalid_type',
        { param },
      );
    }
    return new InvalidRequestError(`Invalid value for '${param}': ${issue.message}`, 'invalid_type', {
      param,
    });
  }
  return new InvalidRequestError(
    `Invalid value for '${param ?? 'body'}': ${issue.message}`,
    'invalid_value',
    {
      param,
    },
  );
};

/** The 400 for fields a strict object does not have; at the top level, parameters off the whitelist. */
export const unrecognized = (path: readonly PropertyKey[], names: readonly string[]): InvalidRequestError => {
  const keys = listed(names);
  const first = paramName([...path, shortened(names[0] ?? '')]);
  if (path.length === 0) {
    return new InvalidRequestError(
      `Unrecognized request argument supplied: ${keys}. This endpoint accepts only documented parameters.`,
      'unsupported_parameter',
      { param: first },
    );
  }
  return new InvalidRequestError(
    `Unrecognized field in ${paramName(path)}: ${keys}.`,
    'unsupported_parameter',
    {
      param: first,
    },
  );
};

/**
 * Names the caller sent, as an error lists them: the first few, each cut short. A body of 150,000 made-up
 * parameter names would otherwise come back as a 3 MB message — and go into the call's settlement record and log.
 */
const listed = (keys: readonly string[]): string =>
  keys.length <= LISTED_KEYS
    ? keys.map(shortened).join(', ')
    : `${keys.slice(0, LISTED_KEYS).map(shortened).join(', ')} and ${keys.length - LISTED_KEYS} more`;

const LISTED_KEYS = 10;
export const shortened = (name: string): string => (name.length <= 64 ? name : `${name.slice(0, 64)}…`);

/** zod's names of the JSON types, as OpenAI's errors say them. */
const EXPECTED: Readonly<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'a boolean',
  object: 'an object',
  array: 'an array',
};

/** What a parsed JSON value is, in the same words. */
const kindOf = (value: unknown): string => {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'an integer' : 'a number';
  return EXPECTED[typeof value] ?? typeof value;
};

/** Parses with a schema, throwing the 400 above on failure. */
export const parseWith = <T>(schema: z.ZodType<T>, input: unknown): T => {
  const result = schema.safeParse(input, { reportInput: true });
  if (!result.success) throw invalidRequest(result.error);
  return result.data;
};

/**
 * Parses a request body with its endpoint's schema (a strict object: the whitelist). Top-level nulls of known
 * parameters are dropped first — `null` for an optional parameter means "not given" in OpenAI's API (SDKs send
 * it) — while a parameter off the whitelist is refused whatever its value (`"thinking": null` is still
 * `thinking`).
 *
 * The names are sorted into known and unknown in one pass, and only the known ones go through the schema: a 4 MB
 * body of 200,000 made-up names took the schema (and a copy of the body without its nulls) most of a second of
 * the instance's CPU to refuse, for a 400 that no limit counts. The answer is the schema's own, as before: a fault
 * of a known parameter first, then the unknown names.
 */
export const parseBody = <T>(schema: z.ZodType<T> & { readonly shape: object }, body: unknown): T => {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return parseWith(schema, body);
  const fields = body as Record<string, unknown>;
  const names = Object.keys(fields);
  const unknown = names.filter((name) => !Object.hasOwn(schema.shape, name));
  const known =
    unknown.length === 0 && names.every((name) => fields[name] !== null)
      ? fields
      : Object.fromEntries(
          names
            .filter((name) => fields[name] !== null && Object.hasOwn(schema.shape, name))
            .map((n) => [n, fields[n]]),
        );
  const parsed = parseWith(schema, known);
  if (unknown.length > 0) throw unrecognized([], unknown);
  return parsed;
};
