/**
 * `null` for an optional parameter means "not given" in OpenAI's API (SDKs send it), so top-level nulls of the
 * parameters a schema knows (its shape) are dropped before its whitelist and type checks. A parameter outside the whitelist
 * is refused whatever its value, `null` included (`"thinking": null` is still `thinking`).
 */
export const withoutNulls = (body: unknown, parameters: Readonly<Record<string, unknown>>): unknown =>
  body !== null && typeof body === 'object' && !Array.isArray(body)
    ? Object.fromEntries(Object.entries(body).filter(([k, v]) => v !== null || !Object.hasOwn(parameters, k)))
    : body;
