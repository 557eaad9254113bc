import type { APIGatewayProxyEvent } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { header, jsonBody } from '#http/lambda.ts';
import { asHttpEvent } from '#http/rest-event.ts';

/** A REST API (payload 1.0) proxy event as API Gateway sends it to a streaming integration. */
const restEvent = (overrides: Partial<APIGatewayProxyEvent> = {}): APIGatewayProxyEvent =>
  ({
    resource: '/v1/models/{id}',
    path: '/v1/models/famA-v4.1-flash-1017',
    httpMethod: 'GET',
    headers: { Authorization: 'Bearer svc_live_abc', 'Content-Type': 'application/json', Accept: 'a' },
    multiValueHeaders: {
      Authorization: ['Bearer svc_live_abc'],
      'Content-Type': ['application/json'],
      Accept: ['a', 'b'],
    },
    queryStringParameters: { x: '2' },
    multiValueQueryStringParameters: { x: ['1', '2'] },
    pathParameters: { id: 'famA-v4.1-flash-1017' },
    stageVariables: null,
    body: null,
    isBase64Encoded: false,
    requestContext: {
      accountId: '123456789012',
      apiId: 'abc123',
      authorizer: null,
      domainName: 'abc123.execute-api.eu-west-1.amazonaws.com',
      domainPrefix: 'abc123',
      httpMethod: 'GET',
      identity: { sourceIp: '203.0.113.9', userAgent: 'openai/5' },
      path: '/prod/v1/models/famA-v4.1-flash-1017',
      protocol: 'HTTP/1.1',
      requestId: 'c6af9ac6-7b61-11e6-9a41-93e8deadbeef',
      requestTime: '22/Nov/2026:06:00:00 +0000',
      requestTimeEpoch: 1_795_327_200_000,
      resourceId: 'r1',
      resourcePath: '/v1/models/{id}',
      stage: 'prod',
    },
    ...overrides,
  }) as unknown as APIGatewayProxyEvent;

describe('asHttpEvent', () => {
  it('maps a REST API event onto the Function URL shape the handlers read', () => {
    const event = asHttpEvent(restEvent());
    expect(event.rawPath).toBe('/v1/models/famA-v4.1-flash-1017'); // without the stage
    expect(event.requestContext.http).toMatchObject({ method: 'GET', sourceIp: '203.0.113.9' });
    expect(header(event, 'authorization')).toBe('Bearer svc_live_abc');
    expect(header(event, 'accept')).toBe('a,b');
    expect(event.rawQueryString).toBe('x=1&x=2');
  });

  it('keeps bodies, base64 or not', () => {
    const json = asHttpEvent(restEvent({ httpMethod: 'POST', body: '{"model":"m"}' }));
    expect(jsonBody(json, 1024)).toEqual({ model: 'm' });
    const binary = asHttpEvent(
      restEvent({ body: Buffer.from('RIFF').toString('base64'), isBase64Encoded: true }),
    );
    expect(binary).toMatchObject({ body: 'UklGRg==', isBase64Encoded: true });
  });

  it('passes a Function URL event through untouched', () => {
    const v2 = asHttpEvent(restEvent());
    expect(asHttpEvent(v2)).toBe(v2);
  });
});
