"""Six scripted support dialogues (English and Russian), five control facts each.

The facts are given early; the rest of the dialogue is long enough to push them out of the verbatim
history under a small budget, so they can only survive through the summary."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fact:
    label: str
    value: str


@dataclass(frozen=True, slots=True)
class Dialogue:
    name: str
    language: str
    messages: tuple[str, ...]
    facts: tuple[Fact, ...]
    final_question: str


def _pad(opening: list[str], followups: list[str], total: int = 26) -> tuple[str, ...]:
    messages = list(opening)
    index = 0
    while len(messages) < total:
        messages.append(followups[index % len(followups)] + ("" if index < len(followups) else " (again)"))
        index += 1
    return tuple(messages)


_EN_FOLLOWUPS = [
    "Thanks. While we wait, can you explain how long this kind of case usually takes to resolve?",
    "I am a bit worried because I need this sorted before the weekend, is there any way to speed it up?",
    "Could you also check whether I need to print anything or whether the e-mail confirmation is enough?",
    "My neighbour had a similar issue last month and got a voucher, is that something you offer too?",
    "Sorry for all the questions, I just want to be sure I understand the process correctly.",
    "What happens if the courier does not come on the agreed day, do I need to contact you again?",
    "Is there a phone line as well, or is this chat the best way to reach support?",
    "Okay, and will I get a notification when the status changes, or should I check the website myself?",
]
_RU_FOLLOWUPS = [
    "Спасибо. Пока ждём, подскажите, сколько обычно занимает решение таких вопросов?",
    "Мне важно решить всё до выходных, можно ли как-то ускорить процесс?",
    "Нужно ли что-то распечатывать, или достаточно подтверждения на почту?",
    "У соседа была похожая ситуация, ему дали купон на скидку. У вас так тоже бывает?",
    "Извините за вопросы, просто хочу правильно понять порядок действий.",
    "А если курьер не приедет в назначенный день, мне нужно снова писать вам?",
    "Есть ли телефон поддержки, или лучше писать сюда в чат?",
    "Я получу уведомление, когда статус изменится, или проверять на сайте самому?",
]

DIALOGUES: tuple[Dialogue, ...] = (
    Dialogue(
        name="damaged-delivery-en",
        language="en",
        messages=_pad(
            [
                "Hello, my parcel arrived today and the box was completely crushed. The order number is ORD-55231.",
                "Inside was the Aurora X2 kettle (article AX2-0042) and the glass jug is cracked, so I cannot use it.",
                "The courier's tracking code was TRK-884120 and he left before I could open the box.",
                "I took photos, I can send them to damage@example.com if that helps.",
                "I paid 89.90 for it, and I would like a replacement rather than a refund.",
            ],
            _EN_FOLLOWUPS,
        ),
        facts=(
            Fact("order number", "ORD-55231"),
            Fact("tracking code", "TRK-884120"),
            Fact("e-mail for photos", "damage@example.com"),
            Fact("amount paid", "89.90"),
            Fact("article", "AX2-0042"),
        ),
        final_question="Before we finish: please list my order number, the tracking code, where I send the "
        "photos, how much I paid and the article number.",
    ),
    Dialogue(
        name="device-will-not-start-ru",
        language="ru",
        messages=_pad(
            [
                "Здравствуйте! Робот-пылесос Nimbus 7 не включается, серийный номер SN-7730-4421.",
                "Индикатор мигает красным, в приложении ошибка E-042.",
                "Прошивка в приложении указана 3.1.7, обновлений нет.",
                "Покупал 02.09.2026 в вашем интернет-магазине, заказ 99017.",
                "Я уже пробовал держать кнопку питания 10 секунд и заряжать ночь, не помогло.",
            ],
            _RU_FOLLOWUPS,
        ),
        facts=(
            Fact("serial number", "SN-7730-4421"),
            Fact("error code", "E-042"),
            Fact("firmware", "3.1.7"),
            Fact("purchase date", "02.09.2026"),
            Fact("order", "99017"),
        ),
        final_question="Напомните, пожалуйста: серийный номер, код ошибки, версию прошивки, дату покупки и "
        "номер заказа.",
    ),
    Dialogue(
        name="refund-en",
        language="en",
        messages=_pad(
            [
                "Hi, I returned the Vega headphones and I am still waiting for the refund of 149.99 EUR.",
                "The return was registered on 14.10.2026 under return number RMA-30562.",
                "You told me the money would go back to the card ending 4417.",
                "My account e-mail is j.smith@example.net in case you need to look it up.",
            ],
            _EN_FOLLOWUPS,
        ),
        facts=(
            Fact("amount", "149.99"),
            Fact("return date", "14.10.2026"),
            Fact("return number", "RMA-30562"),
            Fact("card ending", "4417"),
            Fact("account e-mail", "j.smith@example.net"),
        ),
        final_question="To confirm, can you repeat the refund amount, the return date, the return number, the "
        "card ending and my account e-mail?",
    ),
    Dialogue(
        name="technical-problem-en",
        language="en",
        messages=_pad(
            [
                "Your desktop app crashes on start. App version 5.12.3 on Windows build 22631.",
                "The crash dialog shows error code 0x80070005 and a log id LOG-7F3A91.",
                "It started after the update on 03.11.2026; the previous version worked.",
                "I attached the log at https://files.example.com/crash/7f3a91.zip for your engineers.",
            ],
            _EN_FOLLOWUPS,
        ),
        facts=(
            Fact("app version", "5.12.3"),
            Fact("Windows build", "22631"),
            Fact("error code", "0x80070005"),
            Fact("log id", "LOG-7F3A91"),
            Fact("log link", "https://files.example.com/crash/7f3a91.zip"),
        ),
        final_question="Please summarise the technical details I gave you: app version, Windows build, error "
        "code, log id and the link to the log.",
    ),
    Dialogue(
        name="wrong-item-ru",
        language="ru",
        messages=_pad(
            [
                "Добрый день! Вместо умной лампы Orion мне привезли часы Pulse 3. Заказ ORD-61408.",
                "На коробке наклейка с номером отправления 7700-1234-5566.",
                "Мой телефон для связи +7 903 555-12-34, курьер может позвонить.",
                "Лампа стоила 2490 рублей, доплачивать за часы я не буду.",
                "Удобнее всего забрать часы 21.11.2026 после 18:00.",
            ],
            _RU_FOLLOWUPS,
        ),
        facts=(
            Fact("order", "ORD-61408"),
            Fact("shipment number", "7700-1234-5566"),
            Fact("phone", "+7 903 555-12-34"),
            Fact("price", "2490"),
            Fact("pickup date", "21.11.2026"),
        ),
        final_question="Повторите, пожалуйста: номер заказа, номер отправления, мой телефон, цену лампы и дату, "
        "когда забрать часы.",
    ),
    Dialogue(
        name="subscription-billing-ru",
        language="ru",
        messages=_pad(
            [
                "Здравствуйте, с карты дважды списали 599 рублей за подписку Premium.",
                "Номер договора SUB-448812, списания были 05.11.2026.",
                "Номера транзакций TX-91002 и TX-91003, вижу их в банке.",
                "Почта аккаунта olga.v@example.ru, прошу вернуть лишнее списание.",
            ],
            _RU_FOLLOWUPS,
        ),
        facts=(
            Fact("amount", "599"),
            Fact("contract", "SUB-448812"),
            Fact("charge date", "05.11.2026"),
            Fact("transactions", "TX-91002"),
            Fact("account e-mail", "olga.v@example.ru"),
        ),
        final_question="Уточните, пожалуйста: сумму списания, номер договора, дату, номер первой транзакции и "
        "почту аккаунта.",
    ),
)
