import { UsageError } from './usage-error.ts';

/** What one admin command takes on its command line. */
export interface CommandSpec {
  /** How many positional arguments follow the command (the most; `need` in each command asks for the rest). */
  readonly args: number;
  /** The flags the command reads, without their dashes. */
  readonly flags?: readonly string[];
}

/**
 * Checks a parsed command line against the commands `specs` names (`"group command"`) and returns the command.
 * An unknown command, an argument more than the command takes or a flag it does not read is a mistake on the command
 * line (UsageError: exit 2, with `usage`), never silently ignored: `models retire A B` must not retire A alone and
 * succeed, nor `keys create ACCOUNT --reference X` drop what the operator meant by X. Checked before anything is
 * read or written.
 */
export const checkCommandLine = (
  specs: Readonly<Record<string, CommandSpec>>,
  positionals: readonly string[],
  flags: object,
  usage: string,
): string => {
  const [group, command, ...args] = positionals;
  const name = `${group} ${command}`;
  const spec = Object.hasOwn(specs, name) ? specs[name] : undefined;
  if (!spec) throw new UsageError(`unknown command "${positionals.join(' ')}"\n${usage}`);
  if (args.length > spec.args) throw new UsageError(`unexpected argument "${args[spec.args]}"\n${usage}`);
  const unused = Object.keys(flags).find((flag) => !spec.flags?.includes(flag));
  if (unused !== undefined) {
    const takes = spec.flags?.length ? ` (it takes ${spec.flags.map((f) => `--${f}`).join(', ')})` : '';
    throw new UsageError(`"${name}" takes no --${unused}${takes}\n${usage}`);
  }
  return name;
};
