import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '#adapters/logger.ts';
import { InternalError } from '#core/errors.ts';

/** The JSON lines a logger wrote while `fn` ran. */
const linesOf = (fn: () => void): Record<string, unknown>[] => {
  const written: string[] = [];
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    written.push(String(chunk));
    return true;
  });
  try {
    fn();
  } finally {
    spy.mockRestore();
  }
  return written.map((line) => JSON.parse(line) as Record<string, unknown>);
};

afterEach(() => vi.restoreAllMocks());

describe('log lines', () => {
  it('carry what Lambda filters them by: the level, and an RFC 3339 timestamp', () => {
    const [line] = linesOf(() => createLogger('warn').error('settlement failed'));
    expect(line).toMatchObject({ level: 'error', message: 'settlement failed' });
    expect(line?.timestamp).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  });
});

describe('log lines of errors', () => {
  it('keep the cause behind an API error, not only the body its client got', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:37143'), {
      code: 'ECONNREFUSED',
    });
    const error = new InternalError(new Error('upstream 500', { cause: refused }));
    const [line] = linesOf(() => createLogger('info').warn('request failed', { requestId: 'req_1', error }));
    expect(line).toMatchObject({
      level: 'warn',
      message: 'request failed',
      requestId: 'req_1',
      error: {
        name: 'InternalError',
        message: 'The server had an error while processing your request.',
        cause: {
          name: 'Error',
          message: 'upstream 500',
          cause: { message: 'connect ECONNREFUSED 127.0.0.1:37143', code: 'ECONNREFUSED' },
        },
      },
    });
  });

  it('keep the cause of an API error nested in a field or an array too', () => {
    const nested = new InternalError(new Error('upstream 500'));
    const [line] = linesOf(() =>
      createLogger('info').warn('nested', { detail: { error: nested }, list: [nested] }),
    );
    const described = { name: 'InternalError', cause: { message: 'upstream 500' } };
    expect(line).toMatchObject({ detail: { error: described }, list: [described] });
  });

  it('describe errors nested in a field too, and stop a cause chain that never ends', () => {
    const loop = new Error('a');
    (loop as { cause?: unknown }).cause = loop;
    const [line] = linesOf(() => createLogger('info').error('x', { detail: { inner: loop } }));
    let depth = 0;
    let at = (line as { detail: { inner: { cause?: unknown } } }).detail.inner as
      | { cause?: unknown }
      | undefined;
    while (at) {
      depth++;
      at = at.cause as { cause?: unknown } | undefined;
    }
    expect(depth).toBeGreaterThan(1);
    expect(depth).toBeLessThan(10);
  });
});
