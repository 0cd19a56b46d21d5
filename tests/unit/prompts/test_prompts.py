import pytest

from prompts import PromptRegistry, PromptTemplate, UnknownPromptError, default_registry


def test_default_registry_has_active_versions() -> None:
    registry = default_registry()
    chat = registry.get("support_chat")
    assert chat.version == registry.active_version("support_chat")
    text = chat.render(company="ACME", handoff="", knowledge="")
    assert "ACME" in text and "<customer_message>" in text and "<conversation_summary>" in text
    summary = registry.get("summary").render(max_tokens="500")
    for field in ("topic", "key_facts", "actions_taken", "decisions", "pending_questions", "next_step"):
        assert f'"{field}"' in summary
    assert "Never invent" in summary


def test_unknown_version_lists_known_versions() -> None:
    registry = default_registry()
    with pytest.raises(UnknownPromptError, match=r"known versions: \['v1', 'v2', 'v3'\]"):
        registry.get("support_chat", "v9")
    with pytest.raises(UnknownPromptError, match="known prompts"):
        registry.get("nope")


def test_old_versions_stay_and_one_is_active() -> None:
    registry = PromptRegistry()
    registry.register(PromptTemplate("p", "v1", "hello $name", frozenset({"name"})))
    registry.register(PromptTemplate("p", "v2", "hi $name", frozenset({"name"})), active=True)
    assert registry.get("p").render(name="A") == "hi A"
    assert registry.get("p", "v1").render(name="A") == "hello A"
    registry.activate("p", "v1")
    assert registry.active_version("p") == "v1"
    assert registry.versions("p") == ["v1", "v2"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(PromptTemplate("p", "v1", "x"))


def test_template_declares_exactly_its_placeholders() -> None:
    with pytest.raises(ValueError, match="placeholders"):
        PromptTemplate("p", "v1", "hello $name")
    template = PromptTemplate("p", "v1", "hello $name", frozenset({"name"}))
    with pytest.raises(KeyError):
        template.render()
