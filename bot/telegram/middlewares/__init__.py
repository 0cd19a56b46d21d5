"""Update middlewares: access (allowlist, groups), language, flood control."""
