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
 * `missing_required_parameter`; everything else `invalid_value` / `invalid_type`.
 */
export const invalidRequest = (error: z.ZodError): InvalidRequestError => {
  const issue = error.issues[0];
  if (!issue) return new InvalidRequestError('Invalid request body.', 'invalid_value');
  if (issue.code === 'unrecognized_keys') {
    const keys = issue.keys;
    const first = paramName([...issue.path, keys[0] ?? '']);
    if (issue.path.length === 0) {
      return new InvalidRequestError(
        `Unrecognized request argument supplied: ${keys.join(', ')}. This endpoint accepts only documented parameters.`,
        'unsupported_parameter',
        { param: first },
      );
    }
    return new InvalidRequestError(
      `Unrecognized field in ${paramName(issue.path)}: ${keys.join(', ')}.`,
      'unsupported_parameter',
      {
        param: first,
      },
    );
  }
  const param = paramName(issue.path) || null;
  if (issue.code === 'invalid_type' && issue.input === undefined) {
    return new InvalidRequestError(`Missing required parameter: '${param}'.`, 'missing_required_parameter', {
      param,
    });
  }
  const code = issue.code === 'invalid_type' ? 'invalid_type' : 'invalid_value';
  return new InvalidRequestError(`Invalid value for '${param ?? 'body'}': ${issue.message}`, code, { param });
};

/** Parses with a schema, throwing the 400 above on failure. */
export const parseWith = <T>(schema: z.ZodType<T>, input: unknown): T => {
  const result = schema.safeParse(input);
  if (!result.success) throw invalidRequest(result.error);
  return result.data;
};
