/**
 * Built-in chat templates.
 *
 * CHATML_TEMPLATE is the fallback when a GGUF has no tokenizer.chat_template: plain ChatML
 * (`<|im_start|>role\ncontent<|im_end|>\n`), with the assistant prompt `<|im_start|>assistant\n`.
 *
 * QWEN_STYLE_TEMPLATE is our own Qwen-style ChatML template, written for the fixture vocabulary:
 * system first, tool calls as `<tool_call>` JSON blocks, tool results wrapped in a user turn as
 * `<tool_response>`, and an assistant prompt that opens `<think>\n` (thinking on, the default) or
 * carries an empty `<think>\n\n</think>\n\n` block when `enable_thinking` is false.
 */

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
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\\n\\n</think>\\n\\n' -}}
{%- else -%}
{{- '<think>\\n' -}}
{%- endif -%}
{%- endif -%}`;
