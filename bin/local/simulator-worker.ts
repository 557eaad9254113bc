/**
 * Worker thread running the upstream simulator for `npm start`, on its own event loop like a real remote
 * provider. Receives SimulatorOptions, replies `{ url }`, and closes on a `stop` message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { type SimulatorOptions, startSimulator } from '#sim/server.ts';

const simulator = await startSimulator(workerData as SimulatorOptions);
parentPort?.postMessage({ url: simulator.url });
parentPort?.on('message', async (message: unknown) => {
  if (message !== 'stop') return;
  await simulator.close();
  parentPort?.postMessage('stopped');
});
