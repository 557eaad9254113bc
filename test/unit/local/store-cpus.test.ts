import { describe, expect, it } from 'vitest';
import { storeCpuList } from '#local/emulators.ts';

describe('storeCpuList (the CPUs DynamoDB Local is confined to)', () => {
  it('leaves a single CPU alone', () => {
    expect(storeCpuList(1)).toBeNull();
  });

  it('takes the upper half, at least one CPU, never CPU 0', () => {
    expect(storeCpuList(2)).toBe('1');
    expect(storeCpuList(3)).toBe('2');
    expect(storeCpuList(4)).toBe('2-3');
    expect(storeCpuList(8)).toBe('4-7');
  });
});
