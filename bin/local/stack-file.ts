import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type EmulatorEndpoints, running } from './emulators.ts';
import type { Provisioned } from './provision.ts';

/**
 * Written by `npm start` while it runs, so the admin CLI can reach that stack's emulators.
 * `LOCAL_STACK_FILE` moves it (tests run a second stack beside a developer's own).
 */
export const STACK_FILE =
  process.env.LOCAL_STACK_FILE ?? fileURLToPath(new URL('../../.local/stack.json', import.meta.url));

export interface StackFile {
  /** The `npm start` process that wrote it: only that one removes it. */
  readonly pid?: number;
  readonly url: string;
  readonly emulators: EmulatorEndpoints;
  readonly resources: Provisioned;
  /** The stack's upstream simulator (what `{{SIMULATOR_URL}}` stands for in a registry file), if it runs one. */
  readonly simulatorUrl?: string | null;
}

export const readStackFile = (): StackFile | null =>
  existsSync(STACK_FILE) ? (JSON.parse(readFileSync(STACK_FILE, 'utf8')) as StackFile) : null;

/**
 * Writes this process's stack file. Returns the URL of a stack still running that wrote the file before — the
 * admin CLI then targets this one, not that one (one checkout, two `npm start`s without a DATA_DIR).
 */
export const writeStackFile = (stack: Omit<StackFile, 'pid'>): string | null => {
  let previous: StackFile | null = null;
  try {
    previous = readStackFile();
  } catch {
    // A torn or foreign file: replaced.
  }
  mkdirSync(dirname(STACK_FILE), { recursive: true });
  // Written aside and renamed over it: an admin command reading meanwhile sees the old file or the new, never half.
  const written = `${STACK_FILE}.${process.pid}.tmp`;
  try {
    writeFileSync(written, JSON.stringify({ pid: process.pid, ...stack }, null, 2));
    renameSync(written, STACK_FILE);
  } catch (error) {
    rmSync(written, { force: true });
    throw error;
  }
  return previous?.pid !== undefined && previous.pid !== process.pid && running(previous.pid)
    ? previous.url
    : null;
};

/** Removes the stack file if this process wrote it: a stack stopping must not take another's away. */
export const removeOwnStackFile = (): void => {
  try {
    if (readStackFile()?.pid !== process.pid) return;
  } catch {
    return;
  }
  rmSync(STACK_FILE, { force: true });
};
