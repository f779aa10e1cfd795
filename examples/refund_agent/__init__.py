"""An agent to review without an API key (see agent.py)."""
