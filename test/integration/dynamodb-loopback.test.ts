import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { launchedOnLoopback, loopbackLauncher } from '#local/dynamodb-loopback.ts';

/** Whether a TCP connection to host:port is accepted. */
const accepts = (host: string, port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 2_000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });

/** This machine's addresses other machines could reach it on (link-local IPv6 aside: it needs a scope). */
const outward = Object.values(networkInterfaces())
  .flat()
  .filter((a) => a !== undefined && !a.internal && !a.address.startsWith('fe80:'))
  .map((a) => a?.address as string);

describe("the local host's DynamoDB Local", () => {
  const port = Number(new URL(inject('emulators').dynamodb).port);

  it('answers on loopback', async () => {
    expect(await accepts('127.0.0.1', port)).toBe(true);
  });

  // A machine with no other interface has no address to reach it from: nothing to show there.
  it.skipIf(outward.length === 0)(
    "refuses connections on the machine's other addresses (its own main class listens on all of them)",
    async () => {
      for (const address of outward)
        expect([address, await accepts(address, port)]).toEqual([address, false]);
    },
  );
});

describe('the loopback launcher', () => {
  const cache = mkdtempSync(join(tmpdir(), 'svc-launcher-'));
  afterAll(() => rmSync(cache, { recursive: true, force: true }));

  it("takes DynamoDB Local's place on its command line, the jar on the class path", () => {
    expect(
      launchedOnLoopback(
        ['-Djava.library.path=lib', '-jar', 'a/DynamoDBLocal.jar', '-inMemory', '-port', '1'],
        '/c',
      ),
    ).toEqual([
      '-Djava.library.path=lib',
      '-Dsvc.exitWithHost=true',
      '-cp',
      `a/DynamoDBLocal.jar${delimiter}/c`,
      'LoopbackDynamoDbLocal',
      '-inMemory',
      '-port',
      '1',
    ]);
    expect(() => launchedOnLoopback(['-cp', 'x', 'Main'], '/c')).toThrow(/no -jar/);
  });

  it('says why, rather than fail the start, when its cache cannot be written', async () => {
    const file = join(cache, 'a-file');
    writeFileSync(file, '');
    expect(await loopbackLauncher('/nowhere/DynamoDBLocal.jar', join(file, 'cache'))).toEqual({
      unavailable: expect.stringContaining('could not be built'),
    });
  });

  it('says why it could not be built, and builds nothing, when its compiler cannot run', async () => {
    const built = await loopbackLauncher('/nowhere/DynamoDBLocal.jar', cache, 'no-such-java-binary');
    expect(built).toEqual({ unavailable: expect.stringContaining('did not compile') });
    expect(await loopbackLauncher('/nowhere/DynamoDBLocal.jar', cache, 'no-such-java-binary')).toEqual(built);
  });
});
