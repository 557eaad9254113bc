/** The command line itself is wrong (unknown command, missing argument): exit status 2, with the usage. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}
