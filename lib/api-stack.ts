import { CfnOutput, Duration, Stack, type StackProps } from 'aws-cdk-lib';
import {
  EndpointType,
  LambdaIntegration,
  ResponseTransferMode,
  ResponseType,
  RestApi,
} from 'aws-cdk-lib/aws-apigateway';
import { Alarm, ComparisonOperator, MathExpression, TreatMissingData } from 'aws-cdk-lib/aws-cloudwatch';
import { SnsAction } from 'aws-cdk-lib/aws-cloudwatch-actions';
import { FunctionUrlAuthType, InvokeMode } from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { CORS_HEADERS } from '#http/cors.ts';
import { type FunctionDefinition, REST_BINARY_MEDIA_TYPES, timeoutOf } from './functions.ts';
import { type Bindings, GatewayFunction } from './gateway-function.ts';
import type { StageConfig } from './stage.ts';

export interface ApiStackProps extends StackProps {
  readonly stage: StageConfig;
  /** The rows of the function table with an `http` trigger. */
  readonly functions: Readonly<Record<string, FunctionDefinition>>;
  readonly bindings: Bindings;
}

/** OpenAI's error shape (ARCHITECTURE.md §8) for the errors API Gateway answers itself. */
const openAiError = (type: string, message: string, code: string | null = null) =>
  `{"error":{"message":${message},"type":"${type}","param":null,"code":${code === null ? 'null' : `"${code}"`}}}`;

/**
 * Headers of the errors API Gateway answers itself (its throttling, an unknown route, its own 5xx): the CORS headers
 * the functions send (ADR 0009), so that a browser client can read these bodies as it reads ours. Values are
 * literals in single quotes. (They carry API Gateway's own `x-amzn-RequestId`, not our `x-request-id`: a gateway
 * response's headers may come only from the request or a literal, and none of ours exists yet.)
 */
const GATEWAY_RESPONSE_HEADERS = Object.fromEntries(
  Object.entries(CORS_HEADERS).map(([name, value]) => [name, `'${value}'`]),
);

/**
 * The HTTP functions, each reachable two ways, both streaming: its own Function URL (`RESPONSE_STREAM`, auth
 * NONE — our bearer keys authenticate) and a route of one REST API whose Lambda integrations use
 * `ResponseTransferMode.STREAM`. The API is regional: a streamed response may idle 5 minutes there, 30 s on an
 * edge-optimized endpoint, and CloudFront (site-stack.ts) is in front of it anyway.
 */
export class ApiStack extends Stack {
  readonly api: RestApi;
  readonly functions: Readonly<Record<string, GatewayFunction>>;

