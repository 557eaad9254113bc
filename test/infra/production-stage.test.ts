import { App, type Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { buildGateway } from '#lib/gateway-app.ts';

/** The stacks of a stage, built in this process without bundling the functions (nothing here reads the code). */
const stacksOf = (context: Record<string, unknown>) => {
  const { data, api, site, jobs } = buildGateway(
    new App({ context: { 'aws:cdk:bundling-stacks': [], ...context } }),
  );
  return [data, api, site, jobs];
};

describe('a production stage', () => {
  it('protects every stack from termination: the distribution and the Function URLs are the public addresses', () => {
    for (const stack of stacksOf({ stage: 'prod', alarmEmail: 'ops@example.com' }))
      expect(stack.terminationProtection, stack.stackName).toBe(true);
    for (const stack of stacksOf({ stage: 'dev' }))
      expect(stack.terminationProtection, stack.stackName).toBe(false);
  });

  it('is refused without alarmEmail (a deploy leaving it out would delete the subscription), and takes none', () => {
    expect(() => stacksOf({ stage: 'prod' })).toThrow(
      /CDK context "alarmEmail" must be given on every deploy/,
    );
    const subscriptions = (alarmEmail: string) => {
      const [data] = stacksOf({ stage: 'prod', alarmEmail });
      return Object.keys(Template.fromStack(data as Stack).findResources('AWS::SNS::Subscription')).length;
    };
    expect(subscriptions('none')).toBe(0);
    expect(subscriptions('ops@example.com')).toBe(1);
  });
});

describe("alarms that count a job's runs", () => {
  const alarmPeriod = (context: Record<string, unknown>, name: string) => {
    const jobs = stacksOf(context)[3] as Stack;
    const alarms = Template.fromStack(jobs).findResources('AWS::CloudWatch::Alarm');
    return Object.values(alarms).find((a) => String(a.Properties.AlarmName).endsWith(name))?.Properties
      .Period;
  };

  it('take the period of one run of the schedule the stage gives, so a slower one still adds up to 3 of 4', () => {
    expect(alarmPeriod({}, 'hold-sweeper-holds-not-released')).toBe(300);
    expect(alarmPeriod({ holdSweeperSchedule: 'rate(10 minutes)' }, 'hold-sweeper-holds-not-released')).toBe(
      600,
    );
    expect(alarmPeriod({ priceSyncSchedule: 'rate(2 hours)' }, 'price-sync-unread-price-lists')).toBe(7_200);
  });

  it('refuse a cron schedule for such a job (its runs have no one interval), or one too slow to count', () => {
    expect(() => stacksOf({ holdSweeperSchedule: 'cron(0/5 * * * ? *)' })).toThrow(
      /CDK context "holdSweeperSchedule" must be a rate\(…\) expression of at most 42 hours: the holds-not-released alarm counts its last 4 runs/,
    );
    // Nor one whose four runs span more than CloudWatch evaluates (7 days): it would fail at deploy, not here.
    expect(() => stacksOf({ priceSyncSchedule: 'rate(2 days)' })).toThrow(
      /"priceSyncSchedule" must be a rate/,
    );
    expect(alarmPeriod({ priceSyncSchedule: 'rate(42 hours)' }, 'price-sync-unread-price-lists')).toBe(
      151_200,
    );
  });
});
