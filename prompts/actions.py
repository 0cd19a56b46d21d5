"""The event notes of actions the customer's turn carries instead of a message they wrote."""

CONTACT_SHARED = "[The customer shared their phone number with Telegram's button.]"
"""The turn's text after the customer shared their own number with the share-contact button: the model
may now call the tool that needed it again (the number itself reaches only the tool's request)."""
