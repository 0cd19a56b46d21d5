"""How llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) answers what it does
not take, for the stub model server's ``llama_cpp`` mode (issue 36).

Its request model (llama_cpp/server/types.py, CreateChatCompletionRequest) knows the roles system,
user, assistant, tool and function, a ``response_format`` of type ``text`` or ``json_object`` only,
and ``max_tokens`` (a field it does not know, such as ``max_completion_tokens``, is ignored: pydantic's
default). A request that does not validate raises FastAPI's RequestValidationError inside the route,
where the server's RouteErrorHandler (llama_cpp/server/errors.py) turns every exception it does not
recognise into HTTP 500 ``{"error": {"message": str(exc), "type": "internal_server_error", "param":
null, "code": null}}``; ``str(exc)`` is FastAPI's "N validation errors:" list of pydantic's error dicts
(fastapi/exceptions.py, ValidationException.__str__), which echo the refused input. The models below
copy the server's (llama_cpp/llama_types.py), class names included: they appear in the error's ``loc``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from pydantic import BaseModel, ValidationError
from typing_extensions import TypedDict

from services.core.tokens import TokenCounter


class ChatCompletionRequestResponseFormat(TypedDict):
    type: Literal["text", "json_object"]
    schema: NotRequired[Any]


class ChatCompletionRequestSystemMessage(TypedDict):
    role: Literal["system"]
    content: str | None


class ChatCompletionRequestUserMessage(TypedDict):
    role: Literal["user"]
    content: str | list[Any] | None


class ChatCompletionRequestAssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[str]
    tool_calls: NotRequired[list[Any]]


class ChatCompletionRequestToolMessage(TypedDict):
    role: Literal["tool"]
    content: str | None
    tool_call_id: str


class ChatCompletionRequestFunctionMessage(TypedDict):
    role: Literal["function"]
    content: str | None
    name: str


ChatCompletionRequestMessage = (
    ChatCompletionRequestSystemMessage
    | ChatCompletionRequestUserMessage
    | ChatCompletionRequestAssistantMessage
    | ChatCompletionRequestToolMessage
    | ChatCompletionRequestFunctionMessage
)


class CreateChatCompletionRequest(BaseModel):
    """The fields the bot sends; any other field (``max_completion_tokens``) is ignored, as there."""

    model: str | None = None
    messages: list[ChatCompletionRequestMessage] = []
    max_tokens: int | None = None
    temperature: float = 0.8
    stream: bool = False
    tools: list[Any] | None = None
    response_format: ChatCompletionRequestResponseFormat | None = None


ENDPOINT_CONTEXT = (
    '\n  File "/usr/local/lib/python3.11/site-packages/llama_cpp/server/app.py", line 408, in '
    "create_chat_completion\n    POST /v1/chat/completions"
)


def refusal(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The server's answer to a request it does not validate (status, JSON body), or None."""
    try:
        CreateChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        message = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n"
        message += "".join(f"  {error}\n" for error in errors) + ENDPOINT_CONTEXT
        error = {"message": message.rstrip(), "type": "internal_server_error", "param": None, "code": None}
        return 500, {"error": error}
    return None


_COUNTER: list[TokenCounter] = []


def capped(reply: str, body: dict[str, Any]) -> tuple[str, bool]:
    """The reply cut to the request's ``max_tokens`` (the only cap the server reads), and whether it was."""
    limit = body.get("max_tokens")
    if not isinstance(limit, int):
        return reply, False
    if not _COUNTER:
        _COUNTER.append(TokenCounter.for_encoding("o200k_base"))  # the bundled file, loaded once
    tokens = _COUNTER[0].encode(reply)
    if len(tokens) <= limit:
        return reply, False
    return _COUNTER[0].decode(tokens[:limit]), True
