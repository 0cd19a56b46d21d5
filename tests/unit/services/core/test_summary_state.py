from services.core.records import StoredMessage
from services.core.summary_state import SummaryState, merge_summaries, render_summary
from services.memory.identifiers import extract_identifiers, mentions, restore_identifiers


def test_merge_accumulates_without_duplicates_and_replaces_pending() -> None:
    old = SummaryState(
        topic="Damaged parcel",
        key_facts=["Order 7718", "Kettle KX-200"],
        actions_taken=["Photo requested"],
        decisions=["Replacement agreed"],
        pending_questions=["When will the courier come?"],
        next_step="Send label",
    )
    new = SummaryState(
        topic="",
        key_facts=["order  7718", "Address: Main st 5"],
        actions_taken=["Label sent"],
        decisions=["replacement agreed"],
        pending_questions=["Can I keep the old one?"],
        next_step="",
    )
    merged = merge_summaries(old, new)
    assert merged.topic == "Damaged parcel"
    assert merged.key_facts == ["Order 7718", "Kettle KX-200", "Address: Main st 5"]
    assert merged.actions_taken == ["Photo requested", "Label sent"]
    assert merged.decisions == ["Replacement agreed"]
    assert merged.pending_questions == ["Can I keep the old one?"]
    assert merged.next_step == "Send label"


def test_render_is_compact_and_skips_empty_fields() -> None:
    text = render_summary(SummaryState(topic="Refund", key_facts=["a", "b"], next_step="wait"))
    assert text == "Topic: Refund\nKey facts: a; b\nNext step: wait"


def test_schema_is_strict() -> None:
    schema = SummaryState.json_schema_for_llm()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(schema["properties"])


def test_extracts_identifiers_of_every_kind() -> None:
    text = (
        "Order 7718 and ORD-55231; call +7 (912) 345-67-89 or mail ivan.petrov@mail.ru; "
        "error E-042 on 2.4.1, see https://example.com/kb/42. Paid 1299.50 on 12.03.2026. 12 apples."
    )
    values = [i.value for i in extract_identifiers(text)]
    assert values == [
        "7718",
        "ORD-55231",
        "+7 (912) 345-67-89",
        "ivan.petrov@mail.ru",
        "E-042",
        "2.4.1",
        "https://example.com/kb/42",
        "1299.50",
        "12.03.2026",
    ]


def test_mentions_is_whole_token() -> None:
    assert mentions("order 7718.", "7718")
    assert not mentions("order 77180", "7718")
    assert mentions("ticket ord-55231", "ORD-55231")


def test_restore_puts_back_what_the_summarizer_dropped() -> None:
    messages = [
        StoredMessage(0, "user", "My order 7718 arrived broken, email me at a.b@c.io", 10),
        StoredMessage(1, "assistant", "Sorry! I opened ticket T-9001.", 10),
    ]
    lossy = SummaryState(topic="Broken delivery", key_facts=["order arrived broken"])
    restored, added = restore_identifiers(lossy, messages=messages)
    # the phrase restored with 7718 already carries the e-mail, so it is not added twice
    assert {i.value for i in added} == {"7718", "T-9001"}
    for value in ("7718", "a.b@c.io", "T-9001"):
        assert mentions(render_summary(restored), value)
    assert any("7718" in fact and "My order 7718 arrived broken" in fact for fact in restored.key_facts)
    again, none = restore_identifiers(restored, messages=messages)
    assert none == [] and again == restored


def test_restore_keeps_identifiers_of_the_previous_summary() -> None:
    previous = SummaryState(key_facts=["Order 7718"])
    new = SummaryState(topic="later talk")
    restored, added = restore_identifiers(new, previous=previous)
    assert [i.value for i in added] == ["7718"]
    assert "7718" in render_summary(restored)
