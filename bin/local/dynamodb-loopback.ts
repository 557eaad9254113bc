import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * DynamoDB Local listens on every network interface, and has no option to say otherwise: whoever reaches this
 * machine could read and rewrite the local host's accounts, keys, wallets and registry. Its own main class is
 * therefore replaced by a small one (dynamodb-loopback/LoopbackDynamoDbLocal.java) that starts the same server
 * bound to 127.0.0.1. That class is compiled here, by the JDK's compiler, once per checkout and jar.
 */
const SOURCE = fileURLToPath(new URL('./dynamodb-loopback/LoopbackDynamoDbLocal.java', import.meta.url));
const LAUNCHER_CLASS = 'LoopbackDynamoDbLocal';

export type LoopbackLauncher = { readonly classDir: string } | { readonly unavailable: string };

/**
 * The launcher's class directory (under `cacheRoot`, keyed by its source and the jar it is compiled against), compiled
 * now if it is not there yet; else why it cannot be (no JDK compiler, a jar whose classes changed).
 */
export const loopbackLauncher = async (
  jar: string,
  cacheRoot: string,
  java = 'java',
): Promise<LoopbackLauncher> => {
  try {
    return await build(jar, cacheRoot, java);
  } catch (error) {
    // A cache it cannot write (a read-only checkout), say: the stock main class still serves.
    return { unavailable: `it could not be built: ${(error as Error).message}` };
  }
};

const build = async (jar: string, cacheRoot: string, java: string): Promise<LoopbackLauncher> => {
  const key = createHash('sha256').update(readFileSync(SOURCE)).update('\0').update(jar).digest('hex');
  const classDir = join(cacheRoot, key.slice(0, 16));
  const built = join(classDir, `${LAUNCHER_CLASS}.class`);
  if (existsSync(built)) return { classDir };
  mkdirSync(cacheRoot, { recursive: true });
  // Built aside and moved into place whole: stacks starting together (test workers) may all build it.
  const building = mkdtempSync(join(cacheRoot, 'building-'));
  try {
    // The compiler module rather than `javac`, which Debian ships only with the JDK's binaries; for Java 17, the
    // oldest DynamoDB Local runs on, whichever JDK builds it (a later `java` on the PATH still loads it).
    const compile = await run(java, [
      '-m',
      'jdk.compiler/com.sun.tools.javac.Main',
      '--release',
      '17',
      '-nowarn',
      '-cp',
      jar,
      '-d',
      building,
      SOURCE,
    ]);
    if (compile.code !== 0) {
      return {
        unavailable: /jdk\.compiler/.test(compile.output)
          ? 'building it needs a JDK (Debian: apt-get install -y openjdk-17-jdk-headless)'
          : `it did not compile:\n${compile.output.slice(-1500)}`,
      };
    }
    try {
      renameSync(building, classDir);
    } catch (error) {
      if (!existsSync(built)) throw error; // else another start moved its own build there first
    }
    return { classDir };
  } finally {
    rmSync(building, { recursive: true, force: true });
  }
};

/** DynamoDB Local's java arguments with its `-jar <jar>` replaced by the launcher, the jar on its class path. */
export const launchedOnLoopback = (args: readonly string[], classDir: string): string[] => {
  const at = args.indexOf('-jar');
  const jar = args[at + 1];
  if (at < 0 || jar === undefined)
    throw new Error(`DynamoDB Local's command line has no -jar: ${args.join(' ')}`);
  return [
    ...args.slice(0, at),
    // Exit when the host's pipe to its stdin closes: the host is gone (LoopbackDynamoDbLocal.exitWithHost).
    '-Dsvc.exitWithHost=true',
    '-cp',
    `${jar}${delimiter}${classDir}`,
    LAUNCHER_CLASS,
    ...args.slice(at + 2),
  ];
};

const run = (command: string, args: readonly string[]): Promise<{ code: number; output: string }> =>
  new Promise((resolve) => {
    let output = '';
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const collect = (chunk: Buffer) => {
      output += chunk.toString('utf8');
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.once('error', (error) => resolve({ code: -1, output: `${output}${error.message}` }));
    child.once('close', (code) => resolve({ code: code ?? -1, output }));
  });
