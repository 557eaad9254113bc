/**
 * The CDK app (`npm run synth`, `npx cdk deploy --all`). Stage settings come from CDK context
 * (`-c stage=prod`, …; every key is in lib/stage.ts and the README's "Deploy to AWS").
 */
import { App } from 'aws-cdk-lib';
import { buildGateway } from '#lib/gateway-app.ts';

const app = new App();
buildGateway(app);
