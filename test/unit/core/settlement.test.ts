import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '#core/errors.ts';
import { UpstreamFailure } from '#core/fallback.ts';
import { classifyError } from '#core/settlement.ts';

describe('classifyError', () => {
  it('records an upstream refusal by its status, code and field, never its text (which can echo the prompt)', () => {
    const echoed = "1 validation error: input_value='my diagnosis is HIV positive, patient John Smith'";
    const failure = new UpstreamFailure('rejected', 'upstream status 422 (invalid_value)', {
      status: 422,
      upstreamError: {
        message: echoed,
        type: 'invalid_request_error',
        code: 'invalid_value',
        param: 'messages',
      },
    });
    const relayed = new InvalidRequestError(echoed, 'invalid_value', { param: 'messages', cause: failure });
    const { outcome, status, fault } = classifyError(relayed);
    expect({ outcome, status, kind: fault.kind }).toEqual({
      outcome: 'client_error',
      status: 400,
      kind: 'client',
    });
    expect(fault.detail).toBe('upstream status 422 (invalid_value), relayed to the client (param messages)');
    expect(fault.detail).not.toContain('John');
  });

  it('keeps the wording of its own refusals, which name what to fix', () => {
    const own = new InvalidRequestError(
      'Unrecognized request argument supplied: thinking',
      'unknown_parameter',
      {
        param: 'thinking',
      },
    );
    expect(classifyError(own).fault.detail).toBe('Unrecognized request argument supplied: thinking');
  });
});
