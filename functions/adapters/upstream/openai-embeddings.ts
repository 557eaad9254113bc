import { UpstreamFailure } from '#core/fallback.ts';
import type { EmbeddingsCall, EmbeddingsProvider, EmbeddingsResult, UpstreamVector } from '#core/upstream.ts';
import { statusFailure } from './http.ts';
import { type OpenAiHttp, readJsonObject } from './openai-http.ts';

/** `POST /embeddings` on an OpenAI-compatible upstream; vectors come back as sent (floats or base64). */
export class OpenAiCompatibleEmbeddings implements EmbeddingsProvider {
  readonly #http: OpenAiHttp;

  constructor(http: OpenAiHttp) {
    this.#http = http;
  }

  async embed(call: EmbeddingsCall): Promise<EmbeddingsResult> {
    const response = await this.#http.post(call, {
      path: '/embeddings',
      body: JSON.stringify(call.body),
      contentType: 'application/json',
      accept: 'application/json',
      headersTimeoutMs: this.#http.completionTimeoutMs(call.deployment),
      wholeBodyLimitBytes: call.maxReplyBytes,
    });
    if (response.statusCode !== 200) throw await statusFailure(response);
    const body = await readJsonObject(response, call.maxReplyBytes);
    if (!Array.isArray(body.data)) throw new UpstreamFailure('protocol', 'upstream reply has no data list');
    const vectors: UpstreamVector[] = [];
    for (const item of body.data as unknown[]) {
      const { index, embedding } = (item ?? {}) as { index?: unknown; embedding?: unknown };
      const valid =
        typeof index === 'number' &&
        Number.isInteger(index) &&
        index >= 0 &&
        index < body.data.length &&
        vectors[index] === undefined &&
        (typeof embedding === 'string' || Array.isArray(embedding));
      if (!valid) throw new UpstreamFailure('protocol', 'upstream embedding item is malformed');
      // Providers may list items out of order; the index says which input each belongs to.
      vectors[index] = embedding as UpstreamVector;
    }
    const usage = body.usage as { prompt_tokens?: unknown } | undefined;
    const reported = usage?.prompt_tokens;
    return {
      vectors,
      promptTokens:
        typeof reported === 'number' && Number.isInteger(reported) && reported >= 0 ? reported : null,
    };
  }
}
