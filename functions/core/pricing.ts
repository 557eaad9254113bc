import type { Model, Rates } from './registry.ts';
import type { Usage } from './usage.ts';

/**
 * Money is kept in integer nano-dollars (1 USD = 1e9). Registry rates are decimal USD per 1M units
 * (per minute for audio transcription); they are converted to integer pico-dollars per unit so a
 * call's cost is computed exactly with bigint arithmetic and rounded once, half up, to the nano-dollar.
 */
export const NANO_PER_USD = 1_000_000_000;

export const usdToNano = (usd: number): number => Math.round(usd * NANO_PER_USD);

/**
 * A decimal USD amount as typed (`25`, `12.50`, at most nine decimals: the nano-dollar) in nano-dollars, read
 * digit for digit; null when it is not one. For amounts people enter, where `usdToNano`'s float may land a
 * nano-dollar off (4341553.41828889 → …891).
 */
export const parseUsd = (text: string): number | null => {
  const decimal = /^(\d+)(?:\.(\d{1,9}))?$/.exec(text);
  if (!decimal) return null;
  return Number(decimal[1]) * NANO_PER_USD + Number((decimal[2] ?? '').padEnd(9, '0'));
};
export const nanoToUsd = (nano: number): number => nano / NANO_PER_USD;

/** USD per 1M units → integer pico-USD per unit (exact for rates with up to six decimals). */
const picoPerUnit = (usdPerMillion: number): bigint => BigInt(Math.round(usdPerMillion * 1_000_000));

const PICO_PER_NANO = 1000n;
const roundPicoToNano = (pico: bigint): number => Number((pico + PICO_PER_NANO / 2n) / PICO_PER_NANO);

/** Cost of a chat or embedding call's tokens; cached prompt tokens use the cached rate when there is one. */
const tokenCost = (
  rates: Rates,
  usage: Pick<Usage, 'promptTokens' | 'completionTokens' | 'cachedPromptTokens'>,
) => {
  const cached = BigInt(usage.cachedPromptTokens);
  const uncached = BigInt(usage.promptTokens) - cached;
  const cachedRate = picoPerUnit(rates.cachedInput ?? rates.input);
  return (
    uncached * picoPerUnit(rates.input) +
    cached * cachedRate +
    BigInt(usage.completionTokens) * picoPerUnit(rates.output ?? 0)
  );
};

/** The published price of a call with this usage, in nano-USD. Free models cost nothing. */
export const costOf = (model: Model, usage: Usage): number => {
  if (model.flags.free) return 0;
  switch (model.kind) {
    case 'chat':
    case 'embedding':
      return roundPicoToNano(tokenCost(model.rates, usage));
    case 'speech':
      return roundPicoToNano(BigInt(usage.characters ?? 0) * picoPerUnit(model.rates.input));
    case 'transcription': {
      // Rate is USD per minute: pico-USD per minute = usd × 1e12; bill per millisecond of audio.
      const perMinutePico = BigInt(Math.round(model.rates.input * 1e12));
      return roundPicoToNano((BigInt(usage.audioMs ?? 0) * perMinutePico) / 60_000n);
    }
  }
};

/**
 * The most a chat call can cost: the prompt estimate at the input rate plus every choice using its whole
 * completion cap at the output rate (cached input is assumed uncached). This is what admission holds.
 */
export const worstCaseChatCost = (model: Model, promptTokens: number, completionTokens: number): number =>
  costOf(model, {
    promptTokens,
    completionTokens,
    cachedPromptTokens: 0,
    reasoningTokens: 0,
    source: 'estimated',
  });

/** The largest completion cap per choice whose worst case an available amount (nano-USD) covers. */
export const affordableCompletionTokens = (
  model: Model,
  promptTokens: number,
  choices: number,
  availableNano: number,
): number => {
  const promptCost = worstCaseChatCost(model, promptTokens, 0);
  const perToken = picoPerUnit(model.rates.output ?? 0);
  if (perToken === 0n) return availableNano >= promptCost ? Number.MAX_SAFE_INTEGER : 0;
  const spare = BigInt(Math.max(0, availableNano - promptCost)) * PICO_PER_NANO;
  let tokens = Number(spare / (perToken * BigInt(choices)));
  // Rounding to the nano-dollar happens once on the total; step down until the worst case really fits.
  while (tokens > 0 && worstCaseChatCost(model, promptTokens, tokens * choices) > availableNano) tokens--;
  return tokens;
};
