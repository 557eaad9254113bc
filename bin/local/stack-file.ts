import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { EmulatorEndpoints } from './emulators.ts';
import type { Provisioned } from './provision.ts';

/**
 * Written by `npm start` while it runs, so the admin CLI can reach that stack's emulators.
 * `LOCAL_STACK_FILE` moves it (tests run a second stack beside a developer's own).
 */
export const STACK_FILE =
  process.env.LOCAL_STACK_FILE ?? fileURLToPath(new URL('../../.local/stack.json', import.meta.url));

export interface StackFile {
  readonly url: string;
  readonly emulators: EmulatorEndpoints;
  readonly resources: Provisioned;
  /** The stack's upstream simulator (what `{{SIMULATOR_URL}}` stands for in a registry file), if it runs one. */
  readonly simulatorUrl?: string | null;
}

export const readStackFile = (): StackFile | null =>
  existsSync(STACK_FILE) ? (JSON.parse(readFileSync(STACK_FILE, 'utf8')) as StackFile) : null;
