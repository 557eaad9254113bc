import { encode } from 'gpt-tokenizer';
import { describe, expect, test } from 'vitest';
import { o200kTokenCounter } from '#adapters/tokenizer.ts';
import { countPromptTokens, countTextTokens } from '#sim/tokens.ts';

describe('countPromptTokens', () => {
  test('counts each message as its text tokens plus 3, plus 3 for the reply', () => {
    const body = {
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Say hello to the world.' },
      ],
    };
    const expected = encode('You are terse.').length + 3 + encode('Say hello to the world.').length + 3 + 3;
    expect(countPromptTokens(body)).toBe(expected);
  });

  test('counts text parts individually and 85 per image part', () => {
    const body = {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
            { type: 'text', text: 'these pictures?' },
            { type: 'image_url', image_url: { url: 'https://example.com/b.png' } },
          ],
        },
      ],
    };
    const expected = encode('What is in').length + encode('these pictures?').length + 2 * 85 + 3 + 3;
    expect(countPromptTokens(body)).toBe(expected);
  });

  test('counts tool call names and arguments of assistant messages with null content', () => {
    const body = {
      messages: [
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_1',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      ],
    };
    const expected =
      encode('get_weather').length + encode('{"city":"Oslo"}').length + 3 + encode('sunny').length + 3 + 3;
    expect(countPromptTokens(body)).toBe(expected);
  });

  test('adds the tokens of the serialised tools when tools are present', () => {
    const tools = [
      { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } },
    ];
    const messages = [{ role: 'user', content: 'hi' }];
    expect(countPromptTokens({ messages, tools })).toBe(
      countPromptTokens({ messages }) + encode(JSON.stringify(tools)).length,
    );
    expect(countPromptTokens({ messages, tools: [] })).toBe(countPromptTokens({ messages }));
  });

  test('treats special-token markers in user text as plain text instead of throwing', () => {
    expect(countTextTokens('before <|endoftext|> after')).toBeGreaterThan(3);
    expect(() => countPromptTokens({ messages: [{ role: 'user', content: '<|im_start|>' }] })).not.toThrow();
  });

  test('skips malformed messages instead of failing', () => {
    expect(countPromptTokens({ messages: [null, 42, { role: 'user' }] })).toBe(3 * 3 + 3);
  });
});

describe('the simulator counts as the gateway estimates', () => {
  test("with the gateway's counter, long runs without a space included (which it counts in slices)", () => {
    // 20,000 letters without a space, from a fixed sequence: BPE on the whole run and the counter's slices differ.
    let seed = 7;
    const letter = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return String.fromCharCode(97 + Math.floor((seed / 2 ** 31) * 26));
    };
    const word = Array.from({ length: 20_000 }, letter).join('');
    expect(countTextTokens(word)).toBe(o200kTokenCounter.count(word));
    expect(countTextTokens(`Hello ${word} world`)).toBe(o200kTokenCounter.count(`Hello ${word} world`));
  });
});
