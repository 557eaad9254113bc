import type { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { describe, expect, it } from 'vitest';
import { defaultSecretResolver, SecretsManagerSecretResolver } from '#adapters/secrets.ts';

/** A Secrets Manager client holding `secrets` by id, recording the ids asked for. */
const fakeClient = (secrets: Record<string, string | undefined>) => {
  const asked: string[] = [];
  let built = 0;
  const client = {
    send: async (command: GetSecretValueCommand) => {
      const id = command.input.SecretId as string;
      asked.push(id);
      if (!(id in secrets))
        throw Object.assign(new Error('not found'), { name: 'ResourceNotFoundException' });
      return { SecretString: secrets[id], $metadata: {} };
    },
  } as unknown as SecretsManagerClient;
  return {
    asked,
    builds: () => built,
    factory: () => {
      built++;
      return client;
    },
  };
};

describe('SecretsManagerSecretResolver', () => {
  it('reads the secret named after the prefix, trimmed', async () => {
    const fake = fakeClient({ 'svc/dev/providers/openai': 'sk-abc\n' });
    const resolver = new SecretsManagerSecretResolver(fake.factory);
    await expect(resolver.resolve('secretsmanager:svc/dev/providers/openai')).resolves.toBe('sk-abc');
    expect(fake.asked).toEqual(['svc/dev/providers/openai']);
  });

  it('builds its client once, on the first reference', async () => {
    const fake = fakeClient({ a: '1', b: '2' });
    const resolver = new SecretsManagerSecretResolver(fake.factory);
    expect(fake.builds()).toBe(0);
    await resolver.resolve('secretsmanager:a');
    await resolver.resolve('secretsmanager:b');
    expect(fake.builds()).toBe(1);
  });

  it('refuses an empty secret and a reference of another scheme without calling AWS', async () => {
    const fake = fakeClient({ empty: '  ' });
    const resolver = new SecretsManagerSecretResolver(fake.factory);
    await expect(resolver.resolve('secretsmanager:empty')).rejects.toThrow('has no string value');
    await expect(resolver.resolve('env:X')).rejects.toThrow('Not a Secrets Manager reference');
    await expect(resolver.resolve('secretsmanager:')).rejects.toThrow('Not a Secrets Manager reference');
    expect(fake.asked).toEqual(['empty']);
  });
});

describe('defaultSecretResolver', () => {
  it('resolves env: references from the environment it is given', async () => {
    await expect(defaultSecretResolver({ K: 'v' }).resolve('env:K')).resolves.toBe('v');
  });

  it('refuses env: references when no environment was handed in (a Lambda instance), whatever is set', async () => {
    // On Lambda the process environment holds the role's credentials; a registry entry must not reach them.
    process.env.SVC_TEST_ROLE_SECRET = 'role-credential';
    try {
      const resolver = defaultSecretResolver();
      await expect(resolver.resolve('env:SVC_TEST_ROLE_SECRET')).rejects.toThrow(
        'env: references resolve only on the local host; use secretsmanager:ID',
      );
      await expect(resolver.resolve('env:SVC_TEST_ROLE_SECRET')).rejects.not.toThrow('role-credential');
    } finally {
      delete process.env.SVC_TEST_ROLE_SECRET;
    }
  });

  it('names the scheme it does not know', async () => {
    await expect(defaultSecretResolver({}).resolve('vault:x')).rejects.toThrow('"vault:…"');
    await expect(defaultSecretResolver({}).resolve('plain')).rejects.toThrow('Unsupported secret reference');
  });
});
