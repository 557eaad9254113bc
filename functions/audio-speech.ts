import { SPEECH_FORMATS, speechCharacters, speechUsage, upstreamSpeechBody } from '#core/audio.ts';
import { costOf } from '#core/pricing.ts';
import { audioBody } from '#http/audio-stream.ts';
import { inferenceHandler } from '#http/inference-handler.ts';
import { header, jsonBody } from '#http/lambda.ts';
import { parseSpeechRequest } from '#http/schemas/speech.ts';
import { type Container, containerFromEnv } from './container.ts';

/** `POST /v1/audio/speech` — the audio streamed back as the upstream produces it. */
export const createHandler = (container: () => Container) =>
  inferenceHandler('audio.speech', container, async (event, call, c) => {
    // The key first, as OpenAI checks it: a caller without one learns nothing of the body's faults, and spends
    // no decoding or validation on it.
    await c.gateway.authenticate(header(event, 'authorization'), call);
    const request = parseSpeechRequest(jsonBody(event, c.config.maxJsonBodyBytes));
    const resolved = await c.gateway.resolve(request.model, 'speech', call);
    // Billed per character sent, so the hold is the exact cost.
    const usage = speechUsage(speechCharacters(request));
    const admission = {
      requestId: call.requestId,
      estimatedTokens: 0,
      holdAmount: costOf(resolved.model, usage),
    };
    // Resolves with the first audio bytes in hand (and the call admitted): every failure before them may still
    // fall back. Audio opened for a call then refused is closed unread.
    const audio = await c.gateway.admitAndRoute({
      request: admission,
      resolved,
      call,
      cycleKeys: true,
      attempt: (deployment, keyIndex, signal) =>
        c.provider(deployment.adapter, 'speech').speak({
          deployment,
          keyIndex,
          signal,
          body: upstreamSpeechBody(request, deployment.upstreamModel),
        }),
      discard: (opened) => opened.close(),
    });
    return {
      statusCode: 200,
      headers: { 'content-type': SPEECH_FORMATS[request.response_format ?? 'mp3'] },
      body: audioBody(audio, call, usage),
    };
  });

export const handler = createHandler(containerFromEnv);
