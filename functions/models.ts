import { MODELS_PATH } from '#core/endpoints.ts';
import { ModelNotFoundError, RouteNotFoundError } from '#core/errors.ts';
import { modelObject } from '#core/model-listing.ts';
import { byId, type Catalog } from '#core/registry.ts';
import { httpHandler, JSON_HEADERS, withoutTrailingSlashes } from '#http/handler.ts';
import { header } from '#http/lambda.ts';
import { type Container, containerFromEnv } from './container.ts';

/** Clients may reuse a listing briefly; the registry snapshot behind it is itself up to a few seconds old. */
const CACHE_CONTROL = 'private, max-age=15';

/** The listing changes only with the registry snapshot, so it is built once per snapshot, not per request. */
const listings = new WeakMap<Catalog, unknown>();
const listingOf = (catalog: Catalog): unknown => {
  let listing = listings.get(catalog);
  if (listing === undefined) {
    // In the order of their ids, not the registry table's.
    const models = catalog.list().sort(byId);
    listing = { object: 'list', data: models.map(modelObject) };
    listings.set(catalog, listing);
  }
  return listing;
};

/**
 * `GET /v1/models` and `GET /v1/models/{id}`: the live catalog from the registry snapshot, with published
 * rates (price floor applied). Authenticated like every endpoint; not metered and not settled (it calls no
 * model). Retired models are not listed and answer 404, like unknown ones.
 */
export const createHandler = (container: () => Container) =>
  httpHandler(
    async (event) => {
      const path = withoutTrailingSlashes(event.rawPath);
      // A path this function does not serve is refused before the key is looked at, as the routers refuse it.
      if (path !== MODELS_PATH && !path.startsWith(`${MODELS_PATH}/`))
        throw new RouteNotFoundError(event.requestContext.http.method, event.rawPath);
      const c = container();
      await c.gateway.authenticateOnly(header(event, 'authorization'));
      const catalog = await c.registry.catalog();
      let body: unknown;
      if (path === MODELS_PATH) {
        body = listingOf(catalog);
      } else {
        const raw = path.slice(MODELS_PATH.length + 1);
        let id: string;
        try {
          id = decodeURIComponent(raw);
        } catch {
          throw new ModelNotFoundError(raw); // a malformed escape names no model
        }
        const model = catalog.models.get(id);
        if (model?.status !== 'active') throw new ModelNotFoundError(id);
        body = modelObject(model);
      }
      return {
        statusCode: 200,
        headers: { ...JSON_HEADERS, 'cache-control': CACHE_CONTROL },
        body: JSON.stringify(body),
      };
    },
    () => container().log,
    ['GET'],
    container,
  );

export const handler = createHandler(containerFromEnv);
