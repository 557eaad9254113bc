import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { boundedRequests } from './aws-clients.ts';

/**
 * Resolves deployment secret references to upstream API keys (KeyRing caches them: read once per cold start, and
 * again after the upstream refused a key or a read failed).
 * `env:NAME` reads an environment variable (the local host, tests); `secretsmanager:ID` reads a Secrets
 * Manager secret by name or ARN (AWS). Keys live only in memory; they are never logged or written anywhere,
 * and error messages name the reference, never a value.
 */
export interface SecretResolver {
  resolve(ref: string): Promise<string>;
}

export class EnvSecretResolver implements SecretResolver {
  readonly #env: Readonly<Record<string, string | undefined>>;

  constructor(env: Readonly<Record<string, string | undefined>>) {
    this.#env = env;
  }

  async resolve(ref: string): Promise<string> {
    if (!ref.startsWith('env:'))
      throw new Error(`Unsupported secret reference scheme in "${ref.split(':')[0]}:…"`);
    const name = ref.slice(4);
    const value = this.#env[name];
    if (!value) throw new Error(`Secret reference ${ref} points at an unset environment variable`);
    return value;
  }
}

const SECRETS_MANAGER = 'secretsmanager:';

/**
 * `secretsmanager:ID`: the secret's whole `SecretString` is the key. The client is created on the first
 * reference, so an instance whose deployments use none (the local host) never builds one.
 */
export class SecretsManagerSecretResolver implements SecretResolver {
  readonly #client: () => SecretsManagerClient;
  #built: SecretsManagerClient | undefined;

  constructor(
    client: () => SecretsManagerClient = () =>
      new SecretsManagerClient({ maxAttempts: 3, ...boundedRequests() }),
  ) {
    this.#client = client;
  }

  async resolve(ref: string): Promise<string> {
    if (!ref.startsWith(SECRETS_MANAGER) || ref.length === SECRETS_MANAGER.length)
      throw new Error(`Not a Secrets Manager reference: "${ref.split(':')[0]}:…"`);
    this.#built ??= this.#client();
    const reply = await this.#built.send(
      new GetSecretValueCommand({ SecretId: ref.slice(SECRETS_MANAGER.length) }),
    );
    // A key pasted with a trailing newline would otherwise make an invalid Authorization header.
    const value = reply.SecretString?.trim();
    if (!value) throw new Error(`Secret reference ${ref} has no string value`);
    return value;
  }
}

/** Hands each reference to the resolver of its scheme (the text before the first `:`). */
export class SchemeSecretResolver implements SecretResolver {
  readonly #schemes: Readonly<Record<string, SecretResolver>>;

  constructor(schemes: Readonly<Record<string, SecretResolver>>) {
    this.#schemes = schemes;
  }

  resolve(ref: string): Promise<string> {
    const scheme = ref.slice(0, Math.max(0, ref.indexOf(':')));
    const resolver = Object.hasOwn(this.#schemes, scheme) ? this.#schemes[scheme] : undefined;
    if (!resolver) return Promise.reject(new Error(`Unsupported secret reference scheme in "${scheme}:…"`));
    return resolver.resolve(ref);
  }
}

/**
 * What an `env:` reference gets where no environment was handed in for key references (a Lambda instance).
 * There the process environment holds the function role's credentials (`AWS_SECRET_ACCESS_KEY`,
 * `AWS_SESSION_TOKEN`): a registry entry keyed `env:AWS_SECRET_ACCESS_KEY` would send them to its `baseUrl` as a
 * bearer token. Upstream keys on AWS live in Secrets Manager, so the scheme is refused outright rather than
 * filtered by name.
 */
class NoEnvSecretResolver implements SecretResolver {
  resolve(ref: string): Promise<string> {
    return Promise.reject(
      new Error(
        `Secret reference ${ref}: env: references resolve only on the local host; use secretsmanager:ID`,
      ),
    );
  }
}

/**
 * The resolver of a Lambda instance or the local host: `secretsmanager:` from AWS; `env:` from `env` when the
 * host hands one in (the local host, tests), refused when it does not (Lambda).
 */
export const defaultSecretResolver = (env?: Readonly<Record<string, string | undefined>>): SecretResolver =>
  new SchemeSecretResolver({
    env: env ? new EnvSecretResolver(env) : new NoEnvSecretResolver(),
    secretsmanager: new SecretsManagerSecretResolver(),
  });
