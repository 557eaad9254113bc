import { afterAll, afterEach, beforeAll } from 'vitest';
import { type Simulator, type SimulatorOptions, startSimulator } from '#sim/server.ts';

/**
 * One simulator for the test file, started before its tests and closed after them; every test starts from a
 * clean one (no faults set, no calls recorded). Returns the running simulator.
 */
export const useSimulator = (options: SimulatorOptions = {}): (() => Simulator) => {
  let sim: Simulator | undefined;
  beforeAll(async () => {
    sim = await startSimulator(options);
  });
  afterEach(() => {
    sim?.resetFaults();
    sim?.clearCalls();
  });
  afterAll(async () => {
    await sim?.close();
  });
  return () => {
    if (!sim) throw new Error('the simulator is not running (used outside a test?)');
    return sim;
  };
};
