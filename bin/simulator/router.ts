/** A minimal route table: endpoints register a method and a path pattern, the server looks them up. */
import type { Exchange } from '#sim/http.ts';

/** One route: `pattern` is matched against the path without the query string. */
export interface Route {
  method: string;
  pattern: RegExp;
  /** `params` are the pattern's capture groups; `query` is the raw query string without `?`. */
  handle(ex: Exchange, params: ReadonlyArray<string | undefined>, query: string): void | Promise<void>;
}

/** Result of {@link findRoute}. */
export interface RouteMatch {
  route: Route;
  params: ReadonlyArray<string | undefined>;
}

/** First route matching the method and path, or null. */
export function findRoute(routes: readonly Route[], method: string, path: string): RouteMatch | null {
  for (const route of routes) {
    if (route.method !== method) continue;
    const match = route.pattern.exec(path);
    if (match !== null) return { route, params: match.slice(1) };
  }
  return null;
}

/** Characters allowed in a provider name, as used in `/p/<provider>/...` and the admin API. */
export const PROVIDER_PATTERN = '[A-Za-z0-9_.-]+';

/** Escapes a literal path for use inside a RegExp. */
export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
