import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { z } from 'zod';
import { DynamoRegistry } from '#adapters/dynamo-registry.ts';
import type { Deployment, Model } from '#core/registry.ts';
import { localClientConfig } from './emulators.ts';

/**
 * What the last `npm start` on a DATA_DIR seeded into its registry, kept in the DATA_DIR beside the store.
 *
 * Each way of starting seeds its own deployments: the catalog on the simulator (`…@sim-a`, `…@sim-b`), the
 * catalog on UPSTREAM_BASE_URL (`…@upstream`), or a REGISTRY_FILE's. Seeding only adds and updates, so a
 * restart in another way on a kept DATA_DIR left the former way's deployments active beside the new ones —
 * routed to by weight, at a simulator that no longer runs or an upstream no longer meant. Entries an operator
 * added with the admin CLI are not in this record, and stay as they are.
 */
const RECORD_FILE = 'seeded-registry.json';

const recordSchema = z.object({ models: z.array(z.string()), deployments: z.array(z.string()) });

type SeedRecord = z.infer<typeof recordSchema>;

/** The record, or null: a new DATA_DIR, one from before this record, or a record that does not read. */
const readRecord = (dataDir: string): SeedRecord | null => {
  try {
    const parsed = recordSchema.safeParse(JSON.parse(readFileSync(join(dataDir, RECORD_FILE), 'utf8')));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
};

/**
 * Retires what the previous start on this DATA_DIR seeded and this one does not, then records this start's
 * seed. Call it before seeding (the seed writes the current entries as active). Returns what it retired.
 */
export const replaceFormerSeed = async (
  dataDir: string,
  dynamodbEndpoint: string,
  table: string,
  seeded: { readonly models: readonly Model[]; readonly deployments: readonly Deployment[] },
): Promise<{ models: string[]; deployments: string[] }> => {
  const former = readRecord(dataDir);
  const retired = { models: [] as string[], deployments: [] as string[] };
  if (former) {
    const models = new Set(seeded.models.map((m) => m.id));
    const deployments = new Set(seeded.deployments.map((d) => d.id));
    const staleModels = new Set(former.models.filter((id) => !models.has(id)));
    const staleDeployments = new Set(former.deployments.filter((id) => !deployments.has(id)));
    if (staleModels.size > 0 || staleDeployments.size > 0) {
      const client = new DynamoDBClient(localClientConfig(dynamodbEndpoint));
      try {
        const registry = new DynamoRegistry(client, table);
        const current = await registry.load();
        for (const d of current.deployments) {
          if (d.status !== 'active' || !staleDeployments.has(d.id)) continue;
          await registry.retireDeployment(d);
          retired.deployments.push(d.id);
        }
        for (const m of current.models) {
          if (m.status !== 'active' || !staleModels.has(m.id)) continue;
          await registry.retireModel(m.id);
          retired.models.push(m.id);
        }
      } finally {
        client.destroy();
      }
    }
  }
  const record: SeedRecord = {
    models: seeded.models.map((m) => m.id),
    deployments: seeded.deployments.map((d) => d.id),
  };
  writeFileSync(join(dataDir, RECORD_FILE), `${JSON.stringify(record, null, 2)}\n`);
  return retired;
};
