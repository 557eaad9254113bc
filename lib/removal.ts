import { RemovalPolicy } from 'aws-cdk-lib';

/**
 * What a production stage keeps when its stack is deleted or a resource is replaced: queues of settlements not yet
 * debited, upstream secrets, logs, the published report. Except on a failed first create: CloudFormation's rollback
 * then deletes what it has just made, empty (RetainExceptOnCreate), where a kept resource with a fixed name would
 * make every retry fail with "already exists" until someone deleted it by hand. Other stages keep nothing.
 *
 * Tables are not among them: deletion protection refuses that rollback's delete (data-stack.ts creates them last).
 */
export const keptInProduction = (production: boolean): RemovalPolicy =>
  production ? RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE : RemovalPolicy.DESTROY;
