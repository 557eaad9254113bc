import type { TestProject } from 'vitest/node';
import { type EmulatorEndpoints, startEmulators } from '#local/emulators.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    emulators: EmulatorEndpoints;
  }
}

/** One DynamoDB Local JVM and one SQS/S3 worker for the whole run; test files isolate by name prefix. */
export default async function setup(project: TestProject) {
  const emulators = await startEmulators();
  project.provide('emulators', { dynamodb: emulators.dynamodb, sqs: emulators.sqs, s3: emulators.s3 });
  return () => emulators.stop();
}
