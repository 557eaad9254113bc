import { unrecognized } from '../validation.ts';

/**
 * The top level of a request body, before its schema: parameters off the whitelist (the schema's shape) are refused
 * here, and top-level nulls of known ones dropped — `null` for an optional parameter means "not given" in OpenAI's
 * API (SDKs send it). A parameter outside the whitelist is refused whatever its value, `null` included
 * (`"thinking": null` is still `thinking`).
 *
 * The whitelist is checked here, in one pass over the names, rather than left to the schema: a 4 MB body of
 * 200,000 made-up names took the schema (and a copy of the body without its nulls) most of a second of the
 * instance's CPU to refuse, for a 400 that no limit counts.
 */
export const whitelisted = (body: unknown, parameters: Readonly<Record<string, unknown>>): unknown => {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const names = Object.keys(body);
  const unknown = names.filter((k) => !Object.hasOwn(parameters, k));
  if (unknown.length > 0) throw unrecognized([], unknown);
  return names.some((k) => (body as Record<string, unknown>)[k] === null)
    ? Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null))
    : body;
};
