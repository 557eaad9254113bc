import { describe, expect, it } from 'vitest';
import { readRegistryFile } from '#local/registry-file.ts';
import { SIMULATOR_SECRETS } from '#local/seed.ts';

const EXAMPLE = 'registry/example.json';

describe('npm start with REGISTRY_FILE', () => {
  it('warns of each active deployment whose keys it cannot read here, before anything starts', () => {
    // The example reads provider-a's keys from Secrets Manager and provider-b's from PROVIDER_B_KEY.
    const bare = readRegistryFile(EXAMPLE, SIMULATOR_SECRETS);
    expect(bare.warnings).toContainEqual(
      expect.stringMatching(/"famA-v4\.1-flash@provider-a" reads AWS Secrets Manager/),
    );
    expect(bare.warnings).toContainEqual(
      expect.stringMatching(/"famA-v4\.1-flash@provider-b" reads env:PROVIDER_B_KEY, unset here/),
    );
    // The simulator's own keys are set in the stack's environment; a variable of it is no warning.
    expect(bare.warnings.join('\n')).not.toContain('SIM_A_KEY_1');
    const keyed = readRegistryFile(EXAMPLE, { ...SIMULATOR_SECRETS, PROVIDER_B_KEY: 'sk-b' });
    expect(keyed.warnings.join('\n')).not.toContain('PROVIDER_B_KEY');
    expect(keyed.warnings.length).toBe(bare.warnings.length - 1);
  });
});
