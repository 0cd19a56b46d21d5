"""A deterministic, generated customer-support conversation (English and Russian) with control facts
(order numbers, ticket codes, e-mails...) planted early, for the token and retention benchmarks."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Turn:
    user: str
    assistant: str


PRODUCTS_EN = ["Aurora X2 kettle", "Nimbus 7 robot vacuum", "Vega headphones", "Orion smart lamp", "Pulse 3 watch"]
PRODUCTS_RU = ["чайник Aurora X2", "робот-пылесос Nimbus 7", "наушники Vega", "умная лампа Orion", "часы Pulse 3"]

CONTROL_FACTS = ["ORD-77182", "4410-2291", "T-90417", "anna.k@example.org", "+7 912 345-67-89", "2.4.1"]

_EN_QUESTIONS = [
    "Hi, I ordered the {product} last week and it still has not arrived. What is going on with my delivery?",
    "The {product} turns on but the indicator blinks red three times and then it switches off again.",
    "I already tried resetting the {product} as the manual says, holding the button for ten seconds, no luck.",
    "Can you tell me whether the warranty covers this, or do I have to pay for the repair myself?",
    "The courier said the parcel was delivered, but there was nothing at the door when I got home.",
    "I would prefer a replacement rather than a refund if that is possible, the price went up since.",
    "How long does the return usually take, and do I need the original box for the {product}?",
    "Also the app keeps saying the device is offline even though my Wi-Fi works fine for everything else.",
]
_RU_QUESTIONS = [
    "Здравствуйте, я заказал {product} на прошлой неделе, а доставки всё нет. Что с заказом?",
    "{product} включается, но индикатор трижды мигает красным, и устройство выключается.",
    "Я уже пробовал сбросить настройки, держал кнопку десять секунд, как в инструкции, не помогло.",
    "Подскажите, это гарантийный случай, или ремонт придётся оплачивать самому?",
    "Курьер отметил, что посылка доставлена, но у двери ничего не было, когда я вернулся домой.",
    "Если можно, я бы предпочёл замену, а не возврат денег: цена с тех пор выросла.",
    "Сколько обычно занимает возврат и нужна ли оригинальная коробка от товара?",
    "Ещё приложение пишет, что устройство не в сети, хотя Wi-Fi у меня работает нормально.",
]
_EN_ANSWER = (
    "Thank you for the details, I understand how frustrating this is. I have checked the case: {step} "
    "Please keep the packaging and the receipt for now. If anything changes on your side, just write here, "
    "and I will update the ticket so you do not have to explain everything again. Is there anything else "
    "about the {product} I can help with today?"
)
_RU_ANSWER = (
    "Спасибо за подробности, понимаю, как это неприятно. Я проверил обращение: {step} Пожалуйста, "
    "сохраните упаковку и чек. Если что-то изменится, просто напишите сюда, я обновлю заявку, и вам не "
    "придётся объяснять всё заново. Могу ли я ещё чем-то помочь с товаром ({product})?"
)
_EN_STEPS = [
    "the parcel is at the local depot and should be delivered within two working days.",
    "this blinking pattern means the heating element failed its self-test, which is covered by the warranty.",
    "I have asked the warehouse to prepare a replacement unit, it will ship once the return is scanned.",
    "the courier company opened an investigation, they usually answer within 48 hours.",
    "a firmware update fixes the offline status; it installs automatically overnight.",
]
_RU_STEPS = [
    "посылка на местном складе и будет доставлена в течение двух рабочих дней.",
    "такое мигание означает, что нагревательный элемент не прошёл самопроверку; это гарантийный случай.",
    "я попросил склад подготовить замену, её отправят, как только возврат будет отсканирован.",
    "служба доставки начала расследование, обычно ответ приходит в течение 48 часов.",
    "обновление прошивки исправляет статус «не в сети», оно установится автоматически ночью.",
]
_FACT_MESSAGES = [
    "My order number is {0}, placed on the website.",
    "Мой номер заказа {0}, оформлял на сайте.",
    "The tracking number the courier gave me is {1}.",
    "Support opened ticket {2} for me last time.",
    "Please send the label to {3}.",
    "Мой телефон для курьера: {4}.",
    "The app shows firmware version {5}.",
]


def generate(turns: int = 300, seed: int = 42) -> list[Turn]:
    """``turns`` user/assistant turns; the control facts are all given within the first 12 turns."""
    rng = random.Random(seed)
    facts_at = {1 + i * 2: text.format(*CONTROL_FACTS) for i, text in enumerate(_FACT_MESSAGES)}
    conversation: list[Turn] = []
    for index in range(turns):
        russian = rng.random() < 0.4
        product = rng.choice(PRODUCTS_RU if russian else PRODUCTS_EN)
        question = rng.choice(_RU_QUESTIONS if russian else _EN_QUESTIONS).format(product=product)
        if index in facts_at:
            question = f"{facts_at[index]} {question}"
        step = rng.choice(_RU_STEPS if russian else _EN_STEPS)
        answer = (_RU_ANSWER if russian else _EN_ANSWER).format(step=step, product=product)
        conversation.append(Turn(question, answer))
    return conversation
