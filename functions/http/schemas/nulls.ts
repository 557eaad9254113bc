/**
 * `null` for an optional parameter means "not given" in OpenAI's API (SDKs send it), so top-level nulls are
 * dropped before a schema's whitelist and type checks.
 */
export const withoutNulls = (body: unknown): unknown =>
  body !== null && typeof body === 'object' && !Array.isArray(body)
    ? Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null))
    : body;
