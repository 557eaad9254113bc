import {
  REPORTED_DURATION_SLACK_MS,
  TRANSCRIPTION_FORMATS,
  transcriptionBody,
  transcriptionUsage,
  upstreamAudioFile,
  upstreamTranscriptionFields,
} from '#core/audio.ts';
import { costOf } from '#core/pricing.ts';
import { inferenceHandler } from '#http/inference-handler.ts';
import { decodedBody, header, sizedBody } from '#http/lambda.ts';
import { parseMultipart } from '#http/multipart.ts';
import { parseTranscriptionRequest } from '#http/schemas/transcriptions.ts';
import { type Container, containerFromEnv } from './container.ts';

/** `POST /v1/audio/transcriptions` — a multipart upload; billed on the duration the gateway measures. */
export const createHandler = (container: () => Container) =>
  inferenceHandler('audio.transcriptions', container, async (event, call, c) => {
    // The size limit first (it reads nothing), then the key: decompressing, parsing and probing an upload costs CPU
    // that an anonymous caller should not get to spend.
    const sized = sizedBody(event, c.config.maxAudioBodyBytes);
    await c.gateway.authenticate(header(event, 'authorization'), call);
    const bytes = decodedBody(event, sized, c.config.maxAudioBodyBytes);
    const { request, file } = parseTranscriptionRequest(
      await parseMultipart(bytes, header(event, 'content-type')),
    );
    const resolved = await c.gateway.resolve(request.model, 'transcription', call);
    const audio = await c.audio.probe(file.bytes);
    const upload = upstreamAudioFile(file, audio.format);
    const admission = {
      requestId: call.requestId,
      estimatedTokens: 0,
      holdAmount: costOf(resolved.model, transcriptionUsage(audio.durationMs)),
    };
    const reply = await c.gateway.admitAndRoute({
      request: admission,
      resolved,
      call,
      cycleKeys: true,
      attempt: async (deployment, keyIndex, signal) => {
        const upstream = await c.provider(deployment.adapter, 'transcriptions').transcribe({
          deployment,
          keyIndex,
          signal,
          file: upload,
          fields: upstreamTranscriptionFields(request, deployment.upstreamModel),
        });
        return transcriptionBody(request.response_format, upstream.body, audio);
      },
    });
    // The hold covered our measure; a provider's clearly longer decode of a file we could not count is billed above
    // it (ARCHITECTURE.md §7: a cost above its hold is still debited). One of a file we counted is the provider's to
    // answer for: told, for whoever reconciles with it, and billed to no one.
    if (reply.reportedMs !== null && reply.reportedMs > reply.audioMs + REPORTED_DURATION_SLACK_MS)
      c.log.warn('upstream reported more audio than the file holds; billed our count', {
        requestId: call.requestId,
        deployment: call.deployment?.id ?? null,
        reportedMs: reply.reportedMs,
        billedMs: reply.audioMs,
      });
    call.succeeded(transcriptionUsage(reply.audioMs));
    return {
      statusCode: 200,
      headers: { 'content-type': TRANSCRIPTION_FORMATS[request.response_format] },
      body: reply.body,
    };
  });

export const handler = createHandler(containerFromEnv);
