/** Latency samples and their percentiles; percentiles are nearest-rank over the sorted samples. */

/** A growable array of doubles (milliseconds), so recording a sample allocates nothing. */
export class Samples {
  #values: Float64Array;
  #length = 0;

  constructor(capacity = 4096) {
    this.#values = new Float64Array(capacity);
  }

  get length(): number {
    return this.#length;
  }

  push(value: number): void {
    if (this.#length === this.#values.length) {
      const grown = new Float64Array(this.#values.length * 2);
      grown.set(this.#values);
      this.#values = grown;
    }
    this.#values[this.#length++] = value;
  }

  /** A view of the recorded samples (not a copy). */
  view(): Float64Array {
    return this.#values.subarray(0, this.#length);
  }
}

export interface Distribution {
  readonly count: number;
  readonly mean: number;
  readonly min: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

/** Samples of several rounds as one array (a copy, safe to sort). */
export const concat = (parts: readonly Samples[]): Float64Array => {
  const out = new Float64Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part.view(), at);
    at += part.length;
  }
  return out;
};

/** Nearest-rank percentile of sorted values; `p` in 0..100. */
export const percentile = (sorted: Float64Array, p: number): number => {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
};

/** Summary of the values; sorts `values` in place. Null when there are none. */
export const distribution = (values: Float64Array): Distribution | null => {
  if (values.length === 0) return null;
  values.sort();
  let sum = 0;
  for (const v of values) sum += v;
  return {
    count: values.length,
    mean: sum / values.length,
    min: values[0] as number,
    p50: percentile(values, 50),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
    max: values[values.length - 1] as number,
  };
};

/** Distribution of one round's samples (copied, the round's own array is left alone). */
export const distributionOf = (samples: Samples): Distribution | null => distribution(samples.view().slice());
