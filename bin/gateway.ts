/**
 * The CDK app (`npx cdk synth`, `npx cdk deploy`). Stage settings come from CDK context:
 * `-c stage=dev` (default `dev`); a stage named `prod` or `production` gets production protections.
 */
import { App } from 'aws-cdk-lib';
import { DataStack } from '#lib/data-stack.ts';

const app = new App();
const stage = String(app.node.tryGetContext('stage') ?? 'dev');
if (!/^[a-z][a-z0-9-]{0,15}$/.test(stage))
  throw new Error(`context "stage" must be lowercase letters, digits, -: got "${stage}"`);
const production = stage === 'prod' || stage === 'production';

new DataStack(app, `svc-${stage}-data`, { stage, production });
