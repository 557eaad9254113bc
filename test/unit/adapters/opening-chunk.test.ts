import { describe, expect, it } from 'vitest';
import { openingChunk, openingOfChoices } from '#adapters/upstream/openai-compatible.ts';
import { schemaErrors } from '#test/openapi-schemas.ts';

/** Spec §4 rule 3: a stream opens with a chunk whose delta carries the role and no content. */

const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: 'famA-v4.1-flash' };
const chunk = (choices: object[], extra: object = {}) => JSON.stringify({ ...base, ...extra, choices });
const choice = (delta: object, index = 0) => ({ index, delta, logprobs: null, finish_reason: null });

const opening = (data: string) => {
  const made = openingChunk(data);
  return made === null ? null : (JSON.parse(made) as Record<string, unknown>);
};
const indicesOf = (made: Record<string, unknown> | null) =>
  (made?.choices as { index: number }[] | undefined)?.map((c) => c.index);

describe('the opening chunk of a relayed stream', () => {
  it("is not added before OpenAI's own opening (with or without its refusal field)", () => {
    expect(opening(chunk([choice({ role: 'assistant', content: '' })]))).toBeNull();
    expect(opening(chunk([choice({ role: 'assistant', content: '', refusal: null })]))).toBeNull();
  });

  it("is not added before OpenAI's opening of a tool call: a role, content null, the call's name", () => {
    const toolCall = { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } };
    const data = chunk([choice({ role: 'assistant', content: null, tool_calls: [toolCall] })]);
    expect(opening(data)).toBeNull();
  });

  it('is added before a first chunk that carries the role and the first text together', () => {
    const made = opening(
      chunk([choice({ role: 'assistant', content: 'Hello' })], { system_fingerprint: 'fp_1' }),
    );
    expect(made).toEqual({
      ...base,
      system_fingerprint: 'fp_1',
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
    });
    expect(schemaErrors('CreateChatCompletionStreamResponse', made)).toBe('');
  });

  it('is added before a first chunk without a role, and before one whose role comes with reasoning text', () => {
    expect(opening(chunk([choice({ content: 'Hello' })]))).not.toBeNull();
    expect(opening(chunk([choice({ role: 'assistant', reasoning_content: 'Hm' })]))).not.toBeNull();
    // Its delta begins as OpenAI's opening does, and goes on with text.
    expect(
      opening(chunk([choice({ role: 'assistant', content: '', reasoning_content: 'Hm' })])),
    ).not.toBeNull();
  });
});

describe('with several choices (n > 1), the opening of each choice', () => {
  const track = (n: number) => new Set(Array.from({ length: n }, (_, i) => i));
  const parsed = (made: string | null) =>
    made === null ? null : (JSON.parse(made) as Record<string, unknown>);

  it('is made when a choice first appears with text, after the first chunk, and only once', () => {
    const unopened = track(2);
    expect(openingOfChoices(chunk([choice({ role: 'assistant', content: '' }, 0)]), unopened)).toBeNull();
    expect([...unopened]).toEqual([1]);
    expect(openingOfChoices(chunk([choice({ content: 'A' }, 0)]), unopened, false)).toBeNull();
    const made = parsed(
      openingOfChoices(chunk([choice({ role: 'assistant', content: 'B' }, 1)]), unopened, false),
    );
    expect(indicesOf(made)).toEqual([1]);
    expect(schemaErrors('CreateChatCompletionStreamResponse', made)).toBe('');
    expect(unopened.size).toBe(0);
    expect(openingOfChoices(chunk([choice({ content: 'C' }, 1)]), unopened, false)).toBeNull();
  });

  it('opens only the choices of a chunk that do not open themselves', () => {
    const unopened = track(3);
    const made = openingOfChoices(
      chunk([choice({ role: 'assistant', content: '' }, 0), choice({ content: 'B' }, 1)]),
      unopened,
    );
    expect(indicesOf(parsed(made))).toEqual([1]);
    expect([...unopened]).toEqual([2]);
  });

  it('opens each choice the first chunk carries, or each the call asked for when it carries none', () => {
    const two = parsed(
      openingOfChoices(
        chunk([choice({ role: 'assistant', content: 'A' }, 0), choice({ content: 'B' }, 1)]),
        track(2),
      ),
    );
    expect(indicesOf(two)).toEqual([0, 1]);
    const usageFirst = parsed(
      openingOfChoices(
        chunk([], { usage: { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 } }),
        track(3),
      ),
    );
    expect(indicesOf(usageFirst)).toEqual([0, 1, 2]);
    expect(usageFirst).not.toHaveProperty('usage');
  });

  it('opens them all before a first chunk without choices, and waits for them after it', () => {
    const usage = { usage: { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 } };
    const first = track(2);
    expect(indicesOf(parsed(openingOfChoices(chunk([], usage), first)))).toEqual([0, 1]);
    expect(first.size).toBe(0);
    const later = track(2);
    expect(openingOfChoices(chunk([], usage), later, false)).toBeNull();
    expect(later.size).toBe(2);
  });
});
