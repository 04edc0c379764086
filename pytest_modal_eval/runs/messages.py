"""A run record's chat messages as text, by one rule wherever they are shown (``show``, the
HTML report): the whole conversation, and the question that tells one example from the next."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def content_text(content: Any) -> str:
    """One message's content: a string, or a list of parts (their text, joined)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return str(content)


def messages_text(messages: Any) -> str:
    """Chat messages (or a plain string) as readable text: ``role: content`` per message."""
    if messages is None:
        return ""
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list):
        parts = []
        for message in messages:
            if isinstance(message, Mapping):
                role = message.get("role", "")
                parts.append(f"{role}: {content_text(message.get('content'))}")
            else:
                parts.append(str(message))
        return "\n\n".join(parts)
    return json.dumps(messages, ensure_ascii=False)


def final_reply(messages: Any) -> str:
    """The model's last word in a completion: its last assistant message's text (or the
    completion itself when it is a plain string); "" when it has none. The messages may be
    verifiers' own (pydantic models), as a rollout's output holds them."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        dump = getattr(message, "model_dump", None)  # verifiers' pydantic messages
        if callable(dump):
            message = dump()
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return content_text(message.get("content"))
    return ""


def question(messages: Any) -> str:
    """The last user message of a chat prompt: what differs from one example to the next (a
    system prompt and few-shot turns are the same on every example); "" when there is none."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def question_or_prompt(messages: Any) -> str:
    """What a one-line view of an example shows of its prompt: the question, else (a prompt
    with no user message, or a plain string) the whole prompt."""
    return question(messages) or messages_text(messages)
