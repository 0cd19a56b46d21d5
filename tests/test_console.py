import io

from bot.cli.console import run_console
from services.backends.memory import InMemorySessionStore
from services.engine.llm import LLMClient
from services.engine.tokens import TokenCounter
from tests.helpers import customer_line, make_service
from tests.stubs.openai_server import StubOpenAI


async def test_console_prints_reply_and_memory_figures(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    service = make_service(store=InMemorySessionStore(), llm=llm, counter=counter)
    lines = ["order 7718 is late", *[customer_line(n) for n in range(14)], "/new", "hello again", "/quit"]
    out = io.StringIO()
    await run_console(service, chat_id=1, stdin=io.StringIO("\n".join(lines) + "\n"), stdout=out)
    text = out.getvalue()
    assert "bot> Support answer to: order 7718 is late" in text
    assert "[stored=2 sent_history=0 removed=0 tokens est=" in text
    assert "summary=updated" in text and " cached=0 " in text
    assert "(conversation reset)" in text
    last = text.strip().splitlines()[-2]
    assert last.startswith("[stored=2 ") and "summary=none" in last
