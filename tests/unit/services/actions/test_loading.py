"""ACTIONS_FILE as an operator writes it: the example loads; every kind of mistake is one line naming
the tool and the field with the fix, all of them at once; the file is read with a cap, as YAML
without aliases or duplicate keys; an environment variable's value is never in a line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from prompts.support_chat import HANDOFF_TOOL
from services.actions import spec
from services.actions.loading import MAX_FILE_BYTES, ActionsFileError, load_catalog, load_tools, read_file
from tests.unit.services.actions.shop import EXAMPLE, SECRET, VARIABLES, example

Edit = Callable[[dict[str, Any]], None]


def lines_of(raw: dict[str, Any], **options: Any) -> list[str]:
    options = {"variables": VARIABLES, "operator_chat_configured": True} | options
    with pytest.raises(ActionsFileError) as caught:
        load_tools(raw, **options)
    return caught.value.lines


def edited(edit: Edit) -> dict[str, Any]:
    raw = example()
    edit(raw)
    return raw


def tool(raw: dict[str, Any], name: str = "order_status") -> dict[str, Any]:
    found: dict[str, Any] = raw["tools"][name]
    return found


def test_the_example_loads_in_the_file_order() -> None:
    tools, hosts = load_tools(example(), variables=VARIABLES, operator_chat_configured=True)
    assert [t.name for t in tools] == ["order_status", "cancel_order", "refund"]
    assert [(h.host, h.port, h.private) for h in hosts] == [
        ("shop.example.com", None, False),
        ("10.0.0.12", 8080, True),
    ]
    assert tools[0].secrets == {"SHOP_API_TOKEN": SECRET}
    assert [t.needs_phone for t in tools] == [False, False, True]


def test_the_handoff_tool_name_is_the_prompts_one() -> None:
    assert spec.HANDOFF_TOOL == HANDOFF_TOOL


MISTAKES: dict[str, tuple[Edit, str]] = {
    "undeclared param": (
        lambda raw: tool(raw).update(url="https://shop.example.com/api/orders/{order_id}/{item}"),
        "tool order_status: url: {item} is not a declared parameter",
    ),
    "unknown customer field": (
        lambda raw: tool(raw)["headers"].update({"X-Email": "{customer.email}"}),
        "tool order_status: headers.X-Email: {customer.email} is not known",
    ),
    "variable not set": (
        lambda raw: tool(raw)["headers"].update(Authorization="Bearer ${SHOP_TOKEN_2}"),
        "tool order_status: headers.Authorization: the environment variable SHOP_TOKEN_2 is not set",
    ),
    "secret outside headers": (
        lambda raw: tool(raw).update(query={"key": "${SHOP_API_TOKEN}"}),
        "tool order_status: query.key: ${SHOP_API_TOKEN}: a secret goes in headers only",
    ),
    "identity param": (
        lambda raw: tool(raw)["params"].update(customer_id={"type": "integer"}),
        "tool order_status: params.customer_id: a parameter may not name the customer",
    ),
    "identity param, other spelling": (
        lambda raw: tool(raw)["params"].update(chatId={"type": "integer"}),
        "tool order_status: params.chatId: a parameter may not name the customer",
    ),
    "identity body field from an argument": (
        lambda raw: tool(raw, "cancel_order")["json"].update(customer_id="{order_id}"),
        "tool cancel_order: json.customer_id: names the customer: fill it with {customer.telegram_id}",
    ),
    "identity body field nested under a customer key": (
        lambda raw: tool(raw, "cancel_order")["json"].update(customer={"id": "{order_id}"}),
        "tool cancel_order: json.customer.id: names the customer: fill it with {customer.telegram_id}",
    ),
    "identity body list under a customer key": (
        lambda raw: tool(raw, "cancel_order")["json"].update(customer=[{"ref": "x {reason}"}]),
        "tool cancel_order: json.customer.0.ref: names the customer",
    ),
    "identity header from an argument": (
        lambda raw: tool(raw)["headers"].update({"X-Customer-Telegram-Id": "{order_id}"}),
        "tool order_status: headers.X-Customer-Telegram-Id: names the customer",
    ),
    "host not declared": (
        lambda raw: tool(raw).update(url="https://evil.example.net/api/orders/{order_id}"),
        "tool order_status: url: the host evil.example.net is not in hosts",
    ),
    "port not declared": (
        lambda raw: tool(raw).update(url="https://shop.example.com:8443/api/orders/{order_id}"),
        "tool order_status: url: the host shop.example.com:8443 is not in hosts",
    ),
    "http to a public host": (
        lambda raw: tool(raw).update(url="http://shop.example.com/api/orders/{order_id}"),
        "tool order_status: url: http:// is allowed only for a host listed with private: true",
    ),
    "placeholder in the host": (
        lambda raw: tool(raw).update(url="https://{order_id}.example.com/x"),
        "tool order_status: url: no placeholder may stand in the scheme, host or port",
    ),
    "user in the url": (
        lambda raw: tool(raw).update(url="https://me@shop.example.com/x/{order_id}"),
        "tool order_status: url: no user or password in the url",
    ),
    "ip literal without private": (
        lambda raw: raw["hosts"].append({"host": "192.0.2.7"}),
        "hosts.2: '192.0.2.7' is an IP address: list it with private: true",
    ),
    "numeric host in another form": (
        lambda raw: raw["hosts"].append({"host": "2130706433", "private": True}),
        "hosts.2: '2130706433' is an address in a non-canonical form: write it as a.b.c.d",
    ),
    "short numeric host": (
        lambda raw: raw["hosts"].append({"host": "127.1"}),
        "hosts.2: '127.1' is an address in a non-canonical form",
    ),
    "local name without private": (
        lambda raw: raw["hosts"].append({"host": "billing.internal"}),
        "hosts.2: 'billing.internal' is a local name: list it with private: true",
    ),
    "approval without operators": (lambda raw: None, "tool refund: risk: approval needs the operators' group"),
    "write without confirm": (
        lambda raw: tool(raw, "cancel_order").pop("confirm"),
        "tool cancel_order: confirm: a write tool needs the text the customer confirms",
    ),
    "pattern RE2 cannot compile": (
        lambda raw: tool(raw)["params"]["order_id"].update(pattern="^(a)\\1$"),
        "tool order_status: params.order_id.pattern: RE2 cannot compile it",
    ),
    "lookahead": (
        lambda raw: tool(raw)["params"]["order_id"].update(pattern="^(?=1)[0-9]+$"),
        "tool order_status: params.order_id.pattern: RE2 cannot compile it",
    ),
    "tool name": (
        lambda raw: raw["tools"].update({"order status!": raw["tools"].pop("order_status")}),
        "tool order status!: name: the name must be 1-64 characters of a-z A-Z 0-9 _ -",
    ),
    "handoff name taken": (
        lambda raw: raw["tools"].update({HANDOFF_TOOL: raw["tools"].pop("order_status")}),
        f"tool {HANDOFF_TOOL}: name: {HANDOFF_TOOL} is the bot's own handoff tool",
    ),
    "unknown key": (
        lambda raw: tool(raw).update(retries=3),
        "tool order_status: retries: is not a known key: remove it or fix its spelling",
    ),
    "unknown param keyword": (
        lambda raw: tool(raw)["params"]["order_id"].update(format="email"),
        "tool order_status: params.order_id.format: is not a known key",
    ),
    "risk": (lambda raw: tool(raw).update(risk="delete"), "tool order_status: risk: input should be 'read'"),
    "keyword of another type": (
        lambda raw: tool(raw)["params"]["order_id"].update(type="integer"),
        "tool order_status: params.order_id: pattern, minLength and maxLength are for type string",
    ),
    "enum of another type": (
        lambda raw: tool(raw, "cancel_order")["params"]["reason"].update(enum=["a", 3]),
        "tool cancel_order: params.reason: the value 3 is not of type string",
    ),
    "unused param": (
        lambda raw: tool(raw)["params"].update(note={"type": "string"}),
        "tool order_status: params.note: is never used in the request",
    ),
    "reserved header": (
        lambda raw: tool(raw)["headers"].update({"Idempotency-Key": "x"}),
        "tool order_status: headers.Idempotency-Key: is set by the bot",
    ),
    "body on GET": (lambda raw: tool(raw).update(json={"a": 1}), "tool order_status: json: a GET request has no body"),
    "placeholder in a body key": (
        lambda raw: tool(raw, "cancel_order")["json"].update({"{reason}": 1}),
        "tool cancel_order: json.{reason}: a key of the body is fixed text",
    ),
    "unclosed brace": (
        lambda raw: tool(raw).update(url="https://shop.example.com/api/orders/{order_id"),
        "tool order_status: url: a { is not closed",
    ),
    "bad result path": (
        lambda raw: tool(raw).update(result=["items..name"]),
        "tool order_status: result: 'items..name'",
    ),
    "header value not text": (
        lambda raw: tool(raw)["headers"].update({"X-Version": 2}),
        "tool order_status: headers.X-Version: has the wrong type",
    ),
}


@pytest.mark.parametrize("kind", sorted(MISTAKES))
def test_each_mistake_is_one_line_naming_tool_and_field(kind: str) -> None:
    edit, expected = MISTAKES[kind]
    lines = lines_of(edited(edit), operator_chat_configured=kind != "approval without operators")
    assert any(line.startswith(expected) for line in lines), lines
    assert all(SECRET not in line for line in lines)


def test_every_mistake_is_reported_at_once() -> None:
    def many(raw: dict[str, Any]) -> None:
        tool(raw)["params"].update(user_id={"type": "integer"})
        tool(raw, "cancel_order").pop("confirm")
        tool(raw, "refund").update(url="https://nowhere.example.org/r")
        raw["tools"]["broken"] = {"risk": "read"}
        raw["tools"]["broken_write"] = {"risk": "write", "method": "GET"}
        raw["tools"]["broken_approval"] = {"risk": "approval", "method": "GET"}

    lines = lines_of(edited(many), operator_chat_configured=False)
    for expected in (
        "tool order_status: params.user_id:",
        "tool cancel_order: confirm:",
        "tool refund: risk: approval needs",
        "tool refund: url: the host nowhere.example.org",
        "tool broken: description: is required",
        "tool broken: url: is required",
        "tool broken_write: confirm: a write tool needs the text the customer confirms",
        "tool broken_approval: risk: approval needs the operators' group",
    ):
        assert any(line.startswith(expected) for line in lines), (expected, lines)


def test_top_level_mistakes() -> None:
    assert lines_of({"hosts": [], "tools": {}, "extra": 1}) == [
        "extra: is not a known key: the file has only hosts: and tools:",
        "tools: is required: a mapping of tool names to tools (see docs/actions.md)",
        "hosts: is required: the list of every host a tool may call",
    ]
    assert lines_of([1, 2]) == ["file: the file must be a mapping with hosts: and tools: (see docs/actions.md)"]  # type: ignore[arg-type]


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "actions.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tools: [a\n", "is not valid YAML: line 2"),
        ("a: &x 1\nb: *x\n", "is not valid YAML: line 2: aliases (*name) are not allowed"),
        ("tools: {}\ntools: {}\n", "is not valid YAML: line 2: the key 'tools' is written twice"),
        (b"hosts: [\xff]\n", "is not UTF-8 text"),
        ("#" * (MAX_FILE_BYTES + 1), f"is over {MAX_FILE_BYTES // 1024} kB"),
    ],
)
def test_a_file_that_cannot_be_read(tmp_path: Path, text: str | bytes, expected: str) -> None:
    with pytest.raises(ActionsFileError) as caught:
        read_file(write(tmp_path, text))
    assert len(caught.value.lines) == 1 and expected in caught.value.lines[0], caught.value.lines


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ActionsFileError) as caught:
        read_file(tmp_path / "nope.yaml")
    assert caught.value.lines == [f"file: {tmp_path / 'nope.yaml'} cannot be read (No such file or directory)"]


def test_load_catalog_reads_the_variables_as_settings_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset variables named, never a value; set in the environment or in .env, they load."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHOP_API_TOKEN", raising=False)
    path = write(tmp_path, EXAMPLE)
    with pytest.raises(ActionsFileError) as caught:
        load_catalog(path, operator_chat_configured=True, timeout=5, max_bytes=1000)
    assert sum("the environment variable SHOP_API_TOKEN is not set" in line for line in caught.value.lines) == 2
    (tmp_path / ".env").write_text(f"SHOP_API_TOKEN={SECRET}\n")
    loaded = load_catalog(path, operator_chat_configured=True, timeout=5, max_bytes=1000)
    assert loaded.names() == ["order_status", "cancel_order", "refund"]
    assert loaded.tools[0].secrets == {"SHOP_API_TOKEN": SECRET}


def test_a_variable_with_a_line_break_is_refused_without_its_value() -> None:
    lines = lines_of(example(), variables={"SHOP_API_TOKEN": SECRET + "\nX-Evil: 1"})
    assert "tool order_status: headers.Authorization: the environment variable SHOP_API_TOKEN holds a line break" in (
        " ".join(lines)
    )
    assert all(SECRET not in line for line in lines)


def test_the_example_of_docs_actions_md_loads() -> None:
    text = (Path(__file__).resolve().parents[4] / "docs" / "actions.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    tools, _ = load_tools(yaml.safe_load(block), variables=VARIABLES, operator_chat_configured=True)
    assert [t.name for t in tools] == ["order_status", "cancel_order", "refund"]


@pytest.mark.parametrize(
    "text",
    [
        "tools: " + "[" * 400 + "1" + "]" * 400 + "\n",  # the YAML reader itself runs out of stack
        "tools: " + "{a: " * 400 + "1" + "}" * 400 + "\n",
        "tools: {t: {json: " + "{a: " * 40 + "1" + "}" * 40 + "}}\n",  # readable, but deeper than any tool needs
    ],
    ids=["lists", "mappings", "json_template"],
)
def test_deep_nesting_is_one_error_line_not_a_traceback(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ActionsFileError) as caught:
        read_file(path)
    assert caught.value.lines == [f"file: {path} is nested too deeply (at most 32 levels)"]
