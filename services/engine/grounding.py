"""Knowledge in a turn's prompt: one snapshot per turn, the query from the new message and the
conversation, whole passages in rank order within KNOWLEDGE_TOKEN_BUDGET as ``<knowledge>`` blocks
placed after the history (the cached prefix of instruction, summary and history stays byte-identical),
or a no-knowledge note; or, when it fits KNOWLEDGE_STATIC_TOKENS, all of it once after the instruction.
Then the reply's citations checked against what was sent."""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass, field, replace

from services.core.knowledge import KnowledgeQuery, Passage, Retrieval, ScoredPassage
from services.core.prompt_format import KNOWLEDGE_STATUS_TAG, KNOWLEDGE_TAG, neutralize
from services.core.records import PromptPart, Session
from services.core.tokens import TokenCounter
from services.engine.citations import CitedReply, render_citations
from services.memory.window import Window
from services.ports.knowledge import KnowledgeGaps, KnowledgeSnapshot, KnowledgeSource

log = logging.getLogger(__name__)

NO_KNOWLEDGE = f"<{KNOWLEDGE_STATUS_TAG}>no document covers this question</{KNOWLEDGE_STATUS_TAG}>"
RECENT_MESSAGES = 2
"""Earlier customer messages a follow-up query may lean on."""


def knowledge_block(passage: Passage, ref: str) -> str:
    """One passage as a data block; a document cannot close it or open another fence."""
    source = html.escape(neutralize(passage.source), quote=True)
    return f'<{KNOWLEDGE_TAG} source="{source}" ref="{ref}">\n{neutralize(passage.text)}\n</{KNOWLEDGE_TAG}>'


@dataclass(frozen=True, slots=True)
class Grounded:
    """What a turn's prompt carries: the part to insert before the new message, and the refs sent."""

    part: PromptPart
    refs: dict[str, Passage] = field(default_factory=dict)
    sent: tuple[ScoredPassage, ...] = ()
    seconds: float = 0.0
    degraded: bool = False
    static: bool = False
    """The part holds all the documents and goes right after the instruction (KNOWLEDGE_STATIC_TOKENS);
    ``sent`` is then what the search found relevant, ``refs`` every passage."""
    searched: bool = True
    """The search ran (False: it failed, and the turn went without documents)."""
    found: int = 0
    """Passages the search found above the floor (sent or not: some may not have fit)."""

    @property
    def gap(self) -> bool:
        """A question the documents do not answer (not one whose search failed or whose passages
        only did not fit): what ``knowledge gaps`` lists."""
        return self.searched and not self.found

    @property
    def matched(self) -> bool:
        return bool(self.sent)

    @property
    def ids(self) -> tuple[str, ...]:
        """Ids of the passages sent (with static knowledge: those found relevant), in rank order
        (recorded with the stored reply)."""
        return tuple(scored.passage.id for scored in self.sent)

    def cite(self, reply: str) -> CitedReply:
        return render_citations(reply, self.refs)

    def place(self, window: Window) -> Window:
        """``window`` with the part in the room held back for it: all the documents right after the
        instruction (static), else the passages after the history, before the new message."""
        first, *middle, last = window.messages  # the instruction, ..., the new message
        placed = (first, self.part, *middle, last) if self.static else (first, *middle, self.part, last)
        return replace(window, messages=placed, estimated_tokens=window.estimated_tokens + self.part.tokens)


class Grounding:
    """Retrieval for ChatService; never fails a turn (a broken index means a turn without knowledge)."""

    def __init__(
        self,
        *,
        source: KnowledgeSource,
        counter: TokenCounter,
        role: str,
        budget: int,
        top_k: int,
        gaps: KnowledgeGaps | None = None,
        static_tokens: int = 0,
    ) -> None:
        self._source = source
        self._counter = counter
        self._role = role
        self.budget = budget
        self._top_k = top_k
        self._gaps = gaps
        self._static_tokens = min(static_tokens, budget)
        self._static: tuple[KnowledgeSnapshot, tuple[PromptPart, dict[str, Passage]] | None] | None = None
        """(the snapshot, its whole-knowledge part and refs, or None when it does not fit): by identity,
        not version, since a changed link or title keeps the passages' ids."""

    def _whole(self, snapshot: KnowledgeSnapshot) -> tuple[PromptPart, dict[str, Passage]] | None:
        """All the snapshot's passages as one part, in document order, when they fit
        KNOWLEDGE_STATIC_TOKENS: the same bytes every turn until the documents change."""
        if not self._static_tokens or not snapshot.passages:
            return None
        if self._static is not None and self._static[0] is snapshot:
            return self._static[1]
        whole: tuple[PromptPart, dict[str, Passage]] | None = None
        if sum(p.tokens for p in snapshot.passages) <= self._static_tokens:  # a cheap bound first
            refs = {f"K{i}": passage for i, passage in enumerate(snapshot.passages, start=1)}
            content = "\n".join(knowledge_block(passage, ref) for ref, passage in refs.items())
            tokens = self._counter.count_message(self._role, content)
            whole = (PromptPart(self._role, content, tokens), refs) if tokens <= self._static_tokens else None
        self._static = (snapshot, whole)
        return whole

    def query(self, session: Session, text: str) -> KnowledgeQuery:
        recent = tuple(m.content for m in session.messages if m.role == "user")[-RECENT_MESSAGES:]
        topic = session.summary.topic if session.summary is not None else None
        return KnowledgeQuery(text, recent=recent, topic=topic or None)

    async def ground(self, session: Session, text: str) -> Grounded:
        retrieval: Retrieval | None = None
        whole: tuple[PromptPart, dict[str, Passage]] | None = None
        try:
            snapshot = self._source.current()
            whole = self._whole(snapshot)
            # with the whole knowledge sent, the search only tells what matched (gaps, console): no embedding
            retrieval = await snapshot.search(self.query(session, text), limit=self._top_k, full_text=bool(whole))
        except Exception:  # the knowledge must never be why a customer gets no answer
            log.exception("chat %s: knowledge retrieval failed; answering without documents", session.chat_id)
        searched, found = retrieval is not None, len(retrieval.passages) if retrieval else 0
        if whole is not None:
            relevant = retrieval.passages if retrieval else ()
            seconds = retrieval.seconds if retrieval else 0.0
            return Grounded(whole[0], whole[1], relevant, seconds, static=True, searched=searched, found=found)
        blocks: list[str] = []
        refs: dict[str, Passage] = {}
        sent: list[ScoredPassage] = []
        tokens = self._counter.count_message(self._role, NO_KNOWLEDGE)
        for scored in retrieval.passages if retrieval else ():
            ref = f"K{len(refs) + 1}"
            block = knowledge_block(scored.passage, ref)
            content = "\n".join((*blocks, block))
            cost = self._counter.count_message(self._role, content)
            if cost > self.budget:
                continue  # whole passages only: a smaller, lower-ranked one may still fit
            blocks.append(block)
            refs[ref] = scored.passage
            sent.append(scored)
            tokens = cost
        content = "\n".join(blocks) if blocks else NO_KNOWLEDGE
        seconds = retrieval.seconds if retrieval else 0.0
        degraded = retrieval.degraded if retrieval else False
        part = PromptPart(self._role, content, tokens)
        return Grounded(part, refs, tuple(sent), seconds, degraded, searched=searched, found=found)

    async def record_gap(self, chat_id: int, question: str) -> None:
        if self._gaps is None:
            return
        try:
            await self._gaps.record(chat_id, question)
        except Exception as exc:  # a record for operators is never worth a failed turn
            log.warning("chat %s: knowledge gap not recorded: %s", chat_id, exc)
