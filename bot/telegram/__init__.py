"""Everything that speaks Telegram: routers, middlewares, texts, rendering, streamed drafts."""
