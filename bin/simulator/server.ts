/**
 * The upstream simulator: an OpenAI-compatible fake model provider (plus Anthropic's Messages API at
 * `/v1/messages`) with fault injection, for testing and benchmarking an inference gateway over real HTTP.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdminRoutes } from '#sim/admin.ts';
import { type ApiEndpoint, createApiRoute } from '#sim/api.ts';
import { CallLog, type SimCall } from '#sim/calls.ts';
import { createChatEndpoint } from '#sim/chat.ts';
import { createEmbeddingsEndpoint } from '#sim/embeddings.ts';
import { invalidUrlError, SERVER_ERROR } from '#sim/errors.ts';
import { type FaultSpec, FaultStore } from '#sim/faults.ts';
import { Exchange, sendJson } from '#sim/http.ts';
import { createMessagesEndpoint } from '#sim/messages.ts';
import { createPriceRoutes, type PriceLists, PriceStore, type SimPrice } from '#sim/prices.ts';
import { findRoute, type Route } from '#sim/router.ts';
import { createSpeechEndpoint } from '#sim/speech.ts';
import { createTranscriptionsEndpoint } from '#sim/transcriptions.ts';

export type { SimCall } from '#sim/calls.ts';
export type { FaultSpec } from '#sim/faults.ts';

/** Options of {@link startSimulator}. */
export interface SimulatorOptions {
  /** Port to listen on; 0 (the default) picks a free ephemeral port. */
  port?: number;
  /** Interface to bind; defaults to `127.0.0.1`. */
  host?: string;
  /** Latency added to every API call (not admin calls), e.g. 50 to mimic a real provider in a benchmark. */
  latencyMs?: number;
  /**
   * Upstream model names whose usage reports simulated prompt caching (`prompt_tokens_details` on chat,
   * cache reads and writes on Messages).
   */
  promptCachingModels?: string[];
  /** Initial price lists per provider, served at `GET /p/<provider>/v1/models` (see prices.ts). */
  prices?: PriceLists;
}

/** A running simulator. */
export interface Simulator {
  /** Base URL without trailing slash, e.g. `http://127.0.0.1:41234`. */
  url: string;
  port: number;
  /** Sets (or with null clears) a provider's faults, like `PUT /_sim/faults/<provider>`. */
  setFaults(provider: string, spec: FaultSpec | null): void;
  /** Clears every provider's faults, like `DELETE /_sim/faults`. */
  resetFaults(): void;
  /** Recorded API calls, oldest first and newest last (the last 1000), optionally for one provider. */
  calls(provider?: string): SimCall[];
  /** Forgets recorded calls, like `DELETE /_sim/calls`. */
  clearCalls(): void;
  /** Merges into a provider's price list, like `PUT /_sim/prices/<provider>`. */
  setPrices(provider: string, prices: Record<string, SimPrice | null>): void;
  /** Stops listening and destroys open (including keep-alive) connections; safe to call twice. */
  close(): Promise<void>;
}

/** Starts a simulator and resolves once it is listening. */
export async function startSimulator(options: SimulatorOptions = {}): Promise<Simulator> {
  const faults = new FaultStore();
  const calls = new CallLog();
  const prices = new PriceStore(options.prices);
  const endpoints: ApiEndpoint[] = [
    createChatEndpoint({ promptCachingModels: options.promptCachingModels }),
    createMessagesEndpoint({ promptCachingModels: options.promptCachingModels }),
    createEmbeddingsEndpoint(),
    createTranscriptionsEndpoint(),
    createSpeechEndpoint(),
  ];
  const apiContext = { faults, calls, latencyMs: options.latencyMs ?? 0 };
  const routes: Route[] = [
    ...createAdminRoutes({ faults, calls }),
    ...createPriceRoutes(prices),
    ...endpoints.map((endpoint) => createApiRoute(endpoint, apiContext)),
  ];

  const server = createServer((req, res) => {
    void dispatch(routes, req, res);
  });
  // Longer than common client pool idle timeouts, so a pooled connection is not closed under the
  // gateway mid-request (the classic keep-alive race).
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  const host = options.host ?? '127.0.0.1';
  await listen(server, options.port ?? 0, host);
  const { port } = server.address() as AddressInfo;

  let closing: Promise<void> | null = null;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    setFaults: (provider, spec) => faults.set(provider, spec),
    resetFaults: () => faults.clear(),
    calls: (provider) => calls.list(provider),
    clearCalls: () => calls.clear(),
    setPrices: (provider, list) => prices.set(provider, list),
    close: () => {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((error) => (error === undefined ? resolve() : reject(error)));
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

async function dispatch(routes: readonly Route[], req: IncomingMessage, res: ServerResponse): Promise<void> {
  const ex = new Exchange(req, res);
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  const method = req.method ?? 'GET';
  try {
    const match = findRoute(routes, method, path);
    if (match === null) {
      req.resume();
      sendJson(ex, 404, invalidUrlError(method, path));
      return;
    }
    await match.route.handle(ex, match.params, q === -1 ? '' : url.slice(q + 1));
  } catch (error) {
    // A simulator bug must not take the benchmark down: report it like a provider would.
    console.error('upstream simulator: unhandled error', error);
    if (ex.gone) return;
    if (res.headersSent) ex.drop();
    else sendJson(ex, 500, SERVER_ERROR);
  }
}
