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
    const line = { level: at, time: new Date().toISOString(), message, ...base, ...fields };
    process.stdout.write(`${JSON.stringify(line, errorReplacer)}\n`);
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
  };
};

// Errors serialise to {} by default; keep name, message and cause chain (never request data).
const errorReplacer = (_key: string, value: unknown): unknown =>
  value instanceof Error ? { name: value.name, message: value.message, cause: value.cause } : value;
