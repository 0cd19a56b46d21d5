"""Every text the bot itself says, per language. Add a language by adding a dictionary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiogram.types import BotCommand

if TYPE_CHECKING:
    from aiogram.types import User

    from bot.settings import BotSettings

TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "start": (
            "Hello! I am the support assistant. Describe your problem in a message: the product, your "
            "order number and what already happened. I remember our conversation, so you do not need "
            "to repeat yourself.\n\n/new starts a new conversation, /help shows what I can do."
        ),
        "help": (
            "Write your question and I will answer.\n"
            "/new: forget this conversation and start over\n"
            "/forget: delete everything stored about this chat\n"
            "/operator: talk to a person from the support team (where available)\n"
            "/help: this message\n"
            "You can also send photos, voice messages and documents (PDF, text, Markdown)."
        ),
        "new_done": "Done: I have forgotten our previous conversation. How can I help?",
        "text_only": "Sorry, I cannot read this kind of message. Please write your question as text or "
        "describe it in words.",
        "too_long": "Your message is too long: {tokens} tokens, the limit is {limit}. Please shorten it or split it.",
        "too_long_chars": "Your message is too long: {tokens} characters, the limit is {limit}. Please shorten it.",
        "media_too_big": "This file is too big for me (the limit is {limit_mb} MB). Please send a smaller one "
        "or describe it in words.",
        "media_download_failed": "I could not fetch your file from Telegram just now. Please send it again in "
        "a minute.",
        "media_download_retrying": "I could not fetch your file from Telegram yet. I am still trying and will "
        "answer as soon as it comes through; if it does not, I will ask you to send it again.",
        "media_too_big_any": "This file is too big for me. Please send a smaller one or describe it in words.",
        "media_too_long": "This recording is too long for me (the limit is {limit} seconds). Please send a "
        "shorter one or write it down.",
        "media_too_long_any": "This recording is too long for me. Please send a shorter one or write it down.",
        "media_unreadable": "I could not open this file: it seems damaged or empty. Please send it again or "
        "describe it in words.",
        "media_unsupported": "I cannot read this kind of file. Please send a photo, a PDF, a text file or a "
        "voice message, or describe it in words.",
        "media_encrypted": "This document is password-protected, so I cannot read it. Please send it without "
        "the password or paste the text.",
        "media_empty": "I found no text in this document (a scan?). Please send a photo of it or describe it in words.",
        "media_too_complex": "This document is too complex for me to read: it would take too long. Please send "
        "only the pages that matter, or paste the text.",
        "media_voice_empty": "I could not make out any words in this recording. Please try again or write it.",
        "media_image_not_understood": "I cannot look at images right now. Please describe in words what the "
        "photo shows.",
        "media_voice_not_understood": "I cannot listen to recordings right now. Please write your message.",
        "media_document_not_understood": "I cannot read this document right now. Please paste the text.",
        "media_image_no_room": "These photos are too many or too large for me at once. Please send fewer, or "
        "describe them in words.",
        "media_document_cut": "Your document is long: I read only its first part (about {tokens} tokens).",
        "rate_limited": "You are sending messages too fast. Please wait {seconds} seconds and try again.",
        "not_allowed": "Sorry, this assistant is not available for you.",
        "forget_done": "Done: everything stored about this chat has been deleted.",
        "llm_retrying": "The assistant is temporarily unavailable. Your message is saved and I will answer "
        "it as soon as the assistant is back.",
        "session_lost": "Sorry, I could not load our earlier conversation, so I am starting afresh. "
        "If it matters, please repeat the key details (e.g. your order number).",
        "llm_unavailable": "The assistant is temporarily unavailable. Please try again in a minute.",
        "given_up": "Sorry, I could not answer your message: the assistant stayed unavailable for too long. "
        "Please write to me again later.",
        "given_up_handoff": "Sorry, I could not answer your message: the assistant stayed unavailable for "
        "too long. A person from the support team will look at it.",
        "reply_truncated": "My answer came out too long and was cut off. Please ask a narrower question.",
        "bad_reply": "I could not produce an answer to that. Please rephrase your question.",
        "store_unavailable": "I cannot reach my memory right now. Please try again in a minute.",
        "busy": "I am still working on your previous message. Please wait a moment and try again.",
        "internal_error": "Something went wrong on our side. Please try again later.",
        "command_new": "Start a new conversation",
        "command_forget": "Delete everything stored about this chat",
        "command_help": "What I can do",
        "command_operator": "Talk to a person",
        "operator_off": "Only the assistant is available in this chat; I will do my best to help.",
        "feedback_question": "Did this solve your problem?",
        "feedback_yes": "Yes",
        "feedback_no": "No",
        "feedback_person": "Talk to a person",
        "feedback_thanks": "Thank you! Glad I could help.",
        "feedback_sorry": "Sorry I could not solve it. What was missing? Write it here and I will try again.",
        "feedback_sorry_person": "Sorry I could not solve it. What was missing? Write it here and I will try "
        "again, or a person from the support team can take over.",
        "feedback_noted": "Thank you, noted.",
        "handoff_started": "I am passing our conversation to a person from the support team. They will "
        "answer here, in this chat. You can keep writing: they see everything you send.",
        "handoff_already": "A person from the support team is already handling this chat and will answer here.",
        "handoff_closed": "The support team member has finished. The assistant is back: ask me anything.",
        "handoff_slow": "It is taking longer than usual for a person to answer. Your messages are kept; "
        "you can keep writing here.",
        "handoff_slow_resumed": "It is taking longer than usual for a person to answer, so the assistant is "
        "back for now. The team still has your request.",
        "handoff_lost": "No person from the support team can be reached in this chat right now, so the "
        "assistant is back. Write /operator to try again later.",
        "op_ticket": "Ticket for {name}",
        "op_reason": "Reason",
        "op_reason_command": "the customer asked for a person (/operator)",
        "op_reason_feedback": "the customer said the assistant's answer did not solve the problem",
        "op_reason_given_up": "the assistant could not answer (the model was unavailable): “{question}”",
        "op_language": "Customer's language",
        "op_summary": "Summary",
        "op_no_summary": "(no conversation yet)",
        "op_recent": "Last messages",
        "op_customer": "Customer",
        "op_assistant": "Assistant",
        "op_how": "Write here to answer the customer. /note text: internal note. /close: end the handoff.",
        "op_closed": "Handoff closed. The assistant answers the customer again.",
        "op_ended_new": "The customer started a new conversation (/new): the handoff is over.",
        "op_ended_forget": "The customer deleted their data (/forget): the handoff is over. The messages "
        "above stay in this group.",
        "op_overdue": "⚠ No operator reply within {minutes} min: the customer was told it takes longer.",
        "op_overdue_resumed": "⚠ No operator reply within {minutes} min: the assistant answers again.",
        "op_not_open": "This handoff is not open: the customer does not see this message.",
        "faq_digest_head": "Questions the documents did not answer ({day}, the {count} most asked). Reply to "
        "one with its answer: it becomes a FAQ entry the bot answers from.",
        "faq_digest_group": "❓ asked {count}×: {question}",
        "faq_saved": "Saved as FAQ #{id}: every worker answers from it within a minute. /faq remove {id} takes "
        "it back.",
        "faq_edited": "FAQ #{id} is now version {version}.",
        "faq_removed": "FAQ #{id} removed: the bot no longer answers from it.",
        "faq_missing": "There is no FAQ entry #{id}.",
        "faq_none": "No learned FAQ entries yet.",
        "faq_no_knowledge": "Note: KNOWLEDGE_DIR is not set, so the bot answers from no documents and no FAQ "
        "entries until it is.",
        "faq_no_answer": "No answer of yours with a customer's question before it in this handoff: write the "
        "answer first, or use /faq add QUESTION | ANSWER.",
        "faq_usage": "/faq add QUESTION | ANSWER: a new entry. /faq list. /faq remove ID. /faq edit ID QUESTION "
        "| ANSWER. In a handoff topic, /faq (or /faq as a reply to one of your answers) saves your last "
        "answer with the customer's question before it.",
        "chat_id_forum": "This chat's id: {chat_id}\nTo make this group the operators' desk, set "
        "OPERATOR_CHAT_ID={chat_id} and restart the bot (the bot must be an admin here that can manage topics).",
        "chat_id_group": "This chat's id: {chat_id}\nThe operators' desk needs a group with Topics: turn "
        "Topics on in the group's settings, then send /chatid again (the group may get a new id).",
        "chat_id_private": "This chat's id: {chat_id}\nTo find the operators' group id, add me to that "
        "group and send /chatid there.",
        "action_confirm": "Confirm",
        "action_cancel": "Cancel",
        "action_confirmed": "Confirmed",
        "action_cancelled": "Cancelled",
        "action_gone": "This request has expired or was already handled.",
        "approval_waiting": "This needs the approval of a person from the support team. I will tell you here "
        "as soon as they decide.",
        "contact_ask": "For this I need your phone number. Please share it with the button below.",
        "contact_button": "Share my phone number",
        "contact_not_own": "Please share your own number with the button below.",
        "contact_saved": "Thank you, I have your number.",
        "op_approval": "Approval needed: {tool}\nCustomer: {customer}, Telegram id {customer_id}\n\n{prompt}",
        "op_approve": "Approve",
        "op_reject": "Reject",
        "op_approved": "Approved by {name}",
        "op_rejected": "Rejected by {name}",
    },
    "ru": {
        "start": (
            "Здравствуйте! Я помощник службы поддержки. Опишите проблему одним сообщением: товар, номер "
            "заказа и что уже произошло. Я помню наш разговор, повторять ничего не нужно.\n\n"
            "/new начинает новый разговор, /help показывает, что я умею."
        ),
        "help": (
            "Напишите вопрос, и я отвечу.\n"
            "/new: забыть этот разговор и начать заново\n"
            "/forget: удалить всё, что хранится об этом чате\n"
            "/operator: связаться с сотрудником поддержки (если доступно)\n"
            "/help: это сообщение\n"
            "Можно присылать и фото, голосовые сообщения и документы (PDF, текст, Markdown)."
        ),
        "new_done": "Готово: предыдущий разговор забыт. Чем могу помочь?",
        "text_only": "Извините, такие сообщения я прочитать не могу. Напишите, пожалуйста, вопрос текстом "
        "или опишите словами.",
        "too_long": "Сообщение слишком длинное: {tokens} токенов при лимите {limit}. Сократите его или разделите.",
        "too_long_chars": "Сообщение слишком длинное: {tokens} символов при лимите {limit}. Сократите его.",
        "media_too_big": "Файл слишком большой (предел {limit_mb} МБ). Пришлите файл поменьше или опишите словами.",
        "media_download_failed": "Не удалось получить ваш файл от Telegram. Пришлите его ещё раз через минуту.",
        "media_download_retrying": "Пока не удалось получить ваш файл от Telegram. Я продолжаю попытки и отвечу, "
        "как только он загрузится; если не получится, попрошу прислать его ещё раз.",
        "media_too_big_any": "Файл слишком большой для меня. Пришлите файл поменьше или опишите словами.",
        "media_too_long": "Запись слишком длинная (предел {limit} с). Пришлите покороче или напишите текстом.",
        "media_too_long_any": "Запись слишком длинная для меня. Пришлите покороче или напишите текстом.",
        "media_unreadable": "Не удалось открыть файл: похоже, он повреждён или пуст. Пришлите его ещё раз или "
        "опишите словами.",
        "media_unsupported": "Такие файлы я не читаю. Пришлите фото, PDF, текстовый файл или голосовое "
        "сообщение, или опишите словами.",
        "media_encrypted": "Документ защищён паролем, я не могу его прочитать. Пришлите его без пароля или "
        "вставьте текст.",
        "media_empty": "В документе нет текста (это скан?). Пришлите его фото или опишите словами.",
        "media_too_complex": "Этот документ слишком сложный: его чтение заняло бы слишком много времени. "
        "Пришлите только нужные страницы или вставьте текст.",
        "media_voice_empty": "Не удалось разобрать слова в записи. Попробуйте ещё раз или напишите текстом.",
        "media_image_not_understood": "Сейчас я не могу смотреть изображения. Опишите, пожалуйста, словами, "
        "что на фото.",
        "media_voice_not_understood": "Сейчас я не могу слушать записи. Напишите, пожалуйста, текстом.",
        "media_document_not_understood": "Сейчас я не могу прочитать документ. Вставьте, пожалуйста, текст.",
        "media_image_no_room": "Слишком много или слишком большие фото за раз. Пришлите меньше или опишите словами.",
        "media_document_cut": "Документ длинный: я прочитал только его начало (около {tokens} токенов).",
        "rate_limited": "Вы отправляете сообщения слишком часто. Подождите {seconds} с и повторите.",
        "not_allowed": "Извините, этот помощник вам недоступен.",
        "forget_done": "Готово: всё, что хранилось об этом чате, удалено.",
        "llm_retrying": "Ассистент временно недоступен. Ваше сообщение сохранено, я отвечу, как только он "
        "снова заработает.",
        "session_lost": "Извините, не удалось загрузить наш предыдущий разговор, поэтому начинаю заново. "
        "Если это важно, повторите, пожалуйста, ключевые данные (например, номер заказа).",
        "llm_unavailable": "Помощник временно недоступен. Попробуйте ещё раз через минуту.",
        "given_up": "Извините, я не смог ответить на ваше сообщение: ассистент слишком долго был недоступен. "
        "Напишите мне, пожалуйста, ещё раз позже.",
        "given_up_handoff": "Извините, я не смог ответить на ваше сообщение: ассистент слишком долго был "
        "недоступен. Его посмотрит сотрудник службы поддержки.",
        "op_reason_given_up": "ассистент не смог ответить (модель недоступна): «{question}»",
        "reply_truncated": "Мой ответ получился слишком длинным и оборвался. Задайте, пожалуйста, более узкий вопрос.",
        "bad_reply": "Не удалось подготовить ответ. Пожалуйста, переформулируйте вопрос.",
        "store_unavailable": "Сейчас нет доступа к памяти разговора. Попробуйте через минуту.",
        "busy": "Я ещё отвечаю на предыдущее сообщение. Подождите немного и повторите.",
        "internal_error": "У нас что-то пошло не так. Попробуйте позже.",
        "command_new": "Начать новый разговор",
        "command_forget": "Удалить всё, что хранится об этом чате",
        "command_help": "Что я умею",
        "command_operator": "Связаться с человеком",
        "operator_off": "В этом чате доступен только ассистент; я постараюсь помочь.",
        "feedback_question": "Удалось решить вашу проблему?",
        "feedback_yes": "Да",
        "feedback_no": "Нет",
        "feedback_person": "Позвать сотрудника",
        "feedback_thanks": "Спасибо! Рад, что смог помочь.",
        "feedback_sorry": "Жаль, что не получилось. Чего не хватило? Напишите здесь, и я попробую ещё раз.",
        "feedback_sorry_person": "Жаль, что не получилось. Чего не хватило? Напишите здесь, и я попробую ещё "
        "раз, или разговор продолжит сотрудник поддержки.",
        "feedback_noted": "Спасибо, учтено.",
        "handoff_started": "Передаю наш разговор сотруднику поддержки. Он ответит здесь, в этом чате. "
        "Можете продолжать писать: он видит всё, что вы отправляете.",
        "handoff_already": "Вашим вопросом уже занимается сотрудник поддержки, он ответит здесь.",
        "handoff_closed": "Сотрудник поддержки закончил. Снова отвечает ассистент: спрашивайте.",
        "handoff_slow": "Ответ сотрудника задерживается дольше обычного. Ваши сообщения сохранены, "
        "можете продолжать писать здесь.",
        "handoff_slow_resumed": "Ответ сотрудника задерживается дольше обычного, поэтому пока снова отвечает "
        "ассистент. Ваш запрос у команды.",
        "handoff_lost": "Сейчас связаться с сотрудником поддержки в этом чате не получается, поэтому снова "
        "отвечает ассистент. Напишите /operator, чтобы попробовать позже.",
        "op_ticket": "Обращение: {name}",
        "op_reason": "Причина",
        "op_reason_command": "клиент попросил соединить с человеком (/operator)",
        "op_reason_feedback": "клиент ответил, что ответ ассистента не решил проблему",
        "op_language": "Язык клиента",
        "op_summary": "Сводка",
        "op_no_summary": "(разговора ещё не было)",
        "op_recent": "Последние сообщения",
        "op_customer": "Клиент",
        "op_assistant": "Ассистент",
        "op_how": "Пишите здесь, чтобы ответить клиенту. /note текст: внутренняя заметка. /close: завершить.",
        "op_closed": "Передача завершена. Клиенту снова отвечает ассистент.",
        "op_ended_new": "Клиент начал новый разговор (/new): передача завершена.",
        "op_ended_forget": "Клиент удалил свои данные (/forget): передача завершена. Сообщения выше "
        "остаются в этой группе.",
        "op_overdue": "⚠ Нет ответа оператора за {minutes} мин: клиенту сообщили о задержке.",
        "op_overdue_resumed": "⚠ Нет ответа оператора за {minutes} мин: снова отвечает ассистент.",
        "op_not_open": "Передача не открыта: клиент не увидит это сообщение.",
        "faq_digest_head": "Вопросы без ответа в документах ({day}, {count} самых частых). Ответьте на "
        "вопрос ответом на его сообщение: он станет записью FAQ, по которой бот отвечает.",
        "faq_digest_group": "❓ спросили {count}×: {question}",
        "faq_saved": "Сохранено как FAQ #{id}: все воркеры отвечают по ней в течение минуты. /faq remove {id} "
        "отменяет.",
        "faq_edited": "FAQ #{id}: теперь версия {version}.",
        "faq_removed": "FAQ #{id} удалена: бот больше не отвечает по ней.",
        "faq_missing": "Записи FAQ #{id} нет.",
        "faq_none": "Записей FAQ пока нет.",
        "faq_no_knowledge": "Внимание: KNOWLEDGE_DIR не задан, поэтому бот не отвечает ни по документам, ни по "
        "записям FAQ, пока его не зададут.",
        "faq_no_answer": "В этой передаче нет вашего ответа с вопросом клиента перед ним: сначала ответьте "
        "клиенту или используйте /faq add ВОПРОС | ОТВЕТ.",
        "faq_usage": "/faq add ВОПРОС | ОТВЕТ: новая запись. /faq list. /faq remove ID. /faq edit ID ВОПРОС "
        "| ОТВЕТ. В теме передачи /faq (или /faq в ответ на ваше сообщение) сохраняет ваш последний ответ с "
        "вопросом клиента перед ним.",
        "chat_id_forum": "Id этого чата: {chat_id}\nЧтобы операторы работали в этой группе, задайте "
        "OPERATOR_CHAT_ID={chat_id} и перезапустите бота (бот должен быть здесь админом с правом управлять темами).",
        "chat_id_group": "Id этого чата: {chat_id}\nДля операторов нужна группа с темами: включите темы "
        "в настройках группы и пришлите /chatid ещё раз (id группы может измениться).",
        "chat_id_private": "Id этого чата: {chat_id}\nЧтобы узнать id группы операторов, добавьте меня "
        "в эту группу и пришлите /chatid там.",
        "action_confirm": "Подтвердить",
        "action_cancel": "Отменить",
        "action_confirmed": "Подтверждено",
        "action_cancelled": "Отменено",
        "action_gone": "Этот запрос устарел или уже обработан.",
        "approval_waiting": "Это должен одобрить сотрудник поддержки. Я сообщу здесь, как только он решит.",
        "contact_ask": "Для этого мне нужен ваш номер телефона. Поделитесь им кнопкой ниже.",
        "contact_button": "Поделиться номером",
        "contact_not_own": "Пожалуйста, поделитесь своим собственным номером кнопкой ниже.",
        "contact_saved": "Спасибо, номер получен.",
        "op_approval": "Нужно одобрение: {tool}\nКлиент: {customer}, Telegram id {customer_id}\n\n{prompt}",
        "op_approve": "Одобрить",
        "op_reject": "Отклонить",
        "op_approved": "Одобрил(а) {name}",
        "op_rejected": "Отклонил(а) {name}",
    },
}


def pick_language(language_code: str | None, default: str) -> str:
    """The user's Telegram language if we speak it ("ru-RU" → "ru"), else ``default``, else English."""
    if language_code:
        base = language_code.split("-")[0].lower()
        if base in TEXTS:
            return base
    return default if default in TEXTS else "en"


