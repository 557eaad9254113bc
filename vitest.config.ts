import { defineConfig } from 'vitest/config';

/**
 * Unit tests touch no network. Integration and end-to-end tests share one set of emulators started by the
 * global setup; each test file provisions its own prefixed tables and queues and runs its own simulator.
 */
export default defineConfig({
  test: {
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      { test: { name: 'infra', include: ['test/infra/**/*.test.ts'], testTimeout: 60_000 } },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts', 'test/e2e/**/*.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 90_000,
        },
      },
    ],
  },
});
