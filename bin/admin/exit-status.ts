/**
 * The admin CLI's exit status, so that a script can tell what to do next (sysexits.h's numbers):
 * - 2: the command line is wrong (a usage error), or a value in it refused (an unknown account or key prefix, a bad
 *   amount, a taken id, an unreadable file); running it again changes nothing;
 * - 75 (EX_TEMPFAIL): the store could not be reached, or was busy, throttled or failing on its side; running the same
 *   command again later may succeed — and every command may be rerun: a top-up happens once per reference, a replay
 *   settles each record once, the others read or set a state;
 * - 1: any other failure (a missing table, the store refusing a write): it will fail again.
 */
export const EXIT_USAGE = 2;
export const EXIT_TRANSIENT = 75;
export const EXIT_FAILED = 1;
