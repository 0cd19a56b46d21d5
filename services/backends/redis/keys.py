"""The one owner of every Redis key the bot uses.

Every key lives in the namespace ``<prefix>:<bot id>``, so two bots on one Redis never read each other's
sessions or queues (a private chat's id is the user's id in every bot). Keys are grouped by Redis
Cluster hash slot, as every script touches one slot: a chat's keys share ``{chat:<id>}``; the poller's
lease and offset, the dead letters, and the handoff topics and deadlines each share a tag of their own;
the ready set and its wake-up list ``{<ns>:ready}:wake`` hash to one slot, so that one script marks a
chat due and wakes a worker.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import overload

CHAT_KEY_NAMES = (
    "meta",  # hash: version (the write fence), next_seq, summary, summary_tokens
    "msgs",  # list: verbatim messages, oldest first
    "turns",  # sorted set: committed turn id -> seq of its reply
    "replied",  # sorted set: turn ids whose reply was delivered
    "inbox",  # sorted set: queued updates by update id
    "seen",  # sorted set: item ids taken in (redelivery dedup)
    "lease",  # string: token of the worker serving the chat
    "attempts",  # hash: per queued item, attempts started / transient failures / first failure time
    "rate",  # sorted set: rate-limit window
    "rate_notice",  # string: "customer was told" marker
    "q_meta",  # quarantined (unreadable) session: its meta hash as it was
    "q_msgs",  # ... its message list as it was
    "q_info",  # ... when and why it was quarantined
    "handoff",  # hash: handoff to an operator: state, topic, reason, trigger, language, opened, first_reply, flagged
    "handoff_log",  # list: the handoff's transcript (customer and operator messages, notes)
    "handoff_relayed",  # sorted set: message ids already relayed (exactly once), by time
    "memos",  # hash: transcripts and image notes by file_unique_id (t:<id>, n:<id>)
    "albums",  # hash: album photos (i:<group>:<msg>), their order (l:<group>) and takers (t:<group>:<msg>)
    "quality",  # hash: the current conversation, its feedback state, and each conversation's record (c:<id>)
    "actions",  # hash: actions' recorded outcomes, pending decisions, lines and the shared phone
)

CONTENT_KEY_NAMES = (
    "msgs",
    "turns",
    "replied",
    "q_meta",
    "q_msgs",
    "q_info",
    "handoff",
    "handoff_log",
    "handoff_relayed",
    "memos",
    "actions",
)
"""Per-chat keys /forget deletes outright (``meta`` is cut down to its version counter). The queue's
``inbox``/``seen``/``lease``/``attempts`` stay (ids and work still to do), so do the album photos no
turn took yet (updates still queued; ``Albums.forget`` deletes the taken ones), and so does the rate-limit
window (update ids and times, no text): /forget must not be a way around the rate limit."""


def _model_key(model: str) -> str:
    return hashlib.sha256(model.encode()).hexdigest()[:12]


def bot_id_of(token: str) -> str:
    """The numeric id at the start of a Telegram bot token (``123456:ABC…`` → ``123456``)."""
    head = token.split(":", 1)[0].strip()
    return head if head.isdigit() else "0"


class _ChatKey:
    """One key of a chat, built from the chat's tag when read (a turn reads a few of its 18 keys)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._suffix = f":{name}"

    @overload
    def __get__(self, keys: None, owner: type) -> _ChatKey: ...
    @overload
    def __get__(self, keys: ChatKeys, owner: type | None = None) -> str: ...
    def __get__(self, keys: ChatKeys | None, owner: type | None = None) -> str | _ChatKey:
        return self if keys is None else keys.tag + self._suffix