  constructor(scope: Construct, id: string, props: ApiStackProps) {
    super(scope, id, props);
    const { stage } = props;

    this.api = new RestApi(this, 'api', {
      restApiName: `${stage.prefix}-api`,
      description: 'OpenAI-compatible inference API',
      endpointConfiguration: { types: [EndpointType.REGIONAL] },
      binaryMediaTypes: [...REST_BINARY_MEDIA_TYPES],
      // The account-wide CloudWatch role is shared by every API of the account; not ours to create or replace.
      cloudWatchRole: false,
      deployOptions: { stageName: stage.stage, tracingEnabled: true, metricsEnabled: true },
    });
    this.api.addGatewayResponse('unknown-route', {
      // What API Gateway answers for a path or method without a route.
      type: ResponseType.MISSING_AUTHENTICATION_TOKEN,
      statusCode: '404',
      responseHeaders: GATEWAY_RESPONSE_HEADERS,
      templates: {
        // The path is the client's text and the template inserts it unescaped: a `"` or `\` in it would break the
        // JSON. The method is one of API Gateway's own words.
        'application/json': openAiError(
          'invalid_request_error',
          '"Unknown request URL: no route for $context.httpMethod on this path."',
          'unknown_url',
        ),
      },
    });
    // The 4xx API Gateway answers itself that a client handles by its code, as ours: its throttling (a 429 an SDK
    // retries) and a body over its 10 MB (our own limits are lower, so only a body no function may read meets it).
    this.api.addGatewayResponse('throttled', {
      type: ResponseType.THROTTLED,
      statusCode: '429',
      responseHeaders: GATEWAY_RESPONSE_HEADERS,
      templates: {
        'application/json': openAiError('requests', '$context.error.messageString', 'rate_limit_exceeded'),
      },
    });
    this.api.addGatewayResponse('request-too-large', {
      type: ResponseType.REQUEST_TOO_LARGE,
      statusCode: '413',
      responseHeaders: GATEWAY_RESPONSE_HEADERS,
      templates: {
        'application/json': openAiError(
          'invalid_request_error',
          '$context.error.messageString',
          'request_too_large',
        ),
      },
    });
    this.api.addGatewayResponse('default-4xx', {
      type: ResponseType.DEFAULT_4XX,
      responseHeaders: GATEWAY_RESPONSE_HEADERS,
      templates: { 'application/json': openAiError('invalid_request_error', '$context.error.messageString') },
    });
    this.api.addGatewayResponse('default-5xx', {
      type: ResponseType.DEFAULT_5XX,
      responseHeaders: GATEWAY_RESPONSE_HEADERS,
      templates: { 'application/json': openAiError('server_error', '$context.error.messageString') },
    });

    const built: Record<string, GatewayFunction> = {};
    for (const [name, definition] of Object.entries(props.functions)) {
      if (definition.trigger.kind !== 'http') throw new Error(`${name} is not an HTTP function`);
      const gatewayFunction = new GatewayFunction(this, name, {
        name,
        definition,
        stage,
        bindings: props.bindings,
      });
      const fn = gatewayFunction.function;
      const url = fn.addFunctionUrl({
        authType: FunctionUrlAuthType.NONE,
        invokeMode: InvokeMode.RESPONSE_STREAM,
      });
      new CfnOutput(this, `${name}-url`, { value: url.url, description: `Function URL of ${name}` });
      // Calls through the Function URL bypass the REST API and its 5xx alarm; a 5xx the handler answered is no
      // Lambda error either. The same rate, on the URL's own metrics (FunctionName: all of its URL's traffic).
      const urlMetric = (metricName: string) =>
        fn.metric(metricName, { period: Duration.minutes(5), statistic: 'Sum' });
      new Alarm(this, `${name}-url-5xx-alarm`, {
        alarmName: `${stage.prefix}-${name}-url-5xx-rate`,
        alarmDescription: `More than 5% of ${name}'s Function URL requests answered 5xx, two 5-minute periods in a row`,
        metric: new MathExpression({
          expression: 'errors / requests',
          usingMetrics: { errors: urlMetric('Url5xxCount'), requests: urlMetric('UrlRequestCount') },
          period: Duration.minutes(5),
        }),
        threshold: 0.05,
        evaluationPeriods: 2,
        comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treatMissingData: TreatMissingData.NOT_BREACHING,
      }).addAlarmAction(new SnsAction(props.bindings.alarmTopic));
      const integration = new LambdaIntegration(fn, {
        responseTransferMode: ResponseTransferMode.STREAM,
        // A streamed integration may run up to 15 minutes; give it as long as the function has.
        timeout: Duration.seconds(timeoutOf(definition)),
      });
      for (const route of definition.trigger.routes)
        this.api.root.resourceForPath(route.path).addMethod(route.method, integration);
      // CORS preflights go to the function too, which answers them (functions/http/cors.ts).
      for (const path of new Set(definition.trigger.routes.map((r) => r.path)))
        this.api.root.resourceForPath(path).addMethod('OPTIONS', integration);
      built[name] = gatewayFunction;
    }
    this.functions = built;

    new Alarm(this, 'api-5xx-alarm', {
      alarmName: `${stage.prefix}-api-5xx-rate`,
      alarmDescription: 'More than 5% of API requests answered 5xx, two 5-minute periods in a row',
      metric: this.api.deploymentStage.metricServerError({
        period: Duration.minutes(5),
        statistic: 'Average',
      }),
      threshold: 0.05,
      evaluationPeriods: 2,
      comparisonOperator: ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      treatMissingData: TreatMissingData.NOT_BREACHING,
    }).addAlarmAction(new SnsAction(props.bindings.alarmTopic));

    new CfnOutput(this, 'api-base-url', {
      value: `${this.api.url}v1`,
      description: 'OpenAI base URL through API Gateway',
    });
  }
}
