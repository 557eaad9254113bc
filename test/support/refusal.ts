import { InvalidRequestError } from '#core/errors.ts';

/** The 400 a request parser throws for `body`; fails the test if it accepts the body or throws anything else. */
export const refusal = (parse: (body: unknown) => unknown, body: unknown): InvalidRequestError => {
  try {
    parse(body);
  } catch (error) {
    if (error instanceof InvalidRequestError) return error;
    throw error;
  }
  throw new Error('expected the body to be refused');
};