class ChatKeys:
    """Every key of one chat; all in the same hash slot (they share the tag ``{chat:<id>}``)."""

    __slots__ = ("tag",)

    meta = _ChatKey()
    msgs = _ChatKey()
    turns = _ChatKey()
    replied = _ChatKey()
    inbox = _ChatKey()
    seen = _ChatKey()
    lease = _ChatKey()
    attempts = _ChatKey()
    rate = _ChatKey()
    rate_notice = _ChatKey()
    q_meta = _ChatKey()
    q_msgs = _ChatKey()
    q_info = _ChatKey()
    handoff = _ChatKey()
    handoff_log = _ChatKey()
    handoff_relayed = _ChatKey()
    memos = _ChatKey()
    albums = _ChatKey()
    quality = _ChatKey()
    actions = _ChatKey()

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def content(self) -> list[str]:
        return [getattr(self, name) for name in CONTENT_KEY_NAMES]


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Builds every key of one bot (``bot_id``) under ``prefix``."""

    prefix: str = "sb"
    bot_id: str = "0"

    def __post_init__(self) -> None:
        # a brace in the namespace would make it (part of) a hash tag: keys that must share a slot
        # (the ready set and the wake list, a chat's keys) would not
        if "{" in self.namespace or "}" in self.namespace:
            raise ValueError(f"REDIS_KEY_PREFIX must not contain braces: {self.prefix!r}")

    @property
    def namespace(self) -> str:
        return f"{self.prefix}:{self.bot_id}"

    def chat(self, chat_id: int) -> ChatKeys:
        return ChatKeys(f"{self.namespace}:{{chat:{chat_id}}}")

    def chat_pattern(self, name: str) -> str:
        """A SCAN pattern matching key ``name`` of every chat."""
        return f"{self.namespace}:{{chat:*}}:{name}"

    @staticmethod
    def chat_id_of(key: str) -> int:
        """The chat id inside a chat key."""
        return int(key.split("{chat:", 1)[1].split("}", 1)[0])

    @property
    def ready(self) -> str:
        return f"{self.namespace}:ready"

    @property
    def wake(self) -> str:
        """In the ready set's slot (its tag is the ready set's whole name)."""
        return f"{{{self.ready}}}:wake"

    @property
    def poller_leader(self) -> str:
        return f"{{{self.namespace}:poller}}:leader"

    @property
    def poller_offset(self) -> str:
        return f"{{{self.namespace}:poller}}:offset"

    @property
    def dead_items(self) -> str:
        return f"{{{self.namespace}:dead}}:items"

    @property
    def dead_index(self) -> str:
        return f"{{{self.namespace}:dead}}:index"

    @property
    def handoff_topics(self) -> str:
        """Hash: forum topic id → customer chat id (only topics the bot opened)."""
        return f"{{{self.namespace}:handoff}}:topics"

    @property
    def handoff_open(self) -> str:
        """Set: chats with an open handoff."""
        return f"{{{self.namespace}:handoff}}:open"

    def embeddings(self, model: str) -> str:
        """Hash: passage id → its float32 vector under one embedding model (the model name hashed: any
        characters, no braces)."""
        return f"{{{self.namespace}:emb:{_model_key(model)}}}:vectors"

    def embedding_claims(self, model: str) -> str:
        """Hash: passage id → until when (ms, Redis clock) a worker is embedding it; the vectors' slot."""
        return f"{{{self.namespace}:emb:{_model_key(model)}}}:claims"

    @property
    def knowledge_gaps(self) -> str:
        """Sorted set: an unanswered question (normalized) → how often it was asked."""
        return f"{{{self.namespace}:kgaps}}:counts"

    @property
    def knowledge_gaps_asked(self) -> str:
        """Sorted set: question → when it was last asked (ms, Redis clock): its count expires
        SESSION_TTL_SECONDS after that, as the chats' records do; the counts' slot."""
        return f"{{{self.namespace}:kgaps}}:asked"

    def knowledge_gaps_of(self, chat_id: int) -> str:
        """Hash: question → times this chat asked it (what /forget takes back); the counts' slot."""
        return f"{{{self.namespace}:kgaps}}:chat:{chat_id}"

    @property
    def feedback_due(self) -> str:
        """Sorted set: chat id → when its feedback question is due, or held until (ms, Redis clock)."""
        return f"{{{self.namespace}:quality}}:due"

    @property
    def conversations(self) -> str:
        """Sorted set: ``<chat id>:<conversation id>`` by its start (ms): the report's index; the due set's slot."""
        return f"{{{self.namespace}:quality}}:conversations"

    @property
    def handoff_deadlines(self) -> str:
        """Sorted set: chat id → when its handoff is overdue without an operator reply (ms, Redis clock)."""
        return f"{{{self.namespace}:handoff}}:deadlines"

    @property
    def faq_entries(self) -> str:
        """Hash: learned FAQ entry id → its newest version (JSON, with the version number); removed
        entries leave it (their versions stay in ``faq_versions``)."""
        return f"{{{self.namespace}:faq}}:entries"

    def faq_versions(self, entry_id: str) -> str:
        """List: every version of one entry (JSON), oldest first; the entries' slot."""
        return f"{{{self.namespace}:faq}}:versions:{entry_id}"

    @property
    def faq_next_id(self) -> str:
        """String: the last entry id handed out (INCR)."""
        return f"{{{self.namespace}:faq}}:next"

    @property
    def faq_revision(self) -> str:
        """String: grows with every change of the entries; every worker's library polls it."""
        return f"{{{self.namespace}:faq}}:revision"

    def faq_made(self, key: str) -> str:
        """String: the id of the entry the update ``key`` made (a redelivery makes no second one)."""
        return f"{{{self.namespace}:faq}}:made:{key}"

    def gaps_digest(self, day: str) -> str:
        """String: the worker that posted the day's gaps digest (SET NX, expires after a few days)."""
        return f"{{{self.namespace}:faq}}:digest:{day}"

    def gaps_digest_post(self, message_id: int) -> str:
        """String: the gap group a digest message in the operators' group shows (JSON; expires)."""
        return f"{{{self.namespace}:faq}}:post:{message_id}"
