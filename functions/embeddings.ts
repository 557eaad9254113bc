import {
  checkVectors,
  embeddingsReplyLimitBytes,
  embeddingsResponse,
  embeddingsUsage,
  prepareEmbeddings,
  upstreamEmbeddingsBody,
} from '#core/embeddings.ts';
import { costOf } from '#core/pricing.ts';
import { JSON_HEADERS } from '#http/handler.ts';
import { inferenceHandler, logHeldReport } from '#http/inference-handler.ts';
import { header, jsonBody } from '#http/lambda.ts';
import { parseEmbeddingsRequest } from '#http/schemas/embeddings.ts';
import { type Container, containerFromEnv } from './container.ts';

/** `POST /v1/embeddings` — one JSON reply; the vectors in the encoding the client asked for. */
export const createHandler = (container: () => Container) =>
  inferenceHandler('embeddings', container, async (event, call, c) => {
    // The key first, as OpenAI checks it: a caller without one learns nothing of the body's faults, and spends
    // no decoding or validation on it.
    await c.gateway.authenticate(header(event, 'authorization'), call);
    const request = parseEmbeddingsRequest(jsonBody(event, c.config.maxJsonBodyBytes));
    const resolved = await c.gateway.resolve(request.model, 'embedding', call);
    const prepared = prepareEmbeddings(request, resolved.model, c.tokens);
    const admission = {
      requestId: call.requestId,
      estimatedTokens: prepared.promptTokens,
      // Input tokens are all an embedding costs; the estimate is the upstream's count with our tokenizer.
      holdAmount: costOf(resolved.model, embeddingsUsage(prepared, null)),
    };
    const maxReplyBytes = embeddingsReplyLimitBytes(prepared);
    const result = await c.gateway.admitAndRoute({
      request: admission,
      resolved,
      call,
      cycleKeys: true,
      attempt: async (deployment, keyIndex, signal) => {
        const reply = await c.provider(deployment.adapter, 'embeddings').embed({
          deployment,
          keyIndex,
          signal,
          body: upstreamEmbeddingsBody(prepared, deployment),
          maxReplyBytes,
        });
        checkVectors(prepared, reply.vectors);
        return reply;
      },
    });
    const usage = embeddingsUsage(prepared, result.promptTokens);
    if (result.promptTokens !== null)
      logHeldReport(c.log, call, { ...usage, promptTokens: result.promptTokens }, usage);
    call.succeeded(usage);
    return {
      statusCode: 200,
      headers: JSON_HEADERS,
      body: JSON.stringify(embeddingsResponse(prepared, result.vectors, usage)),
    };
  });

export const handler = createHandler(containerFromEnv);
