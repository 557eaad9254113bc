import { Stack, type StackProps } from 'aws-cdk-lib';
import type { CfnFunction } from 'aws-cdk-lib/aws-lambda';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import { Schedule, ScheduleExpression } from 'aws-cdk-lib/aws-scheduler';
import { LambdaInvoke } from 'aws-cdk-lib/aws-scheduler-targets';
import type { Construct } from 'constructs';
import { type FunctionDefinition, timeoutOf } from './functions.ts';
import { type Bindings, GatewayFunction } from './gateway-function.ts';
import { queues } from './resources.ts';
import { SETTLEMENT_MAX_CONCURRENCY, type StageConfig } from './stage.ts';

export interface JobsStackProps extends StackProps {
  readonly stage: StageConfig;
  /** The rows of the function table with a `queue` or `schedule` trigger. */
  readonly functions: Readonly<Record<string, FunctionDefinition>>;
  readonly bindings: Bindings;
}

/**
 * The functions nobody calls over HTTP: queue consumers (the settlement consumer) and scheduled jobs (hold
 * sweeper, usage report, price sync) on EventBridge Scheduler. They come after the site stack so a job can
 * write to the site bucket (the usage report).
 */
export class JobsStack extends Stack {
  readonly functions: Readonly<Record<string, GatewayFunction>>;

  constructor(scope: Construct, id: string, props: JobsStackProps) {
    super(scope, id, props);
    const { stage, bindings } = props;
    const built: Record<string, GatewayFunction> = {};
    for (const [name, definition] of Object.entries(props.functions)) {
      const gatewayFunction = new GatewayFunction(this, name, { name, definition, stage, bindings });
      const fn = gatewayFunction.function;
      const trigger = definition.trigger;
      if (trigger.kind === 'queue') {
        // Lambda's guidance for SQS event sources; resources.ts derives the visibility timeout from it.
        const visibility = queues[trigger.queue].visibilityTimeoutSeconds;
        if (visibility < 6 * timeoutOf(definition))
          throw new Error(
            `${name}: queue ${trigger.queue}'s visibility timeout is under 6× the function's timeout`,
          );
        if (trigger.queue === 'settlement' && stage.settlementReservedConcurrency > 0)
          (fn.node.defaultChild as CfnFunction).reservedConcurrentExecutions =
            stage.settlementReservedConcurrency;
        fn.addEventSource(
          new SqsEventSource(bindings.queues[trigger.queue], {
            batchSize: 10,
            // The consumer reports the messages that failed; the rest of the batch is deleted.
            reportBatchItemFailures: true,
            // Bounded, so a backlog does not scale consumers into one another: a busy account's settlements all
            // write its wallet and buckets, and past some concurrency they mostly cancel each other's transactions
            // (and the request path's admissions) — six quick conflicts send a message back to the queue, five
            // receives to the DLQ. 50 consumers settle thousands of calls a second.
            maxConcurrency: SETTLEMENT_MAX_CONCURRENCY,
          }),
        );
      } else if (trigger.kind === 'schedule') {
        // Nor Lambda's own retries of an async invocation (two by default): one run per schedule tick.
        fn.configureAsyncInvoke({ retryAttempts: 0 });
        new Schedule(this, `${name}-schedule`, {
          scheduleName: `${stage.prefix}-${name}`,
          description: `Runs ${name} (${trigger.schedule})`,
          schedule: ScheduleExpression.expression(stage.schedules[trigger.schedule]),
          // The next run is the retry: every scheduled job here is idempotent and catches up.
          target: new LambdaInvoke(fn, { retryAttempts: 0 }),
        });
      } else {
        throw new Error(`${name} is an HTTP function; it belongs in the API stack`);
      }
      built[name] = gatewayFunction;
    }
    this.functions = built;
  }
}
