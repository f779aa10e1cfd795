"""What everything else stands on and which knows nothing of items or decisions:
per-item locks, the graph threads' resume lock, the LangGraph checkpointer, named fault
points, the task queue's pending work, and the moderator group's permissions."""
