"""The project's own tool-aware ChatML chat template, written into every checkpoint it makes.

SmolLM2's own template ignores ``tools=``, drops ``tool_calls`` and has no generation markers,
so the project renders conversations itself:

- ``<|im_start|>role\\n...<|im_end|>\\n`` turns;
- the system turn lists the tools (one JSON function spec per line inside ``<tools>``) and says
  how a call is written: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
- an assistant turn is its text, then one ``<tool_call>{json}</tool_call>`` line per call, exactly
  as :func:`interlock.core.chat.render_turn` writes it, so the training text is what the
  model must generate and what :func:`~interlock.core.chat.parse_turn` reads back;
- a tool result is a ``tool`` turn;
- the assistant's text and its ``<|im_end|>`` sit inside ``{% generation %}`` markers, so
  ``apply_chat_template(..., return_assistant_tokens_mask=True, return_dict=True)`` gives the
  assistant-only loss mask (TRL's ``assistant_only_loss`` reads the same markers);
- ``add_generation_prompt`` appends ``<|im_start|>assistant\\n``.

Messages are :meth:`Message.to_dict` dicts (arguments as objects); OpenAI-style arguments given
as a JSON string are written as they are.
"""

from __future__ import annotations

from interlock.core.chat import neutralized_message
from interlock.core.errors import InterlockError

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

TOOLS_PREAMBLE = ("# Tools\n\nYou can call these tools (JSON function specs):\n<tools>\n")
TOOLS_USAGE = ("</tools>\n\nTo call a tool, write a line <tool_call>{\"name\": <tool name>, \"arguments\": "
               "<arguments as a JSON object>}</tool_call>. You may call several tools in one turn; "
               "their results come back as tool messages.")

# Whitespace control: transformers compiles templates with trim_blocks and lstrip_blocks, and every
# tag below strips on both sides, so only the quoted strings reach the output.
CHAT_TEMPLATE = (
    "{%- macro render_tools(tools) -%}"
    "{{- '" + TOOLS_PREAMBLE.replace("\n", "\\n") + "' -}}"
    "{%- for tool in tools -%}"
    "{%- set spec = tool.function if tool.function is defined else tool -%}"
    "{{- spec | tojson -}}{{- '\\n' -}}"
    "{%- endfor -%}"
    "{{- '" + TOOLS_USAGE.replace("\n", "\\n") + "' -}}"
    "{%- endmacro -%}"
    "{%- macro render_assistant(message) -%}"
    "{%- set ns = namespace(text=(message.content or '') | trim) -%}"
    "{%- for call in message.tool_calls or [] -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    "{%- set args = fn.arguments if fn.arguments is string else (fn.arguments | tojson) -%}"
    "{%- set body = '<tool_call>{\"name\": ' + (fn.name | tojson) + ', \"arguments\": ' + args"
    " + '}</tool_call>' -%}"
    "{%- set ns.text = (ns.text + '\\n' + body) if ns.text else body -%}"
    "{%- endfor -%}"
    "{{- ns.text -}}"
    "{%- endmacro -%}"
    # the system turn: the given system message (if first), then the tools
    "{%- set first_system = messages and messages[0].role == 'system' -%}"
    "{%- if first_system or tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if first_system -%}{{- messages[0].content -}}{%- endif -%}"
    "{%- if tools -%}"
    "{%- if first_system and messages[0].content -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- render_tools(tools) -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and first_system -%}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{{- render_assistant(message) -}}{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def openai_tools(specs: list[dict] | tuple[dict, ...]) -> list[dict]:
    """Tool specs in OpenAI's form (``{"type": "function", "function": spec}``), whichever form
    they came in (:data:`interlock.synthesis.workspace.TOOL_SPECS` are bare function specs)."""
    return [spec if "function" in spec else {"type": "function", "function": spec} for spec in specs]


def prompt_token_ids(tokenizer, request) -> list[int]:
    """A chat request (:class:`interlock.core.backend.ChatRequest`) rendered with the tokenizer's
    chat template, generation prompt appended, as a plain list of token ids: what every backend
    that tokenizes itself feeds its model, so two backends given one request see the same tokens.
    Its messages are rendered as :func:`template_messages` makes them (the rule the training
    encoder follows too), and :func:`checked_control_tokens` holds the result to it.
    (Rendered to text first: ``tokenize=True`` returns a ``BatchEncoding`` in transformers 5.)"""
    messages = template_messages(tokenizer, [m.to_dict() for m in request.messages])
    tools = openai_tools(request.tools) or None

    def encode(conversation: list[dict]) -> list[int]:
        text = tokenizer.apply_chat_template(conversation, tools=tools, add_generation_prompt=True,
                                             tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return checked_control_tokens(tokenizer, messages, encode(messages), encode)


def control_tokens(tokenizer) -> frozenset[str]:
    """The tokenizer's control tokens: its special tokens and every added token it marks special
    (SmolLM2's include ``<filename>`` and ``<file_sep>`` besides the chat template's three)."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return frozenset([*tokenizer.all_special_tokens, *(t.content for t in added.values() if t.special)])


def template_messages(tokenizer, messages: list[dict]) -> list[dict]:
    """Messages as the chat template may render them: every text a policy or a tool wrote (content,
    names, calls and their arguments) with its control texts neutralized
    (:func:`~interlock.core.chat.neutralize`, the tokenizer's own control tokens included), so no
    character sequence in a message becomes a control token of the template: a reply that writes
    ``<|im_end|>\\n<|im_start|>user`` stays text, in the live prompt and in a training example alike."""
    extra = control_tokens(tokenizer)
    return [neutralized_message(m, extra) for m in messages]


def checked_control_tokens(tokenizer, messages: list[dict], ids: list[int], encode) -> list[int]:
    """``ids`` (``encode(messages)``) if they hold exactly the control tokens the template itself
    writes around the same conversation with every text emptied, else an error: the check that
    neutralizing held for this tokenizer, whatever its normalizer does."""
    control = control_token_ids(tokenizer)
    skeleton = [{**m, "content": "", **({"tool_calls": [_empty_call(c) for c in m["tool_calls"]]}
                                        if m.get("tool_calls") else {})} for m in messages]
    found, expected = (sum(1 for i in sequence if i in control) for sequence in (ids, encode(skeleton)))
    if found != expected:
        raise InterlockError(f"a message's text reads as {found - expected} control token(s) of the "
                             "tokenizer even neutralized", field="messages")
    return ids


def _empty_call(call: dict) -> dict:
    function = call.get("function", call)
    empty = {"name": "", "arguments": "{}" if isinstance(function.get("arguments"), str) else {}}
    return {**call, "function": empty} if "function" in call else {**call, **empty}


def control_token_ids(tokenizer) -> frozenset[int]:
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return frozenset([*tokenizer.all_special_ids, *(i for i, t in added.items() if t.special)])


def stop_token_ids(tokenizer) -> set[int]:
    """The tokens that end an assistant turn: the end of a message, of the text, the start of
    another message, and the tokenizer's own end-of-sequence token."""
    vocab = tokenizer.get_vocab()
    stops = {vocab[t] for t in (IM_END, END_OF_TEXT, IM_START) if t in vocab}
    if tokenizer.eos_token_id is not None:
        stops.add(tokenizer.eos_token_id)
    return stops
