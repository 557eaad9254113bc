import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { removeOrphanedS3Directories } from '#local/emulators.ts';

/** Above Linux's largest pid (2^22): no process has it. */
const GONE = 4_194_400;

describe('removeOrphanedS3Directories (what a killed npm start left in the temp directory)', () => {
  let parent: string;
  afterEach(() => rmSync(parent, { recursive: true, force: true }));

  it('removes the directories of processes that are gone, and only those', () => {
    parent = mkdtempSync(join(tmpdir(), 'svc-orphans-'));
    const dir = (name: string) => {
      mkdirSync(join(parent, name));
      writeFileSync(join(parent, name, 'object'), 'x');
      return name;
    };
    const orphan = dir(`svc-s3-${GONE}-abc123`);
    const mine = dir(`svc-s3-${process.pid}-def456`);
    // The parent of this test runner: a process that runs.
    const running = dir(`svc-s3-${process.ppid}-ghi789`);
    const unnamed = dir('svc-s3-Xy12Ab');
    const other = dir(`svc-bench-${GONE}-x`);
    expect(removeOrphanedS3Directories(parent)).toEqual([orphan]);
    expect(existsSync(join(parent, orphan))).toBe(false);
    for (const kept of [mine, running, unnamed, other])
      expect(existsSync(join(parent, kept)), kept).toBe(true);
  });
});
