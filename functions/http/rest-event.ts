import type { APIGatewayProxyEvent } from 'aws-lambda';
import type { HttpEvent } from './lambda.ts';

/**
 * Function URLs deliver the payload-2.0 event our handlers read; API Gateway's REST API (the CDN's `/v1/*`
 * origin, whose integrations can stream) delivers the older 1.0 shape: headers in the client's own casing, the
 * path in `path`, the method in `httpMethod`. This maps a 1.0 event onto 2.0 once, at the edge of the handler,
 * so nothing inside has to know which entry a request came through.
 */
export const asHttpEvent = (event: HttpEvent | APIGatewayProxyEvent): HttpEvent => {
  if ('rawPath' in event) return event;
  const headers: Record<string, string> = {};
  // Repeated headers join with commas, as HTTP allows and as payload 2.0 does.
  const multi = event.multiValueHeaders ?? {};
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    const values = multi[name];
    if (value !== undefined)
      headers[name.toLowerCase()] = values && values.length > 1 ? values.join(',') : value;
  }
  const query = new URLSearchParams();
  for (const [name, values] of Object.entries(event.multiValueQueryStringParameters ?? {})) {
    for (const value of values ?? []) query.append(name, value);
  }
  const ctx = event.requestContext;
  return {
    via: 'rest-api',
    version: '2.0',
    routeKey: '$default',
    rawPath: event.path,
    rawQueryString: query.toString(),
    headers,
    ...(event.body === null ? {} : { body: event.body }),
    isBase64Encoded: event.isBase64Encoded,
    requestContext: {
      accountId: ctx.accountId,
      apiId: ctx.apiId,
      domainName: ctx.domainName ?? '',
      domainPrefix: ctx.domainPrefix ?? '',
      requestId: ctx.requestId,
      routeKey: '$default',
      stage: ctx.stage,
      time: ctx.requestTime ?? '',
      timeEpoch: ctx.requestTimeEpoch,
      http: {
        method: event.httpMethod,
        path: event.path,
        protocol: ctx.protocol,
        sourceIp: ctx.identity.sourceIp,
        userAgent: ctx.identity.userAgent ?? '',
      },
    },
  };
};
