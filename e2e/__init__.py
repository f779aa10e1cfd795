"""Browser end-to-end tests (Playwright, async API) against a real daphne server."""
