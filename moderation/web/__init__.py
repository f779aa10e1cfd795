"""The HTML pages and what only they need (forms, the decided page, middleware, rate limits,
origin checks, the health endpoint): they translate HTTP into calls on ``review`` and
``records`` and back, and hold no business rule of their own."""
