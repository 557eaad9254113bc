/**
 * Resolves deployment secret references to upstream API keys, once per cold start.
 * `env:NAME` reads an environment variable (the local host, tests, or a Lambda environment injected
 * from Secrets Manager). Keys live only in memory; they are never logged or written anywhere.
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
