import { readFileSync } from 'node:fs';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import {
  parseRegistryFile,
  parseRegistryJson,
  planLoad,
  RegistryFileError,
  usesSimulator,
} from '#adapters/registry-file.ts';
import type { Deployment, Model } from '#core/registry.ts';
import { localClientConfig } from './emulators.ts';

/** A registry file (`REGISTRY_FILE`) as the local host seeds it instead of the catalog and its simulator. */
export interface LocalRegistryFile {
  readonly path: string;
  readonly models: readonly Model[];
  /** Some deployment points at `{{SIMULATOR_URL}}`: the local host starts (or uses) its simulator. */
  readonly usesSimulator: boolean;
  /** Accepted, but worth an operator's look; the local host prints them. */
  readonly warnings: readonly string[];
  /** The file's deployments with `{{SIMULATOR_URL}}` substituted. */
  deployments(simulatorUrl: string | null): Deployment[];
  /**
   * The file is the whole registry: entries an earlier run left in a persisted table (DATA_DIR) that the file
   * does not list are retired, as `registry load --replace` would.
   */
  retireUnlisted(dynamodbEndpoint: string, table: string, deployments: readonly Deployment[]): Promise<void>;
}

/** A stand-in for the simulator's URL, so the whole file is checked before the simulator has started. */
const UNSTARTED_SIMULATOR = 'http://127.0.0.1:0';

/**
 * Reads and validates the file at once — before any emulator starts — so a bad file fails `npm start` fast,
 * naming the field at fault. Throws `RegistryFileError` (or an Error when the file cannot be read).
 */
export const readRegistryFile = (
  path: string,
  /** The environment its `env:` key references resolve in (the stack's: the caller's and the simulator's keys). */
  secretEnv: Readonly<Record<string, string | undefined>> = {},
): LocalRegistryFile => {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new Error(
      `cannot read registry file ${path}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  const input = parseRegistryJson(text, path);
  const simulator = usesSimulator(input);
  const checked = parseRegistryFile(input, {
    source: path,
    ...(simulator ? { simulatorUrl: UNSTARTED_SIMULATOR } : {}),
  });
  // The file is the whole registry here: with no active model every call would be refused (503).
  if (!checked.models.some((m) => m.status === 'active'))
    throw new RegistryFileError(path, ['models: no active model; every call would be refused']);
  const unresolvable = checked.deployments.flatMap((d, i) =>
    d.status === 'active' && d.keyRefs.some((ref) => ref.startsWith('secretsmanager:'))
      ? [
          `deployments[${i}].keyRefs: "${d.id}" reads AWS Secrets Manager, which needs this machine's AWS credentials; without them it fails over to the next deployment`,
        ]
      : [],
  );
  const unset = checked.deployments.flatMap((d, i) => {
    const missing = d.keyRefs.filter((ref) => ref.startsWith('env:') && !secretEnv[ref.slice('env:'.length)]);
    return d.status === 'active' && missing.length > 0
      ? [
          `deployments[${i}].keyRefs: "${d.id}" reads ${missing.join(', ')}, unset here; without it it fails over to the next deployment`,
        ]
      : [];
  });
  return {
    path,
    models: checked.models,
    usesSimulator: simulator,
    warnings: [...checked.warnings, ...unresolvable, ...unset],
    deployments: (simulatorUrl) => [
      ...parseRegistryFile(input, { source: path, ...(simulatorUrl ? { simulatorUrl } : {}) }).deployments,
    ],
    retireUnlisted: async (dynamodbEndpoint, table, deployments) => {
      const client = new DynamoDBClient(localClientConfig(dynamodbEndpoint));
      try {
        const registry = new DynamoRegistry(client, table);
        const plan = planLoad(
          await registry.load(),
          { models: checked.models, deployments },
          { replace: true },
        );
        if (plan.conflicts.length > 0) throw new RegistryFileError(path, plan.conflicts);
        // The file's own entries are written by the seed; only the retirements are left to write here.
        const models = new Set(checked.models.map((m) => m.id));
        const listed = new Set(deployments.map((d) => d.id));
        await registry.put(
          plan.models.filter((m) => !models.has(m.id)),
          plan.deployments.filter((d) => !listed.has(d.id)),
        );
      } finally {
        client.destroy();
      }
    },
  };
};
