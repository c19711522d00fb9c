"""Chat messages in, prompt token ids out; generated text in, tool calls out.

Tools follow the widely used `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
convention. A chat template that knows about tools gets them as `tools=`; one that does
not (SmolLM2's does not) gets the same definitions in a system message, and its tool
messages and assistant tool calls are rendered as text it can display.

It sits low in the layering (above `types` only) because serving, the judge's teacher
(which re-renders a turn's prompt with a hint) and the evaluation personas all render
prompts the same way, and none of them may import another's package.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from openclaw_rl.types import Message

TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def content_text(message: Message) -> str:
    """The text of a message's content: a string, a list of parts, or nothing.

    The one reading of a message's text, for the policy's prompt, session pairing and the
    judge alike. Text parts are joined by a newline, as vLLM flattens them for a template
    that takes a string: clients send separate pieces as parts (a reminder, then the
    request), and gluing them ("...the bug" + "in app.py") would merge words across the
    boundary for the model and for the judge's word-level grounding. A part that is not
    text (an image the text model cannot see) stays as a marker, `[image_url]`, so that
    whoever reads the message knows something was attached.
    """
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(_part_text(part) for part in content if isinstance(part, dict))


def user_text(messages: Sequence[Message]) -> str:
    """What the user wrote in a conversation: the text of every user message, one per line."""
    return "\n".join(content_text(m) for m in messages if m.get("role") == "user")


def _part_text(part: dict[str, Any]) -> str:
    if "text" in part or part.get("type", "text") == "text":  # text, input_text, output_text
        return str(part.get("text", ""))
    return f"[{part.get('type')}]"


def template_knows_tools(tokenizer) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    return "tools" in template


def render_prompt(tokenizer, messages: list[Message], tools: list[dict] | None, tool_choice: Any) -> list[int]:
    """Prompt token ids for `messages`, ready for the assistant's reply."""
    if tool_choice == "none":
        tools = None
    native = template_knows_tools(tokenizer)
    rendered = [_plain_message(m, native) for m in messages]
    kwargs: dict[str, Any] = {}
    if tools and native:
        kwargs["tools"] = tools
    elif tools:
        rendered = _with_tool_instructions(rendered, tools, tool_choice)
    ids = tokenizer.apply_chat_template(
        rendered, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def _plain_message(message: Message, native_tools: bool) -> Message:
    role = message["role"]
    text = content_text(message)
    if role == "developer":
        role = "system"
    if native_tools:
        out: Message = {"role": role, "content": text}
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
        if message.get("tool_call_id"):
            out["tool_call_id"] = message["tool_call_id"]
        return out
    if role == "assistant" and message.get("tool_calls"):
        calls = "\n".join(format_tool_call(c) for c in message["tool_calls"])
        text = f"{text}\n{calls}".strip()
    if role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}
    return {"role": role, "content": text}


def call_parts(call: dict[str, Any]) -> tuple[Any, Any]:
    """(name, arguments) of an OpenAI tool call or a bare {"name", "arguments"}; arguments
    sent as a JSON string are decoded, anything else is returned as it came."""
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return function.get("name"), arguments


def format_tool_call(call: dict[str, Any]) -> str:
    name, arguments = call_parts(call)
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _with_tool_instructions(messages: list[Message], tools: list[dict], tool_choice: Any) -> list[Message]:
    specs = "\n".join(json.dumps(t.get("function", t)) for t in tools)
    rule = "You may call one or more functions to help with the request."
    if tool_choice == "required":
        rule = "You must call at least one function."
    elif isinstance(tool_choice, dict):
        rule = f"You must call the function {tool_choice.get('function', {}).get('name')!r}."
    instructions = (
        f"{rule} The functions are:\n<tools>\n{specs}\n</tools>\n"
        "To call a function, answer with a JSON object inside tags:\n"
        '<tool_call>{"name": "function_name", "arguments": {"arg": "value"}}</tool_call>'
    )
    if messages and messages[0]["role"] == "system":
        first = {"role": "system", "content": f"{messages[0]['content']}\n\n{instructions}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split generated text into (content, tool_calls in the OpenAI format).

    Calls that are not valid JSON with a name stay in the content: a malformed call is
    what the model said, and hiding it would hide the behaviour being trained.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in _TOOL_CALL_RE.finditer(text):
        call = _parse_call(match.group(1))
        if call is None:
            continue
        kept.append(text[last : match.start()])
        last = match.end()
        calls.append(call)
    if not calls:
        stripped = text.strip()
        if stripped.startswith("{") and (call := _parse_call(stripped)) is not None:
            return None, [call]
        return text, []
    kept.append(text[last:])
    content = "".join(kept).strip()
    return content or None, calls


def _parse_call(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": data["name"], "arguments": arguments},
    }
