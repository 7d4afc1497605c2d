/**
 * Built-in chat templates.
 *
 * QWEN35_TEMPLATE is the fallback when a GGUF has no tokenizer.chat_template: our own template that
 * behaves as Qwen3.5's (a file's own template always wins):
 * - tools listed in the system turn as JSON, with calls asked for in the XML format
 *   `<tool_call>\n<function=NAME>\n<parameter=ARG>\nvalue\n</parameter>\n</function>\n</tool_call>`
 *   (a string argument as is, any other value as JSON), several calls in a row, reasoning before them;
 * - assistant tool calls rendered in that format, tool results grouped into one user turn as
 *   `<tool_response>` blocks;
 * - thinking on by default: the assistant prompt opens `<think>\n`; `enable_thinking: false` gives the
 *   empty block `<think>\n\n</think>\n\n`;
 * - an assistant turn's reasoning (`reasoning_content`, or a `<think>...</think>` at the start of its
 *   content) is rendered for the turns after the last user query (the current tool-calling round) and
 *   dropped for earlier turns, unless `preserve_thinking` is true (Qwen3.6's switch), which keeps all.
 *
 * QWEN_STYLE_TEMPLATE is the Qwen3-style template of the fixture vocabulary
 * (goldens/tokenizer/vocab.json, written by scripts/tokenizer/train-bpe.ts into every fixture GGUF):
 * system first, tool calls as `<tool_call>` JSON blocks, tool results wrapped in a user turn as
 * `<tool_response>`, and an assistant prompt that opens `<think>\n` (thinking on, the default) or
 * carries an empty `<think>\n\n</think>\n\n` block when `enable_thinking` is false. Fixture files
 * carry it, so their prompts (and the goldens made from them) do not change with the built-in one.
 *
 * CHATML_TEMPLATE is plain ChatML (`<|im_start|>role\ncontent<|im_end|>\n`, the assistant prompt
 * `<|im_start|>assistant\n`), for models trained on it (tools/train).
 */

/**
 * The assistant prompt QWEN_STYLE_TEMPLATE and QWEN35_TEMPLATE end with: `<think>\n` opens the reasoning
 * (thinking on, the default), or the empty block `<think>\n\n</think>\n\n` when `enable_thinking` is false.
 */
const THINKING_ASSISTANT_PROMPT = `{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\\n\\n</think>\\n\\n' -}}
{%- else -%}
{{- '<think>\\n' -}}
{%- endif -%}
{%- endif -%}`;

export const CHATML_TEMPLATE = `{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}`;

export const QWEN_STYLE_TEMPLATE = `{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\n\\nYou may call one or more functions. Their signatures:\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools>\\n\\nReply with a <tool_call></tool_call> block holding {"name": ..., "arguments": ...} for each call.<|im_end|>\\n' -}}
{%- elif messages[0].role == 'system' -%}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'user' -%}
{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if message.content -%}{{- message.content -}}{%- endif -%}
{%- if message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- if message.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}
{{- '<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) + '}\\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
${THINKING_ASSISTANT_PROMPT}`;

export const QWEN35_TEMPLATE = `{%- set first_is_system = messages and messages[0].role == 'system' -%}
{%- set system_text = (messages[0].content if first_is_system and messages[0].content is string else '') | trim -%}
{%- if tools -%}
{{- '<|im_start|>system\\n# Tools\\n\\nYou can call these functions:\\n\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools>\\n\\nTo call a function, reply in exactly this format, with nothing after the calls:\\n\\n<tool_call>\\n<function=function_name>\\n<parameter=parameter_name>\\nvalue (text may span several lines)\\n</parameter>\\n</function>\\n</tool_call>\\n\\nRules:\\n- one <tool_call> block per call, one after another for several calls\\n- give every required parameter\\n- reasoning about a call goes before it, never after\\n- when no function fits, answer normally without mentioning functions' -}}
{%- if system_text -%}{{- '\\n\\n' + system_text -}}{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- elif first_is_system -%}
{{- '<|im_start|>system\\n' + system_text + '<|im_end|>\\n' -}}
{%- endif -%}
{%- set ns = namespace(last_query=-1) -%}
{%- for message in messages -%}
{%- if message.role == 'user' -%}
{%- set text = (message.content if message.content is string else '') | trim -%}
{%- if not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) -%}{%- set ns.last_query = loop.index0 -%}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
{%- set content = (message.content if message.content is string else '') | trim -%}
{%- if message.role == 'system' -%}
{%- if not loop.first -%}{{- raise_exception('a system message must be the first message') -}}{%- endif -%}
{%- elif message.role == 'user' -%}
{{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' -}}
{%- elif message.role == 'assistant' -%}
{%- set reasoning = '' -%}
{%- if message.reasoning_content is string -%}
{%- set reasoning = message.reasoning_content -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
{%- set content = content.split('</think>')[-1] | trim -%}
{%- endif -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if loop.index0 > ns.last_query or preserve_thinking is true -%}
{{- '<think>\\n' + (reasoning | trim) + '\\n</think>\\n\\n' -}}
{%- endif -%}
{{- content -}}
{%- if message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if not loop.first -%}{{- '\\n' -}}{%- elif content -%}{{- '\\n\\n' -}}{%- endif -%}
{{- '<tool_call>\\n<function=' + fn.name + '>\\n' -}}
{%- if fn.arguments is mapping -%}
{%- for key, value in fn.arguments | items -%}
{{- '<parameter=' + key + '>\\n' + (value if value is string else (value | tojson)) + '\\n</parameter>\\n' -}}
{%- endfor -%}
{%- endif -%}
{{- '</function>\\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- else -%}
{{- raise_exception('unknown message role: ' + message.role) -}}
{%- endif -%}
{%- endfor -%}
${THINKING_ASSISTANT_PROMPT}`;
