import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const CHECK = 'bin/check-node.mjs';

/** Runs the check on this Node, made to report `version` as its own. */
const check = (version?: string) =>
  new Promise<{ code: number; stderr: string }>((resolve) => {
    const pretend = version
      ? [
          '--import',
          `data:text/javascript,Object.defineProperty(process.versions,"node",{value:"${version}"})`,
        ]
      : [];
    execFile(process.execPath, [...pretend, CHECK], { cwd: ROOT }, (error, _stdout, stderr) =>
      resolve({ code: error ? Number(error.code) : 0, stderr }),
    );
  });

describe('the Node check before every script', () => {
  it('lets Node 24 through, silently', async () => {
    expect(await check()).toEqual({ code: 0, stderr: '' });
  });

  it('stops an older Node first on PATH, saying how to get Node 24', async () => {
    const { code, stderr } = await check('20.20.2');
    expect(code).toBe(1);
    expect(stderr).toContain('need Node 24');
    expect(stderr).toContain('npm ci');
  });

  it('runs before each script a newcomer or CI starts', () => {
    const { scripts } = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as {
      scripts: Record<string, string>;
    };
    for (const script of ['start', 'test', 'bench', 'admin', 'simulator'])
      expect(scripts[`pre${script}`], script).toBe(`node ${CHECK}`);
  });
});
