import type { LogLevel } from '#functions/config.ts';

export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

/**
 * Structured JSON lines on stdout, which CloudWatch ingests as-is. Callers pass explicit fields;
 * nothing logs headers or bodies wholesale, so keys and prompts never reach the logs.
 */
export const createLogger = (level: LogLevel, base: LogFields = {}): Logger => {
  const threshold = RANK[level];
  const write = (at: Exclude<LogLevel, 'silent'>, message: string, fields?: LogFields) => {
    if (RANK[at] < threshold) return;
    // `level` and an RFC 3339 `timestamp` are what Lambda's log-level filter reads in a JSON line; without the
    // timestamp it takes every line for INFO, and a function set to WARN would drop our errors.
    const line: Record<string, unknown> = {
      level: at,
      timestamp: new Date().toISOString(),
      message,
      ...base,
    };
    for (const [name, value] of Object.entries(fields ?? {})) line[name] = describeError(value);
    process.stdout.write(`${JSON.stringify(line, errorReplacer)}\n`);
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
  };
};

/**
 * An error as a log line shows it: name, message, its code when it has one, and its cause chain (never request
 * data). Done before JSON.stringify sees it: an API error's toJSON() is the body the client got, which would
 * otherwise stand in for it and drop the cause — the upstream's failure, the store's refusal — that the line is for.
 */
const describeError = (value: unknown, depth = 0): unknown => {
  if (!(value instanceof Error)) return value;
  const code = (value as { code?: unknown }).code;
  return {
    name: value.name,
    message: value.message,
    ...(typeof code === 'string' || typeof code === 'number' ? { code } : {}),
    ...(value.cause !== undefined && depth < MAX_CAUSES
      ? { cause: describeError(value.cause, depth + 1) }
      : {}),
  };
};

const MAX_CAUSES = 5;

/**
 * Errors deeper in a field (in an object, an array) get the same description. A replacer sees what toJSON()
 * returned; the holder (`this`) still has the error itself.
 */
function errorReplacer(this: unknown, key: string, value: unknown): unknown {
  const original = (this as Record<string, unknown>)[key];
  return original instanceof Error ? describeError(original) : value;
}