def text(language: str, key: str, **values: object) -> str:
    template = TEXTS.get(language, TEXTS["en"]).get(key) or TEXTS["en"][key]
    return template.format(**values)


def language_of(user: User | None, settings: BotSettings) -> str:
    """The language to answer a Telegram user in."""
    return pick_language(user.language_code if user else None, settings.default_language)


class Texts:
    """The texts of one language, as handlers use them: ``say("start")``, ``say("rate_limited", seconds=5)``.
    The language middleware puts the customer's into every message handler's data as ``say``."""

    __slots__ = ("language",)

    def __init__(self, language: str) -> None:
        self.language = language

    def __call__(self, key: str, **values: object) -> str:
        return text(self.language, key, **values)

    @classmethod
    def for_user(cls, user: User | None, settings: BotSettings) -> Texts:
        return cls(language_of(user, settings))


MENU = ("new", "forget", "help")
"""The commands listed in Telegram's menu, in order (each described by the text ``command_<name>``);
``operator`` comes first when handoff to an operator is on."""


def bot_commands(*, handoff: bool = False) -> dict[str, list[BotCommand]]:
    """The command menu per language."""
    menu = ("operator", *MENU) if handoff else MENU
    return {
        language: [BotCommand(command=name, description=text(language, f"command_{name}")) for name in menu]
        for language in TEXTS
    }
