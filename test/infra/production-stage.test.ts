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
