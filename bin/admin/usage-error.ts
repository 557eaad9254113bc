/**
 * The command line is wrong (unknown command, missing argument), or a value in it refused (an unknown id, an invalid
 * file): exit status 2 — running it again changes nothing.
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}
